"""Validation of the planner's own inputs (what a scenario cannot say). Errors name the input."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

from vramfit.errors import ScenarioError

# Up to one node the planner rents GPUs as one machine (the guide: "não separadamente, mas o mesmo nó");
# above it, whole nodes.
from vramfit.gpus import GPUS_PER_NODE  # noqa: F401 - the one node cap, shared with the estimator
from vramfit.limits import MIN_MFU
from vramfit.safe_input import shown
from vramfit.scenario import fraction, positive_number  # noqa: F401 - part of this module's validators

_SCALES = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}
# a sign is read so that "-4" is judged by the range ("must be from 1 to ..."), not called a malformed number
_COUNT = re.compile(r"^([+-]?[0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmbgt]?)$")
MAX_TOKENS = 10**15


def parse_count(key: str, value: Any, lo: int = 1, hi: int = MAX_TOKENS) -> int:
    """A whole count such as ``50000000``, ``5e7``, ``"50M"``, ``"1.5B"`` (K, M, B/G, T suffixes)."""
    if isinstance(value, bool) or value is None:
        raise ScenarioError(key, f"must be a whole number like 50000000 or '50M', got {shown(value)}")
    if isinstance(value, str):
        text = value.strip().lower().replace("_", "").replace(",", "")
        m = _COUNT.match(text)
        if not m:
            raise ScenarioError(key, f"must be a number like 50000000, 5e7 or '50M' (suffixes K, M, B, T), got {shown(value)}")
        number = float(m.group(1)) * _SCALES[m.group(2)]
    elif isinstance(value, int):
        if not lo <= value <= hi:  # before float(): ints of 10^309 and more overflow it
            raise ScenarioError(key, f"must be from {lo:,} to {hi:,}, got {shown(value)}")
        return value
    elif isinstance(value, float):
        number = value
    else:
        raise ScenarioError(key, f"must be a number, got {type(value).__name__}")
    if not math.isfinite(number) or number != int(number):
        raise ScenarioError(key, f"must be a whole number, got {shown(value)}")
    if not lo <= number <= hi:
        raise ScenarioError(key, f"must be from {lo:,} to {hi:,}, got {shown(value)}")
    return int(number)






def mfu_value(mfu: Any) -> float:
    """Model FLOPs utilisation: a fraction of at least :data:`vramfit.limits.MIN_MFU` (below it the
    time of a run overflows; 5e-324 divided by zero)."""
    u = fraction("mfu", mfu, lo_open=True)
    if u < MIN_MFU:
        raise ScenarioError("mfu", f"must be at least {MIN_MFU:g} (MIN_MFU: no real run is slower), got {shown(mfu)}")
    return u


def gpu_id_list(value: str | Iterable[str] | None) -> list[str] | None:
    """Card ids (a list, or a comma-separated string), each checked against the catalog."""
    from vramfit.gpus import get_gpu

    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else list(value)
    out: list[str] = []
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise ScenarioError("gpu", f"must be GPU ids, got {item!r}")
        gid = get_gpu(item).gpu_id
        if gid not in out:
            out.append(gid)
    if not out:
        raise ScenarioError("gpu", "name at least one GPU id")
    return out


#: Most nodes a plan rents (1024 GPUs): the search stays under a second up to there.
MAX_NODES = 128


def gpu_counts(max_gpus: Any) -> tuple[int, ...]:
    """1, 2, 4, 8 up to ``max_gpus``; above one node, whole nodes of :data:`GPUS_PER_NODE`: 2, 4, 8 ... nodes."""
    n = parse_count("max_gpus", max_gpus, 1, 100_000)
    one = tuple(c for c in (1, 2, 4, 8) if c <= min(n, GPUS_PER_NODE))
    nodes = [GPUS_PER_NODE * 2**i for i in range(1, MAX_NODES.bit_length())]
    return one + tuple(c for c in nodes if c <= n)
