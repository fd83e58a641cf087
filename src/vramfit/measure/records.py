"""A stored run and its JSON Lines form, the format of ``benchmarks/data/measured/`` (its README lists the fields).

Export writes one line per measured counter of a run (``allocated``, ``reserved``, ``device``; OOM and
error runs have no peak to report and are not exported as lines). Each line carries the standard
fields plus ``vramfit_run``: the whole record (environment, status, timings, estimate, simulation), so
``import`` restores runs exactly; readers of the measured format ignore it. Lines without
``vramfit_run`` (e.g. ``public.jsonl``) import as one run per line with that one counter set
(``unknown`` included), keeping ``source``, ``confidence``, ``seq_exact`` and ``notes``.

``export --format records`` writes whole records instead, one a line, out-of-memory and error runs
included; import reads both kinds of line. Import validates every line, streaming the file into one
transaction; the first bad line is an error that names it, and nothing is imported. Every record, imported or measured, meets one schema
(:mod:`vramfit.measure.record_schema`) before it is written; the store checks it again when reading.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import MISSING, asdict, dataclass, field, fields
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from vramfit.errors import VramfitError
from vramfit.measure import record_schema as S
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
#: Bytes of one JSON Lines line. A run record of the harness is about 2 KB; a line embeds one run, so
#: 16 MiB bounds the memory one line can take while the file is read line by line.
MAX_LINE_BYTES = 16 * 2**20


def _fail(line: int, message: str) -> RecordError:
    return RecordError(f"line {line}: {message}")


def _bytes(value: Any, line: int, key: str) -> int:
    try:
        return S.count(key, value)  # type: ignore[return-value]
    except S.SchemaError:
        shown = value if isinstance(value, (int, float)) and abs(value) < 10**30 else type(value).__name__
        raise _fail(line, f"{key} must be a positive integer number of bytes below 2**63, got {shown!r}") from None


def _check_line(obj: Any, line: int) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise _fail(line, f"must be a JSON object, got {type(obj).__name__}")
    missing = [k for k in LINE_FIELDS if k not in obj]
    if missing:
        raise _fail(line, f"missing field(s) {', '.join(missing)} (the measured format: {', '.join(LINE_FIELDS)})")
    extra = sorted(set(obj) - set(LINE_FIELDS) - {RUN_KEY})
    if extra:
        raise _fail(line, f"unknown field(s) {', '.join(str(e)[:40] for e in extra[:5])}")
    try:
        for key in ("id", "source_id"):
            S.text(key, obj[key], S.MAX_ID_CHARS, empty=False)
        for key in ("source", "notes"):
            S.text(key, obj[key])
    except S.SchemaError as exc:
        raise _fail(line, str(exc)) from None
    m = obj["measured"]
    if not isinstance(m, dict) or set(m) != {"metric", "bytes"}:
        raise _fail(line, "measured must be an object with exactly 'metric' and 'bytes'")
    if m["metric"] not in METRICS:
        raise _fail(line, f"measured.metric: unknown value {_short(m['metric'])} (valid values: {', '.join(METRICS)})")
    _bytes(m["bytes"], line, "measured.bytes")
    if not isinstance(obj["seq_exact"], bool):
        raise _fail(line, f"seq_exact must be true or false, got {_short(obj['seq_exact'])}")
    if obj["confidence"] not in CONFIDENCES:
        raise _fail(line, f"confidence: unknown value {_short(obj['confidence'])} (valid values: {', '.join(CONFIDENCES)})")
    try:
        obj = {**obj, "scenario": _scenario(obj["scenario"])}
    except S.SchemaError as exc:
        raise _fail(line, str(exc)) from None
    return obj


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value) if not isinstance(value, (dict, list)) else type(value).__name__
    return text if len(text) <= limit else text[:limit] + "…"


def _run_from_embedded(data: Any, line: int) -> RunRecord:
    if not isinstance(data, dict):
        raise _fail(line, f"{RUN_KEY} must be an object")
    unknown = sorted(set(data) - set(RECORD_FIELDS))
    if unknown:
        raise _fail(line, f"{RUN_KEY}: unknown field(s) {', '.join(str(u)[:40] for u in unknown[:5])}")
    required = [f.name for f in fields(RunRecord) if f.default is MISSING and f.default_factory is MISSING]
    if missing := [k for k in required if k not in data]:
        raise _fail(line, f"{RUN_KEY}: missing field(s) {', '.join(missing)} (a record needs {', '.join(required)})")
    return validate(RunRecord(**data), line)


def _scenario(value: Any) -> dict[str, Any]:
    """A stored scenario: JSON within the limits, valid for ``parse_scenario``, a model name that fits."""
    if not isinstance(value, dict):
        raise S.SchemaError(f"scenario must be an object, got {type(value).__name__}")
    S.json_value("scenario", value)
    return json.loads(_checked_scenario(json.dumps(value, sort_keys=True)))


@lru_cache(maxsize=256)
def _checked_scenario(key: str) -> str:
    """The schema form of a scenario, as JSON (cached: the runs of one import share few scenarios)."""
    try:
        out = scenario_dict(json.loads(key))
    except VramfitError as exc:
        raise S.SchemaError(f"scenario: {exc}") from None
    except (TypeError, ValueError, ArithmeticError, RecursionError) as exc:
        raise S.SchemaError(f"scenario: invalid ({type(exc).__name__})") from None
    if isinstance(out.get("model"), str):
        S.text("scenario.model", out["model"], S.MAX_MODEL_CHARS)
    return json.dumps(out)


def _check_fields(rec: RunRecord) -> None:
    """Every field against the schema (:mod:`vramfit.measure.record_schema`); normalises NaN timings."""
    S.text("id", rec.id, S.MAX_ID_CHARS, empty=False)
    if rec.status not in STATUSES:
        raise S.SchemaError(f"status: unknown value {_short(rec.status)} (valid values: {', '.join(STATUSES)})")
    if not isinstance(rec.created_at, str):
        raise S.SchemaError("created_at must be an ISO 8601 string (empty for imported figures without one)")
    S.text("created_at", rec.created_at, S.MAX_TIME_CHARS)
    if rec.created_at:  # `runs list` orders by this text: a time, or empty for figures imported without one
        try:
            datetime.fromisoformat(rec.created_at.replace("Z", "+00:00"))
        except ValueError:
            raise S.SchemaError(f"created_at must be an ISO 8601 time such as 2026-12-05T19:48:43Z (or empty), "
                                f"got {_short(rec.created_at)}") from None
    S.text("source_id", rec.source_id, S.MAX_ID_CHARS, empty=False)
    S.text("source", rec.source)
    S.text("notes", rec.notes)
    if not isinstance(rec.seq_exact, bool):
        raise S.SchemaError(f"seq_exact must be true or false, got {_short(rec.seq_exact)}")
    if rec.confidence not in CONFIDENCES:
        raise S.SchemaError(f"confidence: unknown value {_short(rec.confidence)} (valid values: {', '.join(CONFIDENCES)})")
    for m in METRICS:
        try:
            S.count(f"{m}_bytes", rec.counter(m))
        except S.SchemaError:
            raise S.SchemaError(f"{m}_bytes must be a positive integer number of bytes below 2**63, "
                                f"got {_short(rec.counter(m))}") from None
    S.count("steps_done", rec.steps_done, 0, S.MAX_STEPS)
    rec.step_time_s = S.seconds("step_time_s", rec.step_time_s)
    rec.tokens_per_s = S.seconds("tokens_per_s", rec.tokens_per_s)
    if not isinstance(rec.environment, dict) or not isinstance(rec.details, dict):
        raise S.SchemaError("environment and details must be objects")
    rec.environment = S.environment(rec.environment)
    rec.details = S.json_value("details", rec.details)
    rec.estimate = S.peaks("estimate", rec.estimate)
    rec.simulation = S.peaks("simulation", rec.simulation)
    rec.scenario = _scenario(rec.scenario)
    S.text("GPU family", rec.gpu_family, S.MAX_SHORT_CHARS)


def validate(rec: RunRecord, line: int | None = None) -> RunRecord:
    """Check a record against the one schema (types, limits, finite numbers, the scenario) and
    normalise it (NaN timings to None, the scenario to its schema keys); raises :class:`RecordError`."""
    try:
        _check_fields(rec)
    except S.SchemaError as exc:
        raise (_fail(line, str(exc)) if line is not None else RecordError(f"run {_short(rec.id)}: {exc}")) from None
    return rec


def digest(rec: RunRecord) -> bytes:
    """A fingerprint of a validated record's content (equal records, equal digests)."""
    content = {k: getattr(rec, k) for k in RECORD_FIELDS}  # JSON data already: no deep copy needed
    return hashlib.blake2b(json.dumps(content, sort_keys=True).encode(), digest_size=16).digest()


