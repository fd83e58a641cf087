"""litgpt's validation also generates a sample (``generate_example``); its KV cache and mask never set the peak.

What the code does (Lightning-AI/litgpt@8641822, the litgpt profile's version, and @0077627, its ``litgpt-2024``):
``finetune/lora.py`` sets ``model.max_seq_length`` to the longest training sample before the first ``validate``
(@8641822 l. 176; @0077627 l. 264, capped by ``train.max_seq_length``). ``validate`` (@8641822 l. 258-285) and
``generate_example`` (@0077627 l. 380-400, after ``optimizer.step(); optimizer.zero_grad()``, so no gradients are
live) call ``model.set_kv_cache(batch_size=1)`` under ``fabric.init_tensor()``, generate ``eval.max_new_tokens`` (100)
tokens after a short fixed instruction, then ``clear_kv_cache()``. ``set_kv_cache`` (lit_gpt/model.py @8641822
l. 109-131, litgpt/model.py @0077627 l. 111-131) gives every block a ``KVCache`` of k and v shaped
``(1, n_head, max_seq_length, head_size)`` (``build_kv_cache``: ``n_head``, not the KV groups, unless there is one
group) and builds a ``(max_seq_length, max_seq_length)`` bool mask. The buffers take the default dtype:
``fabric.init_tensor()`` is bf16 under ``bf16-true`` (lightning fabric plugins/precision/half.py
``tensor_init_context``) and fp32 under ``bf16-mixed`` (plugins/precision/amp.py ``MixedPrecision`` keeps the base
class's null context); ``KVCache.forward`` then casts each layer's buffers to the activation dtype (one layer's bf16
copy live beside the fp32 ones). The generation runs under no_grad on a prompt of tens of tokens.

So the generation adds ``2 * layers * n_head * max_seq_length * head_size`` elements plus ``max_seq_length**2`` bytes
to what persists after a step; training at the same ``max_seq_length`` adds its activations, gradients and loss on
top of the same persistent state. This test holds the two against each other on the estimator's own figures: the
generation's extra stays at most 0.75 of training's at every catalog model, method and length below (checkpointing
too, where the activations are smallest), so the validation's generation never sets the peak and is not modelled.
The mask is quadratic: it would overtake training only near a million tokens per sample, which no card holds.
"""

import pytest

from vramfit import estimate
from vramfit.estimate import resolve_spec
from vramfit.scenario import parse_scenario

PERSISTENT = ("persistent", "after-first-step")  # what stays live between optimizer steps


def generation_extra(spec, seq_len: int, precision: str) -> int:
    """Bytes ``generate_example`` holds beyond the persistent state (module docstring for the source lines)."""
    width = spec.num_attention_heads * spec.head_dim
    buffer = 4 if precision == "bf16-mixed" else 2  # fabric.init_tensor(): fp32 under mixed, bf16 under -true
    kv = 2 * spec.num_hidden_layers * seq_len * width * buffer
    one_layer_cast = 2 * seq_len * width * 2  # KVCache.forward: k.to(bf16), v.to(bf16) beside the fp32 buffers
    return kv + one_layer_cast + seq_len * seq_len  # + the bool causal mask


def training_extra(sc: dict) -> tuple[int, object]:
    r = estimate(sc)
    kept = sum(c.bytes for c in r.components if c.phase in PERSISTENT and c.counted_in == "allocated")
    return r.peak.allocated_bytes - kept, resolve_spec(parse_scenario(sc))[1]


@pytest.mark.parametrize(("model", "method", "precision", "seq_len", "ckpt"), [
    ("meta-llama/Llama-2-7b-hf", "lora", "bf16-mixed", 4096, "none"),
    ("meta-llama/Llama-2-7b-hf", "qlora", "bf16-true", 2048, "full"),
    ("meta-llama/Llama-3.1-8B", "full", "bf16-mixed", 131072, "full"),
    ("mistralai/Mistral-7B-v0.1", "lora", "bf16-mixed", 32768, "full"),
    ("google/gemma-2b", "lora", "bf16-mixed", 8192, "none"),
    ("Qwen/Qwen2.5-0.5B", "full", "bf16-mixed", 32768, "full"),
])
def test_generate_example_stays_under_the_training_step(model, method, precision, seq_len, ckpt):
    sc = {"model": model, "method": method, "precision": precision, "framework": "litgpt", "seq_len": seq_len,
          "micro_batch_size": 1, "gradient_checkpointing": ckpt}
    train, spec = training_extra(sc)
    gen = generation_extra(spec, seq_len, precision)
    assert 0 < gen < 0.75 * train, (gen, train)


def test_the_generation_figure_is_the_code_shapes():
    """Llama-2-7B at 4,096 tokens, bf16-mixed: k and v of 32 layers x 4,096 tokens x 4,096 (32 heads x 128) in fp32
    = 4 GiB of cache, one layer's bf16 copy (64 MiB) and a 16 MiB mask."""
    spec = resolve_spec(parse_scenario({"model": "meta-llama/Llama-2-7b-hf"}))[1]
    assert generation_extra(spec, 4096, "bf16-mixed") == 2 * 32 * 4096 * 4096 * 4 + 2 * 4096 * 4096 * 2 + 4096 ** 2
    assert generation_extra(spec, 4096, "bf16-mixed") == 4_378_853_376
