"""The planner: which GPU, how many, how long, how much, and what to change to make a run fit.

Pure functions over the estimator (no printing, no files): ``plan``, ``fit``, ``changes_to_fit``,
``sweep``/``parse_vary`` and ``guide_table``; every result has ``to_dict()`` (JSON, integer bytes).
Invalid input raises :class:`vramfit.errors.ScenarioError` naming the input.
"""

from vramfit.plan.changes import Change, changes_to_fit
from vramfit.plan.fit import FitReport, fit
from vramfit.plan.guide import GuideTable, guide_table
from vramfit.plan.planner import plan
from vramfit.plan.report import Plan, PlanReport
from vramfit.plan.sweep import SweepResult, parse_vary, sweep
from vramfit.plan.throughput import MFU_DEFAULT

__all__ = [
    "MFU_DEFAULT",
    "Change",
    "FitReport",
    "GuideTable",
    "Plan",
    "PlanReport",
    "SweepResult",
    "changes_to_fit",
    "fit",
    "guide_table",
    "parse_vary",
    "plan",
    "sweep",
]
