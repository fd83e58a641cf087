"""A stored run and its JSON Lines form, the format of ``benchmarks/data/measured/`` (its README lists the fields).

Export writes one line per measured counter of a run (``allocated``, ``reserved``, ``device``; OOM and
error runs have no peak to report and are not exported as lines). Each line carries the standard
fields plus ``vramfit_run``: the whole record (environment, status, timings, estimate, simulation), so
``import`` restores runs exactly; readers of the measured format ignore it. Lines without
``vramfit_run`` (e.g. ``public.jsonl``) import as one run per line with that one counter set
(``unknown`` included), keeping ``source``, ``confidence``, ``seq_exact`` and ``notes``.

``export --format records`` writes whole records instead, one a line, out-of-memory and error runs
included; import reads both kinds of line. Import validates every line before anything is written;
the first bad line is an error that names it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from vramfit.errors import VramfitError
from vramfit.scenario import parse_scenario

METRICS = ("allocated", "reserved", "device", "unknown")
STATUSES = ("ok", "oom", "error")
CONFIDENCES = ("high", "medium", "low")
LINE_FIELDS = ("id", "source_id", "source", "scenario", "measured", "seq_exact", "confidence", "notes")
RUN_KEY = "vramfit_run"
SOURCE_ID = "vramfit-measure"


class RecordError(VramfitError):
    """A run record or an import line is invalid."""


@dataclass
class RunRecord:
    id: str
    created_at: str  # ISO 8601, UTC; "" for figures imported from elsewhere
    scenario: dict[str, Any]
    environment: dict[str, Any]
    status: str  # "ok" | "oom" | "error"
    steps_done: int | None = None
    allocated_bytes: int | None = None
    reserved_bytes: int | None = None
    device_bytes: int | None = None
    unknown_bytes: int | None = None  # imported figures whose counter the source did not name
    step_time_s: float | None = None
    tokens_per_s: float | None = None
    estimate: dict[str, Any] | None = None
    simulation: dict[str, Any] | None = None
    source_id: str = SOURCE_ID
    source: str = ""
    seq_exact: bool = True
    confidence: str = "high"
    notes: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def counter(self, metric: str) -> int | None:
        return getattr(self, f"{metric}_bytes")

    def metrics(self) -> list[str]:
        """The counters this run has a figure for, in the format's order."""
        return [m for m in METRICS if self.counter(m) is not None]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def gpu_family(self) -> str:
        from vramfit.measure.env import gpu_family

        return self.environment.get("gpu_family") or gpu_family(
            self.environment.get("gpu_name") or self.scenario.get("gpu"))

    @property
    def model_name(self) -> str:
        return str(self.scenario.get("model") or f"params={self.scenario.get('params')}")


RECORD_FIELDS = tuple(f.name for f in fields(RunRecord))


def scenario_dict(scenario: Any) -> dict[str, Any]:
    """A validated scenario as plain schema keys and values (None values dropped)."""
    return {k: v for k, v in parse_scenario(scenario).to_dict().items() if v is not None}


def _metric_note(rec: RunRecord, metric: str) -> str:
    where = {
        "allocated": "torch.cuda.max_memory_allocated()",
        "reserved": "torch.cuda.max_memory_reserved()",
        "device": f"the process's device memory ({rec.environment.get('memory_probe') or 'NVML'})",
    }[metric]
    text = (f"{where} over {rec.steps_done} training steps after the model was built (load excluded); "
            "random token ids of exactly seq_len.")
    return f"{text} {rec.notes}".strip()


def to_lines(rec: RunRecord, metrics: tuple[str, ...] = METRICS) -> list[dict[str, Any]]:
    """The measured-format lines of one run (none for a run without figures)."""
    out = []
    own = rec.source_id == SOURCE_ID
    for metric in rec.metrics():
        if metric not in metrics:
            continue
        out.append({
            "id": f"{SOURCE_ID}-{rec.id}-{metric}" if own else rec.id,
            "source_id": rec.source_id,
            "source": rec.source,
            "scenario": rec.scenario,
            "measured": {"metric": metric, "bytes": rec.counter(metric)},
            "seq_exact": rec.seq_exact,
            "confidence": rec.confidence,
            "notes": _metric_note(rec, metric) if own and metric != "unknown" else rec.notes,
            RUN_KEY: rec.to_dict(),
        })
    return out


# ------------------------------------------------------------------------------------------ import
def _fail(line: int, message: str) -> RecordError:
    return RecordError(f"line {line}: {message}")


