"""Byte units and their printed forms, and parameter counts ("7B"), defined once.

Binary units are what memory counters report (``torch.cuda.memory_allocated``, ``nvidia-smi`` "MiB");
decimal units are what vendors and disks print ("80 GB"). The two are never mixed in one figure and a
printed figure always carries its label: GiB = 1024^3 bytes, GB = 10^9 bytes.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

from vramfit.errors import ModelError
from vramfit.safe_input import shown

KiB = 1024
MiB = 1024**2
GiB = 1024**3
KB = 10**3
MB = 10**6
GB = 10**9


def gib(n: int | float | None, digits: int = 2) -> str:
    """``n`` bytes as GiB with ``digits`` decimals and thousands separators (``""`` for None)."""
    return "" if n is None else f"{n / GiB:,.{digits}f}"


def mib(n: int | float | None, digits: int = 0) -> str:
    """``n`` bytes as MiB (``""`` for None)."""
    return "" if n is None else f"{n / MiB:,.{digits}f}"


def gb(n: int | float | None, digits: int = 2) -> str:
    """``n`` bytes as GB = 10^9 bytes (``""`` for None)."""
    return "" if n is None else f"{n / GB:,.{digits}f}"


def gib_label(n: int | float, digits: int = 2) -> str:
    """``"12.34 GiB"``: the figure with its unit, for sentences."""
    return f"{gib(n, digits)} GiB"


MAX_PARAMS = 10**13  # 10 trillion: anything above is a typo

_SCALES = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}
_COUNT = re.compile(r"^([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmbt]?)$")


def parse_param_count(value: str | int | float) -> int:
    """Parse a parameter count: ``7000000000``, ``"7B"``, ``"7e9"``, ``"1.5b"``, ``"405M"``.

    Suffixes K, M, B, T (any case) mean thousand, million, billion, trillion; ``_`` and ``,``
    digit separators are ignored. Raises :class:`ModelError` (key ``params``) on anything that is
    not a whole positive count of at most 10 trillion.
    """
    if isinstance(value, bool):
        raise ModelError(f"not a parameter count: {shown(value)}", key="params")
    if isinstance(value, int):
        count = Decimal(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ModelError(f"not a parameter count: {shown(value)}", key="params")
        count = Decimal(repr(value))
    elif isinstance(value, str):
        text = value.strip().lower().replace("_", "").replace(",", "")
        if text.startswith("-"):
            raise ModelError(f"parameter count must be positive, got {shown(value)}", key="params")
        match = _COUNT.match(text)
        if not match:
            raise ModelError(
                f"not a parameter count: {shown(value)} (examples: 7B, 1.5b, 405M, 7e9, 7000000000)",
                key="params",
            )
        try:
            count = Decimal(match.group(1)) * _SCALES[match.group(2)]
        except InvalidOperation as exc:
            raise ModelError(f"not a parameter count: {shown(value)}", key="params") from exc
    else:
        raise ModelError(f"not a parameter count: {shown(value)}", key="params")
    if count <= 0:
        raise ModelError(f"parameter count must be positive, got {shown(value)}", key="params")
    if count > MAX_PARAMS:
        raise ModelError(
            f"parameter count {shown(value)} is absurd (more than 10 trillion)", key="params"
        )
    if count != count.to_integral_value():
        raise ModelError(f"parameter count {shown(value)} is not a whole number", key="params")
    return int(count)
