"""The plan search: for every card and count (one node), the fastest settings that fit.

For a card and a GPU count the search varies the micro-batch (a divisor of the per-GPU batch, the
rest reached by gradient accumulation), activation checkpointing, sharding/offload, and the
memory savers that cost no speed (fused loss, 8-bit AdamW for full fine-tuning). It keeps the
setting with the shortest step time (``throughput``); near-ties (within ``TIE`` of the shortest) go
to the fewer compromises, then to the larger micro-batch. Only settings the card's software stack
runs compete. The search gives what trying every pair would (:meth:`Search.choose`) from a few
hundred estimates shared by all cards (:mod:`screen`); the pick is checked with the card's estimator
class (see :func:`evaluate.gpu_classes`).
"""

from __future__ import annotations

import dataclasses
import math
from functools import lru_cache
from typing import Any, NamedTuple

from vramfit.choices import FSDP_FAMILY, Generation
from vramfit.estimate.framework import scenario_profile
from vramfit.estimate.stages import stage_loss_choice
from vramfit.gpus import GPU, GPUS_PER_NODE
from vramfit.nodes import network_for
from vramfit.plan import layouts
from vramfit.plan.evaluate import Evaluator, class_shifts, gpu_classes
from vramfit.plan.kernels import card_speed
from vramfit.plan.paged import PAGED_FOR, is_paged, paged_state, timing
from vramfit.plan.rental import needs
from vramfit.plan.screen import CKPT_RANK, OPTIMIZER_RANK, Figures, Screen
from vramfit.plan.throughput import MFU_DEFAULT, ModelFlops, Speed, Work, net_rate, step_time, step_work
from vramfit.plan.timing import calibrated, speed_factor
from vramfit.scenario import (
    Checkpointing,
    Loss,
    Method,
    Offload,
    Optimizer,
    Parallelism,
    PipelineSchedule,
    Scenario,
    ShardScope,
)

#: Step times within this fraction count as equal: the speed model is not finer than that (MFU alone
#: varies by more), so a plain setting beats a slightly faster one with more compromises.
TIE = 0.05
_FSDP = FSDP_FAMILY  # a run on FSDP (NO_SHARD included) is offered FSDP names, not ZeRO
#: Plan-only names of sharding inside a node across several nodes -> the engine's parallelism (with
#: shard_scope=node): FSDP HSDP, DeepSpeed ZeRO-3 with ZeRO++ hpZ.
HYBRID = {"hsdp": "fsdp", "zero3-hpz": "zero3"}


