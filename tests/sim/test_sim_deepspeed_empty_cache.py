"""``torch.cuda.empty_cache()`` in the simulator: DeepSpeed calls it through its accelerator (``get_accelerator().
empty_cache()``), which on the CPU accelerator the simulator runs is a no-op (DeepSpeed 0.19.8 accelerator/
cpu_accelerator.py l. 137); sim/deepspeed_zero.py ``gpu_labelled_accelerator`` makes it an event of the trace
(sim/trace.py ``Trace.empty_caches``) and the allocator replay returns every wholly free cached segment to the driver
there, as CUDACachingAllocator's ``emptyCache`` -> ``release_cached_blocks`` does (sim/cuda_allocator.py).

ZeRO-3 calls it in ``defragment`` (runtime/zero/utils.py l. 215-241: every partition copied to the host and freed,
``empty_cache``, the flat partition copied back) unless ``offload_param`` keeps the partitions on the host.
`vramfit simulate --full-depth`, full fine-tuning, bf16-true, 2 GPUs, rank 0's reserved bytes:

| case | engine, empty_cache a no-op | engine now | estimate (estimate/zero3_reserved.py) |
|---|---|---|---|
| Qwen2.5-0.5B seq 256, no offload | 7,562,330,112 (7,212 MiB) | 7,103,053,824 (6,774 MiB) | 6,506 MiB (-4.0 %; was 6,382, -5.8 %) |
| same, offload_optimizer | 3,200,253,952 (3,052 MiB) | 3,229,614,080 (3,080 MiB) | 2,805 MiB (-8.9 %) |
| same, + offload_param (no defragment) | 2,705,326,080 (2,580 MiB) | 2,707,423,232 (2,582 MiB) | 2,334 MiB |
| TinyLlama-1.1B seq 512, no offload | 14,474,543,104 (13,804 MiB) | 13,723,762,688 (13,088 MiB) | 12,868 MiB (-1.7 %; was 11,970, -8.5 %) |

Qwen2.5-0.5B without offload: defragment's ``empty_cache`` returns 1,156 MiB of load segments (4 MiB stay: the small
pool's live blocks), leaving the flat partition's 472; from there the estimate's replay opens the engine's segments
(944 + 944 fp32 master, 150, 260 + 260, 520, 944 x 3) but one: the boundary micro-batch's forward carves its saved
activations (1-10 MiB, large pool) out of the 472 MiB left free in the fp32 conversion's segment after the 16-bit
gradient partition, so the output layer's 260 MiB gather opens a segment of its own; that and the activations' own
small-pool segments were the 392 MiB the estimate lacked; it now replays the activations and the cuBLAS workspaces (test_sim_deepspeed_zero3_reserved.py) and lacks one 260 MiB segment. With the optimizer offloaded, the freed load segments no longer
absorb the activations either: the second step's float64 norm copy opens a second 520 MiB segment. The simulator still
builds the model whole where HF builds it under ``deepspeed.zero.Init`` (transformers 5.24.0 modeling_utils.py l.
1435-1446): after ``empty_cache`` both hold only the flat partition, so that changes only the run with offload_param.
"""

from __future__ import annotations

import json

import pytest
from simconfigs import tiny

from vramfit.scenario import parse_scenario
from vramfit.sim.cuda_allocator import replay
from vramfit.sim.inplace import fold_accumulations
from vramfit.sim.trace import LiveTracker, Trace

MiB = 1024**2
LAYERS = 4


def test_the_replay_returns_wholly_free_segments_where_empty_cache_ran():
    """300 MiB freed, 100 MiB live, then a 400 MiB request: cached, the 300 MiB block cannot serve it (800 MiB
    reserved); emptied first, its segment goes back and the request opens 400 beside the live 100."""
    nbytes, events = [300 * MiB, 100 * MiB, 400 * MiB], [0, 1, ~0, 2]
    assert replay(events, nbytes)[2].peak_reserved == 800 * MiB
    _allocated, reserved, stats = replay(events, nbytes, empty_caches=[3])
    assert reserved == [300 * MiB, 400 * MiB, 400 * MiB, 500 * MiB] and stats.peak_reserved == 500 * MiB
    assert stats.segments == 2


def test_empty_cache_keeps_a_segment_with_a_live_block_and_empties_every_stream():
    """``release_cached_blocks`` frees every pool's wholly free segments, a side stream's too; a segment a live block
    was split from keeps its free remainder cached."""
    nbytes, events = [60 * MiB, 40 * MiB, 20 * MiB, 50 * MiB], [0, ~0, 1, ~1, 2, 3]
    streams = {0: 1}  # sid 0 on a side stream: freed, its segment cached there; sid 2 split from sid 1's segment
    assert replay(events, nbytes, streams=streams)[1][-1] == (60 + 40 + 50) * MiB
    _a, reserved, stats = replay(events, nbytes, streams=streams, empty_caches=[5])
    assert reserved[-2:] == [100 * MiB, (40 + 50) * MiB] and stats.segments == 2  # the 60 went back


