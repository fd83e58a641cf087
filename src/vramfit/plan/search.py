"""The plan search: for every card and count (one node), the fastest settings that fit.

For a card and a GPU count the search varies the micro-batch (a divisor of the per-GPU batch, the
rest reached by gradient accumulation), activation checkpointing, sharding/offload, and the
memory savers that cost no speed (fused loss, 8-bit AdamW for full fine-tuning). It keeps the
setting with the shortest step time (``throughput``); near-ties go to the fewer compromises, then
to the larger micro-batch. Memory is screened once per setting with the estimator and the chosen
setting is re-estimated for the card's estimator class (see :func:`evaluate.gpu_classes`).
"""

from __future__ import annotations

import dataclasses
import math
from functools import lru_cache
from typing import Any, NamedTuple

from vramfit.gpus import GPU
from vramfit.plan.evaluate import Evaluator, gpu_classes
from vramfit.plan.kernels import card_speed
from vramfit.plan.throughput import ModelFlops, Speed, Work, step_time, step_work
from vramfit.plan.verdict import fits
from vramfit.scenario import Checkpointing, Loss, Method, Offload, Optimizer, Parallelism, Scenario

#: Step times within this fraction count as equal: the speed model is not finer than that (MFU alone
#: varies by more), so a plain setting beats a slightly faster one with more compromises.
TIE = 0.05
_FSDP = (Parallelism.FSDP, Parallelism.FSDP_GRAD_OP)


class Config(NamedTuple):
    """Settings the search varies, besides the card and the micro-batch (a tuple: hashed often)."""

    num_gpus: int
    parallelism: str
    offload: str
    gradient_checkpointing: str
    optimizer: str
    loss: str

    def keys(self, micro_batch: int, grad_accum: int) -> dict[str, Any]:
        return {
            "num_gpus": self.num_gpus, "parallelism": self.parallelism, "offload": self.offload,
            "gradient_checkpointing": self.gradient_checkpointing, "optimizer": self.optimizer,
            "loss": self.loss, "micro_batch_size": micro_batch, "grad_accum": grad_accum,
        }

    def compromises(self, base: Scenario) -> float:
        """How far from a plain run (tie-break only): offload, sharding, changed optimizer or loss."""
        s = {"none": 0.0, "optimizer": 2.0, "optimizer+params": 3.0}[self.offload]
        s += {"none": 0.0, "selective": 0.1, "full": 0.2, "offload": 0.3}[self.gradient_checkpointing]
        s += 0.2 if self.parallelism in ("zero3", "fsdp") else 0.1 if self.parallelism in ("zero2", "fsdp-grad-op") else 0
        s += 0.5 if self.optimizer != base.optimizer.value else 0.0
        s += 0.2 if self.loss != base.loss.value else 0.0
        return s


def configs_for(n: int, base: Scenario) -> list[Config]:
    """Every setting tried on ``n`` GPUs (ZeRO names, or FSDP names if the scenario uses FSDP)."""
    full = base.method is Method.FULL
    fsdp = base.parallelism in _FSDP
    shard2, shard3 = ("fsdp-grad-op", "fsdp") if fsdp else ("zero2", "zero3")
    strategies = [("none", "none")] if n == 1 else [("ddp", "none")]
    if n > 1 and full:
        strategies.append((shard2, "none"))
    if n > 1:
        strategies.append((shard3, "none"))
    if full:
        strategies.append((shard2 if n == 1 else shard3, "optimizer"))
    strategies.append((shard3, "optimizer+params"))
    ckpts = ["none", "full", "offload"]
    if base.gradient_checkpointing is Checkpointing.SELECTIVE:
        ckpts.insert(1, "selective")
    opts = [base.optimizer.value]
    if full and base.optimizer is Optimizer.ADAMW:
        opts.append(Optimizer.ADAMW_8BIT.value)
    losses = [base.loss.value] + ([Loss.FUSED.value] if base.loss is not Loss.FUSED else [])
    return [Config(n, p, o, c, opt, loss) for p, o in strategies for c in ckpts for opt in opts for loss in losses]


