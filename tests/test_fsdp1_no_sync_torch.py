"""The torch FSDP1 behaviour estimate/step_grads.py _fsdp1_no_sync_grads rests on, run for real on CPU/gloo with two
ranks: under ``no_sync`` each trainable FlatParameter keeps its whole unsharded gradient in MixedPrecision's
param_dtype (a block unit mixing frozen weights and adapters: the whole block), a frozen one none; the synced
micro-batch leaves the shards in the parameters' dtype."""

from __future__ import annotations

import functools

import pytest

from two_ranks import spawn_two

pytestmark = pytest.mark.slow


def _seen() -> dict:
    """What each rank computes (two_ranks.spawn_two)."""
    return {method: _grads(method) for method in ("full", "lora", "litgpt")}


def _grads(method: str) -> list:
    """(synced, unpadded unsharded numel, (.grad numel, dtype) or None) per flat parameter, per micro-batch."""
    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import MixedPrecision
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg)  # fp32 parameters (bf16-mixed)
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={LlamaDecoderLayer})
    bf16 = torch.bfloat16
    if method != "full":
        from peft import LoraConfig, get_peft_model
        from peft.utils.other import fsdp_auto_wrap_policy

        model = get_peft_model(model, LoraConfig(r=8, target_modules=["q_proj", "v_proj"]))
        if method == "lora":
            policy = fsdp_auto_wrap_policy(model)  # what the Trainer swaps in (update_fsdp_plugin_peft)
        else:  # lit-gpt: bf16-true weights, the block as the only unit (adapters inside it), no autocast
            model = model.to(bf16)
    model = FSDP(model, auto_wrap_policy=policy, use_orig_params=True, device_id=torch.device("cpu"),
                 mixed_precision=MixedPrecision(param_dtype=bf16, reduce_dtype=bf16, buffer_dtype=bf16))
    ids = torch.randint(0, 256, (1, 16))
    seen = []
    for sync in (False, True):
        with model.no_sync() if not sync else torch.enable_grad():
            with torch.autocast("cpu", bf16, enabled=method != "litgpt"):
                loss = model(input_ids=ids, labels=ids).loss
            if method == "litgpt" and sync:  # the held gradients exist: trace this backward's allocations
                from vramfit.sim.trace import LiveTracker

                with LiveTracker() as tracker:
                    loss.backward()
                seen.append(("at_cat", _live_at_first_cat(tracker.trace)))
            else:
                loss.backward()
        for h in (m._handle for m in FSDP.fsdp_modules(model) if m._handle is not None):
            g = h.flat_param.grad
            seen.append((sync, h.flat_param._unpadded_unsharded_size.numel(),
                         None if g is None else (g.numel(), str(g.dtype))))
    return seen


def _live_at_first_cat(trace) -> tuple:
    """(the first cat's bytes, the bytes of the live 2-D mm outputs) when the first unit's flat gradient is made."""
    live: dict[int, int] = {}
    for e in trace.events:
        if e < 0:
            live.pop(~e, None)
            continue
        live[e] = e
        if trace.ops[e] == "cat.default":
            mm = sum(trace.nbytes[s] for s in live if trace.ops[s] == "mm.default" and len(trace.shapes[s]) == 2
                     and min(trace.shapes[s]) >= 64)  # weight gradients (the adapters' have a rank-8 side)
            return trace.nbytes[e], mm
    return 0, 0


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    return spawn_two(_seen, tmp_path_factory.mktemp("fsdp1"))


def test_full_fine_tune_holds_whole_bf16_gradients_until_the_synced_micro_batch(runs):
    seen = runs["full"]
    held = [(n, g) for sync, n, g in seen if not sync]
    assert held == [(32832, (32832, "torch.bfloat16")), (41088, (41088, "torch.bfloat16")),
                    (41088, (41088, "torch.bfloat16"))]
    assert sum(g[0] * 2 for _, g in held) == 115_008 * 2  # every parameter, 2 bytes each
    synced = [g for sync, _, g in seen if sync]
    assert synced == [(16416, "torch.float32"), (20544, "torch.float32"), (20544, "torch.float32")]


