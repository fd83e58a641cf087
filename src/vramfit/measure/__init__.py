"""Field validation: measure a scenario on a real GPU, store the run, compare with the estimate.

``measure(scenario)`` runs the training steps in a fresh process and returns a :class:`RunRecord`;
:class:`RunStore` keeps runs in SQLite or a shared database; :func:`calibrate` scores the estimator
on the stored runs. Importing this package imports neither torch nor SQLAlchemy (``vramfit[measure]``
extra); they are loaded when a run or the database is used.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "measure",
    "MeasureError",
    "RunRecord",
    "RunStore",
    "DatabaseError",
    "RecordError",
    "calibrate",
    "default_url",
    "parse_lines",
    "dumps_lines",
]

_LAZY = {
    "measure": "vramfit.measure.runner",
    "MeasureError": "vramfit.measure.runner",
    "RunRecord": "vramfit.measure.records",
    "RecordError": "vramfit.measure.records",
    "parse_lines": "vramfit.measure.records",
    "dumps_lines": "vramfit.measure.records",
    "RunStore": "vramfit.measure.store",
    "DatabaseError": "vramfit.measure.store",
    "default_url": "vramfit.measure.store",
    "calibrate": "vramfit.measure.calibration",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'vramfit.measure' has no attribute {name!r}")
