"""Memoised estimates of one model under many settings, and the fit test against a card.

The architecture is resolved once (``resolve_spec``) and every variant goes through
``estimate_spec``; a variant is named by the scenario keys it changes.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from vramfit.errors import ScenarioError
from vramfit.estimate import estimate_spec, resolve_spec
from vramfit.estimate.result import EstimateResult
from vramfit.gpus import GPU, get_gpu, list_gpus
from vramfit.plan.verdict import limit_bytes  # noqa: F401 - the one definition, re-exported for the planner
from vramfit.scenario import Scenario, parse_scenario

_PROBE: dict[tuple, dict[str, str]] = {}


class Evaluator:
    """Estimates of ``base`` with some keys changed, computed once each."""

    def __init__(self, base: Scenario | dict):
        self.base = parse_scenario(base)
        self._cards: dict[str, GPU] = {}
        card = self.card(self.base.gpu)
        if card is not None and card.gpu_id != self.base.gpu:  # an alias ("4090") becomes the catalog id
            self.base = dataclasses.replace(self.base, gpu=card.gpu_id)
        self.model_id, self.spec, self.origin, self.notes = resolve_spec(self.base)
        self._memo: dict[tuple, EstimateResult | ScenarioError] = {}
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
        key = self._key(changes)
        hit = self._scenarios.get(key)
        if hit is None:
            try:
                hit = self.base.replace(**changes)
            except ScenarioError as exc:
                hit = exc
            self._scenarios[key] = hit
        if isinstance(hit, ScenarioError):
            raise hit
        return hit

    def try_estimate(self, **changes: Any) -> EstimateResult | ScenarioError:
        """The estimate, or the ScenarioError that the changed scenario raises."""
        key = self._key(changes)
        hit = self._memo.get(key)
        if hit is None:
            try:
                sc = self.scenario(**changes)
                self.calls += 1
                hit = estimate_spec(sc, self.spec, self.model_id, self.origin, self.notes, card=self.card(sc.gpu))
            except ScenarioError as exc:
                hit = exc
            self._memo[key] = hit
        return hit

    def estimate(self, **changes: Any) -> EstimateResult:
        r = self.try_estimate(**changes)
        if isinstance(r, ScenarioError):
            raise r
        return r

    def device_bytes(self, **changes: Any) -> int:
        return self.estimate(**changes).peak.device_bytes


def gpu_classes() -> dict[str, str]:
    """Cards grouped by how the estimator treats them: gpu id -> the class's first gpu id.

    ``""`` is the class of a scenario without ``gpu``; cards in it get exactly that figure.

    The estimator may depend on the card (e.g. Hopper's larger cuBLAS workspace). A small generic
    model is estimated once per card; cards with equal results share a class, so the planner
    estimates one card per class and assumes the card only shifts the figure by a constant.
    """
    from vramfit.models import generic_spec

    gpus = list_gpus()
    key = tuple((g.gpu_id, g.usable_bytes) for g in gpus)
    if key in _PROBE:
        return _PROBE[key]
    spec = generic_spec(100_000_000)
    none = estimate_spec(Scenario(params=100_000_000), spec, "probe").peak.device_bytes
    seen: dict[int, str] = {none: ""}
    out: dict[str, str] = {"": ""}
    for g in gpus:
        sc = Scenario(params=100_000_000, gpu=g.gpu_id)
        dev = estimate_spec(sc, spec, "probe", card=g).peak.device_bytes
        out[g.gpu_id] = seen.setdefault(dev, g.gpu_id)
    _PROBE.clear()
    _PROBE[key] = out
    return out
