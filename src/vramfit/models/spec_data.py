"""A :class:`ModelSpec` as JSON data and back, so the bundled catalog stays torch-free.

Catalog entries of families without a reader of their own (read from transformers' modules on the meta
device, :mod:`vramfit.models.from_modules`) store the spec that reading gave under ``"spec"``; it is used
when torch or transformers are missing, and a test checks it equals the live reading
(tests/models/test_model_catalog_new.py; ``tests/models/recount_params.py --write`` refreshes it).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from enum import Enum
from functools import lru_cache
from typing import Any

from vramfit.models.spec import ModelSpec


def spec_to_data(spec: ModelSpec) -> dict[str, Any]:
    """Every field of ``spec`` (vision tower and projector included) as JSON-ready data."""
    return _dump(spec)


def spec_from_data(data: dict[str, Any]) -> ModelSpec:
    """The :class:`ModelSpec` that :func:`spec_to_data` wrote."""
    return _load(ModelSpec, data)


def _dump(x: Any) -> Any:
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: _dump(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, Enum):
        return x.value
    if isinstance(x, (tuple, list)):
        return [_dump(v) for v in x]
    if isinstance(x, dict):
        return {k: _dump(v) for k, v in x.items()}
    return x


@lru_cache(maxsize=8)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _load(cls: type, data: dict[str, Any]) -> Any:
    hints = _hints(cls)
    return cls(**{f.name: _value(hints[f.name], data[f.name]) for f in dataclasses.fields(cls) if f.name in data})


def _value(tp: Any, v: Any) -> Any:
    if v is None:
        return None
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is tuple:
        return tuple(_value(args[0], x) for x in v)
    if origin in (typing.Union, types.UnionType):  # X | None
        return _value(next(a for a in args if a is not type(None)), v)
    if dataclasses.is_dataclass(tp):
        return _load(tp, v)
    if isinstance(tp, type) and issubclass(tp, Enum):
        return tp(v)
    return v
