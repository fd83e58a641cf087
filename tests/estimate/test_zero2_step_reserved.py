"""DeepSpeed ZeRO-2's flat partition-sized tensors replayed through the caching allocator from model load to the
second step (estimate/zero2_step.py zero2_step_reserved; DeepSpeed v0.16.2 runtime/zero/stage_1_and_2.py)."""

from dataclasses import replace

import pytest

from vramfit.estimate import allocator as alloc
from vramfit.estimate import estimate, resolve_spec
from vramfit.estimate import zero2_step as zero2
from vramfit.estimate.framework import OptimizerImpl
from vramfit.estimate.step import compute
from vramfit.estimate.transients import step_transients
from vramfit.scenario import parse_scenario
from vramfit.sim.cuda_allocator import CachingAllocatorModel

MiB = 1024**2
# SWIFT_EX_2601-10's shape without the preference stage: Qwen2.5-3B full fine-tuning, ZeRO-2 on 2 GPUs, its releases
SC = {"model": "Qwen/Qwen2.5-3B", "method": "full", "parallelism": "zero2", "num_gpus": 2, "seq_len": 2048,
      "framework": "hf", "framework_version": "transformers-4.47+deepspeed-0.18"}
# the same with the reduction on the default stream (overlap_comm false: HF's template sets it true, and with it the
# 16-bit partition buffer is the reduction stream's, estimate/zero2_step.py partition_grads_on_side_stream)
SC_SERIAL = {**SC, "deepspeed_config": {"zero_optimization": {"stage": 2, "overlap_comm": False}}}
# the simulator's DeepSpeed 0.19.8 engine on this scenario, full depth, foreach AdamW
SIM = {"model": "Qwen/Qwen2.5-0.5B", "method": "full", "precision": "bf16-true", "seq_len": 256, "num_gpus": 2,
       "parallelism": "zero2", "framework": "hf", "framework_version": "transformers-4.47"}


def _step(**keys):
    sc = parse_scenario(keys)
    _, spec, _, _ = resolve_spec(sc)
    return compute(spec, sc)


