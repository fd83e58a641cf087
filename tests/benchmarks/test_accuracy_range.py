"""A row whose sequence length is only an upper bound is scored against the range its estimate states
(vramfit.estimate.first_batch: the floor where later micro-batches are shorter, to the peak at ``seq_len``)."""

import json
import re
from pathlib import Path

import pytest

from benchmark_modules import load_benchmark
from vramfit import estimate
from vramfit.estimate.first_batch import allocated_floor

ROOT = Path(__file__).resolve().parents[2]


def _row(rid: str) -> dict:
    for line in (ROOT / "benchmarks/data/measured/public.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["id"] == rid:
            return row
    raise KeyError(rid)


def test_bound_error_is_zero_inside_the_range_and_taken_against_the_nearer_end():
    bench = load_benchmark("accuracy")
    assert bench.bound_error("allocated", 100, 90, 110, 130) == 0.0
    assert bench.bound_error("allocated", 80, 90, 110, 130) == pytest.approx(0.125)  # below the floor
    assert bench.bound_error("allocated", 120, 90, 110, 130) == pytest.approx(-10 / 120)  # above the peak
    assert bench.bound_error("unknown", 120, 90, 110, 130) == 0.0  # up to the device figure
    assert bench.bound_error("reserved", 100, 90, 110, 130) is None  # the floor counts live tensors only
    assert bench.bound_error("allocated", 100, None, 110, 130) is None


def test_the_floor_is_the_one_the_estimate_states():
    sc = dict(_row("LIT_RES-101")["scenario"], framework="litgpt")
    r = estimate(sc)
    floor = allocated_floor(sc)
    stated = [a for a in r.assumptions if "the peak lies between" in a]
    assert len(stated) == 1
    low = float(re.search(r"between ([\d.]+) GiB", stated[0]).group(1))
    assert round(floor / 2**30, 2) == low == 4.86
    assert floor < r.peak.allocated_bytes
    # one GPU, no gradient held between micro-batches: the first micro-batch is the worst, no range
    assert allocated_floor(dict(_row("LIT_RES-80")["scenario"], framework="litgpt")) is None


def test_a_bound_row_inside_its_range_scores_zero_and_keeps_its_error_at_the_bound():
    bench = load_benchmark("accuracy")
    rows = [_row("LIT_RES-102"), _row("LIT_RES-101"), _row("LIT_RES-80")]
    scored = {s["id"]: s for s in bench.score(rows)}
    # 5.88 GB measured: inside 5.44 .. 6.22 GiB; at the bound alone +13.7 %
    assert scored["LIT_RES-102"]["error"] == 0.0
    assert scored["LIT_RES-102"]["error_at_bound"] == pytest.approx(0.137, abs=0.001)
    # 5.05 GB measured, below its floor (4.86 GiB): the error is taken against the floor, the nearer end
    assert scored["LIT_RES-101"]["error"] == pytest.approx(0.032, abs=0.001)
    assert scored["LIT_RES-101"]["error"] < scored["LIT_RES-101"]["error_at_bound"]
    # an exact-length row is never range-scored
    assert scored["LIT_RES-80"]["error"] == scored["LIT_RES-80"]["error_at_bound"]
    line = bench.every_rows_line(list(scored.values()))
    assert "2 of them are scored against the range" in line


def test_the_bands_keep_the_peak_figures_error():
    bench = load_benchmark("accuracy")
    data = bench.bands(bench.score([_row("LIT_RES-102")]))
    # each estimate's band says how far its peak was: +13.7 %, not the range's 0
    assert data["cases"][0]["error"] == pytest.approx(0.137, abs=0.001)
