"""Values read from a config as the frameworks' own parsers read them: booleans in each parser's spellings, counts,
one name or a list of names, ZeRO stages; each refused in one line naming the key and the valid values."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from vramfit.config_import.report import KeyReader
from vramfit.safe_input import shown

ZERO_STAGES = {0: "ddp", 1: "zero1", 2: "zero2", 3: "zero3"}


# The strings each framework's own parser turns into a boolean; it refuses any other string. A config key read
# through one of them takes these spellings (case-insensitive) and 0/1, as the framework does.
# accelerate: `accelerate launch` exports a config value as str(value).lower() and the plugins read it back with
# utils/environment.py ``str_to_bool`` (accelerate v1.16.0).
ACCELERATE_BOOL = {**dict.fromkeys(("y", "yes", "t", "true", "on", "1"), True),
                   **dict.fromkeys(("n", "no", "f", "false", "off", "0"), False)}
# transformers hf_argparser.py ``string_to_bool`` (v4.40.0, v5.24.0): TRL's TrlParser sets a YAML file's values as the
# argparse defaults, and argparse converts a string default with the field's type.
ARGPARSE_BOOL = {**dict.fromkeys(("yes", "true", "t", "y", "1"), True),
                 **dict.fromkeys(("no", "false", "f", "n", "0"), False)}
# pydantic v2 bool validation in lax mode (axolotl's config model; pydantic 2.14.4): the same words as accelerate.
PYDANTIC_BOOL = ACCELERATE_BOOL


def boolean(r: KeyReader, key: str, *default: Any, spellings: dict[str, bool] | None = None) -> bool:
    """A switch's value (``r.get(key, *default)``), refused in one line unless it is true or false, or (``spellings``:
    the framework's own parser, above) one of the strings or 0/1 that parser reads as one."""
    value = r.get(key, *default)
    if value is None:  # set to null with no default: the framework's own default is not known here
        raise r.error(f"{key}: None is not a boolean (valid values: true, false)")
    return switch_value(r, key, value, spellings)


def nonnegative(r: KeyReader, key: str, *default: Any, positive: bool = False) -> float:
    """A size or fraction (``r.get(key, *default)``; unset or None: 0), refused in one line unless it is a finite number
    of at least 0 (``positive``: above 0, a divisor such as Axolotl's ``num_epochs``)."""
    value = r.get(key, *default)
    value = 0 if value is None else value
    try:
        number = math.nan if isinstance(value, bool) or not isinstance(value, (int, float)) else float(value)
    except OverflowError:  # an integer past 1.8e308
        number = math.inf
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        least = "above 0 (valid values: more than 0)" if positive else "of at least 0 (valid values: 0 or more)"
        raise r.error(f"{key}: {shown(value)} is not a number {least}")
    return number


def whole(r: KeyReader, key: str, value: Any, least: int = 1) -> int:
    """A count already taken from the config (a batch size, a device or node count), refused in one line unless it is
    an integer of at least ``least``: a bool, a float, a list or a string of anything but ASCII digits is not one (the
    arithmetic after it would raise). A string of digits is read as its number, as the frameworks' parsers do
    (pydantic's lax int, jsonargparse, argparse ``type=int``)."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 18:
        value = int(value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:  # 2.0: pydantic's lax int takes it
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        what = "a positive integer" if least == 1 else f"an integer of at least {least}"
        raise r.error(f"{key}: {shown(value)} is not {what} (valid values: {least} or more)")
    return value


def scalar(r: KeyReader, key: str, value: Any, valid: str | Iterable[str]) -> Any:
    """A value already taken from the config that is looked up among names (``value in TABLE``), as given; a list or a
    mapping (unhashable: the lookup would raise) refused in one line naming ``key`` and the ``valid`` names."""
    if isinstance(value, (list, dict)):
        listed = valid if isinstance(valid, str) else ", ".join(valid)
        raise r.error(f"{key}: {shown(value)} is not a single value (valid values: {listed})")
    return value


def names(r: KeyReader, key: str, value: Any, valid: str) -> list[str]:
    """Module or plugin names already taken from the config: one string (a list of it) or a list of strings; anything
    else (a number, a mapping, a list holding one) refused in one line naming ``key`` and ``valid``."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise r.error(f"{key}: {shown(value)} is not a name or a list of names (valid values: {valid})")


def zero_stage(r: KeyReader, key: str, value: Any, digits: bool = False) -> int:
    """A ZeRO stage (DeepSpeed's ``zero_optimization.stage``, accelerate's ``zero_stage``): 0, 1, 2 or 3, else one line.
    ``digits``: a string of one digit is its number (accelerate passes ``zero_stage`` through an environment variable
    and ``int()``s it: accelerate v1.16.0 utils/dataclasses.py DeepSpeedPlugin ``ACCELERATE_DEEPSPEED_ZERO_STAGE``)."""
    if digits and isinstance(value, str) and value.strip() in ("0", "1", "2", "3"):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value not in ZERO_STAGES:
        raise r.error(f"{key}: {shown(value)} is not a ZeRO stage (valid values: 0, 1, 2, 3)")
    return value


def switch_value(r: KeyReader, key: str, value: Any, spellings: dict[str, bool] | None = None) -> bool:
    """:func:`boolean` for a value already taken from the config (unset, None: false)."""
    if value is None or isinstance(value, bool):
        return bool(value)
    if spellings and isinstance(value, (str, int)) and str(value).lower() in spellings:
        return spellings[str(value).lower()]
    words = f"; or {', '.join(sorted(k for k in spellings if not k.isdigit()))}, 0, 1" if spellings else ""
    raise r.error(f"{key}: {shown(value)} is not a boolean (valid values: true, false{words})")