def read_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of a JSON Lines file, read one line at a time (at most
    :data:`MAX_LINE_BYTES` each); a line that is not UTF-8 is an error naming it."""
    with open(path, "rb") as f:
        for n, raw in enumerate(iter(lambda: f.readline(MAX_LINE_BYTES + 1), b""), 1):
            if len(raw) > MAX_LINE_BYTES:
                raise _fail(n, f"is longer than {MAX_LINE_BYTES:,} bytes")
            try:
                yield n, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise _fail(n, f"is not UTF-8 text (byte {exc.start + 1} of the line)") from None


def _load(raw: str, n: int) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise _fail(n, f"not JSON: {exc.msg} (column {exc.colno})") from None
    except ValueError as exc:  # an integer beyond Python's 4,300-digit int-str limit
        raise _fail(n, f"not JSON this tool reads: {str(exc).split(';')[0]}") from None
    except RecursionError:
        raise _fail(n, f"is nested too deeply (at most {S.MAX_DEPTH} levels)") from None


def iter_runs(lines: Iterable[tuple[int, str]], remember_all: bool = False) -> Iterator[RunRecord]:
    """Runs from numbered measured-format JSON Lines, each validated as it is read; the first bad
    line is raised. A run repeated on the next lines (one line per counter) is yielded once.

    Memory: one line and the last run's fingerprint, whatever the file's size; a run repeated further
    apart is found by the store (same content: skipped; other content: refused). ``remember_all``
    fingerprints every id instead, so that text already in memory yields each run once."""
    runs: dict[str, tuple[bytes, int]] = {}  # run id -> (fingerprint, first line)
    line_ids: dict[str, int] = {}  # id of a measured-format line -> its line
    for n, raw in lines:
        if not raw.strip():
            continue
        obj = _load(raw, n)
        if isinstance(obj, dict) and "measured" not in obj and "status" in obj and "environment" in obj:
            rec = _run_from_embedded(obj, n)  # a whole run record (`runs export --format records`)
        else:
            obj = _check_line(obj, n)
            if obj["id"] in line_ids:
                raise _fail(n, f"id {obj['id']!r} repeats line {line_ids[obj['id']]}")
            if not remember_all:
                line_ids.clear()
            line_ids[obj["id"]] = n
            rec = _line_run(obj, n)
        fp = digest(rec)
        if rec.id in runs:
            if runs[rec.id][0] != fp:
                raise _fail(n, f"run {rec.id!r} differs from the one on line {runs[rec.id][1]}")
            continue
        if not remember_all:
            runs.clear()
        runs[rec.id] = (fp, n)
        yield rec


def _line_run(obj: dict[str, Any], n: int) -> RunRecord:
    metric, nbytes = obj["measured"]["metric"], obj["measured"]["bytes"]
    if RUN_KEY in obj:
        rec = _run_from_embedded(obj[RUN_KEY], n)
        if rec.counter(metric) != nbytes:
            raise _fail(n, f"measured.bytes {nbytes} differs from the run's {metric}_bytes {rec.counter(metric)}")
        if rec.scenario != obj["scenario"]:
            raise _fail(n, "scenario differs from the embedded run's scenario")
        return rec
    rec = RunRecord(id=obj["id"], created_at="", scenario=obj["scenario"], environment={}, status="ok",
                    source_id=obj["source_id"], source=obj["source"], seq_exact=obj["seq_exact"],
                    confidence=obj["confidence"], notes=obj["notes"])
    setattr(rec, f"{metric}_bytes", nbytes)
    return validate(rec, n)


def parse_lines(text: str) -> list[RunRecord]:
    """Runs from measured-format JSON Lines text; every line checked first, the first bad one raised."""
    return list(iter_runs(enumerate(text.splitlines(), 1), remember_all=True))


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
