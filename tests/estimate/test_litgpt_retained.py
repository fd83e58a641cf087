"""litgpt 2024 QLoRA as it runs: the previous micro-batch's 4-bit matmul inputs outlive its backward
(bitsandbytes 0.42.0 MatMul4Bit keeps them as ``ctx.tensors``; finetune/lora.py's ``logits`` keeps the graph
into the next forward), and litgpt 2024's RMSNorm saves its fp32 input. The per-layer figures are the
running-loop replica's (estimate/retained_graph.py docstring: litgpt@5895df10 on CPU, bytes still allocated
after backward while ``logits`` lives): 11.375 x h per token on Llama-2-7B, 12 x h on phi-2 and falcon-7b,
14 x h on stablelm-base-alpha-3b."""

import pytest

from vramfit.estimate.retained_graph import previous_step_inputs
from vramfit.estimate.step import compute
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario

LLAMA = "meta-llama/Llama-2-7b-hf"


def _step(model, **keys):
    base = {"model": model, "method": "qlora", "quantize": "nf4", "framework": "litgpt",
            "framework_version": "litgpt-2024", "precision": "bf16-true", "lora_targets": ["q_proj", "v_proj"],
            "lora_rank": 32, "micro_batch_size": 2, "seq_len": 512, "optimizer": "paged-adamw"}
    sc = parse_scenario({k: v for k, v in {**base, **keys}.items() if v is not None})
    return compute(resolve_model(model).spec, sc)


def _phase(step, name):
    return dict(next(p for p in step.phases if p.phase.value == name).parts)


def test_llama_keeps_qkv_attention_mlp_and_product_inputs_of_every_layer_and_the_head_input():
    step = _step(LLAMA)
    T, h, inter = 1024, 4096, 11008
    saved = step.acts.saved
    assert saved.q_inputs == {"attn_in", "attn.out", "mlp_in", "mlp_mid"}
    # (3 h + intermediate) bf16 per token = 11.375 h, 32 layers, plus the 4-bit lm_head's bf16 input
    assert previous_step_inputs(step) == 32 * T * (3 * h + inter) * 2 + T * h * 2 == 1_535_115_264
    # alive through the next forward only: the loop rebinds `logits` when the forward returns
    assert _phase(step, "forward")["previous_step_inputs"] == 1_535_115_264
    assert "previous_step_inputs" not in _phase(step, "backward-loss")


@pytest.mark.parametrize(("model", "per_token_h"), [
    ("microsoft/phi-2", 12), ("tiiuae/falcon-7b", 12), ("stabilityai/stablelm-base-alpha-3b", 14)])
def test_parallel_blocks_keep_what_the_replica_keeps(model, per_token_h):
    step = _step(model)
    spec, T = step.spec, 1024
    per_layer = sum(step.acts.saved.items[k] for k in step.acts.saved.q_inputs)
    assert per_layer == per_token_h * spec.hidden_size * T


@pytest.mark.parametrize("keys", [
    {"framework_version": None},  # lit-gpt@8641822: the longest sample comes first, with no graph before it
    {"method": "lora", "quantize": "none", "optimizer": "adamw"},  # frozen nn.Linear keeps nothing past backward
    {"framework": "hf", "framework_version": None},  # the Trainer keeps loss.detach(); bnb 0.50.2 keeps no input
    {"gradient_checkpointing": "full"},  # not modelled
])
def test_nothing_retained_elsewhere(keys):
    assert previous_step_inputs(_step(LLAMA, **keys)) == 0


def test_litgpt_2024_rmsnorm_saves_its_fp32_input_and_2023_its_bf16_input():
    T, h = 1024, 4096
    new = _step(LLAMA).acts.saved.items
    assert new["norm1.fp32_in"] == new["norm2.fp32_in"] == 4 * T * h
    assert "block_in" not in new
    old = _step(LLAMA, framework_version=None).acts.saved.items
    assert old["block_in"] == old["resid_mid"] == 2 * T * h
    assert "norm1.fp32_in" not in old