def test_the_tracker_logs_empty_cache_before_the_next_event():
    tracker = LiveTracker()
    tracker.synthetic(MiB, "a", (MiB,), "uint8")
    tracker.empty_cache()
    tracker.release(0)
    assert tracker.trace.empty_caches == [1] and tracker.trace.events == [0, ~0]


def test_folding_a_gradient_merge_keeps_empty_cache_before_the_same_event():
    """fold_accumulations drops ``out = old + new``'s allocation and ``old``'s free (events 2 and 3): an empty_cache
    logged before event 4 runs before the same allocation, now event 2."""
    tr = Trace(nbytes=[MiB] * 4, events=[0, 1, 2, ~1, 3], accum={2: 1}, empty_caches=[4])
    folded = fold_accumulations(tr)
    assert folded.events == [0, 1, 3] and folded.empty_caches == [2]


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("ds_empty") / "config.json"
    path.write_text(json.dumps(tiny("meta-llama/Llama-3.2-1B", layers=LAYERS, hidden=256, vocab=4096)))
    return str(path)


def _trace(model_path: str, stage: str, offload: str) -> Trace:
    from vramfit.sim.build import build_model
    from vramfit.sim.deepspeed_zero import run_deepspeed

    parsed = parse_scenario({"model": model_path, "method": "full", "precision": "bf16-mixed", "seq_len": 512,
                             "micro_batch_size": 2, "attention": "flash", "num_gpus": 2, "parallelism": stage,
                             "offload": offload})
    return run_deepspeed(build_model(json.loads(open(model_path).read()), parsed, LAYERS), parsed).trace


def test_zero3_defragment_empties_the_cache_before_the_flat_partition(model_path):
    """The tiny Llama (hidden 256, 4 layers, vocab 4096; 3,410,176 parameters, 1,705,088 per rank): the engine's
    only empty_cache is defragment's, right before the flat 16-bit partition comes back (``cpu_buffer.to(
    orig_device)``); the load's 26 MiB of segments go back but the small pool's 2 MiB that holds live blocks, and the
    partition opens a 20 MiB one (1-10 MiB requests): 22 MiB reserved, not 26. With offload_param the partitions
    stay on the host: no defragment, no empty_cache."""
    tr = _trace(model_path, "zero3", "none")
    (at,) = tr.empty_caches
    flat = tr.events[at]
    assert tr.nbytes[flat] == 2 * 1_705_088 and tr.ops[flat] == "_to_copy.default" and tr.phases[flat] == "load"
    _a, cached, _s = replay(tr.events, tr.nbytes, tr.host, tr.streams)
    allocated, emptied, _s = replay(tr.events, tr.nbytes, tr.host, tr.streams, tr.empty_caches)
    assert (cached[at - 1], cached[at], emptied[at]) == (26 * MiB, 26 * MiB, 22 * MiB)
    assert allocated[at - 1] == 1_536  # every partition freed: the buffers' blocks alone live
    assert _trace(model_path, "zero3", "optimizer+params").empty_caches == []


def test_zero2_empties_the_cache_before_flattening_with_the_weights_live(model_path):
    """ZeRO-1/2 call ``empty_cache()`` before flattening each group (DeepSpeed 0.19.8 stage_1_and_2.py l. 449) while
    every 16-bit weight is live (6,820,352 B): nothing to return, so the figures stay."""
    tr = _trace(model_path, "zero2", "none")
    (at,) = tr.empty_caches
    assert tr.ops[tr.events[at]] == "cat.default" and tr.nbytes[tr.events[at]] == 6_820_352
    assert replay(tr.events, tr.nbytes, tr.host, tr.streams)[1] == \
        replay(tr.events, tr.nbytes, tr.host, tr.streams, tr.empty_caches)[1]


def test_zero3_peak_reserved_drops_by_the_load_segments_a_gpu_returns(tmp_path):
    """A tiny Llama with a larger head (hidden 1024, vocab 32000, 4 layers; 2 ranks, no offload): defragment's
    empty_cache returns the load's 190 MiB of segments (the whole parameters, then their partitions) but the small
    pool's 2, and the flat partition (70,525,952 B) opens 68 MiB: 70 MiB reserved after it, not 258. The peak (the
    step) reserves 12 MiB less: 1,442,840,576 B, not 1,455,423,488 (the later tensors re-open most of what went back)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(tiny("meta-llama/Llama-3.2-1B", layers=LAYERS, hidden=1024, vocab=32000)))
    tr = _trace(str(path), "zero3", "none")
    (at,) = tr.empty_caches
    _a, cached, before = replay(tr.events, tr.nbytes, tr.host, tr.streams)
    _a, emptied, now = replay(tr.events, tr.nbytes, tr.host, tr.streams, tr.empty_caches)
    assert tr.nbytes[tr.events[at]] == 70_525_952
    assert (cached[at - 1], cached[at], emptied[at]) == (190 * MiB, 258 * MiB, 70 * MiB)
    assert (before.peak_reserved, now.peak_reserved) == (1_455_423_488, 1_442_840_576)
