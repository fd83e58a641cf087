"""``sweep(scenario, key, values)``: the estimate for each value of one scenario key.

``parse_vary`` reads ``key=a..b`` (doubling from a to b, b included), ``key=a..b:step`` (a, a+step,
... up to b), ``key=a,b,c`` and, for a finite choice, ``key=*`` (every value). A value the
scenario rejects is a row with its error, never an abort.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vramfit.calibration import Calibration
from vramfit.errors import ScenarioError, VramfitError
from vramfit.estimate.card_facts import per_card
from vramfit.estimate.result import EstimateResult
from vramfit.gpus import get_gpu
from vramfit.limits import MAX_SWEEP_VALUES
from vramfit.plan.evaluate import Evaluator
from vramfit.plan.inputs import fraction
from vramfit.plan.verdict import SAFETY_MARGIN, card_fit, default_cards, limit_bytes
from vramfit.safe_input import shown, to_float
from vramfit.scenario import (
    BOOL_KEYS,
    CHOICE_KEYS,
    FIELD,
    INT_LIMITS,
    SCENARIO_KEYS,
    Scenario,
    parse_scenario,
)

MAX_VALUES = MAX_SWEEP_VALUES  # vramfit.limits
#: Keys whose values a range (``a..b``) can produce.
RANGE_KEYS: tuple[str, ...] = (*INT_LIMITS, "lora_alpha", "params")


#: Whole-number keys measured in tokens (seq_len, completion_len): their ``k`` is 1,024, as context lengths are written.
TOKEN_KEYS: tuple[str, ...] = tuple(k for k in INT_LIMITS if FIELD[k].unit == "tokens")


def _number(key: str, text: str, least: int | None = None) -> int:
    """A whole number of ``--vary``, at least the key's own minimum (0 for eval_batch_size, images_per_sample, ...) or
    ``least``; ``k``/``K`` is 1,024 for a token length (32k = 32,768 tokens, as context lengths are written, and as
    ``--seq-len 4k`` reads), 1,000 for a count (``grad_accum=1k`` is 1,000, as ``plan``'s counts)."""
    t = text.strip().lower().replace("_", "")
    mult = 1
    if t.endswith("k"):
        mult, t = (1024 if key in TOKEN_KEYS else 1000), t[:-1]
    try:
        value = to_float("vary", t) * mult  # NaN, inf, 1e400 and 100-digit strings are refused here
    except ScenarioError:
        raise ScenarioError("vary", f"{key}: {shown(text)} is not a number (a finite one is needed)") from None
    lo = least if least is not None else min(1, INT_LIMITS.get(key, (1, 0))[0])
    if value != int(value) or value < lo:
        what = "a positive whole number" if lo == 1 else f"a whole number >= {lo}"
        raise ScenarioError("vary", f"{key}: {shown(text)} must be {what}")
    return int(value)


def parse_vary(text: str) -> tuple[str, list[Any]]:
    """``"seq_len=512..32768"`` -> ``("seq_len", [512, 1024, ..., 32768])``."""
    if not isinstance(text, str) or "=" not in text:
        raise ScenarioError("vary", f"must look like key=a..b, key=a..b:step or key=a,b,c, got {shown(text)}")
    key, _, spec = text.partition("=")
    key = key.strip().replace("-", "_")
    spec = spec.strip()
    if key not in SCENARIO_KEYS:
        raise ScenarioError("vary", f"unknown scenario key {shown(key)}", SCENARIO_KEYS)
    if not spec:
        raise ScenarioError("vary", f"{key}: no values after '='")
    if spec == "*":
        if key in BOOL_KEYS:
            return key, [False, True]
        if key not in CHOICE_KEYS:
            raise ScenarioError("vary", f"{key}: '*' (every value) works for finite choices and switches only",
                                [*CHOICE_KEYS, *BOOL_KEYS])
        return key, CHOICE_KEYS[key].values()
    if ".." in spec:
        if key not in RANGE_KEYS or key == "params":
            raise ScenarioError("vary", f"{key}: a range a..b needs a whole-number key", [k for k in RANGE_KEYS if k != "params"])
        lo_t, _, rest = spec.partition("..")
        hi_t, _, step_t = rest.partition(":")
        lo, hi = _number(key, lo_t), _number(key, hi_t)
        if hi < lo:
            raise ScenarioError("vary", f"{key}: range end {hi} is below its start {lo}")
        if step_t:
            step = _number(key, step_t, least=1)
            if (hi - lo) // step + 1 > MAX_VALUES:  # counted before the list is built
                raise ScenarioError("vary", f"{key}: {(hi - lo) // step + 1:,} values, at most {MAX_VALUES} "
                                    "(MAX_SWEEP_VALUES)")
            values = list(range(lo, hi + 1, step))
        else:
            values, v = [], lo
            while v < hi and len(values) <= MAX_VALUES:
                values.append(v)
                v = v * 2 or 1  # from 0: 0, 1, 2, 4, ...
            values.append(hi)
    else:
        if spec.count(",") >= MAX_VALUES:  # counted before the list is built
            raise ScenarioError("vary", f"{key}: {spec.count(',') + 1:,} values, at most {MAX_VALUES} (MAX_SWEEP_VALUES)")
        items = [v.strip() for v in spec.split(",")]
        if any(not v for v in items):
            raise ScenarioError("vary", f"{key}: empty value in {shown(spec)}")
        values = [_number(key, v) if key in INT_LIMITS else v for v in items]
    if len(values) > MAX_VALUES:
        raise ScenarioError("vary", f"{key}: {len(values)} values, at most {MAX_VALUES} (MAX_SWEEP_VALUES)")
    return key, values


@dataclass(frozen=True)
class SweepPoint:
    value: Any
    allocated_bytes: int | None = None
    reserved_bytes: int | None = None
    device_bytes: int | None = None
    phase: str | None = None
    components: dict[str, int] | None = None
    fits: dict[str, bool] | None = None  # card id -> the one verdict (vramfit.plan.verdict)
    error: str | None = None
    required_bytes: int | None = None  # the figure the verdict holds to each card's limit (Peak.required_bytes)
    accuracy: dict[str, Any] | None = None  # the measured cases nearest this point's path (vramfit.estimate.accuracy)
    #: card id -> bytes of paged optimizer state that page out to host RAM for the point to fit there (cards it fits
    #: only that way; plan/verdict.py result_paging, the "fits, with paging" of estimate, fit and plan)
    paging: dict[str, int] | None = None

    def to_dict(self) -> dict[str, Any]:
        if self.error is not None:
            return {"value": self.value, "error": self.error}
        return {
            "value": self.value,
            "peak": {"allocated_bytes": self.allocated_bytes, "reserved_bytes": self.reserved_bytes,
                     "device_bytes": self.device_bytes, "required_bytes": self.required_bytes, "phase": self.phase},
            "components": dict(self.components or {}),
            "fits": dict(self.fits or {}),
            "paging": dict(self.paging or {}),
            "accuracy": self.accuracy,
        }


@dataclass(frozen=True)
class SweepResult:
    scenario: dict[str, Any]
    key: str
    values: tuple[Any, ...]
    points: tuple[SweepPoint, ...]
    cards: tuple[dict[str, Any], ...]  # {gpu_id, name, usable_bytes, limit_bytes}: the lines a chart draws
    safety_margin: float = SAFETY_MARGIN

    def to_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "key": self.key, "values": list(self.values),
                "points": [p.to_dict() for p in self.points], "cards": [dict(c) for c in self.cards],
                "safety_margin": self.safety_margin}


