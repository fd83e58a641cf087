"""Property-based fuzz of ``runs import`` (hypothesis): any line is refused naming its line, or is
stored so that every later command reads it back unchanged and a re-import is a no-op.

Reproducible (``derandomize``) and bounded (examples, and a wall-clock budget after which the
remaining examples do nothing).
"""

from __future__ import annotations

import itertools
import json
import math
import time

import pytest

pytest.importorskip("sqlalchemy")
from hypothesis import HealthCheck, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from vramfit.measure.records import RUN_KEY, RecordError, dumps_lines, dumps_records, iter_runs  # noqa: E402
from vramfit.measure.store import RunStore  # noqa: E402

BUDGET_S = 25.0
GiB = 2**30
_ids = itertools.count()
_started: dict[str, float] = {}

#: JSON values, hostile ones included: huge and negative integers, NaN and infinities, long strings,
#: NUL and lone surrogates, nesting deeper than the schema allows.
SCALARS = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.sampled_from([2**63 - 1, 2**63, -1, 0])
           | st.floats() | st.text(max_size=20) | st.sampled_from(["\x00", "\ud800", "é" * 300]) | st.integers(65_537, 70_000).map(lambda n: "x" * n))
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                    max_leaves=8) | st.integers(1, 40).map(lambda n: json.loads("[" * n + "]" * n))
#: Values a real record could hold (so that many examples are stored and read back, not refused).
PLAUSIBLE = (st.integers(1, 2**40) | st.text(max_size=30) | st.floats(0, 1e6) | st.just(float("nan"))
             | st.dictionaries(st.text(min_size=1, max_size=6), st.integers(0, 2**40) | st.text(max_size=10)
                               | st.floats(allow_infinity=False) | st.lists(st.floats(0, 10), max_size=3), max_size=3))
RECORD_KEYS = ["id", "created_at", "scenario", "environment", "status", "steps_done", "allocated_bytes",
               "reserved_bytes", "device_bytes", "unknown_bytes", "step_time_s", "tokens_per_s", "estimate",
               "simulation", "source_id", "source", "seq_exact", "confidence", "notes", "details"]
NESTED = ["environment.gpu_family", "environment.gpu_name", "environment.gpu_total_bytes", "estimate.allocated_bytes",
          "scenario.model", "scenario.seq_len", "scenario.lora_targets", "details.step_times_s"]


def base_record() -> dict:
    return {
        "id": f"fuzz{next(_ids):08d}", "created_at": "2026-01-01T00:00:00Z",
        "scenario": {"model": "meta-llama/Llama-3.2-1B", "method": "lora", "seq_len": 512},
        "environment": {"device": "cuda", "gpu_name": "NVIDIA H100 80GB HBM3", "gpu_family": "h100",
                        "gpu_total_bytes": 80 * GiB, "packages": {"torch": "2.13.0"}},
        "status": "ok", "steps_done": 5, "allocated_bytes": 10 * GiB, "reserved_bytes": 11 * GiB,
        "device_bytes": 12 * GiB, "unknown_bytes": None, "step_time_s": 0.5, "tokens_per_s": 1024.0,
        "estimate": {"allocated_bytes": 10 * GiB}, "simulation": None, "source_id": "vramfit-measure",
        "source": "fuzz", "seq_exact": True, "confidence": "high", "notes": "", "details": {},
    }


def mutate(rec: dict, changes: dict) -> dict:
    for path, value in changes.items():
        head, _, tail = path.partition(".")
        if tail and isinstance(rec.get(head), dict):
            rec[head] = {**rec[head], tail: value}
        elif not tail:
            rec[head] = value
    if isinstance(rec["id"], str) and "id" in changes:  # unique per example: the store is shared
        rec["id"] = f"{next(_ids)}-{rec['id']}"
    return rec


@pytest.fixture(scope="module")
def fuzz_store(tmp_path_factory):
    st_ = RunStore(str(tmp_path_factory.mktemp("fuzz") / "runs.sqlite"))
    st_.prepare()
    yield st_
    st_.close()


