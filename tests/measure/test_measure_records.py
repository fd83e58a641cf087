"""Export and import in the benchmarks/data/measured/ JSON Lines format: round trips and line validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramfit.measure.records import (
    LINE_FIELDS,
    RUN_KEY,
    RecordError,
    dumps_lines,
    dumps_records,
    parse_lines,
    to_lines,
)
from vramfit.scenario import parse_scenario

PUBLIC = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "measured" / "public.jsonl"


def test_one_line_per_counter_in_the_measured_format(make_record):
    rec = make_record()
    lines = to_lines(rec)
    assert [ln["measured"]["metric"] for ln in lines] == ["allocated", "reserved", "device"]
    for ln in lines:
        assert set(ln) == set(LINE_FIELDS) | {RUN_KEY}
        assert ln["id"].startswith(f"{ln['source_id']}-") and ln["id"].endswith(ln["measured"]["metric"])
        assert isinstance(ln["measured"]["bytes"], int) and ln["seq_exact"] is True and ln["confidence"] == "high"
        assert "steps" in ln["notes"]
    assert to_lines(rec, ("device",))[0]["measured"] == {"metric": "device", "bytes": rec.device_bytes}


def test_round_trip_restores_runs_exactly(make_record):
    recs = [make_record(), make_record(device_bytes=None, notes="no NVML"), make_record(simulation={"allocated_bytes": 1})]
    text, n, skipped = dumps_lines(recs)
    assert (n, skipped) == (8, 0)
    back = parse_lines(text)
    assert [r.to_dict() for r in back] == [r.to_dict() for r in recs]


def test_runs_without_figures_are_left_out_of_measured_lines_but_kept_as_records(make_record):
    oom = make_record(status="oom", allocated_bytes=None, reserved_bytes=None, device_bytes=None,
                      notes="Out of memory at step2.mb1.backward after 1 complete step(s).")
    ok = make_record()
    text, n, skipped = dumps_lines([oom, ok])
    assert (n, skipped) == (3, 1)
    back = parse_lines(dumps_records([oom, ok]))
    assert [r.to_dict() for r in back] == [oom.to_dict(), ok.to_dict()]


@pytest.mark.skipif(not PUBLIC.is_file(), reason=f"shared data not found at {PUBLIC}")
def test_public_measurements_import_and_export_unchanged():
    rows = [json.loads(line) for line in PUBLIC.read_text().splitlines() if line.strip()]
    recs = parse_lines(PUBLIC.read_text())
    assert len(recs) == len(rows)
    text, n, _ = dumps_lines(recs)
    out = [json.loads(line) for line in text.splitlines()]
    assert n == len(rows)
    for a, b in zip(rows, out, strict=True):
        for key in ("id", "source_id", "source", "measured", "seq_exact", "confidence", "notes"):
            assert a[key] == b[key]
        assert parse_scenario(b["scenario"]) == parse_scenario(a["scenario"])


def _good_line(**over) -> dict:
    line = {"id": "X-1", "source_id": "X", "source": "somewhere", "scenario": {"model": "meta-llama/Llama-3.2-1B"},
            "measured": {"metric": "allocated", "bytes": 123}, "seq_exact": True, "confidence": "high", "notes": ""}
    line.update(over)
    return line


@pytest.mark.parametrize("bad,message", [
    ("{not json", "not JSON"),
    (json.dumps([1, 2]), "JSON object"),
    (json.dumps({k: v for k, v in _good_line().items() if k != "measured"}), "missing field(s) measured"),
    (json.dumps(_good_line(extra=1)), "unknown field(s) extra"),
    (json.dumps(_good_line(measured={"metric": "peak", "bytes": 1})), "measured.metric: unknown value 'peak'"),
    (json.dumps(_good_line(measured={"metric": "device", "bytes": -5})), "measured.bytes"),
    (json.dumps(_good_line(measured={"metric": "device", "bytes": 1.5})), "measured.bytes"),
    (json.dumps(_good_line(measured={"metric": "device", "bytes": True})), "measured.bytes"),
    (json.dumps(_good_line(seq_exact="yes")), "seq_exact"),
    (json.dumps(_good_line(confidence="sure")), "confidence"),
    (json.dumps(_good_line(scenario={"model": "meta-llama/Llama-3.2-1B", "method": "dora"})), "scenario: method"),
    (json.dumps(_good_line(id="")), "id must be"),
    (json.dumps(_good_line(id="X-0")), "repeats line 1"),
], ids=["not-json", "not-object", "missing", "extra", "metric", "negative", "float", "bool", "seq_exact",
        "confidence", "scenario", "empty-id", "duplicate"])
def test_bad_line_is_named(bad, message):
    text = json.dumps(_good_line(id="X-0")) + "\n\n" + bad + "\n"
    with pytest.raises(RecordError) as err:
        parse_lines(text)
    assert str(err.value).startswith("line 3: ")
    assert message in str(err.value)


def test_embedded_run_must_agree_with_its_line(make_record):
    line = to_lines(make_record())[0]
    line["measured"]["bytes"] += 1
    with pytest.raises(RecordError, match="line 1: measured.bytes .* differs"):
        parse_lines(json.dumps(line))
    bad = to_lines(make_record())[0]
    bad[RUN_KEY]["status"] = "exploded"
    with pytest.raises(RecordError, match="line 1: status: unknown value 'exploded'"):
        parse_lines(json.dumps(bad))


def test_conflicting_copies_of_one_run_are_rejected(make_record):
    rec = make_record()
    a, b = to_lines(rec)[:2]
    b[RUN_KEY]["notes"] = "edited"
    with pytest.raises(RecordError, match="line 2: run .* differs from the one on line 1"):
        parse_lines(json.dumps(a) + "\n" + json.dumps(b))
