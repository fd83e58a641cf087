"""When DeepSpeed ZeRO-1/2 make their IPG reduction buckets: before 0.17.2 at the start of the optimizer's backward(),
so they are live while the loss's backward runs (v0.16.2 runtime/zero/stage_1_and_2.py backward l. 2029-2052); since
PR #6993 (v0.17.2) at the first gradient hook (process_gradients -> backward_prologue, setup_buckets since v0.18.3).
The simulator's DeepSpeed 0.19.8 engine cannot run the old order, so the estimator's phases are checked directly."""

import pytest

from vramfit.estimate import estimate
from vramfit.estimate.framework import scenario_profile
from vramfit.scenario import parse_scenario

ZERO2 = {"stage": 2, "overlap_comm": True, "reduce_scatter": True, "reduce_bucket_size": 2e8, "contiguous_gradients": True}
# SWIFT_EX_2601-1's shape: Qwen2.5-7B LoRA all-linear, ZeRO-2 on 2 GPUs, swift/llm/ds_config/zero2.json of 2024-12-23
SC = {"model": "Qwen/Qwen2.5-7B", "method": "lora", "precision": "bf16-true", "seq_len": 2048, "num_gpus": 2,
      "lora_rank": 8, "lora_targets": "all-linear", "gradient_checkpointing": "full", "grad_accum": 8,
      "parallelism": "zero2", "framework": "hf", "deepspeed_config": {"zero_optimization": ZERO2}}


def _phases(sc):
    return {p.phase: p.allocated_bytes for p in estimate(sc).phases}


def test_releases_name_the_bucket_order():
    assert scenario_profile(parse_scenario({**SC, "framework_version": "deepspeed-0.16"})).ds_ipg_at_backward_start
    assert scenario_profile(parse_scenario({**SC, "framework_version": "deepspeed-0.8"})).ds_ipg_at_backward_start
    assert not scenario_profile(parse_scenario({**SC, "framework_version": "deepspeed-0.18"})).ds_ipg_at_backward_start
    assert not scenario_profile(parse_scenario(SC)).ds_ipg_at_backward_start


@pytest.mark.parametrize(("overlap", "buckets"), [(True, 2), (False, 1)])
def test_before_0_17_2_the_buckets_are_live_at_the_loss_backward(overlap, buckets):
    """buf_0 (and buf_1 with overlap_comm) of reduce_bucket_size bf16 elements: 2e8 x 2 bytes each, only in the
    loss's backward; forward (made after the previous backward released them) and the blocks' backward (where the
    hooks have made them in both orders) are the same."""
    sc = {**SC, "deepspeed_config": {"zero_optimization": {**ZERO2, "overlap_comm": overlap}}}
    old, new = _phases({**sc, "framework_version": "deepspeed-0.16"}), _phases({**sc, "framework_version": "deepspeed-0.18"})
    assert old["backward-loss"] - new["backward-loss"] == buckets * 200_000_000 * 2
    assert {k: v for k, v in old.items() if k != "backward-loss"} == {k: v for k, v in new.items() if k != "backward-loss"}
    assert old == _phases({**sc, "framework_version": "deepspeed-0.8"})


def test_the_loss_backward_is_the_peak_with_the_early_buckets():
    old, new = estimate({**SC, "framework_version": "deepspeed-0.16"}), estimate({**SC, "framework_version": "deepspeed-0.18"})
    assert old.peak.allocated_bytes == 20_409_570_304 == new.peak.allocated_bytes + 800_000_000
    # the IPG buckets and their flat copy (estimate/zero2_step.py ipg_reduction), replayed at the end of each backward,
    # leave required where it was: the LoRA bucket's flat copy opens a reduction-stream segment, wholly free at the step,
    # which the second step's copy reuses (21,515,993,088 while a shadowed name made that step allocate the first
    # step's allocation number in bytes: a small block opening a 2 MiB small-pool segment on that stream). Under 0.18
    # the step's replay no longer sets the figure: it counts the segments holding a live block when the most do
    # (zero2_step._zero2_replay, the simulator's required; 21,641,822,208 while only the flatten's originals and the
    # reduction stream's segments came off), so the loss backward's does, 140.5 MB under its reserved figure. 0.16's
    # figure is 21,905,221,632 since the engine's 16-bit cast reaches peft's adapters under bf16-true too (2026-12-07:
    # no fp32 copies of their inputs in the recomputed block; 22,022,662,144 before)
    assert old.peak.required_bytes == 21_905_221_632 and new.peak.required_bytes == 21_105_221_632  # (21,222,662,144)
    assert new.peak.reserved_bytes - new.peak.required_bytes == 140_509_184


def test_zero3_keeps_its_bucket_from_init_in_every_release():
    sc = {**SC, "parallelism": "zero3", "deepspeed_config": {"zero_optimization": {**ZERO2, "stage": 3}}}
    assert _phases({**sc, "framework_version": "deepspeed-0.16"}) == _phases({**sc, "framework_version": "deepspeed-0.18"})
