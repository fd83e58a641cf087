"""The shape of one scenario key as every face shows it (see ``vramfit.scenario.FIELDS``).

Kept apart from the scenario module so that the table there stays a table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any


class Kind(str, Enum):
    """The type of a scenario key's value, as every face shows it."""

    CHOICE = "choice"  # one of a finite set (an enum)
    INTEGER = "integer"
    NUMBER = "number"
    BOOLEAN = "boolean"
    TEXT = "text"
    COUNT = "count"  # a whole number with K/M/B/T suffixes ("7B")
    NAMES = "names"  # a list of names, or one comma-separated string


@dataclass(frozen=True)
class FieldSpec:
    """One scenario key as every face shows it: the CLI option, the web schema and form label, the docs.

    ``help`` is one sentence for any face; ``label`` is the form's (English, Portuguese) name.
    """

    name: str
    kind: Kind
    help: str
    label: tuple[str, str]
    unit: str = ""
    choices: type[Any] | None = None  # an enum with .values()
    limits: tuple[float, float] | None = None  # inclusive bounds of a number
    default_note: str | Callable[[], str] = ""  # said instead of the plain default when it depends on other keys
    default: Any = None  # the dataclass default (filled by the scenario module's table)
    range_note: str = ""  # the valid range in words, where limits cannot say it (open bounds)

    @property
    def valid(self) -> list[str]:
        """The finite set of values, or [] when the value is open."""
        if self.choices is not None:
            return self.choices.values()
        return ["true", "false"] if self.kind is Kind.BOOLEAN else []

    def default_text(self) -> str:
        """How the default reads in help and docs (``lora``, ``16``, ``2 × lora_rank``, ``none``)."""
        if self.default_note:
            return self.default_note() if callable(self.default_note) else self.default_note
        d = self.default
        if d is None:
            return "none"
        if isinstance(d, bool):
            return str(d).lower()
        if isinstance(d, tuple):
            return ",".join(d)
        return f"{d:g}" if isinstance(d, float) else str(d)

    def range_text(self) -> str:
        """The valid range of a number (``1..65,536``, ``> 0``), or ``""``."""
        if self.range_note:
            return self.range_note
        if self.limits is not None:
            lo, hi = self.limits
            return f"{lo:,g}..{hi:,.0f}"
        return ""

    def values_text(self) -> str:
        """The valid values, else the range, else ``""`` (an open value such as a model id)."""
        return " | ".join(self.valid) if self.valid else self.range_text()
