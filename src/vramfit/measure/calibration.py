"""The estimator's error on stored runs, and the overheads the runs imply.

For every run with figures, the *current* estimator is run on its scenario (the stored estimate is used
only where the scenario cannot be estimated any more, e.g. a Hub model while offline) and compared per
counter: signed error ``(estimate − measured) / measured``; an ``unknown`` counter counts as 0 when it lies
between the estimate's allocated and device figures, else against the nearer bound (as
``benchmarks/accuracy.py`` scores ``benchmarks/data/measured/``). Errors are grouped per GPU family and method.

Implied overheads (single-GPU runs that measured them; paged optimizers left out, their state lives
outside the allocator):

- CUDA context and libraries = ``device − reserved`` (nvidia-smi minus PyTorch's reserved peak), against the
  estimator's ``CUDA_CONTEXT`` constant;
- caching-allocator overhead = ``reserved − allocated``, in bytes and as a fraction of allocated, against
  the estimator's own ``reserved − allocated``.

Out-of-memory runs score the fit verdict: the estimate's device figure against the card's total memory.

Speed (runs with a step time on a catalog card): measured step time / the planner's predicted one
(:func:`vramfit.plan.timing.scenario_speed`, the mechanism model); per GPU family the median ratio is the
``speed_factor`` the planner multiplies that family's predicted step times by.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from vramfit.calibration import Calibration, FamilyCalibration
from vramfit.errors import VramfitError
from vramfit.measure.records import RunRecord

PAGED = ("paged-adamw", "paged-adamw-8bit")
COUNTERS = ("allocated", "reserved", "device", "unknown")


@dataclass
class MetricError:
    metric: str
    n: int
    mean_signed: float  # mean of (estimate - measured) / measured
    mean_abs: float
    worst: float  # the signed error with the largest magnitude
    worst_run: str


@dataclass
class Group:
    gpu_family: str
    method: str
    runs: int = 0
    oom_runs: int = 0
    errors: dict[str, MetricError] = field(default_factory=dict)
    fit_correct: int = 0
    fit_missed_oom: int = 0  # the estimate said it fits, the run ran out of memory
    fit_false_alarm: int = 0  # the estimate said it does not fit, the run fitted


@dataclass
class Overhead:
    gpu_family: str
    runs: int
    context_median_bytes: int
    context_min_bytes: int
    context_max_bytes: int
    estimator_context_bytes: int
    allocator_median_bytes: int
    allocator_median_fraction: float  # of allocated
    estimator_allocator_median_bytes: int
    gpus: list[str] = field(default_factory=list)  # catalog ids (or device names) of the runs


@dataclass
class SpeedFit:
    gpu_family: str
    runs: int
    factor: float  # median of measured / predicted step time
    factor_min: float
    factor_max: float
    gpus: list[str] = field(default_factory=list)


@dataclass
class CalibrationReport:
    runs: int
    scored: int
    groups: list[Group]
    overheads: list[Overhead]
    skipped: list[tuple[str, str]]  # (run id, reason)
    stored_estimates: int = 0  # runs scored against their stored estimate
    speeds: list[SpeedFit] = field(default_factory=list)  # per GPU family: measured / predicted step time

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def signed_error(metric: str, measured: int, est: dict[str, int]) -> float:
    if metric == "unknown":
        lo, hi = est["allocated_bytes"], est["device_bytes"]
        if lo <= measured <= hi:
            return 0.0
        ours = lo if measured < lo else hi
    else:
        ours = est[f"{metric}_bytes"]
    return (ours - measured) / measured


#: What estimating a stored scenario may raise besides VramfitError: stored records come from other
#: machines and versions (a model path such as ``~user/x`` or a 300-character name fails in the OS),
#: and one such record is a skipped run with its reason, never the end of the report.
_STORED_SCENARIO_ERRORS = (VramfitError, OSError, RuntimeError, ValueError, TypeError, KeyError,
                           ArithmeticError, RecursionError)


def _reason(exc: BaseException, limit: int = 200) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text if len(text) <= limit else text[:limit] + "…"


def _estimate(rec: RunRecord, estimator: Callable[[dict], Any]) -> tuple[dict[str, int] | None, bool, str]:
    """(peaks, from_stored, reason) for a record."""
    try:
        r = estimator(rec.scenario)
        peak = r.peak
        return ({"allocated_bytes": peak.allocated_bytes, "reserved_bytes": peak.reserved_bytes,
                 "device_bytes": peak.device_bytes}, False, "")
    except _STORED_SCENARIO_ERRORS as exc:
        stored = rec.estimate or {}
        if all(isinstance(stored.get(k), int) for k in ("allocated_bytes", "reserved_bytes", "device_bytes")):
            return ({k: stored[k] for k in ("allocated_bytes", "reserved_bytes", "device_bytes")}, True, "")
        return None, False, f"cannot estimate: {_reason(exc)}"


def _context_bytes(scenario: dict) -> int:
    """What the estimator assumes outside the allocator for a run's card; a card this machine's catalog lacks (a run
    recorded elsewhere with a user's GPU row): the general figure, as an estimate without a card takes."""
    from vramfit.estimate.constants import CUDA_CONTEXT
    from vramfit.estimate.reserved import process_bytes
    from vramfit.scenario import parse_scenario

    try:
        return process_bytes(parse_scenario(scenario))[0]
    except VramfitError:
        return CUDA_CONTEXT.value


def _card_name(rec: RunRecord) -> str:
    from vramfit.measure.env import catalog_gpu_id

    env = rec.environment
    return (rec.scenario.get("gpu") or catalog_gpu_id(env.get("gpu_name"), env.get("gpu_total_bytes"))
            or env.get("gpu_name") or rec.gpu_family)


def _predicted_step_s(rec: RunRecord) -> tuple[float | None, str]:
    """(the planner's predicted step time of the run's scenario on its card, why not)."""
    from vramfit.plan.timing import scenario_speed

    card = _card_name(rec)
    try:
        s = scenario_speed(rec.scenario, card)
    except _STORED_SCENARIO_ERRORS as exc:
        return None, f"cannot time: {_reason(exc)}"
    return (s.step_s, "") if s is not None and s.step_s > 0 else (None, f"cannot time: no speed figures for {card}")


def to_calibration(rep: CalibrationReport) -> Calibration:
    """The calibration file's content: each family's measured context and allocator slack (medians), and its
    step-time factor where runs timed it (a family without memory overheads is not written)."""
    speeds = {f.gpu_family: f for f in rep.speeds}
    fams = {}
    for o in rep.overheads:
        sp = speeds.get(o.gpu_family)
        fams[o.gpu_family] = FamilyCalibration(o.gpu_family, o.runs, max(0, o.context_median_bytes),
                                               min(max(0.0, o.allocator_median_fraction), 0.99), tuple(o.gpus),
                                               sp.factor if sp else None, sp.runs if sp else 0)
    return Calibration(fams)


@dataclass
class _Tally:
    """What :func:`calibrate` gathers run by run, before it summarises."""

    groups: dict[tuple[str, str], Group] = field(default_factory=dict)
    samples: dict[tuple[str, str], dict[str, list[tuple[float, str]]]] = field(default_factory=dict)
    over: dict[str, list[tuple[int, int, int, int, int]]] = field(default_factory=dict)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    cards: dict[str, set[str]] = field(default_factory=dict)
    ratios: dict[str, list[float]] = field(default_factory=dict)  # measured / predicted step time per family
    speed_cards: dict[str, set[str]] = field(default_factory=dict)
    scored: int = 0
    stored_used: int = 0

    def add(self, rec: RunRecord, estimator: Callable[[dict], Any]) -> None:
        if rec.status == "error":
            self.skipped.append((rec.id, "status error"))
            return
        est, from_stored, why = _estimate(rec, estimator)
        if est is None:
            self.skipped.append((rec.id, why))
            return
        key = (rec.gpu_family, str(rec.scenario.get("method", "lora")))
        g = self.groups.setdefault(key, Group(*key))
        g.runs += 1
        _count_fit(g, rec, est)
        if rec.status != "ok":
            return
        figures = {m: rec.counter(m) for m in COUNTERS if rec.counter(m)}
        if not figures:
            self.skipped.append((rec.id, "no measured figure"))
            return
        self.scored += 1
        self.stored_used += from_stored
        self._add_figures(key, rec, figures, est)
        self._add_speed(rec)

    def _add_speed(self, rec: RunRecord) -> None:
        """The run's measured / predicted step time, where it has a step time and its card can be timed."""
        if not rec.step_time_s or rec.step_time_s <= 0:
            return
        predicted, why = _predicted_step_s(rec)
        if predicted is None:
            self.skipped.append((rec.id, f"step time not scored: {why}"))
            return
        self.ratios.setdefault(rec.gpu_family, []).append(rec.step_time_s / predicted)
        self.speed_cards.setdefault(rec.gpu_family, set()).add(_card_name(rec))

    def _add_figures(self, key: tuple[str, str], rec: RunRecord, figures: dict[str, int], est: dict[str, int]) -> None:
        """The run's signed errors, and (single-GPU runs with all three counters) its implied overheads."""
        for metric, measured in figures.items():
            self.samples.setdefault(key, {}).setdefault(metric, []).append(
                (signed_error(metric, measured, est), rec.id))
        single = int(rec.scenario.get("num_gpus", 1)) == 1 and rec.scenario.get("optimizer") not in PAGED
        if single and all(figures.get(m) for m in ("allocated", "reserved", "device")):
            self.cards.setdefault(rec.gpu_family, set()).add(_card_name(rec))
            self.over.setdefault(rec.gpu_family, []).append((
                figures["device"] - figures["reserved"], figures["reserved"] - figures["allocated"],
                figures["allocated"], est["reserved_bytes"] - est["allocated_bytes"], _context_bytes(rec.scenario)))


def _count_fit(g: Group, rec: RunRecord, est: dict[str, int]) -> None:
    """Count the run as out of memory, and score the fit verdict where the card's total memory is known."""
    total = rec.environment.get("gpu_total_bytes")
    if rec.status == "oom":
        g.oom_runs += 1
    if isinstance(total, int) and total > 0:
        fits = est["device_bytes"] <= total
        if (rec.status == "ok") == fits:
            g.fit_correct += 1
        elif rec.status == "oom":
            g.fit_missed_oom += 1
        else:
            g.fit_false_alarm += 1


def _fill_errors(tally: _Tally) -> None:
    """Each group's per-counter error summary from its samples."""
    for key, by_metric in tally.samples.items():
        for metric, vals in by_metric.items():
            errs = [e for e, _ in vals]
            worst = max(vals, key=lambda v: abs(v[0]))
            tally.groups[key].errors[metric] = MetricError(metric, len(vals), statistics.fmean(errs),
                                                           statistics.fmean(abs(e) for e in errs), worst[0], worst[1])


def _overheads(tally: _Tally) -> list[Overhead]:
    """Per GPU family: the medians of the implied context and allocator overheads."""
    overheads = []
    for fam, rows in sorted(tally.over.items()):
        ctx = [r[0] for r in rows]
        overheads.append(Overhead(
            gpu_family=fam, runs=len(rows),
            context_median_bytes=int(statistics.median(ctx)), context_min_bytes=min(ctx), context_max_bytes=max(ctx),
            estimator_context_bytes=int(statistics.median(r[4] for r in rows)),
            allocator_median_bytes=int(statistics.median(r[1] for r in rows)),
            allocator_median_fraction=statistics.median(r[1] / r[2] for r in rows if r[2]),
            estimator_allocator_median_bytes=int(statistics.median(r[3] for r in rows)),
            gpus=sorted(tally.cards.get(fam, ())),
        ))
    return overheads


def _speeds(tally: _Tally) -> list[SpeedFit]:
    """Per GPU family: the median of measured / predicted step time."""
    return [SpeedFit(fam, len(r), statistics.median(r), min(r), max(r), sorted(tally.speed_cards.get(fam, ())))
            for fam, r in sorted(tally.ratios.items())]


def calibrate(records: Iterable[RunRecord], estimator: Callable[[dict], Any] | None = None) -> CalibrationReport:
    """Score the estimator on ``records`` (see the module docstring)."""
    if estimator is None:
        from vramfit.estimate import estimate as estimator
    recs = list(records)
    tally = _Tally()
    for rec in recs:
        tally.add(rec, estimator)
    _fill_errors(tally)
    overheads = _overheads(tally)
    ordered = [tally.groups[k] for k in sorted(tally.groups)]
    return CalibrationReport(len(recs), tally.scored, ordered, overheads, tally.skipped, tally.stored_used,
                             _speeds(tally))
