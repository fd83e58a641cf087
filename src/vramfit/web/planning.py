"""``/api/plan`` and ``/api/sweep``: checked bodies handed to :mod:`vramfit.plan`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from vramfit.errors import ScenarioError
from vramfit.scenario import finite_number
from vramfit.web import service
from vramfit.web.schemas import PlanOptions
from vramfit.web.service import (
    ApiError,
    Checked,
    check_scenario,
    checked_gpu,
    renamed,
    sweep_values,
    sweep_with_estimate,
)


def _planner(name: str):
    """``vramfit.plan.<name>``, or None while the planner is not installed (or not complete)."""
    try:
        import vramfit.plan as planner
    except ModuleNotFoundError as exc:  # pragma: no cover - the planner ships with vramfit
        if not (exc.name or "").startswith("vramfit.plan"):
            raise
        return None
    return getattr(planner, name, None)


def _split(body: Any, allowed: tuple[str, ...]) -> tuple[Checked, dict[str, Any]]:
    if not isinstance(body, dict):
        raise ScenarioError("body", f"must be a JSON object with a scenario, got {type(body).__name__}")
    unknown = [k for k in body if k not in allowed]
    if unknown:
        raise ScenarioError(str(unknown[0]), "unknown field", list(allowed))
    if "scenario" not in body:
        raise ScenarioError("scenario", "is required (an object of scenario keys)")
    rest = {k: v for k, v in body.items() if k != "scenario"}
    return check_scenario(body["scenario"]), rest


#: The lowest model-FLOPs utilisation the API plans with. Reported LLM training MFU is 20-60 %
#: (llm-foundry's benchmark table, the source of the planner's 0.40 default); 1 % is already a badly
#: misconfigured run, and below it the hours (tokens x FLOPs / (peak x MFU)) run to absurd or
#: non-finite figures (5e-324 divides by zero).
MIN_MFU = 0.01


def _stack_names() -> list[str] | None:
    """The planner's software stacks, where the planner is installed (the valid values of ``stacks``)."""
    try:
        from vramfit.plan.rental import STACK_NAMES
    except ImportError:
        return None
    return list(STACK_NAMES)


#: The planner names its inputs as ``vramfit plan``'s flags (--budget, --deadline, --stack, --gpu, --export); the
#: API's errors name the body's fields.
PLAN_FIELDS = {"budget": "budget_usd", "deadline": "deadline_hours", "stack": "stacks", "gpu": "gpu_ids"}
EXPORT_FIELDS = {**PLAN_FIELDS, "gpu": "gpu_id", "export": "engine"}


@contextmanager
def body_fields(names: dict[str, str]) -> Iterator[None]:
    """The planner's errors re-keyed by ``names`` (flag -> body field). A scenario's own unknown ``gpu`` never gets
    here: :func:`vramfit.web.service.check_scenario` refuses it first."""
    try:
        yield
    except ScenarioError as exc:
        if exc.key not in names:
            raise
        raise renamed(exc, names[exc.key]) from None


def plan_options(raw: dict[str, Any]) -> dict[str, Any]:
    """The planner's own inputs, as given (the planner validates them and names the input at fault);
    only ``gpu_ids`` is checked for its shape here, and ``None`` means "the planner's default"."""
    opts = {k: v for k, v in raw.items() if v is not None}
    stacks = _stack_names()
    for key, most, what in (("gpu_ids", 64, "GPU ids"), ("stacks", 8, "software stacks")):
        ids = opts.get(key)  # the plan's own JSON writes stacks as a list: it reads back
        if ids is not None and not (isinstance(ids, str) or (isinstance(ids, list) and len(ids) <= most
                                                              and all(isinstance(i, str) for i in ids))):
            raise ScenarioError(key, f"must be a list of at most {most} {what}, or a comma-separated string",
                                stacks if key == "stacks" else None)
    ids = opts.get("gpu_ids")
    for gid in ids.split(",") if isinstance(ids, str) else ids or ():
        if gid.strip():  # an unknown card lists the catalog's ids, as the scenario's gpu does
            checked_gpu("gpu_ids", gid)
    if isinstance(opts.get("sort"), (dict, list)):
        raise ScenarioError("sort", f"must be a string, got {opts['sort']!r}", ["cost", "time"])
    if "eval_follows_micro" in opts and not isinstance(opts["eval_follows_micro"], bool):
        raise ScenarioError("eval_follows_micro", f"must be true or false, got {opts['eval_follows_micro']!r}",
                            ["true", "false"])
    for k, v in opts.items():
        if isinstance(v, (dict, list)) and k not in ("gpu_ids", "stacks"):
            raise ScenarioError(k, f"must be a number, got {v!r}")
    if "mfu" in opts and finite_number("mfu", opts["mfu"]) < MIN_MFU:
        raise ScenarioError("mfu", f"must be at least {MIN_MFU} (1 % of the card's peak FLOPs; real training "
                            f"runs reach 20-60 %), got {opts['mfu']!r}")
    return opts


