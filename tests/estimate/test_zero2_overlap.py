"""ZeRO-2's 16-bit gradient partition on the reduction stream under ``overlap_comm`` (estimate/zero2_step.py
``partition_grads_on_side_stream``; DeepSpeed v0.16.2 runtime/zero/stage_1_and_2.py reduce_ipg_grads l. 1375-1404)."""

from vramfit.estimate import estimate, resolve_spec
from vramfit.estimate import zero2_step as zero2
from vramfit.estimate.allocator import segment_size
from vramfit.estimate.step import compute
from vramfit.scenario import parse_scenario

# SWIFT_EX_2601-10's scenario: ms-swift examples/train/rlhf/simpo.sh, zero2.json as at its header's commit
ROW10 = {"model": "Qwen/Qwen2.5-3B", "method": "full", "precision": "bf16-true", "micro_batch_size": 1,
         "seq_len": 2048, "gradient_checkpointing": "full", "attention": "sdpa", "optimizer": "adamw",
         "num_gpus": 2, "parallelism": "zero2", "offload": "none", "framework": "hf", "grad_accum": 8,
         "loss": "standard", "stage": "simpo", "cpo_alpha": 1.0,
         "framework_version": "transformers-4.47+trl-0.14+deepspeed-0.18"}


def _zero(overlap: bool | None, contiguous: bool = True) -> dict:
    z = {"stage": 2, "contiguous_gradients": contiguous, "reduce_bucket_size": 2e8, "allgather_bucket_size": 2e8}
    return {"zero_optimization": z if overlap is None else {**z, "overlap_comm": overlap}}


def _step(**keys):
    sc = parse_scenario(keys)
    _, spec, _, _ = resolve_spec(sc)
    return compute(spec, sc)


def test_which_configs_put_the_partition_on_the_reduction_stream():
    assert zero2.partition_grads_on_side_stream(_step(**ROW10, deepspeed_config=_zero(True)))
    # HF's template config (no file given) sets overlap_comm true; DeepSpeed's own default for stage 2 is false
    assert zero2.partition_grads_on_side_stream(_step(**ROW10))
    assert not zero2.partition_grads_on_side_stream(_step(**ROW10, deepspeed_config=_zero(None)))
    assert not zero2.partition_grads_on_side_stream(_step(**ROW10, deepspeed_config=_zero(False)))
    assert not zero2.partition_grads_on_side_stream(_step(**ROW10, deepspeed_config=_zero(True, contiguous=False)))
    zero3 = {**ROW10, "parallelism": "zero3"}
    assert not zero2.partition_grads_on_side_stream(_step(**zero3))


def test_the_events_put_both_accumulation_buffers_on_the_side_stream():
    """Per step: the window's buffer and, with accumulation, a later micro-batch's second one, made and dropped."""
    g, c = 1000 * 2**20, 2
    events, windows, side = zero2._zero2_events([], (g, g), c, 0, True, None, True, 8)
    made = [e for e in events if e >= 0]  # side holds allocation numbers (1-based), frees are -number
    assert sorted(made[n - 1] for n in side) == [c * g] * 4
    assert len(windows) == 4  # the second buffer and its micro-batch's loss lie outside the step's windows
    assert zero2._zero2_events([], (g, g), c, 0, True, None, False, 8)[2] == frozenset()
    assert len(zero2._zero2_events([], (g, g), c, 0, True, None, True, 1)[2]) == 2


def test_overlap_adds_two_partition_segments_to_row_10():
    """Two 16-bit partition buffers (Qwen2.5-3B over 2 GPUs: 1,542,969,344 elements, 2.88 GiB each) stay in the
    reduction stream's pool: reserved 43.73 GiB with overlap_comm (ms-swift's zero2.json at 0b45cce58), 37.98 GiB
    without; the allocated peak (the step's) is the same. The buffer holds rank 0's parameters counted whole
    (estimate/zero12_partition.py ``grads_in_partition``: 1,544,412,160 elements), so without overlap_comm it no
    longer fits the segment the partition's 16-bit clone left cached at init and opens one too: the difference is
    one buffer's segment (two, 6,174,015,488 B, when the buffer was sized by the partition), and the IPG bucket's flat
    copy (estimate/zero2_step.py ``ipg_reduction``: 199,242,752 elements, the bucket that spans the partition edge), made on the
    reduction stream with overlap_comm, where it opens a segment of its own, and on the default stream without, where
    it takes a cached one (the engine on Qwen2.5-3B with the 5e8 default bucket: a 926 MiB reduction-stream segment
    with overlap_comm, none without: tests/sim/test_sim_deepspeed_grid.py)."""
    on, off = estimate({**ROW10, "deepspeed_config": _zero(True)}), estimate({**ROW10, "deepspeed_config": _zero(False)})
    g = -(-on.model.num_trainable_params // 2)
    assert g == 1_542_969_344
    assert on.peak.allocated_bytes == off.peak.allocated_bytes == 37_053_286_400  # + 2 x 1,442,816 B of gradients
    assert zero2.ipg_reduction(_step(**ROW10, deepspeed_config=_zero(True)))[1:] == (2 * 199_242_752, True)
    assert on.peak.reserved_bytes - off.peak.reserved_bytes == segment_size(2 * 1_544_412_160) + segment_size(
        2 * 199_242_752) == 3_089_104_896 + 400_556_032