@given(changes=st.dictionaries(st.sampled_from(RECORD_KEYS + NESTED), JSON | PLAUSIBLE, min_size=1, max_size=3),
       fmt=st.sampled_from(["records", "measured"]))
@settings(max_examples=300, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_any_import_line_is_refused_cleanly_or_round_trips(fuzz_store, changes, fmt):
    if time.monotonic() - _started.setdefault("import", time.monotonic()) > BUDGET_S:
        return
    rec = mutate(base_record(), changes)
    try:
        text = json.dumps(rec) + "\n"
    except (ValueError, TypeError):  # not JSON at all: nothing to import
        return
    if fmt == "measured":
        try:
            [good] = list(iter_runs([(1, text)]))
        except RecordError:
            event("refused")
            return
        text = dumps_lines([good])[0] or text
    try:
        runs = list(iter_runs(enumerate(text.splitlines(), 1)))
    except RecordError as exc:
        assert str(exc).startswith("line ") and len(str(exc)) < 1000, str(exc)[:1100]  # bounded: never a 100 KB value
        event("refused")
        return
    event("stored")
    added, skipped = fuzz_store.add_many(runs)
    assert (added, skipped) == (1, 0)
    assert fuzz_store.add_many(list(iter_runs(enumerate(text.splitlines(), 1)))) == (0, 1)  # a no-op
    stored = fuzz_store.get(runs[0].id)
    assert stored.to_dict() == runs[0].to_dict()
    listed = fuzz_store.list()
    assert fuzz_store.bad_rows == [] and runs[0].id in {r.id for r in listed}
    again = list(iter_runs(enumerate(dumps_records([stored]).splitlines(), 1)))
    assert [r.to_dict() for r in again] == [stored.to_dict()]
    assert RUN_KEY  # the measured format embeds the whole run (checked by test_measure_records)


#: Text a valid record may hold: any Unicode but NUL and lone surrogates.
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)
VALID_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_infinity=False) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT.filter(lambda k: len(k) <= 100), inner, max_size=3),
    max_leaves=10)
BYTES = st.none() | st.integers(1, 2**63 - 1)


@given(env=st.dictionaries(TEXT, VALID_JSON, max_size=4), details=st.dictionaries(TEXT, VALID_JSON, max_size=4),
       counters=st.tuples(BYTES, BYTES, BYTES, BYTES), timing=st.none() | st.floats(0, 1e9) | st.just(float("nan")),
       notes=TEXT, steps=st.none() | st.integers(0, 2**31 - 1), estimate=st.none() | st.dictionaries(
           st.sampled_from(["allocated_bytes", "reserved_bytes", "device_bytes", "note"]), st.integers(0, 2**63 - 1)))
@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_any_valid_record_is_stored_and_read_back_unchanged(fuzz_store, env, details, counters, timing, notes,
                                                           steps, estimate):
    if time.monotonic() - _started.setdefault("valid", time.monotonic()) > BUDGET_S:
        return
    env = {k: v for k, v in env.items() if k not in ("gpu_name", "gpu_family", "gpu_total_bytes")}
    rec = {**base_record(), "environment": env, "details": details, "notes": notes, "steps_done": steps,
           "step_time_s": timing, "estimate": estimate, **dict(zip(
               ["allocated_bytes", "reserved_bytes", "device_bytes", "unknown_bytes"], counters, strict=True))}
    text = json.dumps(rec) + "\n"
    [run] = list(iter_runs([(1, text)]))  # valid: never refused
    assert fuzz_store.add_many([run]) == (1, 0)
    assert fuzz_store.add_many(list(iter_runs([(1, text)]))) == (0, 1)  # the same file again: a no-op
    assert fuzz_store.get(run.id).to_dict() == run.to_dict()
    assert (run.step_time_s is None) if timing is None or math.isnan(timing) else run.step_time_s == timing