def plan(body: Any) -> dict[str, Any]:
    checked, raw = _split(body, ("scenario", *PlanOptions.model_fields))
    opts = plan_options(raw)
    run_plan = _planner("plan")
    if run_plan is None:
        raise ApiError(503, "plan", "the planner (vramfit.plan) is not installed")
    if checked.pasted:
        raise ScenarioError("config_json", "the planner takes a catalog model or a parameter count; "
                            "a pasted config.json is estimated by /api/estimate and /api/sweep only")
    with body_fields(PLAN_FIELDS):
        return run_plan(checked.scenario, calibration=service.CALIBRATION, **opts).to_dict()


#: ``/api/export`` keys besides the scenario and the planner's inputs.
EXPORT_KEYS = ("engine", "gpu_id", "num_gpus")


def export(body: Any) -> dict[str, Any]:
    """Configuration files (``vramfit plan --export``) for the plan of ``num_gpus`` x ``gpu_id``."""
    checked, raw = _split(body, ("scenario", *PlanOptions.model_fields, *EXPORT_KEYS))
    engine = raw.pop("engine", None) or "accelerate"
    gpu_id = raw.pop("gpu_id", None) or checked.scenario.gpu
    count = raw.pop("num_gpus", None)
    if not gpu_id:
        raise ScenarioError("gpu_id", "is required: the card of the plan to export")
    if not isinstance(gpu_id, str):
        raise ScenarioError("gpu_id", f"must be a GPU id (GET /api/gpus), got {gpu_id!r}")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        raise ScenarioError("num_gpus", f"must be a whole number of GPUs, got {count!r}")
    run_plan = _planner("plan")
    if run_plan is None:
        raise ApiError(503, "plan", "the planner (vramfit.plan) is not installed")
    if checked.pasted:
        raise ScenarioError("config_json", "the planner takes a catalog model or a parameter count")
    opts = {**plan_options(raw), "gpu_ids": [checked_gpu("gpu_id", gpu_id)]}
    with body_fields(EXPORT_FIELDS):
        report = run_plan(checked.scenario, with_changes=False, calibration=service.CALIBRATION, **opts)
        plans = [p for p in report.plans if count is None or p.num_gpus == count]
        if not plans:
            if count is None:  # no GPU count asked: no count of this card fits within max_gpus
                raise ScenarioError("gpu_id", f"no plan on {gpu_id} fits (up to max_gpus of them)")
            raise ScenarioError("num_gpus", f"no plan of {count} x {gpu_id} fits",
                                [str(p.num_gpus) for p in report.plans] or None)
        from vramfit.plan.export import export_plan

        return export_plan(plans[0], engine, epochs=report.epochs).to_dict()


def sweep(body: Any) -> dict[str, Any]:
    checked, raw = _split(body, ("scenario", "key", "values"))
    if "key" not in raw or "values" not in raw:
        raise ScenarioError("key" if "key" not in raw else "values", "is required")
    key, values = sweep_values(raw["key"], raw["values"])
    run_sweep = _planner("sweep")
    if run_sweep is None or checked.pasted:
        return sweep_with_estimate(checked, key, values)
    return run_sweep(checked.scenario, key, values, calibration=service.CALIBRATION).to_dict()
