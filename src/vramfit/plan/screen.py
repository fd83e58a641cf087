"""Whether a (setting, micro-batch) fits a card, with as few estimates as the order of memory allows.

The plan search asks this thousands of times per plan (43 cards x 1-8 GPUs x up to 60 settings x up
to 7 micro-batches); each estimate costs about 0.3 ms. Estimates are shared by every card (the figure
of a scenario without ``gpu``, memoised in :class:`Figures`), and most answers follow from figures
already known, by three orders of the estimator's memory (each checked over the planner's settings
by tests/plan/test_search.py, as is the search's result against trying every pair):

- a micro-batch uses no less device or host memory than a smaller one while gradients are held
  across accumulation steps (grad_accum > 1); the one-step case (micro-batch = per-GPU batch)
  holds none and is compared with nothing else;
- with the same sharding and offload, a setting that saves more in every way (checkpointing
  none < selective < full < offload, fused loss, 8-bit optimizer state) uses no more device memory;
- and no more host memory, unless only it offloads activations (checkpointing ``offload``);
- a pipeline run with 1F1B uses no more memory than its interleaved twin (same degrees, ``+vpp2``): the
  interleaved ranks hold as many layers or more and more micro-batches in flight (:mod:`vramfit.plan.layouts`).
"""

from __future__ import annotations

from typing import NamedTuple

from vramfit.plan import layouts
from vramfit.plan.evaluate import Evaluator

#: what an interleaved pipeline adds to its 1F1B twin's sharding name (layouts.name)
INTERLEAVED = f"{layouts.SEP}vpp{layouts.VIRTUAL_STAGES}"
# selective-op (torchtitan) keeps a subset of what selective keeps, more than full
CKPT_RANK = {"none": 0, "selective": 1, "selective-op": 1.5, "full": 2, "offload": 3}
# what an optimizer keeps on the card: paged state may all page out (Fig.device excludes it), 8-bit keeps a
# quarter of AdamW's (other optimizers rank as AdamW: only the same one is ordered against them)
OPTIMIZER_RANK = {"adamw-8bit": 1, "paged-adamw": 2, "paged-adamw-8bit": 2}


class Fig(NamedTuple):
    device: int  # what must be on the card: the required peak less paged optimizer state (verdict.paging_bytes)
    host: int


def _sharding_no_more(a, b) -> bool:
    """Same offload, and the same sharding name or ``a`` the 1F1B twin of interleaved ``b``."""
    return a.offload == b.offload and (a.parallelism == b.parallelism or b.parallelism.replace(INTERLEAVED, "") == a.parallelism)


def saves_more(a, b) -> bool:
    """Whether setting ``a`` saves at least as much device memory as ``b`` in every way (same sharding/offload,
    or ``a`` the 1F1B twin of an interleaved ``b``)."""
    return (_sharding_no_more(a, b) and CKPT_RANK[a.gradient_checkpointing] >= CKPT_RANK[b.gradient_checkpointing]
            and (a.loss == "fused" or a.loss == b.loss) and (a.optimizer == b.optimizer or _opt_rank(a) > _opt_rank(b)))


def _opt_rank(c) -> int:
    return OPTIMIZER_RANK.get(c.optimizer, 0)


def host_no_more(a, b) -> bool:
    """Given ``saves_more(a, b)``: whether ``a`` also uses no more host memory than ``b``."""
    return a.gradient_checkpointing != "offload" or b.gradient_checkpointing == "offload"


class Figures:
    """Device and host bytes per (setting, micro-batch, estimator class), each estimated once."""

    def __init__(self, ev: Evaluator, per_gpu):
        self.ev, self.per_gpu = ev, per_gpu
        self.known: dict[tuple, Fig | None] = {}
        self._order: dict[tuple, tuple[list, list]] = {}  # per setting (it names its GPU count)

    def get(self, c, mb: int, cls: str | None) -> Fig | None:
        """The figure (None: the scenario is invalid), estimating it if unknown."""
        key = (c, mb, cls)
        if key not in self.known:
            r = self.ev.try_fit(**c.keys(mb, self.per_gpu(c.num_gpus) // mb), gpu=cls)
            # verdict.fits(r, limit) <=> required peak - paged optimizer state <= limit (the state may page out)
            self.known[key] = None if isinstance(r, Exception) else Fig(r.required_bytes - r.paged_bytes, r.host_bytes)
        return self.known[key]

    def order(self, c, every: list) -> tuple[list, list]:
        """(settings of ``every`` saving at least as much as ``c``, those saving at most as much), each with
        whether the host memory follows the same order. ``every``: all settings tried on the GPU count, also
        those a card's stack lacks (their figures still bound the others')."""
        hit = self._order.get(c)
        if hit is None:
            lighter = [(w, host_no_more(w, c)) for w in every if w != c and saves_more(w, c)]
            heavier = [(w, host_no_more(c, w)) for w in every if w != c and saves_more(c, w)]
            hit = self._order[c] = ([(c, True)] + lighter, [(c, True)] + heavier)
        return hit


class Screen:
    """Fit answers for one card (limits) and one GPU count, inferred where the orders allow."""

    def __init__(self, figs: Figures, every: list, top: int, held: tuple[int, ...], limit: int,
                 host_limit: int | None, cls: str | None):
        self.figs, self.every, self.top, self.held = figs, every, top, held
        self.limit, self.host_limit, self.cls = limit, host_limit, cls

    def _fits(self, f: Fig) -> bool:
        return f.device <= self.limit and (self.host_limit is None or f.host <= self.host_limit)

    def ok(self, c, mb: int) -> bool:
        known = self.figs.known
        f = known.get((c, mb, self.cls), False)
        if f is not False:
            return f is not None and self._fits(f)
        lighter, heavier = self.figs.order(c, self.every)
        below = (mb,) if mb == self.top else tuple(m for m in self.held if m <= mb)
        above = (mb,) if mb == self.top else tuple(m for m in self.held if m >= mb)
        for w, host_too in lighter:
            for m in below:
                f = known.get((w, m, self.cls))
                if f and (f.device > self.limit or (host_too and self.host_limit is not None and f.host > self.host_limit)):
                    return False
        for w, host_too in heavier:
            if host_too or self.host_limit is None:
                for m in above:
                    f = known.get((w, m, self.cls))
                    if f and self._fits(f):
                        return True
        f = self.figs.get(c, mb, self.cls)
        return f is not None and self._fits(f)