def sweep(scenario: Scenario | dict, key: str, values: list[Any], *, cards: list[str] | None = None,
          safety_margin: float = SAFETY_MARGIN, calibration: Calibration | None = None) -> SweepResult:
    """Estimate ``scenario`` with ``key`` set to each of ``values``; ``cards`` are the capacity lines."""
    sc = parse_scenario(scenario)
    safety_margin = fraction("safety_margin", safety_margin, lo_open=False)
    key = key.strip().replace("-", "_") if isinstance(key, str) else key
    if key not in SCENARIO_KEYS:
        raise ScenarioError("vary", f"unknown scenario key {shown(key)}", SCENARIO_KEYS)
    if key == "params" and sc.model:  # the model was dropped for generic decoders without a word
        raise ScenarioError("vary", f"params: each value is a generic Llama-style decoder of that size, not a size of "
                            f"the scenario's model {shown(sc.model)}; sweep sizes with params instead of model, or "
                            "vary model over ids")
    if not isinstance(values, (list, tuple)) or not values:
        raise ScenarioError("vary", "needs at least one value")
    if len(values) > MAX_VALUES:
        raise ScenarioError("vary", f"{len(values)} values, at most {MAX_VALUES}")
    gpus = [get_gpu(c) for c in cards] if cards else default_cards(sc.gpu)
    if key == "gpu" and not cards:  # each swept card is a capacity line too (its point's own verdict)
        gpus = _with_swept_cards(gpus, values)
    ev = Evaluator(sc, calibration) if key not in ("model", "params") else None
    points = []
    def run(**changes: Any) -> EstimateResult:
        if ev is not None:
            return ev.estimate(**changes)
        from vramfit.estimate import estimate

        return estimate(sc.replace(**changes), calibration=calibration)  # the model itself changes

    for v in values:
        try:
            r = run(**{key: v})
            on = per_card(r, lambda g, v=v: run(**{key: v, "gpu": g.gpu_id}), calibration)  # each card its own figure
            infos = [card_fit(on(g), g, safety_margin) for g in gpus]  # estimate's card verdicts, refusal included
            verdicts = {f.gpu_id: f.fits for f in infos}
            paging = {f.gpu_id: f.paging_bytes for f in infos if f.fits and f.paging_bytes}
        except VramfitError as exc:
            points.append(SweepPoint(v, error=str(exc)))
            continue
        d = r.peak.device_bytes
        points.append(SweepPoint(
            v, r.peak.allocated_bytes, r.peak.reserved_bytes, d, r.peak.phase,
            {c.name: c.bytes for c in r.components}, verdicts, required_bytes=r.peak.required_bytes, accuracy=r.accuracy,
            paging=paging,
        ))
    return SweepResult(sc.to_dict(), key, tuple(values), tuple(points),
                       tuple({"gpu_id": g.gpu_id, "name": g.name, "usable_bytes": g.usable_bytes,
                              "limit_bytes": limit_bytes(g, safety_margin)} for g in gpus), safety_margin)


def _with_swept_cards(gpus: list, values: list[Any]) -> list:
    """``gpus`` with every card a ``gpu`` sweep names that the catalog knows (an unknown one is its point's error)."""
    out = {g.gpu_id: g for g in gpus}
    for v in values:
        try:
            g = get_gpu(v) if isinstance(v, str) else None
        except VramfitError:
            continue
        if g is None:
            continue
        out.setdefault(g.gpu_id, g)
    return list(out.values())