def _int(value: Any, line: int, key: str, positive: bool = True, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or (positive and value <= 0) or value < 0:
        raise _fail(line, f"{key} must be a {'positive ' if positive else ''}integer number of bytes, got {value!r}")
    return value


def _check_line(obj: Any, line: int) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise _fail(line, f"must be a JSON object, got {type(obj).__name__}")
    missing = [k for k in LINE_FIELDS if k not in obj]
    if missing:
        raise _fail(line, f"missing field(s) {', '.join(missing)} (the measured format: {', '.join(LINE_FIELDS)})")
    extra = sorted(set(obj) - set(LINE_FIELDS) - {RUN_KEY})
    if extra:
        raise _fail(line, f"unknown field(s) {', '.join(extra)}")
    for key in ("id", "source_id"):
        if not isinstance(obj[key], str) or not obj[key].strip():
            raise _fail(line, f"{key} must be a non-empty string")
    for key in ("source", "notes"):
        if not isinstance(obj[key], str):
            raise _fail(line, f"{key} must be a string")
    m = obj["measured"]
    if not isinstance(m, dict) or set(m) != {"metric", "bytes"}:
        raise _fail(line, "measured must be an object with exactly 'metric' and 'bytes'")
    if m["metric"] not in METRICS:
        raise _fail(line, f"measured.metric: unknown value {m['metric']!r} (valid values: {', '.join(METRICS)})")
    _int(m["bytes"], line, "measured.bytes")
    if not isinstance(obj["seq_exact"], bool):
        raise _fail(line, f"seq_exact must be true or false, got {obj['seq_exact']!r}")
    if obj["confidence"] not in CONFIDENCES:
        raise _fail(line, f"confidence: unknown value {obj['confidence']!r} (valid values: {', '.join(CONFIDENCES)})")
    try:
        obj = {**obj, "scenario": scenario_dict(obj["scenario"])}
    except VramfitError as exc:
        raise _fail(line, f"scenario: {exc}") from None
    return obj


def _run_from_embedded(data: Any, line: int) -> RunRecord:
    if not isinstance(data, dict):
        raise _fail(line, f"{RUN_KEY} must be an object")
    unknown = sorted(set(data) - set(RECORD_FIELDS))
    if unknown:
        raise _fail(line, f"{RUN_KEY}: unknown field(s) {', '.join(unknown)}")
    try:
        rec = RunRecord(**data)
    except TypeError as exc:
        raise _fail(line, f"{RUN_KEY}: {exc}") from None
    validate(rec, line)
    return rec


def validate(rec: RunRecord, line: int | None = None) -> RunRecord:
    """Check a record's fields (types, status, figures); raises :class:`RecordError`."""
    where = line if line is not None else 0

    def fail(msg: str) -> RecordError:
        return _fail(where, msg) if line is not None else RecordError(f"run {rec.id!r}: {msg}")

    if not isinstance(rec.id, str) or not rec.id.strip() or len(rec.id) > 200:
        raise fail("id must be a non-empty string of at most 200 characters")
    if rec.status not in STATUSES:
        raise fail(f"status: unknown value {rec.status!r} (valid values: {', '.join(STATUSES)})")
    if not isinstance(rec.created_at, str):
        raise fail("created_at must be an ISO 8601 string (empty for imported figures without one)")
    if not isinstance(rec.environment, dict) or not isinstance(rec.details, dict):
        raise fail("environment and details must be objects")
    for m in METRICS:
        try:
            _int(rec.counter(m), where, f"{m}_bytes", optional=True)
        except RecordError as exc:
            raise fail(str(exc).split(": ", 1)[1]) from None
    if rec.steps_done is not None:
        _int(rec.steps_done, where, "steps_done", positive=False)
    if rec.confidence not in CONFIDENCES:
        raise fail(f"confidence: unknown value {rec.confidence!r}")
    try:
        rec.scenario = scenario_dict(rec.scenario)
    except VramfitError as exc:
        raise fail(f"scenario: {exc}") from None
    return rec


def parse_lines(text: str) -> list[RunRecord]:
    """Runs from measured-format JSON Lines; every line checked first, the first bad one raised."""
    runs: dict[str, RunRecord] = {}
    first_line: dict[str, int] = {}
    seen_ids: dict[str, int] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise _fail(n, f"not JSON: {exc.msg} (column {exc.colno})") from None
        if isinstance(obj, dict) and "measured" not in obj and "status" in obj and "environment" in obj:
            rec = _run_from_embedded(obj, n)  # a whole run record (`runs export --format records`)
            if rec.id in runs and runs[rec.id].to_dict() != rec.to_dict():
                raise _fail(n, f"run {rec.id!r} differs from the one on line {first_line[rec.id]}")
            runs.setdefault(rec.id, rec)
            first_line.setdefault(rec.id, n)
            continue
        obj = _check_line(obj, n)
        if obj["id"] in seen_ids:
            raise _fail(n, f"id {obj['id']!r} repeats line {seen_ids[obj['id']]}")
        seen_ids[obj["id"]] = n
        metric, nbytes = obj["measured"]["metric"], obj["measured"]["bytes"]
        if RUN_KEY in obj:
            rec = _run_from_embedded(obj[RUN_KEY], n)
            if rec.counter(metric) != nbytes:
                raise _fail(n, f"measured.bytes {nbytes} differs from the run's {metric}_bytes {rec.counter(metric)}")
            if rec.scenario != obj["scenario"]:
                raise _fail(n, "scenario differs from the embedded run's scenario")
        else:
            rec = RunRecord(id=obj["id"], created_at="", scenario=obj["scenario"], environment={}, status="ok",
                            source_id=obj["source_id"], source=obj["source"], seq_exact=obj["seq_exact"],
                            confidence=obj["confidence"], notes=obj["notes"])
            setattr(rec, f"{metric}_bytes", nbytes)
        if rec.id in runs:
            if runs[rec.id].to_dict() != rec.to_dict():
                raise _fail(n, f"run {rec.id!r} differs from the one on line {first_line[rec.id]}")
            continue
        runs[rec.id] = rec
        first_line[rec.id] = n
    return list(runs.values())


def dumps_records(records: list[RunRecord]) -> str:
    """Whole run records, one JSON object a line (every run, out-of-memory and errors included)."""
    return "".join(json.dumps(rec.to_dict()) + "\n" for rec in records)


def dumps_lines(records: list[RunRecord], metrics: tuple[str, ...] = METRICS) -> tuple[str, int, int]:
    """(JSON Lines text, lines written, runs left out because they have no figure to export)."""
    lines: list[str] = []
    skipped = 0
    for rec in records:
        out = to_lines(rec, metrics)
        if not out:
            skipped += 1
        lines.extend(json.dumps(obj, sort_keys=False) for obj in out)
    return "".join(line + "\n" for line in lines), len(lines), skipped
