"""``fit(scenario, gpu_id)``: the largest micro-batch and the longest sequence that fit one card,
and a micro-batch x sequence-length grid of the per-GPU peak, marking what fits.

Found by doubling then bisection on the estimator (memory grows with both), with the scenario's
other keys unchanged and ``gpu`` set to the card.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vramfit.calibration import Calibration
from vramfit.errors import ScenarioError
from vramfit.gpus import get_gpu
from vramfit.models.context import trained_context
from vramfit.plan.evaluate import Evaluator
from vramfit.plan.inputs import fraction
from vramfit.plan.verdict import SAFETY_MARGIN, card_fit, card_refusal, figures_fit, fits, limit_bytes
from vramfit.scenario import MAX_BATCH, MAX_SEQ_LEN, Scenario, parse_scenario
from vramfit.stage_keys import BATCH_RULE_STAGES, micro_batch_step, min_micro_batch, min_seq_len, seq_len_step

GRID_BATCHES: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
GRID_SEQ_LENS: tuple[int, ...] = (512, 1024, 2048, 4096, 8192, 16384, 32768)


@dataclass(frozen=True)
class GridCell:
    micro_batch_size: int
    seq_len: int
    device_bytes: int | None
    fits: bool
    error: str | None = None
    # the verdict's figure (Peak.required_bytes: the device peak less the cache PyTorch releases before an OOM)
    required_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class FitReport:
    gpu_id: str
    gpu_name: str
    usable_bytes: int
    limit_bytes: int
    safety_margin: float
    scenario: dict[str, Any]
    device_bytes: int  # the scenario as given
    fits: bool  # the one definition (vramfit.plan.verdict): within limit_bytes, paging allowed
    paging_bytes: int  # paged optimizer state in host RAM for the scenario to fit (0: none)
    verdict: str  # "fits" | "fits, with paging of N GiB optimizer state (slower)" | "does not fit"
    max_micro_batch: int | None  # at the scenario's seq_len; None if micro-batch 1 does not fit
    max_micro_batch_device_bytes: int | None
    max_seq_len: int | None  # at the scenario's micro-batch
    max_seq_len_device_bytes: int | None
    max_position_embeddings: int  # the model's trained context (0 if unknown or generic: models/context.py)
    batches: tuple[int, ...]
    seq_lens: tuple[int, ...]
    grid: tuple[tuple[GridCell, ...], ...]  # [batch][seq_len]
    # the verdict's figures (Peak.required_bytes, vramfit.plan.verdict): what is held to limit_bytes, so a report
    # that states a size next to "fits" states these (the device figures above can exceed the limit and still fit)
    required_bytes: int = 0
    max_micro_batch_required_bytes: int | None = None
    max_seq_len_required_bytes: int | None = None
    # the seq_len of the largest micro-batch: the scenario's, or with a padding-free dataset that micro-batch's own peak row
    max_micro_batch_seq_len: int | None = None
    # how far to trust the scenario's figure: the measured cases nearest its path (vramfit.estimate.accuracy)
    accuracy: dict[str, Any] | None = None
    # the accumulation at the largest micro-batch: the scenario's, which the search keeps (GRPO: typed without
    # --grad-accum, that micro-batch would take the least that holds whole groups of completions, stage_keys)
    max_micro_batch_grad_accum: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["batches"] = list(self.batches)
        out["seq_lens"] = list(self.seq_lens)
        out["grid"] = [[c.to_dict() for c in row] for row in self.grid]
        return out


def _largest(ok, start: int, hi: int, lo: int = 1) -> int | None:
    """Largest x in [lo, hi] with ok(x), assuming ok is true up to some point then false; searched from ``start``
    (the scenario's own value) where it holds: FSDP's cached wrap residue makes the figure fall a little as the
    step grows (estimate/wrap_step.py), so a scenario that fits could fail at x = 1 and be answered "none"."""
    if lo <= start <= hi and ok(start):
        lo = start
    elif not ok(lo):
        return None
    x = max(lo, start)
    while x <= hi and ok(x):
        lo, x = x, x * 2
    top = min(x, hi + 1)  # first known failure (or past hi)
    if lo == hi or top == lo + 1:
        return lo
    return bisect_largest(lo, top - 1, ok)


def _largest_seq_len(base: Scenario, ok) -> int | None:
    """The longest valid ``seq_len`` with ``ok``: a generating stage's holds its completion (GRPO: > completion_len),
    and context parallelism takes only multiples of 2 x context_parallel (stage_keys.seq_len_step)."""
    step = seq_len_step(base)
    lo = -(-min_seq_len(base) // step)
    k = _largest(lambda k: ok(k * step), base.seq_len // step, MAX_SEQ_LEN // step, lo=lo)
    return k and k * step


def bisect_largest(lo: int, hi: int, ok) -> int:
    """Largest x in [lo, hi] with ok(x), given ok(lo) and ok monotone (true, then false)."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def fit(
    scenario: Scenario | dict,
    gpu_id: str,
    *,
    safety_margin: float = SAFETY_MARGIN,
    batches: tuple[int, ...] | None = None,
    seq_lens: tuple[int, ...] | None = None,
    calibration: Calibration | None = None,
    dataset: Any | None = None,
    eval_follows_micro: bool = False,
) -> FitReport:
    """What fits one ``gpu_id`` card per GPU, under ``safety_margin`` of its usable memory; with ``dataset`` (a
    :class:`vramfit.dataset.DatasetReport`) each micro-batch size at its own peak row (padding-free rows grow)."""
    sc = parse_scenario(scenario)
    g = get_gpu(gpu_id)
    margin = fraction("safety_margin", safety_margin, lo_open=False)
    at = dataset.seq_len_at if dataset is not None and dataset.varies_with_micro_batch else None
    ev = Evaluator(sc.replace(gpu=g.gpu_id), calibration, at, eval_follows_micro)
    limit = limit_bytes(g, margin)

    def peak(counter: str, **k: Any) -> int | None:
        r = ev.try_estimate(**k)
        return None if isinstance(r, ScenarioError) else getattr(r.peak, counter)

    refused = card_refusal(g, ev.base)  # a card the run cannot start on: nothing fits, as estimate, sweep and plan say

    def ok(**k: Any) -> bool:
        f = ev.try_fit(**k)  # the fit test's figures only (estimate.fit_figures): the searches' many probes
        return refused is None and not isinstance(f, ScenarioError) and figures_fit(f, limit)

    base = ev.base
    step = micro_batch_step(base)  # GRPO accepts only multiples of this micro-batch (stage_keys)
    # GRPO: the micro-batches tried keep the scenario's accumulation (said with the answer). Derived again per
    # micro-batch, the accumulation would jump (8 at 43, 2 at 44 on one GPU) and with it the generation batch and its
    # KV cache, so memory would not grow with the micro-batch and no search could find the largest that fits
    hold = {"grad_accum": base.grad_accum} if base.stage in BATCH_RULE_STAGES else {}
    # a dataset's micro-batch holds at most its rows (padding-free rows of a few tokens went to 31,026 on 15 rows)
    most = min(MAX_BATCH, dataset.train_rows) if dataset is not None and dataset.train_rows else MAX_BATCH
    mb = _largest(lambda k: ok(micro_batch_size=k * step, **hold), base.micro_batch_size // step, most // step,
                  lo=-(-min_micro_batch(base) // step))
    mb = mb and mb * step
    seq = _largest_seq_len(base, lambda s: ok(seq_len=s))
    bs = tuple(batches or GRID_BATCHES)
    ss = tuple(seq_lens or GRID_SEQ_LENS)
    for key, values in (("micro_batch_size", bs), ("seq_len", ss)):
        if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
            raise ScenarioError(key, f"grid values must be positive integers, got {list(values)!r}")
    grid = []
    for b in bs:
        row = []
        for s in ss:
            r = ev.try_estimate(micro_batch_size=b, seq_len=s, **hold)
            if isinstance(r, ScenarioError):
                row.append(GridCell(b, s, None, False, str(r)))
            else:
                row.append(GridCell(b, s, r.peak.device_bytes, fits(r, limit) and refused is None,
                                    required_bytes=r.peak.required_bytes))
        grid.append(tuple(row))
    own = ev.estimate()
    info = card_fit(own, g, margin)  # the card verdict estimate states, refusal included
    at_mb, at_seq = ({"micro_batch_size": mb, **hold} if mb else None), ({"seq_len": seq} if seq else None)
    return FitReport(
        gpu_id=g.gpu_id, gpu_name=g.name, usable_bytes=g.usable_bytes, limit_bytes=limit, safety_margin=margin,
        scenario=base.to_dict(), device_bytes=own.peak.device_bytes, fits=info.fits, paging_bytes=info.paging_bytes,
        verdict=info.verdict,
        max_micro_batch_grad_accum=at_mb and ev.scenario(**at_mb).grad_accum,
        max_micro_batch=mb, max_micro_batch_device_bytes=at_mb and peak("device_bytes", **at_mb),
        max_seq_len=seq, max_seq_len_device_bytes=at_seq and peak("device_bytes", **at_seq),
        max_position_embeddings=trained_context(ev.spec, ev.origin), batches=bs, seq_lens=ss, grid=tuple(grid),
        required_bytes=own.peak.required_bytes,
        max_micro_batch_required_bytes=at_mb and peak("required_bytes", **at_mb),
        max_seq_len_required_bytes=at_seq and peak("required_bytes", **at_seq),
        max_micro_batch_seq_len=at_mb and ev.scenario(**at_mb).seq_len, accuracy=own.accuracy,
    )


COUNTERS = ("device", "reserved", "allocated")


def max_seq_len_within(scenario: Scenario | dict, budget_bytes: int, counter: str = "device") -> int | None:
    """The longest ``seq_len`` whose estimate fits ``budget_bytes`` per GPU (fit's own search, with a
    budget instead of a catalog card); ``None`` when one token does not fit. ``counter``: the figure held
    to the budget, ``device`` (fit's own rule, paging allowed) or the PyTorch counter ``reserved`` /
    ``allocated`` (what a publication that reports ``torch.cuda.max_memory_reserved()`` compared)."""
    if counter not in COUNTERS:
        raise ScenarioError("counter", f"unknown memory counter {counter!r}", list(COUNTERS))
    ev = Evaluator(parse_scenario(scenario))

    def ok(s: int) -> bool:
        if counter == "device":  # fit's own rule, on the fit test's figures (estimate.fit_figures)
            f = ev.try_fit(seq_len=s)
            return not isinstance(f, ScenarioError) and figures_fit(f, budget_bytes)
        r = ev.try_estimate(seq_len=s)
        return not isinstance(r, ScenarioError) and getattr(r.peak, f"{counter}_bytes") <= budget_bytes

    return _largest_seq_len(ev.base, ok)
