"""DeepSpeed ZeRO-2's flat step tensors replayed through the caching allocator after the loss
(estimate/allocator.py zero2_step_reserved; DeepSpeed v0.16.2 runtime/zero/stage_1_and_2.py step)."""

from dataclasses import replace

import pytest

from vramfit.estimate import estimate, resolve_spec
from vramfit.estimate.allocator import step_transients, transient_reserved, zero2_step_reserved
from vramfit.estimate.framework import OptimizerImpl
from vramfit.estimate.step import compute
from vramfit.scenario import parse_scenario

MiB = 1024**2
# SWIFT_EX_2601-10's shape without the preference stage: Qwen2.5-3B full fine-tuning, ZeRO-2 on 2 GPUs
SC = {"model": "Qwen/Qwen2.5-3B", "method": "full", "parallelism": "zero2", "num_gpus": 2, "seq_len": 2048,
      "framework": "hf", "framework_version": "transformers-4.47"}


def _step(**keys):
    sc = parse_scenario(keys)
    _, spec, _, _ = resolve_spec(sc)
    return compute(spec, sc)


def test_foreach_copy_and_the_loss_segments_stay_reserved_at_the_step():
    r = _step(**SC)
    g = -(-r.parts.num_trainable // 2)  # 1,543,707,136 elements: every step tensor dwarfs a 1.2 GB loss block
    loss = step_transients(r)
    loss_segments = transient_reserved(loss)[1]
    fused = replace(r, profile=replace(r.profile, torch_optimizer_impl=OptimizerImpl.FUSED))
    # fused: 16-bit gradients 2g + flat copy 2g + fp32 copy 4g, all live at once: only the loss's segments are extra
    # (each segment rounds up to 2 MiB, the cached figure down: within one 2 MiB unit per step tensor)
    assert zero2_step_reserved(fused, 0, loss) == pytest.approx(loss_segments, abs=8 * MiB)
    # foreach: the sqrt copy (4g) cannot reuse the freed 16-bit segments (2g each): a segment of its own
    assert zero2_step_reserved(r, 0, loss) == pytest.approx(loss_segments + 4 * g, abs=8 * MiB)


def test_the_step_sets_the_reserved_figure_above_the_allocated_peak():
    peak = estimate(SC).peak
    step = next(p for p in estimate(SC).phases if p.phase == "optimizer-step")
    r = _step(**SC)
    cached = zero2_step_reserved(r, 0, step_transients(r))
    assert peak.reserved_bytes >= step.allocated_bytes + cached
    assert zero2_step_reserved(_step(**{**SC, "parallelism": "zero3"}), 0, []) == 0
