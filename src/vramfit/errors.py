"""Errors a user can cause. Each names the field at fault and, where finite, the valid values.

The CLI turns them into a one-line message and exit code 2; the web API into HTTP 422.
"""

from __future__ import annotations

from collections.abc import Iterable

from vramfit.limits import MAX_ERROR_CHARS as _MAX_TEXT


class VramfitError(ValueError):
    """Base class of every error caused by user input."""


class ScenarioError(VramfitError):
    """A scenario key has a bad value (or is unknown)."""

    def __init__(self, key: str, message: str, valid: Iterable[str] | None = None):
        self.key = key
        self.valid = list(valid) if valid is not None else None
        text = f"{key}: {message}"
        if len(text) > _MAX_TEXT:  # a net under every message: values are cut to 80 where quoted
            text = text[: _MAX_TEXT - 1] + "…"
        if self.valid:
            text += f" (valid values: {', '.join(self.valid)})"
        super().__init__(text)
        self.message = text


class ModelError(ScenarioError):
    """A model id, config path or config content cannot be resolved to an architecture."""

    def __init__(self, message: str, key: str = "model", valid: Iterable[str] | None = None):
        super().__init__(key, message, valid)
