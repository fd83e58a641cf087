"""Memoised estimates of one model under many settings, and the fit test against a card.

The architecture is resolved once (``resolve_spec``) and every variant goes through
``estimate_spec``; a variant is named by the scenario keys it changes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from vramfit.calibration import Calibration
from vramfit.errors import ScenarioError
from vramfit.estimate import FitFigures, estimate_spec, fit_figures, resolve_spec, step_peak
from vramfit.estimate.framework import check_free_keys
from vramfit.estimate.result import EstimateResult
from vramfit.gpus import GPU, get_gpu, list_gpus
from vramfit.plan.verdict import limit_bytes  # noqa: F401 - the one definition, re-exported for the planner
from vramfit.scenario import MAX_BATCH, Checkpointing, Loss, Optimizer, Scenario, parse_scenario
from vramfit.stage_keys import BATCH_RULE_STAGES

_PROBE: dict[tuple, dict[str, int]] = {}
#: Keys no rule of scenario.parse_scenario reads beyond their own range or choices: the planner's
#: variants set them on the validated rest without re-parsing (tests/plan/test_search.py: same scenarios).
#: Except under a stage whose rule reads the batch keys together (stage_keys.BATCH_RULE_STAGES, GRPO): there every
#: variant is parsed whole, so fit and plan never offer a micro-batch that ``estimate`` (and TRL) refuse.
_FREE_KEYS = {"micro_batch_size": int, "grad_accum": int, "gradient_checkpointing": Checkpointing,
              "optimizer": Optimizer, "loss": Loss}


def evaluation_follows(base: Scenario, changes: dict[str, Any]) -> dict[str, Any]:
    """The evaluation batch a change of micro-batch carries where the run evaluates at its micro-batch
    (``Evaluator.eval_follows_micro``): none where the base does not evaluate or the change sets it itself."""
    if not base.eval_batch_size or "micro_batch_size" not in changes or "eval_batch_size" in changes:
        return {}
    return {"eval_batch_size": changes["micro_batch_size"]}


class Evaluator:
    """Estimates of ``base`` with some keys changed, computed once each."""

    def __init__(self, base: Scenario | dict, calibration: Calibration | None = None,
                 seq_len_at: Callable[[int], int] | None = None, eval_follows_micro: bool = False):
        """``calibration``: a user's measured overheads, applied to cards of its families (:mod:`vramfit.calibration`).
        ``seq_len_at``: the ``seq_len`` of a micro-batch size where a dataset's batches set it (a padding-free micro-batch
        is one row of its samples: :meth:`vramfit.dataset.DatasetReport.seq_len_at`); every variant takes it.
        ``eval_follows_micro``: the run evaluates at its micro-batch (a config that leaves the evaluation batch to its
        default, e.g. Axolotl's ``eval_batch_size``: ``vramfit.config_import.Imported.eval_follows_micro``), so a
        variant with another micro-batch evaluates at that one too (where the base evaluates at all)."""
        self.seq_len_at = seq_len_at
        self.eval_follows_micro = eval_follows_micro
        self.base = parse_scenario(base)
        if seq_len_at is not None:
            self.base = self.base.replace(seq_len=seq_len_at(self.base.micro_batch_size))
        self.calibration = calibration
        self._cards: dict[str, GPU] = {}
        card = self.card(self.base.gpu)
        if card is not None and card.gpu_id != self.base.gpu:  # an alias ("4090") becomes the catalog id
            given = getattr(self.base, "_given", None)  # the keys the user set: Scenario.replace keeps them
            self.base = dataclasses.replace(self.base, gpu=card.gpu_id)
            if given is not None:
                object.__setattr__(self.base, "_given", given)
        self.model_id, self.spec, self.origin, self.notes = resolve_spec(self.base)
        self._memo: dict[tuple, EstimateResult | ScenarioError] = {}
        self._fits: dict[tuple, FitFigures | ScenarioError] = {}
        self._steps: dict[tuple, Any] = {}  # estimate.step_peak of a fit answered without the estimate
        self._scenarios: dict[tuple, Scenario | ScenarioError] = {}
        self.calls = 0

    def card(self, gpu_id: str | None) -> GPU | None:
        """The catalog record of a scenario's ``gpu`` (its hardware facts), looked up once."""
        if not gpu_id:
            return None
        if gpu_id not in self._cards:
            self._cards[gpu_id] = get_gpu(gpu_id)
        return self._cards[gpu_id]

    @staticmethod
    def _key(changes: dict[str, Any]) -> tuple:
        return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in changes.items()))

    def scenario(self, **changes: Any) -> Scenario:
        """The base scenario with ``changes`` (validated; memoised)."""
        if not changes:
            return self.base
        if self.seq_len_at is not None and "micro_batch_size" in changes and "seq_len" not in changes:
            changes = {**changes, "seq_len": self.seq_len_at(changes["micro_batch_size"])}
        if self.eval_follows_micro:
            changes = {**changes, **evaluation_follows(self.base, changes)}
        key = self._key(changes)
        hit = self._scenarios.get(key)
        if hit is None:
            hit = self._scenarios[key] = self._replace(changes)
        if isinstance(hit, ScenarioError):
            raise hit
        return hit

    def _replace(self, changes: dict[str, Any]) -> Scenario | ScenarioError:
        """``base.replace(**changes)``; free keys (:data:`_FREE_KEYS`) go on the validated rest directly."""
        free = {k: _free_value(k, changes[k]) for k in _FREE_KEYS if k in changes}
        if free and None not in free.values() and self.base.stage not in BATCH_RULE_STAGES:
            try:
                rest = self.scenario(**{k: v for k, v in changes.items() if k not in free})
                check_free_keys(rest, free)  # what the framework refuses of them (estimate/framework.py check_runs)
            except ScenarioError as exc:
                return exc
            return dataclasses.replace(rest, **free)
        try:
            return self.base.replace(**changes)
        except ScenarioError as exc:
            return exc

    def try_estimate(self, **changes: Any) -> EstimateResult | ScenarioError:
        """The estimate, or the ScenarioError that the changed scenario raises."""
        key = self._key(changes)
        hit = self._memo.get(key)
        if hit is None:
            try:
                sc = self.scenario(**changes)
                step = self._steps.pop(key, None)
                self.calls += step is None
                hit = estimate_spec(sc, self.spec, self.model_id, self.origin, self.notes, card=self.card(sc.gpu),
                                   calibration=self.calibration, step=step)
            except ScenarioError as exc:
                hit = exc
            self._memo[key] = hit
        return hit

    def try_fit(self, **changes: Any) -> FitFigures | ScenarioError:
        """What the fit test reads of the estimate (:func:`vramfit.estimate.fit_figures`: the same bytes, without the
        replays only the reserved and device peaks need), or the ScenarioError; from the estimate where it is known.
        The step is kept: an estimate of the same changes later starts from it."""
        key = self._key(changes)
        hit = self._fits.get(key)
        if hit is not None:
            return hit
        known = self._memo.get(key)
        if known is None:
            try:
                sc = self.scenario(**changes)
                card = self.card(sc.gpu)
                step = step_peak(sc, self.spec, card)
                self.calls += 1
                hit = fit_figures(step, sc, card, self.calibration)
                if hit is not None:
                    self._steps[key] = step
            except ScenarioError as exc:
                hit = exc
        if hit is None:  # a calibrated card (fit_figures: None): the estimate answers
            known = self.try_estimate(**changes)
        if isinstance(known, EstimateResult):
            hit = FitFigures(known.peak.required_bytes, known.component("paged_optimizer_state"), known.host_bytes)
        elif known is not None:
            hit = known
        self._fits[key] = hit
        return hit

    def estimate(self, **changes: Any) -> EstimateResult:
        r = self.try_estimate(**changes)
        if isinstance(r, ScenarioError):
            raise r
        return r

    def device_bytes(self, **changes: Any) -> int:
        return self.estimate(**changes).peak.device_bytes


