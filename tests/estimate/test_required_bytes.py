"""The memory a run needs on a card without headroom (``peak.required_bytes``, issue 13).

pytorch/pytorch@eb42ad6e c10/cuda/CUDACachingAllocator.cpp ``malloc``: when ``cudaMalloc`` fails, the allocator calls
``release_cached_blocks`` (every cached segment holding no live block goes back to the driver) and retries; a segment
that still holds a live block keeps its free remainder. So the bytes needed are the peak of the segments holding a
live block, not the reserved peak a card with headroom shows.
"""

import importlib
import json
from pathlib import Path

import pytest

from vramfit.estimate import estimate
from vramfit.gpus import get_gpu
from vramfit.plan.verdict import card_fit, limit_bytes
from vramfit.sim.cuda_allocator import CachingAllocatorModel

allocator = importlib.import_module("vramfit.estimate.allocator")
MiB, GiB = 2**20, 2**30
ROOT = Path(__file__).resolve().parents[2]


def test_a_freed_big_tensor_leaves_a_releasable_segment():
    # 1 GiB tensor freed, then a 2 GiB one: no cached block fits it, so a second segment opens beside the cached one
    events = (GiB, -1, 2 * GiB)
    assert allocator.transient_reserved(events) == (2 * GiB, 3 * GiB)
    assert allocator.transient_required(events) == 2 * GiB  # the cached 1 GiB segment is released on an OOM retry
    a = CachingAllocatorModel()
    allocator.run_events(a, events)
    assert a.stats.peak_reserved - a.stats.peak_required == a.empty_cache() == GiB  # exactly that segment


def test_a_partly_used_segment_is_not_releasable():
    # the same, but a 100 MiB tensor still lives in the 1 GiB segment (split: > 1 MiB remains): fragmentation
    events = (GiB, -1, 100 * MiB, 2 * GiB)
    assert allocator.transient_reserved(events) == (2 * GiB + 100 * MiB, 3 * GiB)
    assert allocator.transient_required(events) == 3 * GiB
    a = CachingAllocatorModel()
    allocator.run_events(a, events)
    assert a.empty_cache() == 0 and a.stats.required == a.stats.reserved == 3 * GiB


def test_required_follows_frees_and_clones():
    a = CachingAllocatorModel()
    x = a.malloc(GiB)
    y = a.malloc(300 * MiB)
    a.free(x)
    assert a.stats.required == 300 * MiB and a.stats.peak_required == GiB + 300 * MiB
    b = a.clone()
    z = b.malloc(512 * MiB)  # served from x's cached segment: it holds a live block again
    assert b.stats.required == GiB + 300 * MiB and a.stats.required == 300 * MiB
    b.free(z)
    b.free(y)
    assert b.stats.required == 0 and b.stats.reserved == GiB + 300 * MiB


def test_expandable_segments_are_counted_whole():
    conf = allocator.parse_alloc_conf("expandable_segments:True")
    events = (GiB, -1, 2 * GiB)
    assert allocator.transient_required(events, conf) == allocator.transient_reserved(events, conf)[1]


def _row(row_id: str) -> dict:
    rows = (json.loads(x) for x in (ROOT / "benchmarks/data/measured/found.jsonl").read_text().splitlines())
    return next(r for r in rows if r["id"] == row_id)


@pytest.mark.parametrize("row_id", ["AAI_FSDPQLORA_2403-17", "AAI_FSDPQLORA_2403-18", "AAI_FSDPQLORA_2403-19"])
def test_answer_ai_runs_that_ran_on_24_gb_fit_their_card(row_id):
    """They ran on 2x RTX 4090 (reserved measured at 22.4-22.5 GiB, capped by the card); the device peak with
    headroom is over the card's limit, the memory they need once the cache is released is under it."""
    row = _row(row_id)
    r = estimate(row["scenario"])
    g = get_gpu(row["scenario"]["gpu"])
    assert r.peak.device_bytes > limit_bytes(g)
    v = card_fit(r, g)
    assert v.fits and v.verdict == "fits" and v.headroom_bytes == limit_bytes(g) - r.peak.required_bytes > 0
    assert r.peak.allocated_bytes < r.peak.required_bytes < r.peak.device_bytes
    assert r.to_dict()["peak"]["required_bytes"] == r.peak.required_bytes


def test_a_run_whose_live_tensors_exceed_the_card_still_does_not_fit():
    """LIT_RES-85 (public.jsonl): Llama-2-13B LoRA measured at 35.5 GiB allocated on an A100 40GB: its live
    tensors alone are over an RTX 4090's usable memory, so no cache release makes it fit."""
    rows = (json.loads(x) for x in (ROOT / "benchmarks/data/measured/public.jsonl").read_text().splitlines())
    row = next(r for r in rows if r["id"] == "LIT_RES-85")
    g = get_gpu("rtx4090")
    assert row["measured"]["metric"] == "allocated" and row["measured"]["bytes"] > g.usable_bytes
    r = estimate({**row["scenario"], "gpu": "rtx4090"})
    v = card_fit(r, g)
    assert not v.fits and v.verdict == "does not fit" and v.headroom_bytes < 0
    assert r.peak.required_bytes >= r.peak.allocated_bytes > g.usable_bytes


def test_a_calibrated_slack_is_taken_as_measured():
    """A calibration's allocator slack is what the user's runs reserved: nothing is taken off it."""
    from vramfit.calibration import Calibration, FamilyCalibration

    sc = {**_row("AAI_FSDPQLORA_2403-18")["scenario"]}
    cal = Calibration({"rtx4090": FamilyCalibration("rtx4090", 3, 500 * MiB, 0.25)})
    r = estimate(sc, calibration=cal)
    assert r.peak.required_bytes == r.peak.device_bytes
    assert r.peak.reserved_bytes == r.peak.allocated_bytes + round(r.peak.allocated_bytes * 0.25)
    assert estimate(sc).peak.required_bytes < estimate(sc).peak.device_bytes


def test_a_peak_without_the_figure_reports_the_device_figure():
    peak = type(estimate({"params": "1B", "method": "lora"}).peak)(1, 2, 3, "forward")  # as the simulator builds it
    assert peak.required_bytes == 3 and peak.to_dict()["required_bytes"] == 3