def _new_segments(r) -> list[int]:
    """MiB of every segment of 50 MiB or more the replay opens, in order."""
    g = -(-r.parts.num_trainable // r.sc.num_gpus)
    foreach = r.profile.torch_optimizer_impl is OptimizerImpl.FOREACH
    banks = r.profile.runs_transformers_modeling
    sizes = (g, zero2.grads_in_partition(r.spec, r.sc, banks) or g)  # the 16-bit gradient buffer: rank 0's params whole
    events, _, _ = zero2._zero2_events(step_transients(r), sizes, 2, 8 * zero2.zero12_norm_piece(r.spec, g), foreach)
    model, blocks, out = CachingAllocatorModel(), [], []
    for ev in events:
        if ev >= 0:
            before = model.stats.reserved
            blocks.append(model.malloc(ev))
            if model.stats.reserved - before >= 50 * MiB:
                out.append(round((model.stats.reserved - before) / MiB))
        else:
            model.free(blocks[-ev - 1])
    return out


def test_the_replay_opens_the_segments_the_engine_opens():
    """`vramfit simulate` (SIM, --full-depth) opens, after the model's flat 16-bit buffer: the 16-bit clone (472 MiB),
    the fp32 master (944), the zero fp32 gradient of initialize_optimizer_states (944), the first step's float64 norm
    copy of the whole embedding on rank 0 (1040: 151936 x 896 x 8 B), one Adam state (944; the other reuses the zero
    gradient's segment) and foreach AdamW's sqrt copy (944)."""
    assert _new_segments(_step(**SIM)) == [472, 944, 944, 1040, 944, 944]


def test_load_segments_serve_the_loss_and_one_16_bit_partition_is_left_at_the_step():
    r = _step(**SC_SERIAL)
    g = -(-r.parts.num_trainable // 2)
    loss = step_transients(r)
    # the loss's 2.3 GiB fp32 blocks split the cached clone and zero-gradient segments: no segment of their own
    seg = [alloc.segment_size(n * g) // MiB for n in (2, 4)]  # 2 MiB-rounded segments of 16-bit and fp32 partitions
    assert _new_segments(r) == [seg[0]] + [seg[1]] * 5  # clone, master, zero gradient, three at the steps
    # less what the 16-bit gradient buffer holds beyond the partition at the step: rank 0's parameters counted whole,
    # 1,442,816 elements more (estimate/zero12_partition.py grads_in_partition)
    whole = zero2.grads_in_partition(r.spec, r.sc, r.profile.runs_transformers_modeling)
    assert whole - g == 1_442_816
    assert zero2.zero2_step_reserved(r, loss) == pytest.approx(2 * g - 2 * (whole - g), abs=2 * MiB)
    fused = replace(r, profile=replace(r.profile, torch_optimizer_impl=OptimizerImpl.FUSED))
    assert zero2.zero2_step_reserved(fused, loss) == zero2.zero2_step_reserved(r, loss)


def test_the_step_sets_the_reserved_figure_above_the_allocated_peak():
    est = estimate(SC)
    step = next(p for p in est.phases if p.phase == "optimizer-step")
    r = _step(**SC)
    assert est.peak.reserved_bytes >= step.allocated_bytes + zero2.zero2_step_reserved(r, step_transients(r))
    assert zero2.zero2_step_reserved(_step(**{**SC, "parallelism": "zero3"}), []) == 0


def test_zero1_2_norm_takes_the_whole_embedding_on_one_gpu():
    """ZeRO-1/2 partition the flat buffer: the first GPU holds the whole embedding (136M elements of a 247M-element
    partition), ZeRO-3 half of it."""
    r = _step(**SIM)
    assert zero2.zero12_norm_piece(r.spec, 247_000_000) == 151936 * 896
    assert zero2.zero12_norm_piece(r.spec, 100_000_000) == 100_000_000


def test_reserved_is_the_engines_with_the_cached_parameter_segments():
    """`vramfit simulate` (DeepSpeed 0.19.8, fused AdamW, --full-depth) of SIM less its release, and of Qwen2.5-3B,
    HF's template config (overlap_comm true: the partition buffer on the reduction stream, sim/deepspeed_zero.py
    side_reduction_stream): allocated 5.55 / 34.51 GiB, reserved 8,323,596,288 / 43,641,733,120 B (7.75 / 40.64 GiB;
    8.01 / 41.23 before the simulator stopped allocating the tied output layer's own weight, sim/build.py). DeepSpeed
    0.19 flattens on the GPU and leaves the 16-bit parameters the engine moved there cached (0.92 / 5.75 GiB, the
    16-bit model; estimate/ds_load.py flatten_events): the estimate is 8,302,417,792 / 43,537,680,384 (-0.25 % /
    -0.24 %; +6.1 % / +0.9 % while the generic per-tensor and activation slack, estimate/reserved.py, was added over
    the step's replay, which already holds those segments whole: zero2_step.py flatten_cached)."""
    modern = {k: v for k, v in SIM.items() if k != "framework_version"}
    for model, allocated, reserved in (("Qwen/Qwen2.5-0.5B", 5.55, 8_323_596_288), ("Qwen/Qwen2.5-3B", 34.51, 43_641_733_120)):
        r = estimate({**modern, "model": model})
        assert r.peak.allocated_bytes == pytest.approx(allocated * 2**30, rel=0.005)
        assert r.peak.reserved_bytes == pytest.approx(reserved, rel=0.005)


def test_required_leaves_out_the_cached_parameter_segments():
    """The freed originals' segments stay wholly free through the step (no step tensor fits in them), so a card
    without room releases them (CUDACachingAllocator.cpp release_cached_blocks): required is what it was before they
    were modelled and what DeepSpeed 0.18's host flatten (no original left cached) needs; the device figure is above
    it by the originals' segments (the 16-bit model, 5.75 GiB, in segments rounded to 2 MiB / shared 20 MiB ones)."""
    modern = {k: v for k, v in SIM.items() if k != "framework_version"} | {"deepspeed_config": SC_SERIAL["deepspeed_config"]}
    r = estimate({**modern, "model": "Qwen/Qwen2.5-3B"})
    old = estimate({**modern, "model": "Qwen/Qwen2.5-3B", "framework_version": "deepspeed-0.18"})
    model16 = 2 * r.model.num_params
    # DeepSpeed 0.18 (no original cached) needs the step's generic per-tensor and activation slack (estimate/
    # reserved.py, 643,907,584 B here) on top; 0.19's activations lie in the originals' freed segments, released
    # whole on a card without room (zero2_step.py flatten_cached). 2 MiB more in both while a shadowed name made the
    # second step allocate the first step's allocation number in bytes instead of the IPG bucket's flat copy
    assert r.peak.required_bytes == 40_851_228_672
    assert old.peak.required_bytes == old.peak.device_bytes == 41_495_136_256 == 40_851_228_672 + 643_907_584
    assert r.peak.device_bytes - r.peak.required_bytes == 6_438_256_640  # 5.996 GiB
    assert model16 < 6_438_256_640 < 1.05 * model16
    step = _step(**{**modern, "model": "Qwen/Qwen2.5-3B"})
    loss = step_transients(step)
    cached = zero2.zero2_step_reserved(step, loss)
    assert cached - zero2.zero2_step_reserved(step, loss, required=True) == 6_438_256_640
    host = replace(step, profile=replace(step.profile, ds_flattens_on_host=True))
    # with no original cached the step opens the same segments: the IPG bucket's flat copy (ipg_reduction) reuses in
    # the second step the segment it opened in the first
    assert cached - zero2.zero2_step_reserved(host, loss) == 6_438_256_640
    assert zero2.flatten_cached(step) == 6_438_256_640 and zero2.flatten_cached(host) == 0


def test_before_0_19_zero2_flattens_on_the_host():
    """No flat copy beside the parameters at load (v0.16.2 stage_1_and_2.py l. 320-329)."""
    modern = {k: v for k, v in SIM.items() if k != "framework_version"}
    assert any(p.phase == "load" for p in estimate(modern).phases)
    assert not any(p.phase == "load" for p in estimate({**modern, "framework_version": "deepspeed-0.18"}).phases)


def test_a_step_tensor_that_fits_reuses_a_cached_original():
    """A 100 MiB original freed after the flatten (300 MiB flat buffer, kept): a 90 MiB step tensor splits its cached
    segment (best fit, more than 1 MiB left: CUDACachingAllocator.cpp should_split), so reserved stays 400 MiB and the
    segment, no longer wholly free, is not released; a 110 MiB one opens a segment of its own and the original's
    100 MiB are released."""
    fits = zero2._zero2_replay((100 * MiB, 300 * MiB, -1, 90 * MiB), ((3, 4),), None)
    assert fits == (400 * MiB, 390 * MiB, 400 * MiB)  # (reserved, live at the step, needed): nothing released
    opens = zero2._zero2_replay((100 * MiB, 300 * MiB, -1, 110 * MiB), ((3, 4),), None)
    assert opens == (510 * MiB, 410 * MiB, 410 * MiB)  # the original's 100 MiB released: 510 - 410
