"""The one schema every stored run meets, checked before writing and again after reading.

The limits are the same on SQLite and PostgreSQL, and are checked here rather than left to the
database, so a record that one accepts the other accepts too, and a record that passes is read back
exactly as written (``validate`` on a record read back changes nothing):

* strings are UTF-8 text without NUL (PostgreSQL ``text`` cannot hold NUL; a lone surrogate cannot
  be encoded) and of bounded length;
* byte counts are integers below 2**63 (``BIGINT`` on both; SQLite raises ``OverflowError`` beyond);
* numbers are finite (PostgreSQL's ``json`` refuses ``NaN`` and ``Infinity``); a missing timing written
  as NaN means "not measured" and is stored as null, so a re-import of the same file compares equal;
* the JSON fields (scenario, environment, details, estimate, simulation) are nested at most
  :data:`MAX_DEPTH` levels, hold at most :data:`MAX_JSON_ITEMS` values and integers within 64 bits.
"""

from __future__ import annotations

import math
from typing import Any

#: Characters of an id (the ``id`` column is ``VARCHAR(200)``).
MAX_ID_CHARS = 200
#: Characters of the short text fields: source_id, GPU name and family (columns <= 200).
MAX_SHORT_CHARS = 100
#: Characters of created_at (the ``created_at`` column is ``VARCHAR(40)``; an ISO 8601 time needs at most 32).
MAX_TIME_CHARS = 40
#: Characters of the model name (the denormalised ``model`` column is ``VARCHAR(500)``).
MAX_MODEL_CHARS = 500
#: Characters of any other string (source, notes, strings inside the JSON fields): 64 Ki, far above
#: any note or package list the harness writes.
MAX_TEXT_CHARS = 65_536
#: Nesting of the JSON fields: the harness writes 3 levels (environment.packages.torch); 16 leaves
#: room and keeps every reader (export, deep copies) far from Python's recursion limit.
MAX_DEPTH = 16
#: Values inside one JSON field (the harness's step-time lists are at most a few thousand).
MAX_JSON_ITEMS = 100_000
#: Byte counts and integers inside JSON: signed 64-bit, what BIGINT holds.
MAX_INT = 2**63 - 1
#: steps_done is an ``INTEGER`` column: 32-bit on PostgreSQL.
MAX_STEPS = 2**31 - 1


class SchemaError(ValueError):
    """A field breaks the record schema; the message names it."""


def text(key: str, value: Any, limit: int = MAX_TEXT_CHARS, empty: bool = True) -> str:
    if not isinstance(value, str):
        raise SchemaError(f"{key} must be a string, got {type(value).__name__}")
    if not empty and not value.strip():
        raise SchemaError(f"{key} must be a non-empty string")
    if len(value) > limit:
        raise SchemaError(f"{key} is {len(value):,} characters long (at most {limit:,})")
    if "\x00" in value:
        raise SchemaError(f"{key} contains a NUL character")
    try:
        value.isascii() or value.encode("utf-8")
    except UnicodeEncodeError:
        raise SchemaError(f"{key} is not valid Unicode text (a lone surrogate)") from None
    return value


def count(key: str, value: Any, lo: int = 1, hi: int = MAX_INT, optional: bool = True) -> int | None:
    """An integer in [lo, hi] (bytes: a positive integer below 2**63)."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        shown = value if isinstance(value, (int, float)) and abs(value) < 10**30 else type(value).__name__
        raise SchemaError(f"{key} must be an integer from {lo} to {hi:,}, got {shown!r}")
    return value


def seconds(key: str, value: Any) -> float | None:
    """A finite number >= 0, or None; NaN (a timing not measured) is None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SchemaError(f"{key} must be a number or null, got {type(value).__name__}")
    try:
        out = float(value)
    except OverflowError:
        raise SchemaError(f"{key} must be a finite number, got an integer of {len(str(abs(value)))} digits") from None
    if math.isnan(out):
        return None
    if not math.isfinite(out) or out < 0:
        raise SchemaError(f"{key} must be a finite number >= 0, got {out!r}")
    return out


def json_value(key: str, value: Any) -> Any:
    """``value`` with NaN replaced by None, after checking depth, size, strings and numbers."""
    budget = [MAX_JSON_ITEMS]
    return _walk(key, value, 0, budget)


def _walk(path: str, value: Any, depth: int, budget: list[int]) -> Any:
    budget[0] -= 1
    if budget[0] < 0:
        raise SchemaError(f"{path.split('.')[0]} holds more than {MAX_JSON_ITEMS:,} values")
    if isinstance(value, dict):
        if depth >= MAX_DEPTH:
            raise SchemaError(f"{path} is nested more than {MAX_DEPTH} levels deep")
        out = {}
        for k, v in value.items():
            text(f"{path} key", k, MAX_SHORT_CHARS)
            out[k] = _walk(f"{path}.{k}", v, depth + 1, budget)
        return out
    if isinstance(value, (list, tuple)):
        if depth >= MAX_DEPTH:
            raise SchemaError(f"{path} is nested more than {MAX_DEPTH} levels deep")
        return [_walk(f"{path}[{i}]", v, depth + 1, budget) for i, v in enumerate(value)]
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return count(path, value, -MAX_INT - 1, MAX_INT)
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if not math.isfinite(value):
            raise SchemaError(f"{path} must be a finite number, got {value!r}")
        return value
    if isinstance(value, str):
        return text(path, value)
    raise SchemaError(f"{path} must be JSON data, got {type(value).__name__}")


def peaks(key: str, value: Any) -> dict[str, Any] | None:
    """The estimate or simulation: an object (or null) whose ``*_bytes`` entries are byte counts."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise SchemaError(f"{key} must be an object or null, got {type(value).__name__}")
    out = json_value(key, value)
    for k, v in out.items():
        if k.endswith("_bytes"):
            count(f"{key}.{k}", v, 0)
    return out


def environment(value: Any) -> dict[str, Any]:
    """The environment object: its GPU name and family are short strings, its total memory bytes."""
    if not isinstance(value, dict):
        raise SchemaError(f"environment must be an object, got {type(value).__name__}")
    out = json_value("environment", value)
    for k in ("gpu_name", "gpu_family"):
        if out.get(k) is not None:
            text(f"environment.{k}", out[k], MAX_SHORT_CHARS)
    if out.get("gpu_total_bytes") is not None:
        count("environment.gpu_total_bytes", out["gpu_total_bytes"], 0)
    return out