def test_lora_holds_only_its_adapters_units(runs):
    seen = runs["lora"]
    held = [g for sync, _, g in seen if not sync and g is not None]
    assert held == [(512, "torch.bfloat16")] * 8  # r8 A and B of q and v in 2 layers: 4,096 elements
    assert sum(1 for sync, _, g in seen if not sync and g is None) == 3  # the frozen units: no gradient


def _flat(seen: list) -> list:
    """The per-flat-parameter records of a run (without the traced backward's)."""
    return [x for x in seen if x[0] != "at_cat"]


LITGPT_BLOCK = 41_088 + 2_048  # one Llama block's frozen weights and its q/v adapters, one FlatParameter


def test_litgpt_blocks_hold_their_whole_flat_parameter(runs):
    """Lightning 2.1's use_orig_params=True with lit-gpt's {Block} units: the adapters share the block's
    FlatParameter, and its no_sync gradient spans it whole (frozen elements as zeros) until the synced
    micro-batch shards it; the all-frozen root unit gets none."""
    seen = _flat(runs["litgpt"])
    held = [g for sync, _, g in seen if not sync]
    assert held == [None, (LITGPT_BLOCK, "torch.bfloat16"), (LITGPT_BLOCK, "torch.bfloat16")]
    assert [g for sync, _, g in seen if sync] == [None] + [(LITGPT_BLOCK // 2, "torch.bfloat16")] * 2


def test_the_estimator_holds_the_same_bytes(runs):
    """estimate/step_grads.py _fsdp1_no_sync_grads on the same tiny Llama under the litgpt profile."""
    from transformers import LlamaConfig

    from vramfit.estimate.step import compute
    from vramfit.models.hf_config import spec_from_hf_config
    from vramfit.scenario import parse_scenario

    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=False)
    sc = parse_scenario({"model": "meta-llama/Llama-2-7b-hf", "framework": "litgpt", "method": "lora",
                         "precision": "bf16-true", "lora_rank": 8, "lora_targets": ["q_proj", "v_proj"],
                         "num_gpus": 2, "parallelism": "fsdp", "grad_accum": 2, "seq_len": 16})
    torch_bytes = sum(g[0] * 2 for sync, _, g in _flat(runs["litgpt"]) if not sync and g)  # bf16
    assert compute(spec_from_hf_config(cfg.to_dict()), sc).held_grads == torch_bytes == 172_544


def test_litgpt_block_backward_makes_two_whole_units_of_gradient(runs):
    """estimate/fsdp1_units.py mixed_unit_backward_grads: with the gradients held, the top block's backward has every
    frozen weight's gradient (q, k, v, o 64x64, gate, up, down 64x128: 40,960 elements, bf16) buffered for the
    split's backward when it concatenates them into the whole flat gradient (43,136 elements)."""
    from transformers import LlamaConfig

    from vramfit.estimate.core import model_state
    from vramfit.estimate.framework import scenario_profile
    from vramfit.estimate.fsdp1_units import mixed_unit_backward_grads
    from vramfit.models.hf_config import spec_from_hf_config
    from vramfit.scenario import parse_scenario

    (cat, frozen_dw), = [x[1] for x in runs["litgpt"] if x[0] == "at_cat"]
    assert (cat, frozen_dw) == (LITGPT_BLOCK * 2, 40_960 * 2)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=False)
    sc = parse_scenario({"model": "meta-llama/Llama-2-7b-hf", "framework": "litgpt", "method": "lora",
                         "precision": "bf16-true", "lora_rank": 8, "lora_targets": ["q_proj", "v_proj"],
                         "num_gpus": 2, "parallelism": "fsdp", "grad_accum": 2, "seq_len": 16})
    spec, profile = spec_from_hf_config(cfg.to_dict()), scenario_profile(sc)
    parts = model_state(spec, sc, profile)[0]
    assert mixed_unit_backward_grads(spec, sc, profile, parts) == 2 * 86_528  # 43,136 x 2 B, 512-rounded, twice