def _free_value(key: str, value: Any) -> Any:
    """``value`` as the scenario holds it, or None unless it is plainly valid (then the full parse judges it)."""
    kind = _FREE_KEYS[key]
    if kind is int:
        return value if type(value) is int and 1 <= value <= MAX_BATCH else None
    try:
        return kind(value)  # an exact choice (the planner's); anything else goes through the full parse
    except ValueError:
        return None


def gpu_classes(sc: Scenario | None = None) -> dict[str, str]:
    """Cards grouped by how the estimator treats them in ``sc`` (default: a small generic model on one GPU):
    gpu id -> the class's first gpu id.

    ``""`` is the class of a scenario without ``gpu``; cards in it get exactly that figure. A class is one set of
    the facts an estimate reads of its card (estimate/card_facts.py ``card_facts``: workspaces, CUDA context,
    NVLS buffers behind an NVSwitch), the one answer to "which cards does the estimator tell apart" that the
    per-card verdicts use too, so the planner's estimate for a class is the figure of every card in it
    (tests/plan/test_plan_classes.py). The search screens with the estimate without ``gpu`` plus a constant
    shift per class (:func:`class_shifts`) and checks its pick with the class's own estimate.
    """
    from vramfit.estimate.card_facts import card_facts

    sc = sc or _probe_scenario()
    seen: dict[tuple, str] = {card_facts(sc, None): ""}
    out: dict[str, str] = {"": ""}
    for g in list_gpus():
        out[g.gpu_id] = seen.setdefault(card_facts(sc, g), g.gpu_id)
    return out


def class_shifts(classes: dict[str, str] | None = None) -> dict[str, int]:
    """Device bytes each class of ``classes`` (default :func:`gpu_classes`) adds to the figure of a scenario
    without ``gpu``, measured on the probe model at one GPU (class id -> bytes).

    The card's workspaces (cuBLAS on sm90, estimate/step.py ``workspaces``) and CUDA context are constants in
    every phase; tests/plan/test_search.py checks that the shift is the same over the planner's settings.
    NVLS buffers exist only at 3-8 GPUs behind an NVSwitch, so the probe leaves them out and the screen
    under-counts such a class by them; the pick's check with the class's own estimate counts them.
    """
    probe = _probe()
    return {cls: probe[cls] - probe[""] for cls in set((classes or gpu_classes()).values())}


def _probe_scenario() -> Scenario:
    return Scenario(params=100_000_000)


def _probe() -> dict[str, int]:
    """The probe model's device figure on every card of the catalog (``""``: no card named)."""
    from vramfit.models import generic_spec

    gpus = list_gpus()
    key = tuple((g.gpu_id, g.usable_bytes) for g in gpus)
    found = _PROBE.get(key)  # read once: the web server's worker threads share this cache
    if found is not None:
        return found
    spec = generic_spec(100_000_000)
    found = {"": estimate_spec(_probe_scenario(), spec, "probe").peak.device_bytes}
    for g in gpus:
        sc = dataclasses.replace(_probe_scenario(), gpu=g.gpu_id)
        found[g.gpu_id] = estimate_spec(sc, spec, "probe", card=g).peak.device_bytes
    _PROBE.clear()
    _PROBE[key] = found
    return found