def node_keys(num_gpus: int, parallelism: str) -> dict[str, Any]:
    """The scenario keys of a plan's sharding name on ``num_gpus``: whole nodes of :data:`GPUS_PER_NODE`
    above one node; a layout's tensor, pipeline, context and expert degrees (``fsdp+tp8+pp2+vpp2+cp2+ep8``,
    :mod:`vramfit.plan.layouts`)."""
    d = layouts.parse(parallelism)
    return {"parallelism": HYBRID.get(d.parallelism, d.parallelism), "num_nodes": max(1, num_gpus // GPUS_PER_NODE),
            "shard_scope": "node" if d.parallelism in HYBRID else "all", "tensor_parallel": d.tp,
            "pipeline_parallel": d.pp, "context_parallel": d.cp, "pipeline_virtual_stages": d.vpp,
            "pipeline_schedule": "interleaved-1f1b" if d.vpp > 1 else "1f1b", "expert_parallel": d.ep}


class Config(NamedTuple):
    """Settings the search varies, besides the card and the micro-batch (a tuple: hashed often)."""

    num_gpus: int
    parallelism: str
    offload: str
    gradient_checkpointing: str
    optimizer: str
    loss: str

    def keys(self, micro_batch: int, grad_accum: int) -> dict[str, Any]:
        """``grad_accum`` per GPU's share of the batch; a layout's data-parallel rank runs the batch of its
        ``tp x pp x cp`` GPUs, as that many times the micro-batches (the same effective batch)."""
        nk = node_keys(self.num_gpus, self.parallelism)
        return {
            "num_gpus": self.num_gpus, **nk, "offload": self.offload,
            "gradient_checkpointing": self.gradient_checkpointing, "optimizer": self.optimizer,
            "loss": self.loss, "micro_batch_size": micro_batch,
            "grad_accum": grad_accum * _model_parallel(nk),
        }

    def compromises(self, base: Scenario) -> float:
        """How far from a plain run (tie-break only): offload, sharding, changed optimizer or loss."""
        s = {"none": 0.0, "optimizer": 2.0, "optimizer+params": 3.0}[self.offload]
        s += {"none": 0.0, "selective": 0.1, "selective-op": 0.15, "full": 0.2, "offload": 0.3}[
            self.gradient_checkpointing]
        s += 0.3 if layouts.parse(self.parallelism).parallelism in HYBRID else 0.0
        s += 0.3 * (self.parallelism.count(layouts.SEP))  # each model-parallel dimension: a harder run
        s += 0.2 if self.parallelism in ("zero3", "fsdp") else 0.1 if self.parallelism in ("zero2", "fsdp-grad-op") else 0
        s += 0.5 if self.optimizer != base.optimizer.value else 0.0
        s += 0.2 if self.loss != base.loss.value else 0.0
        return round(s, 6)  # 0.1 + 0.2 ranks equal to 0.3


def pinned_layout(base: Scenario) -> tuple[str, str] | None:
    """(parallelism, offload) a scenario's DeepSpeed config fixes: its ``zero_optimization.stage`` and offload sections
    must agree with the scenario's (``parse_scenario`` refuses anything else), so the planner searches the card, count,
    micro-batch and memory savers under that layout only. None without a config."""
    if base.deepspeed_config is None:
        return None
    return base.parallelism.value, base.offload.value


def shard_names(base: Scenario, profile) -> tuple[str, str]:
    """(gradient-sharding, full-sharding) parallelism names for ``base``: FSDP's for a run on FSDP or a framework whose
    recipes run no ZeRO (profile ``parallelisms``: torchtitan, torchtune, litgpt), else ZeRO's."""
    runs = {p.value for p in profile.parallelisms}
    fsdp = base.parallelism in _FSDP or bool(runs) and "zero3" not in runs
    return ("fsdp-grad-op", "fsdp") if fsdp else ("zero2", "zero3")


def tried_words(base: Scenario, n: int = 8) -> str:
    """What :func:`configs_for` tries at most for ``base`` on ``n`` GPUs, in the words of a card that got no plan:
    the framework's full-sharding engine (on one GPU only with offload), checkpointing where the user chooses it or
    the scripts run it at that count (profile ``checkpointing_by_devices``: litgpt's scripts checkpoint only under
    FSDP), and offload where its recipes offload (profile ``runs_offload``)."""
    profile = scenario_profile(base)
    full = shard_names(base, profile)[1]
    engine = "ZeRO-3" if full == "zero3" else "FSDP"
    sharded = _engine_runs(base, full)  # e.g. modules_to_save is refused under a sharding engine, offload with it
    counts = [1] if n == 1 else [1, n]  # the search tries every count up to n
    scripts = [profile.scripts_checkpointing(k) for k in counts]
    parts = ([engine] if sharded and (n > 1 or profile.runs_offload) else []) + (
        ["checkpointing"] if any(c is not Checkpointing.NONE for c in scripts) else []) + (
        ["offload"] if sharded and profile.runs_offload else [])
    if not parts:
        return f"at micro-batch 1 ({profile.name}'s scripts run no checkpointing or offload on one GPU)"
    said = parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"
    return f"even with {said} (at micro-batch 1)"


def _engine_runs(base: Scenario, name: str) -> bool:
    """Whether the framework's refusals (estimate/framework.py check_runs) let ``base`` run under the sharding engine
    ``name``, as the search's variants are checked (plan/evaluate.py)."""
    from vramfit.errors import ScenarioError
    from vramfit.estimate.framework import check_free_keys

    try:
        check_free_keys(base, {"parallelism": Parallelism(name)})
    except ScenarioError:
        return False
    return True


def one_gpu_only(base: Scenario) -> str | None:
    """Why ``base`` runs on one GPU only (profile ``quantized_on_one_device``: litgpt trains a quantized base on one
    device), with the checkpointing that one GPU gets; None where more GPUs may run it."""
    profile = scenario_profile(base)
    if not (profile.quantized_on_one_device and base.method is Method.QLORA):
        return None
    scripts = profile.scripts_checkpointing(1)
    ckpt = f", checkpointing {scripts.value}" if scripts is not None else ""
    return f"{profile.name} trains a quantized base on one GPU only{ckpt}"


def configs_for(n: int, base: Scenario, spec=None) -> list[Config]:
    """Every setting tried on ``n`` GPUs (ZeRO names, or FSDP names if the scenario uses FSDP); with
    ``spec``, torchtitan full fine-tuning also gets the tensor/pipeline layouts of :mod:`vramfit.plan.layouts`
    (FSDP over the remaining ranks, no offload; MoE models: EP degrees where the profile runs them)."""
    full = base.method is Method.FULL
    profile = scenario_profile(base)  # what the framework can be told to run (profile_fields.py runs_*, offload_*)
    runs = {p.value for p in profile.parallelisms}  # empty: every engine (profile_fields.py parallelisms)
    shard2, shard3 = shard_names(base, profile)
    strategies = [("none", "none")] if n == 1 else [("ddp", "none")] if not runs or "ddp" in runs else []
    if n > 1 and full and (not runs or shard2 in runs):
        strategies.append((shard2, "none"))
    if n > 1:
        strategies.append((shard3, "none"))
    if n > GPUS_PER_NODE and profile.runs_hybrid_shard:  # several nodes: shard inside the node, replicate across
        strategies.append(("hsdp" if shard3 == "fsdp" else "zero3-hpz", "none"))
    # FSDP's CPU offload moves the parameters with the state (torch FSDP1 CPUOffload(offload_params), FSDP2
    # CPUOffloadPolicy): optimizer-only offload is ZeRO's
    if full and not profile.offload_moves_params and profile.runs_offload and shard3 == "zero3":
        strategies.append((shard2 if n == 1 else shard3, "optimizer"))
    if profile.runs_offload:
        strategies.append((shard3, "optimizer+params"))
    if pinned := pinned_layout(base):  # the DeepSpeed config's stage and offload (estimate/deepspeed.scenario_keys)
        strategies = [pinned] + ([("zero3-hpz", pinned[1])] if n > GPUS_PER_NODE and pinned[0] == "zero3" else [])
    ckpts = ["none", "full"] + (["offload"] if profile.runs_activation_offload else [])  # profile_fields.py runs_*
    if base.gradient_checkpointing in (Checkpointing.SELECTIVE, Checkpointing.SELECTIVE_OP):
        ckpts.insert(1, base.gradient_checkpointing.value)
    if (scripts := profile.scripts_checkpointing(n)) is not None:  # the scripts' own, by device count
        ckpts = [scripts.value]
    opts = [base.optimizer.value]
    if full and base.optimizer is Optimizer.ADAMW and profile.runs_bnb_optimizers:
        opts.append(Optimizer.ADAMW_8BIT.value)
    if full and profile.runs_bnb_optimizers:
        opts += PAGED_FOR.get(base.optimizer, [])
    # the scenario's loss as its stage's trainer runs it, and the fused one where that trainer runs it
    # (estimate/stages stage_loss_choice: TRL 1.16.0's preference and RL trainers run their own log-prob code)
    runs = stage_loss_choice(base)
    fused = stage_loss_choice(dataclasses.replace(base, loss=Loss.FUSED)) is Loss.FUSED
    losses = [runs.value] + ([Loss.FUSED.value] if runs is not Loss.FUSED and profile.runs_fused_loss and fused else [])
    out = [Config(n, p, o, c, opt, loss) for p, o in strategies for c in ckpts for opt in _offload_opts(p, o, opts)
           for loss in losses]
    if spec is not None and n > 1 and layouts.searched(base):
        # torchtitan v0.3.0 offloads no activations (activation_checkpoint.py); FSDP/HSDP + EP: FSDP's savers
        for d in layouts.layouts_for(n, spec, base.seq_len, TIE, layouts.runs_expert_parallel(base)):
            k = None if layouts.plain_expert_parallel(d) else 1
            out += [Config(n, layouts.name(*d), "none", c, o, x) for c in ckpts if c != "offload" for o in opts[:k]
                    for x in losses[:k]]
    return out


def _offload_opts(parallelism: str, offload: str, opts: list[str]) -> list[str]:
    """The optimizers tried under one layout: paged state not with CPU offload (its optimizer runs on the host), and
    under ZeRO's offload only what steps there (estimate/ds_offload.py ``host_optimizer``: DeepSpeed's CPU Adam for
    all but Lion), named as it runs, as the export's DeepSpeed optimizer section writes it (plan/export.py)."""
    if offload == "none":
        return opts
    if parallelism.startswith("zero"):
        return list(dict.fromkeys(o if o == Optimizer.LION.value else Optimizer.ADAMW.value for o in opts))
    return [o for o in opts if "paged" not in o]


def _model_parallel(keys: dict[str, Any]) -> int:
    """GPUs that share one micro-batch (tensor x pipeline x context parallel) in :func:`node_keys`'s keys."""
    return keys["tensor_parallel"] * keys["pipeline_parallel"] * keys["context_parallel"]


@lru_cache(maxsize=256)
def divisors(n: int) -> tuple[int, ...]:
    """Divisors of ``n`` in increasing order (the micro-batches that reach a per-GPU batch exactly)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return tuple(small + [n // d for d in reversed(small) if d * d != n])


def bridge_size(gpu: GPU) -> int:
    """Cards one NVLink bridge joins (the catalog's interconnect text: "2-way", "pairs 2", "4-way"), 0 for a card
    without a bridge. A bridge is an add-on a rented set may lack; cards beyond it talk over PCIe."""
    text = gpu.interconnect.lower()
    if not gpu.interconnect_gbs or not ("bridge" in text or "pairs 2" in text):
        return 0
    return 4 if "4-way" in text else 2


def peer_gbs(gpu: GPU, n: int) -> float:
    """GPU-to-GPU bandwidth per direction for ``n`` cards: an NVLink bridge links its 2 (or 4) cards only."""
    if n > 2 and bridge_size(gpu) and n > bridge_size(gpu):
        return gpu.host_link_gbs
    return gpu.peer_gbs


class Search:
    """Memoised screening of (setting, micro-batch) and the choice per (card, count)."""

    def __init__(self, ev: Evaluator, effective_batch: int, mf: ModelFlops, trainable: int, mfu: float | None):
        """``mfu`` None: time steps with the mechanism model (:func:`throughput.mechanism_step_time`)."""
        self.ev, self.eff, self.mf, self.trainable, self.mfu = ev, effective_batch, mf, trainable, mfu
        self._work: dict[tuple[tuple, int], Work] = {}
        self._dicts: dict[int, tuple[Scenario, dict]] = {}
        self._comp: dict[Config, float] = {}
        self._layouts: dict[tuple, Layout] = {}
        self._spt: dict[tuple[tuple, int, str], float] = {}
        self._links: dict[tuple[str, int], tuple] = {}  # (peer GB/s, host GB/s, CardSpeed, net) for speed()
        self._configs: dict[int, list[Config]] = {}
        self.figs = Figures(ev, self.per_gpu)
        self.classes = gpu_classes(ev.base)
        self.shifts = class_shifts(self.classes)
        self.server_of = None  # GRPO with a vLLM server: card -> server GPUs beside training (vllm_split)
        self.raw_bytes: int | None = None  # a dataset file's own size on disk (plan/disk.py disk_needed)
        if ev.base.generation is Generation.VLLM_COLOCATE:  # vLLM takes a share of each card: every figure its own
            self.classes, self.shifts = {g: g for g in self.classes if g}, {}
        if ev.calibration is not None:  # a calibrated card's figure is its own: no class, no constant shift
            mine = {g for g in self.classes if g and ev.calibration.for_card(g)}
            self.classes.update({g: g for g in mine})
            self.shifts = {k: v for k, v in self.shifts.items() if k not in mine}

    def scenario_dict(self, sc: Scenario) -> dict[str, Any]:
        """``sc.to_dict()``, once per scenario object (plans on many cards share one)."""
        key = id(sc)
        if key not in self._dicts:
            self._dicts[key] = (sc, sc.to_dict())
        return self._dicts[key][1]

    def per_gpu(self, n: int) -> int:
        return math.ceil(self.eff / n)

    def micro_batches(self, n: int) -> tuple[int, ...]:
        """The micro-batches that reach ``n`` GPUs' per-GPU batch exactly; the one-step one alone where the optimizer
        steps in backward, which leaves nothing to accumulate (estimate/framework.py check_runs)."""
        top = self.per_gpu(n)
        return (top,) if self.ev.base.optimizer_in_backward else divisors(top)

    def configs(self, n: int) -> list[Config]:
        if n not in self._configs:
            self._configs[n] = configs_for(n, self.ev.base, self.ev.spec)
            self._comp.update({c: c.compromises(self.ev.base) for c in self._configs[n]})
        return self._configs[n]

    def work(self, c: Config, mb: int) -> Work:
        key = (c[:4], mb)  # optimizer and loss are not timed (paging is, in speed()): one work for the variants
        if key not in self._work:
            # the speed model reads only these keys: set them without re-validating the scenario
            nk = node_keys(c.num_gpus, c.parallelism)
            sc = dataclasses.replace(
                self.ev.base, num_gpus=c.num_gpus, parallelism=Parallelism(nk["parallelism"]),
                num_nodes=nk["num_nodes"], shard_scope=ShardScope(nk["shard_scope"]), offload=Offload(c.offload),
                gradient_checkpointing=Checkpointing(c.gradient_checkpointing), micro_batch_size=mb,
                grad_accum=self.per_gpu(c.num_gpus) // mb * _model_parallel(nk),
                tensor_parallel=nk["tensor_parallel"], pipeline_parallel=nk["pipeline_parallel"],
                context_parallel=nk["context_parallel"], pipeline_virtual_stages=nk["pipeline_virtual_stages"],
                pipeline_schedule=PipelineSchedule(nk["pipeline_schedule"]), expert_parallel=nk["expert_parallel"],
            )
            self._work[key] = step_work(sc, self.mf, self.trainable)
        return self._work[key]

    def speed(self, c: Config, mb: int, g: GPU, paged: int | None = None) -> Speed | None:
        """Step time of ``c`` (x the family's calibrated factor: plan/timing.py); paged state moves as ``paged`` bytes (None: all)."""
        if not g.bf16_tflops:
            return None
        link = self._link(g, c.num_gpus)
        card = link[2] if self.mfu is None else None
        paged = (paged_state(self.trainable, c) if is_paged(c) else 0) if paged is None else paged
        s = step_time(
            self.work(c, mb), peak_tflops=g.bf16_tflops, mfu=self.mfu or MFU_DEFAULT.value, mem_bandwidth_gbs=g.mem_bandwidth_gbs,
            peer_gbs=link[0], host_gbs=link[1], card=card, net=link[3], paged_bytes=paged, link=link[2])
        return calibrated(s, speed_factor(self.ev.calibration, g.gpu_id)) if card is not None else s

    def _link(self, g: GPU, n: int) -> tuple:
        """(peer GB/s, host GB/s, :class:`kernels.CardSpeed`, network rates) of ``n`` x ``g``."""
        link = self._links.get((g.gpu_id, n))
        if link is None:
            peer = peer_gbs(g, n)
            net = network_for(self.ev.base.interconnect, g.gpu_id)
            link = self._links[(g.gpu_id, n)] = (peer, g.host_link_gbs, card_speed(g, peer, min(n, GPUS_PER_NODE)),
                                                 net_rate(peer * 1e9, net.node_bytes_s, net.latency_us))
        return link

    def _seconds_per_token(self, c: Config, mb: int, g: GPU) -> float:
        """Seconds per trained token (all GPUs): :func:`throughput.step_time` through :meth:`speed`, memoised."""
        key = (timing(c), mb, g.gpu_id)  # the speed model reads neither optimizer (but paging) nor loss
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

    def layout(self, n: int, lacks: tuple[str, ...] = ()) -> Layout:
        """The settings tried on ``n`` GPUs that a stack lacking ``lacks`` runs (Gaudi: no 8-bit AdamW), arranged."""
        key = (n, lacks)
        hit = self._layouts.get(key)
        if hit is None:
            allowed = [c for c in self.configs(n) if not set(needs(c._asdict())) & set(lacks)]
            hit = self._layouts[key] = Layout(allowed, self._comp)
        return hit

    def fits(self, c: Config, mb: int, limit: int, host_limit: int | None, gpu_class: str | None = None) -> bool:
        f = self.figs.get(c, mb, gpu_class or None)
        return f is not None and f.device <= limit and (host_limit is None or f.host <= host_limit)

    def largest_within(self, c: Config, theta: float, spt, ok) -> int | None:
        """The largest micro-batch of ``c`` that fits (``ok``), if a fitting one takes at most ``theta``
        seconds per token (``spt``); else None.

        Memory grows with the micro-batch while gradients are held across accumulation steps; the
        one-step case (micro-batch = per-GPU batch) holds none and is tested on its own. Time never grows
        with the micro-batch, so the smallest held micro-batch within ``theta`` decides whether one
        exists, and a bisection above it finds the largest.
        """
        ds = self.micro_batches(c.num_gpus)
        if ok(c, ds[-1]):
            return ds[-1]
        held = ds[:-1]
        lo, hi = 0, len(held)  # the smallest held micro-batch within theta: held[lo] (none if lo == len)
        while lo < hi:
            mid = (lo + hi) // 2
            if spt(c, held[mid]) <= theta:
                hi = mid
            else:
                lo = mid + 1
        if lo == len(held) or not ok(c, held[lo]):
            return None
        hi = len(held) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if ok(c, held[mid]):
                lo = mid
            else:
                hi = mid - 1
        return held[lo]

    def best(self, g: GPU, n: int, limit: int, host_limit: int | None = None,
             lacks: tuple[str, ...] = ()) -> tuple[Config, int] | None:
        """The best (setting, micro-batch) for ``n`` x ``g`` that fits the card, among settings its stack runs.

        Best: let T be the shortest time per token of any fitting pair; of the pairs within ``TIE`` of T,
        the fewest compromises, then the largest micro-batch, then the shortest time (:meth:`choose`).
        Memory is screened with the estimate without ``gpu`` plus the card class's constant shift
        (:func:`evaluate.class_shifts`); the pick is checked with the class's own estimate, and should
        that disagree the search is redone with class estimates throughout.
        """
        cls = self.classes.get(g.gpu_id, g.gpu_id)
        shift = self.shifts.get(cls) if cls else 0
        if shift is not None:
            pick = self.choose(g, n, limit - shift, host_limit, lacks, None)
            if pick is None or not cls or self.fits(pick[0], pick[1], limit, host_limit, cls):
                return pick
        return self.choose(g, n, limit, host_limit, lacks, cls)

    def choose(self, g: GPU, n: int, limit: int, host_limit: int | None, lacks: tuple[str, ...],
               cls: str | None) -> tuple[Config, int] | None:
        """:meth:`best` with memory from estimates for ``cls``: exact, as trying every pair would be
        (tests/plan/test_search.py), at a fraction of the estimates.

        Time never grows with the micro-batch, so a setting's time at the per-GPU batch bounds it from
        below; settings are taken in that order. While a bound is under the fastest time found, the
        setting may set T: its largest fitting micro-batch within the band is found. Once bounds reach
        it, T is final and only settings that could still win the tie-break (fewer compromises first)
        are looked at. Most fit answers follow from figures already known (:class:`screen.Screen`).
        """
        lay = self.layout(n, lacks)
        top = self.per_gpu(n)
        ds = self.micro_batches(n)
        ok = Screen(self.figs, self.configs(n), top, ds[:-1], limit, host_limit, cls).ok
        probed: set[Config] = set()
        comp, index = self._comp, lay.index

        def spt(c: Config, mb: int) -> float:
            return self._seconds_per_token(c, mb, g)

        def look(c: Config, theta: float) -> tuple[float, float, int, int, Config] | None:
            s = lay.group_saver[c]
            if s not in probed:  # the group's most saving setting first: where it does not fit, none does
                probed.add(s)
                if not ok(s, ds[0]):
                    ok(s, top)
            mb = self.largest_within(c, theta, spt, ok)
            return None if mb is None else (spt(c, mb), comp[c], -mb, index[c], c)

        bound = {k: spt(s, top) for k, s in lay.savers.items()}  # timed alike: one bound per timing
        # 1. the fastest time T: of settings timed alike, the most saving fits the largest micro-batch; a
        # setting is resolved here only as far as it lowers T (the band is settled in 2.)
        found: dict[tuple, tuple] = {}  # timing -> (hit or None, the time limit it was looked for within)
        fastest = math.inf
        for k in sorted(bound, key=lambda k: (bound[k], lay.rank[lay.savers[k]])):
            if bound[k] >= fastest:
                break
            hit = look(lay.savers[k], fastest)
            found[k] = (hit, fastest)
            fastest = min(fastest, hit[0]) if hit else fastest
        band = fastest * (1 + TIE)  # final: every setting left is at least as slow as the fastest found
        # 2. within the band: fewest compromises, then largest micro-batch, then time
        pick = None
        for c in lay.by_comp:
            if pick and comp[c] > pick[1]:
                break
            if bound[timing(c)] > band:
                continue
            ref, within = found.get(timing(c), ((), 0.0))
            if ref is None and within >= band:
                continue  # its most saving sibling has no micro-batch within the band: neither has c
            ref = ref or ()
            hope = (comp[c], ref[2], ref[0]) if ref else (comp[c], -top, bound[timing(c)])
            if pick and hope + (index[c],) > _tie_break(pick):
                continue
            hit = ref if ref and lay.savers[timing(c)] == c else look(c, band)
            if hit and hit[0] <= band and (pick is None or _tie_break(hit) < _tie_break(pick)):
                pick = hit
        return None if pick is None else (pick[4], -pick[2])


class Layout:
    """The settings of one GPU count a stack runs, indexed for :meth:`Search.choose`."""

    def __init__(self, allowed: list[Config], comp: dict[Config, float]):
        self.allowed = allowed
        self.index = {c: i for i, c in enumerate(allowed)}
        self.rank = {c: _saving_rank(c) for c in allowed}
        self.by_comp = sorted(allowed, key=lambda c: (comp[c], self.rank[c]))
        #: per timing (sharding, offload, checkpointing: the speed model reads no optimizer or loss) and
        #: per group (sharding, offload): the most memory-saving setting
        self.savers: dict[tuple, Config] = {}
        groups: dict[tuple, Config] = {}
        for c in sorted(allowed, key=self.rank.get):
            self.savers.setdefault(timing(c), c)
            groups.setdefault(c[:3], c)
        self.group_saver = {c: groups[c[:3]] for c in allowed}


def _tie_break(x: tuple) -> tuple:
    """(compromises, -micro-batch, time, setting index) of a found (time, compromises, -mb, index, setting)."""
    return x[1], x[2], x[0], x[3]


def _saving_rank(c: Config) -> tuple:
    """Most memory-saving first: offload, checkpointing, fused loss, paged then 8-bit optimizer state."""
    return (-{"none": 0, "optimizer": 1, "optimizer+params": 2}[c.offload],
            -CKPT_RANK[c.gradient_checkpointing],
            c.loss != "fused", -OPTIMIZER_RANK.get(c.optimizer, 0))
