"""A fully checkpointed block's eager attention in forward (block_extras.forward_softmax_moment's working set:
eager_forward_softmax + checkpointed_block_own, the forward-attention phase) and a kept output
that lives into the next forward (profile.loop_carry LoopCarry.OUTPUTS, framework_version llama-recipes-2023).

Llama-2-7B, 4 x 2048, bf16: the (B, H, S, S) scores are 4 x 32 x 2048 x 2048 = 512 Mi elements; at the softmax the
masked bf16 scores (1 GiB), their fp32 copy (2 GiB) and the fp32 output (2 GiB) are alive with the normed input,
q, k and v (64 MiB each)."""

import pytest

from vramfit.estimate import estimate
from vramfit.estimate.block_extras import checkpointed_block_own, eager_forward_softmax
from vramfit.estimate.framework import scenario_profile
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario

LLAMA2 = resolve_model("meta-llama/Llama-2-7b-hf").spec
GIB, MIB = 1024**3, 1024**2
BASE = {"model": "meta-llama/Llama-2-7b-hf", "method": "lora", "lora_targets": ["q_proj", "v_proj"],
        "micro_batch_size": 4, "seq_len": 2048, "precision": "bf16-true", "gradient_checkpointing": "full",
        "attention": "eager"}


def _ws(cache=0, **keys):
    sc = parse_scenario({**BASE, **keys})
    profile = scenario_profile(sc)
    return eager_forward_softmax(LLAMA2, sc, profile) + checkpointed_block_own(LLAMA2, sc, profile, cache)


def test_the_softmax_moment_holds_three_score_tensors_and_the_blocks_own():
    assert _ws() == 5 * GIB + 4 * 64 * MIB
    # with a returned cache, k and v are the cache's (every layer's, here 4 GiB) instead of the block's own
    assert _ws(cache=4 * GIB) == 5 * GIB + 2 * 64 * MIB + 4 * GIB


def test_only_for_eager_attention_and_the_blocks_own_only_when_checkpointed():
    assert _ws(attention="sdpa") == 0
    # not checkpointed, the block's normed input, q, k and v are saved activations (kept, not working set)
    assert _ws(gradient_checkpointing="none") == 5 * GIB


def _phase(result, name):
    return next(p.allocated_bytes for p in result.phases if p.phase == name)


def _forward(result):
    """The estimator's forward high point: the simulator traces the softmax moment (forward-attention) as forward."""
    return max(_phase(result, "forward"), _phase(result, "forward-attention"))


def test_forward_phase_agrees_with_simulator():
    """The simulator (installed transformers, use_cache off) peaks in forward at the last block's softmax:
    21,416,076,288 B; the estimator counted only the logits moment before (19.06e9, -11 %). The cache raises the
    forward by 31 earlier layers' k and v beyond it (the block's own are in both)."""
    from vramfit.sim import simulate

    sim = _phase(simulate(BASE).result, "forward")
    est = _forward(estimate(BASE))
    assert est == pytest.approx(sim, rel=0.01), (est, sim)
    with_cache = _forward(estimate({**BASE, "framework_version": "transformers-4.44+llama-recipes-2023"}))
    assert with_cache - est == 31 * 128 * MIB


def test_llama_recipes_pr41_peaks_in_forward_and_a_kept_output_adds_itself():
    """meta-llama/llama-recipes PR #41 (4 x A100, FSDP1): 15.22 and 20.20 'GB' peak active, 4.98 apart, with the
    output dropped and kept; the kept output is the fp32 logits plus the 4 GiB cache, alive in the next forward."""
    fsdp = {**BASE, "num_gpus": 4, "parallelism": "fsdp", "fsdp_version": "1",
            "framework_version": "transformers-4.44+llama-recipes-2023"}
    dropped, kept = estimate(fsdp), estimate({**fsdp, "keeps_outputs": True})
    assert dropped.peak.phase == "forward-attention" and kept.peak.phase == "forward-attention"
    assert kept.peak.allocated_bytes - dropped.peak.allocated_bytes == 4 * 2048 * 32000 * 4 + 4 * GIB
    # not for a loop that drops it before the next forward (fsdp_qlora's `output = None`): the plain profile
    plain = {**fsdp, "framework_version": "transformers-4.44", "keeps_outputs": True}
    assert _forward(estimate(plain)) == _forward(estimate({**plain, "keeps_outputs": False}))