@lru_cache(maxsize=256)
def divisors(n: int) -> tuple[int, ...]:
    """Divisors of ``n`` in increasing order (the micro-batches that reach a per-GPU batch exactly)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return tuple(small + [n // d for d in reversed(small) if d * d != n])


def peer_gbs(gpu: GPU, n: int) -> float:
    """GPU-to-GPU bandwidth per direction for ``n`` cards: a 2-way NVLink bridge links pairs only."""
    text = gpu.interconnect.lower()
    if n > 2 and gpu.interconnect_gbs and ("bridge" in text or "pairs 2" in text) and "4-way" not in text:
        return gpu.host_link_gbs
    return gpu.peer_gbs


class Search:
    """Memoised screening of (setting, micro-batch) and the choice per (card, count)."""

    def __init__(self, ev: Evaluator, effective_batch: int, mf: ModelFlops, trainable: int, mfu: float | None):
        """``mfu`` None: time steps with the mechanism model (:func:`throughput.mechanism_step_time`)."""
        self.ev, self.eff, self.mf, self.trainable, self.mfu = ev, effective_batch, mf, trainable, mfu
        self._work: dict[tuple[Config, int], Work] = {}
        self._dicts: dict[int, tuple[Scenario, dict]] = {}
        self._comp: dict[Config, float] = {}
        self._completion: dict[tuple, Config] = {}
        self._spt: dict[tuple[Config, int, str], float] = {}
        self._links: dict[tuple[str, int], tuple] = {}  # (peer GB/s, host GB/s, CardSpeed) for speed()
        self._configs: dict[int, list[Config]] = {}
        self.classes = gpu_classes()

    def scenario_dict(self, sc: Scenario) -> dict[str, Any]:
        """``sc.to_dict()``, once per scenario object (plans on many cards share one)."""
        key = id(sc)
        if key not in self._dicts:
            self._dicts[key] = (sc, sc.to_dict())
        return self._dicts[key][1]

    def per_gpu(self, n: int) -> int:
        return math.ceil(self.eff / n)

    def configs(self, n: int) -> list[Config]:
        if n not in self._configs:
            self._configs[n] = configs_for(n, self.ev.base)
            self._comp.update({c: c.compromises(self.ev.base) for c in self._configs[n]})
        return self._configs[n]

    def largest_mb(self, c: Config, limit: int, host_limit: int | None, banned: set) -> int | None:
        """Largest micro-batch of ``c`` that fits ``limit`` (screening figure).

        While gradients are held across accumulation steps, memory grows linearly with the
        micro-batch: what grows (activations, logits, block temporaries at the smallest micro-batch)
        gives the slope, the predicted largest micro-batch is checked, then lowered until it fits. The one-step case (micro-batch = per-GPU
        batch, no held gradients) is tried when every smaller one fits.
        """
        ds = divisors(self.per_gpu(c.num_gpus))

        def ok(mb: int) -> bool:
            return (c, mb) not in banned and self.fits(c, mb, limit, host_limit)

        if not ok(ds[0]):
            return None
        if len(ds) == 1:
            return ds[0]
        held = ds[:-1]
        i = 0
        if len(held) > 1:
            r1 = self.ev.try_estimate(**c.keys(held[0], self.per_gpu(c.num_gpus) // held[0]))
            # what grows with the micro-batch: saved activations, logits/loss, block temporaries
            slope = max(1, sum(r1.component(k) for k in ("activations", "logits_loss", "temporaries")) // held[0])
            m1 = r1.peak.device_bytes
            i = max(j for j, d in enumerate(held) if j == 0 or m1 + slope * (d - held[0]) <= limit)
            while i > 0 and not ok(held[i]):
                i -= 1
        if i == len(held) - 1 and ok(ds[-1]):
            return ds[-1]
        return held[i]

    def device(self, c: Config, mb: int) -> int:
        r = self.ev.try_estimate(**c.keys(mb, self.per_gpu(c.num_gpus) // mb))
        return r.peak.device_bytes if not isinstance(r, Exception) else 2**62

    def work(self, c: Config, mb: int) -> Work:
        key = (c, mb)
        if key not in self._work:
            # the speed model reads only these keys: set them without re-validating the scenario
            sc = dataclasses.replace(
                self.ev.base, num_gpus=c.num_gpus, parallelism=Parallelism(c.parallelism), offload=Offload(c.offload),
                gradient_checkpointing=Checkpointing(c.gradient_checkpointing), micro_batch_size=mb,
                grad_accum=self.per_gpu(c.num_gpus) // mb,
            )
            self._work[key] = step_work(sc, self.mf, self.trainable)
        return self._work[key]

    def speed(self, c: Config, mb: int, g: GPU) -> Speed | None:
        if not g.bf16_tflops:
            return None
        link = self._links.get((g.gpu_id, c.num_gpus))
        if link is None:
            peer = peer_gbs(g, c.num_gpus)
            link = self._links[(g.gpu_id, c.num_gpus)] = (peer, g.host_link_gbs, card_speed(g, peer))
        card = link[2] if self.mfu is None else None
        return step_time(
            self.work(c, mb), peak_tflops=g.bf16_tflops, mfu=self.mfu or 0.0, mem_bandwidth_gbs=g.mem_bandwidth_gbs,
            peer_gbs=link[0], host_gbs=link[1], card=card,
        )

    def _seconds_per_token(self, c: Config, mb: int, g: GPU) -> float:
        """Seconds per trained token (all GPUs): :func:`throughput.step_time` through :meth:`speed`, memoised."""
        key = (c, mb, g.gpu_id)
        t = self._spt.get(key)
        if t is None:
            s = self.speed(c, mb, g)
            if s is None:
                t = math.inf
            elif self.mfu is None:  # the mechanism model
                t = 1.0 / s.tokens_per_s
            else:  # the FLOPs-at-MFU model, as the inline formula this replaced computed it
                t = s.step_s / self.work(c, mb).tokens_per_step
            self._spt[key] = t
        return t

    def completion(self, c: Config, any_checkpointing: bool) -> Config:
        """``c`` with every speed-free memory saver (and, if asked, the most saving checkpointing)."""
        key = (c.num_gpus, c.parallelism, c.offload, None if any_checkpointing else c.gradient_checkpointing)
        hit = self._completion.get(key)
        if hit is None:
            same = [x for x in self.configs(c.num_gpus) if x.parallelism == c.parallelism and x.offload == c.offload
                    and (any_checkpointing or x.gradient_checkpointing == c.gradient_checkpointing)]
            hit = self._completion[key] = min(same, key=self._saving_rank)
        return hit

    def floor_fits(self, n: int, limit: int, host_limit: int | None) -> bool:
        """Whether the most memory-saving setting on ``n`` GPUs fits at micro-batch 1 (else none does)."""
        c = min(self.configs(n), key=lambda c: self._saving_rank(c))
        return self.fits(c, 1, limit, host_limit)

    @staticmethod
    def _saving_rank(c: Config) -> tuple:
        return (-{"none": 0, "optimizer": 1, "optimizer+params": 2}[c.offload],
                -{"none": 0, "selective": 1, "full": 2, "offload": 3}[c.gradient_checkpointing],
                c.loss != "fused", "8bit" not in c.optimizer)

    def fits(self, c: Config, mb: int, limit: int, host_limit: int | None, gpu_class: str | None = None) -> bool:
        r = self.ev.try_estimate(**c.keys(mb, self.per_gpu(c.num_gpus) // mb), gpu=gpu_class or None)
        if isinstance(r, Exception):
            return False
        return fits(r, limit) and (host_limit is None or r.host_bytes <= host_limit)

    def best(self, g: GPU, n: int, limit: int, host_limit: int | None = None) -> tuple[Config, int] | None:
        """The fastest (setting, micro-batch) for ``n`` x ``g`` that fits, re-estimated for the card.

        Branch and bound: settings in order of their time at the largest micro-batch (a lower bound:
        a smaller micro-batch is never faster); a setting that cannot beat the pick is skipped.
        """
        if not self.floor_fits(n, limit, host_limit):
            return None
        banned: set = set()
        top = self.per_gpu(n)
        ranked = sorted(self.configs(n), key=lambda c: (self._seconds_per_token(c, top, g), self._comp[c]))
        cls = self.classes.get(g.gpu_id, g.gpu_id)
        group_ok: dict[tuple, bool] = {}

        def possible(c: Config) -> bool:
            """False when even the most memory-saving variant of c's strategy (or checkpointing) fails."""
            for key in ((c.parallelism, c.offload), (c.parallelism, c.offload, c.gradient_checkpointing)):
                if key not in group_ok:
                    group_ok[key] = self.fits(self.completion(c, len(key) == 2), 1, limit, host_limit)
                if not group_ok[key]:
                    return False
            return True

        for _ in range(8):
            pick: tuple[float, float, int, Config] | None = None
            for c in ranked:
                optimistic = self._seconds_per_token(c, top, g)
                if pick and math.isfinite(pick[0]):
                    if optimistic > pick[0] * (1 + TIE):
                        break
                    if optimistic >= pick[0] * (1 - TIE) and self._comp[c] >= pick[1]:
                        continue
                if not possible(c):
                    continue
                mb = self.largest_mb(c, limit, host_limit, banned)
                if mb is None:
                    continue
                cand = (self._seconds_per_token(c, mb, g), self._comp[c], -mb, c)
                if pick is None or _better(cand, pick):
                    pick = cand
            if pick is None:
                return None
            c, mb = pick[3], -pick[2]
            if cls == self.classes.get("") or self.fits(c, mb, limit, host_limit, cls):
                return c, mb
            banned.add((c, mb))
        return None


def _better(a: tuple, b: tuple) -> bool:
    """Shorter time (beyond the tie band), else fewer compromises, else larger micro-batch."""
    ta, tb = a[0], b[0]
    if math.isfinite(ta) and math.isfinite(tb) and abs(ta - tb) > TIE * min(ta, tb):
        return ta < tb
    if math.isfinite(ta) != math.isfinite(tb):
        return math.isfinite(ta)
    return (a[1], a[2]) < (b[1], b[2])

