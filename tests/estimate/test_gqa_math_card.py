"""Grouped-query SDPA under transformers on a card without the flash backend (T4, V100): transformers passes grouped
k and v with enable_gqa, PyTorch's memory-efficient kernel takes no grouped-query shapes, so the math kernel runs
and keeps fp32 probabilities and fp32 q, k, v of every head (estimate/attention.py ``gqa_math_on_card``)."""

from vramfit.estimate import estimate
from vramfit.estimate.attention import gqa_math_on_card
from vramfit.estimate.framework import scenario_profile
from vramfit.estimate.step import compute
from vramfit.gpus import get_gpu
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario

L1 = "meta-llama/Llama-3.2-1B"  # 16 layers, 32 query heads, 8 k/v heads, head_dim 64


def _sc(gpu, **keys):
    return parse_scenario({"model": L1, "framework": "hf", "method": "lora", "lora_rank": 16,
                           "lora_targets": ["all-linear"], "precision": "fp16-mixed", "micro_batch_size": 2,
                           "seq_len": 1024, "gradient_checkpointing": "none", "attention": "sdpa", "gpu": gpu, **keys})


def _saved(sc) -> dict[str, int]:
    return dict(compute(resolve_model(sc.model).spec, sc, get_gpu(sc.gpu)).acts.saved.items)


def test_the_math_kernel_keeps_fp32_probabilities_and_fp32_q_k_v_of_every_head():
    T, heads, d = 2 * 1024, 32, 64
    t4, a100 = _saved(_sc("t4")), _saved(_sc("a100-80gb-sxm"))
    assert t4["attn.softmax_out"] == 4 * 2 * heads * 1024 * 1024
    assert t4["q"] == t4["k"] == t4["v"] == 4 * T * heads * d
    assert "attn.lse" not in t4 and "attn.softmax_out" not in a100
    assert a100["k"] == a100["v"] == 2 * T * 8 * d and a100["attn.lse"] == 4 * 2 * heads * 1024


def test_the_estimate_is_the_flash_one_plus_what_the_math_kernel_keeps():
    """Without checkpointing every layer keeps them: per layer the fp32 probabilities and q, k, v, less flash's
    16-bit q, grouped k and v, output and log-sum-exp; the simulator agrees within 0.2 % on both cards
    (tests/sim/test_sim_gqa_math_card.py)."""
    T, heads, d, layers = 2 * 1024, 32, 64, 16
    per_layer = 4 * 2 * heads * 1024 * 1024 + 3 * 4 * T * heads * d - (2 * T * heads * d + 2 * 2 * T * 8 * d
                                                                      + 2 * T * heads * d + 4 * 2 * heads * 1024)
    t4, a100 = (estimate(_sc(g)).peak.allocated_bytes for g in ("t4", "a100-80gb-sxm"))
    assert t4 - a100 == layers * per_layer


def test_only_where_transformers_passes_grouped_k_and_v():
    """transformers before v4.54 repeats k and v itself (the efficient kernel takes them), a model whose layers differ
    in kind is not modelled, and the flash path on an A100 or with no card named is unchanged."""
    for keys in ({"framework_version": "transformers-4.53"}, {"model": "google/gemma-3-1b-it"}):
        sc = _sc("t4", **keys)
        assert not gqa_math_on_card(resolve_model(sc.model).spec, sc, scenario_profile(sc))
        assert estimate(sc).peak.allocated_bytes == estimate(_sc("a100-80gb-sxm", **keys)).peak.allocated_bytes
    assert estimate(_sc(None)).peak.allocated_bytes == estimate(_sc("a100-80gb-sxm")).peak.allocated_bytes


def test_the_estimate_says_so():
    notes = [a for a in estimate(_sc("t4")).assumptions if a.startswith("Attention: ")]
    assert notes == ["Attention: the Tesla T4 has no flash SDPA kernel and PyTorch's memory-efficient one takes no "
                     "grouped-query heads, so transformers' SDPA call (enable_gqa) runs the math kernel: fp32 "
                     "probabilities (2 x 32 x 1024^2 per layer) and fp32 q, k and v of every head are saved for "
                     "backward."]
