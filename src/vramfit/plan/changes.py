"""``changes_to_fit(scenario, gpu_id)``: what to change so a run fits a card, ranked, each measured.

Every candidate is applied to the user's scenario (with ``gpu`` set to the card) and estimated;
``changes`` holds exactly the scenario keys to set, so ``scenario.replace(gpu=card, **changes)``
reproduces the figure. With ``effective_batch`` the scenario is first put at the accumulation that
batch needs (micro-batch x accumulation x GPUs >= effective batch, as the planner runs it) and every
change is estimated there; ``changes`` then carries that ``grad_accum`` too. When no single change fits, the cheapest combination that fits is added.
Ranked: changes that fit first; then those that cost nothing, slow the run, add cards, change
the training itself; then the time x cards factor; then the least effort (fused loss before
8-bit AdamW before checkpointing before offload); then the saving.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from vramfit.calibration import Calibration
from vramfit.choices import FSDP_FAMILY
from vramfit.errors import ScenarioError
from vramfit.estimate.framework import scenario_profile
from vramfit.estimate.reentrant_fsdp1 import keeps_block_inputs
from vramfit.estimate.stages import stage_loss_choice
from vramfit.gpus import GPU, get_gpu
from vramfit.plan.evaluate import Evaluator
from vramfit.plan.fit import bisect_largest
from vramfit.plan.inputs import fraction, mfu_value
from vramfit.plan.kernels import card_speed
from vramfit.plan.search import peer_gbs, shard_names
from vramfit.plan.stage_work import scenario_flops
from vramfit.plan.throughput import MFU_DEFAULT, scenario_net, step_time, step_work
from vramfit.plan.verdict import SAFETY_MARGIN, card_fit, fits, limit_bytes
from vramfit.scenario import Loss, Method, Optimizer, Parallelism, Scenario, parse_scenario
from vramfit.stage_keys import min_seq_len

KINDS = ("free", "slower", "hardware", "training")
_ORDER = {"none": 0, "selective": 1, "selective-op": 1.5, "full": 2, "offload": 3}  # memory saved, least first


@dataclass(frozen=True)
class Change:
    name: str
    description: str
    changes: dict[str, Any]  # scenario keys to set (on top of gpu=<card>)
    kind: str  # free | slower | hardware | training (see KINDS)
    tradeoff: str
    device_bytes: int | None = None  # per GPU after the change
    # what the change takes off the figure the verdict counts (Peak.required_bytes): on a card the run fills, the
    # device figure stops at the card (estimate.on_card) and would hide it
    saving_bytes: int | None = None
    fits: bool = False
    # the card's verdict of the changed scenario (vramfit.plan.verdict.card_fit, as estimate's ``fits`` states it):
    # limit (usable less margin) - what stays on the card, and the figure held to the limit (Peak.required_bytes)
    headroom_bytes: int | None = None
    slowdown: float | None = None  # seconds per token after / before, on this card (< 1: faster)
    cost_factor: float | None = None  # GPU-hours per token after / before
    error: str | None = None
    required_bytes: int | None = None
    # host RAM per GPU for offloaded state, set where it is over the planner's cap (planner.HOST_RAM_PER_GPU): the
    # change then does not fit, as the planner drops such a plan
    host_ram_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _runs_loss(sc: Scenario, loss: Loss) -> bool:
    return stage_loss_choice(dataclasses.replace(sc, loss=loss)) is loss


def _candidates(sc: Scenario) -> list[Change]:
    out: list[Change] = []
    profile = scenario_profile(sc)  # only changes the framework can be told to make (profile_fields.py runs_*)
    # only a loss the stage's trainer runs (estimate/stages stage_loss_choice: TRL 1.16.0's preference and RL trainers
    # keep their own log-prob code under use_liger_kernel, so a fused or chunked loss would save nothing)
    if sc.loss is not Loss.FUSED and profile.runs_fused_loss and _runs_loss(sc, Loss.FUSED):
        out.append(Change("fused-loss", "fused linear + cross-entropy loss (no full logits)", {"loss": "fused"},
                          "free", "needs Liger Kernel (use_liger_kernel=True) or Cut Cross-Entropy"))
    if sc.loss is Loss.STANDARD and profile.runs_chunked_loss and _runs_loss(sc, Loss.CHUNKED):
        out.append(Change("chunked-loss", "cross-entropy over the sequence in chunks", {"loss": "chunked"},
                          "free", "torchtune CEWithChunkedOutputLoss; not in the HF Trainer"))
    if sc.optimizer in (Optimizer.ADAMW, Optimizer.PAGED_ADAMW) and profile.runs_bnb_optimizers:
        out.append(Change("8bit-optimizer", "8-bit AdamW (bitsandbytes)", {"optimizer": "adamw-8bit"},
                          "free", "block-wise 8-bit states; matches 32-bit AdamW in the bitsandbytes paper's tests"))
    # none where the scripts fix it by GPU count (profile checkpointing_by_devices: litgpt)
    for ck in ("selective", "full", "offload")[:0 if profile.checkpointing_by_devices else
                                               None if profile.runs_activation_offload else 2]:
        if _ORDER[ck] > _ORDER[sc.gradient_checkpointing.value]:
            trade = {"selective": "recomputes attention in backward (not in the HF Trainer)",
                     "full": "recomputes every block's forward in backward",
                     "offload": "as full, and keeps block inputs in pinned host RAM"}[ck]
            out.append(Change(f"checkpointing-{ck}", f"activation checkpointing: {ck}",
                              {"gradient_checkpointing": ck}, "slower", trade))
    if keeps_block_inputs(sc, profile):  # estimate/reentrant_fsdp1.py
        out.append(Change("non-reentrant-checkpointing", "non-reentrant gradient checkpointing "
                          "(gradient_checkpointing_kwargs={'use_reentrant': False})", {"use_reentrant": "no"}, "free",
                          "the same recompute; FSDP1 then keeps no block input or its gradient to the end of backward"))
    out += _dora_changes(sc, profile) + _saved_module_changes(sc, profile)
    if sc.method is Method.LORA:
        out.append(Change("qlora", "QLoRA: 4-bit NF4 base instead of 16-bit", {"method": "qlora"},
                          "training", "quality loss depends on the task: measure it (the guide, sec. 03)"))
    if sc.method is Method.FULL and sc.precision.mixed:
        out.append(Change("bf16-true", "pure bf16 weights (no fp32 master copy)", {"precision": "bf16-true"},
                          "training", "bf16 updates lose small steps; use Kahan summation or a stochastic-rounding optimizer"))
    out += _sharding_changes(sc, profile)
    if profile.runs_offload:  # only what the framework can be told to run (profile_fields.py runs_offload)
        out += _offload_changes(sc, profile)
    if profile.runs_compile and not sc.compile:  # kept only where it saves memory (changes_to_fit)
        out.append(Change("compile", "torch.compile (its partition keeps fewer tensors for backward)", {"compile": True},
                          "free", "compiles before the first step (minutes); a graph break or a shape change recompiles"))
    return out


def _dora_changes(sc: Scenario, profile) -> list[Change]:
    """DoRA's own costs (estimate/dora.py): PEFT with dropout keeps a copy of every adapted weight, which dropout 0
    avoids (the base output is reused); plain LoRA keeps neither DoRA output nor its weight-norm working set."""
    if not sc.dora:
        return []
    out: list[Change] = []
    if not profile.reuses_dora_base_output(sc.lora_dropout) and profile.reuses_dora_base_output(0.0):
        out.append(Change("dora-no-dropout", "LoRA dropout 0, so DoRA reuses the base output (no kept weight copies)",
                          {"lora_dropout": 0.0}, "training", "no dropout on the adapters' input"))
    out.append(Change("plain-lora", "plain LoRA instead of DoRA", {"dora": False}, "training",
                      "no magnitude/direction split: measure the quality on the task"))
    return out


def _saved_module_changes(sc: Scenario, profile) -> list[Change]:
    """The trained copies' own costs (modules_to_save, estimate/saved_modules.py): each copy is the whole module with
    its gradient and optimizer states; LoRA on the same module trains rank-r adapters on the frozen original instead
    (not under DoRA, which is refused there, nor on a module the framework would copy again: profile
    ``targets_trained_as_copies``, whose copy stays), and no copy leaves the modules frozen."""
    if not sc.modules_to_save:
        return []
    names = ", ".join(sc.modules_to_save)
    adaptable = [m for m in sc.modules_to_save if m not in profile.targets_trained_as_copies]
    kept = [m for m in sc.modules_to_save if m not in adaptable]
    out: list[Change] = []
    if adaptable and not sc.dora:
        on = ", ".join(adaptable)
        out.append(Change("adapt-saved-modules", f"LoRA on {on} instead of whole trained copies",
                          {"modules_to_save": kept, "lora_targets": [*sc.lora_targets, *adaptable]}, "training",
                          f"a rank-r update of {on}: new tokens' rows learn less than in a whole copy"))
    out.append(Change("no-saved-modules", f"no trained copies of {names}", {"modules_to_save": []}, "training",
                      f"{names} stay frozen: added tokens keep their initial vectors"))
    return out


#: how much of the model state each strategy shards, least first (none, ddp and FSDP's NO_SHARD: nothing)
_SHARDS = {"zero1": 1, "zero2": 2, "fsdp-grad-op": 2, "zero3": 3, "fsdp": 3}


def _sharding_changes(sc: Scenario, profile) -> list[Change]:
    """Sharding at the run's own GPU count, with no offload, where it shards more than the run does (drive 2026-12-07:
    8 H100s in DDP needing 91.5 GiB were offered only CPU offload, while ZeRO-2 or FSDP fit as they were). Gradient
    sharding keeps data parallelism's traffic, full sharding adds half again (Rajbhandari et al. 2020, ZeRO, sec. 7:
    Pos+g moves 2 x the parameters per step as DP's all-reduce does, Pos+g+p 3 x); the framework's own engines only
    (plan/search.py shard_names, profile ``parallelisms``)."""
    if sc.num_gpus // sc.model_parallel_size < 2:
        return []
    runs = {p.value for p in profile.parallelisms}
    now = _SHARDS.get(sc.parallelism.value, 0)
    out: list[Change] = []
    for name, kind, trade in zip(shard_names(sc, profile), ("free", "slower"), (
            "optimizer state and gradients split across the GPUs: the same traffic as data parallelism",
            "weights split too and gathered for every block, forward and backward: half again the traffic"), strict=True):
        if _SHARDS[name] > now and (not runs or name in runs):
            words = {"zero2": "ZeRO-2", "zero3": "ZeRO-3", "fsdp": "FSDP", "fsdp-grad-op": "FSDP SHARD_GRAD_OP"}[name]
            out.append(Change(f"shard-{name}", f"{words} across the {sc.num_gpus} GPUs", {"parallelism": name},
                              kind, trade))
    return out


def _offload_changes(sc: Scenario, profile) -> list[Change]:
    """Optimizer offload (where the framework's offload can leave the weights) and parameter offload, each under a
    sharding engine the framework runs (plan/search.py shard_names)."""
    out: list[Change] = []
    shard2, shard = shard_names(sc, profile)
    runs = {p.value for p in profile.parallelisms}
    if sc.method is Method.FULL and not profile.offload_moves_params:
        par = sc.parallelism.value if sc.parallelism in (Parallelism.ZERO2, Parallelism.ZERO3, Parallelism.FSDP) else (
            shard2 if sc.num_gpus == 1 else shard)
        if (not runs or par in runs) and par not in ("fsdp", "fsdp-grad-op"):  # FSDP offloads parameters too
            out.append(Change("offload-optimizer", "optimizer state in host RAM (ZeRO-Offload)",
                              {"parallelism": par, "offload": "optimizer"}, "slower",
                              "CPU Adam step and PCIe traffic each step; needs host RAM"))
    out.append(Change("offload-params", "weights and optimizer state in host RAM (ZeRO-Infinity / FSDP CPU offload)",
                      {"parallelism": shard, "offload": "optimizer+params"}, "slower",
                      "weights stream over PCIe every micro-batch: much slower"))
    return out


class _Ctx:
    def __init__(self, sc: Scenario, g: GPU, margin: float, mfu: float | None, calibration: Calibration | None = None,
                 seq_len_at: Callable[[int], int] | None = None, eval_follows_micro: bool = False):
        self.sc, self.g = sc, g
        self.ev = Evaluator(sc.replace(gpu=g.gpu_id), calibration, seq_len_at, eval_follows_micro)
        self.limit = limit_bytes(g, margin)
        self.margin = margin
        self.mfu = mfu
        self.before = self.ev.estimate().peak.required_bytes
        self.trainable = self.ev.estimate().model.num_trainable_params
        self.t0 = self.seconds_per_token(self.ev.base)
        self.only: frozenset[str] | None = None  # changes_to_fit only_keys

    def allows(self, ch: Change | None) -> bool:
        """``ch`` sets only keys the caller can write (every key where it named none)."""
        return ch is not None and (self.only is None or set(ch.changes) <= self.only)

    def seconds_per_token(self, sc: Scenario) -> float | None:
        g = self.g
        if not g.bf16_tflops:
            return None
        w = step_work(sc, scenario_flops(self.ev.spec, sc), self.trainable)
        peer = peer_gbs(g, sc.num_gpus)
        card = card_speed(g, peer, sc.gpus_per_node)
        s = step_time(w, peak_tflops=g.bf16_tflops, mfu=self.mfu or MFU_DEFAULT.value, mem_bandwidth_gbs=g.mem_bandwidth_gbs,
                      peer_gbs=peer, host_gbs=g.host_link_gbs, card=card if self.mfu is None else None,  # mechanism model
                      net=scenario_net(sc.interconnect, g, peer), link=card)  # several nodes: their network
        return 1.0 / s.tokens_per_s

    def measure(self, ch: Change) -> Change:
        r = self.ev.try_estimate(**ch.changes)
        if isinstance(r, ScenarioError):
            return _with(ch, error=str(r))
        dev = r.peak.device_bytes
        t = self.seconds_per_token(r.scenario)
        slow = t / self.t0 if (t and self.t0) else None
        cost = slow * r.scenario.num_gpus / self.sc.num_gpus if slow is not None else None
        if r.scenario.seq_len != self.ev.base.seq_len and "seq_len" not in ch.changes:  # a dataset's row at this size
            ch = _with(ch, changes={**ch.changes, "seq_len": r.scenario.seq_len})
        verdict = card_fit(r, self.g, self.margin)
        from vramfit.plan.planner import HOST_RAM_PER_GPU  # the planner's host-RAM rule holds for changes too

        if verdict.fits and r.host_bytes > HOST_RAM_PER_GPU.value:
            ch = _with(ch, host_ram_bytes=r.host_bytes)
            verdict = dataclasses.replace(verdict, fits=False)
        return _with(ch, device_bytes=dev, saving_bytes=self.before - r.peak.required_bytes, fits=verdict.fits,
                     headroom_bytes=verdict.headroom_bytes, slowdown=slow, cost_factor=cost,
                     required_bytes=r.peak.required_bytes)

    def fits(self, changes: dict[str, Any]) -> bool:
        r = self.ev.try_estimate(**changes)
        return not isinstance(r, ScenarioError) and fits(r, self.limit)


def _experts_unquantized(ctx: _Ctx) -> bool:
    """A QLoRA mixture-of-experts run whose experts stay 16/32-bit (see scenario key quantize_experts)."""
    from vramfit.estimate.core import experts_quantized
    from vramfit.estimate.framework import scenario_profile

    sc = ctx.sc
    has_experts = any(lin.group == "expert" for lin in ctx.ev.spec.block_linears)
    return sc.method is Method.QLORA and has_experts and not experts_quantized(sc, scenario_profile(sc))  # its release


def _with(ch: Change, **kw: Any) -> Change:
    d = ch.to_dict()
    d.update(kw)
    return Change(**d)


def _largest(lo: int, hi: int, ok) -> int | None:
    """Largest integer in [lo, hi] with ok(x) (ok monotone: true then false), or None."""
    if hi < lo or not ok(lo):
        return None
    return bisect_largest(lo, hi, ok)


def _micro_batch(ctx: _Ctx, extra: dict[str, Any] | None = None) -> Change | None:
    """A smaller micro-batch with the accumulation that keeps the effective batch exactly: the micro-batches that
    divide the sequences each data-parallel rank takes per optimizer step (7 x 1 becomes 1 x 7, not 6 x 2)."""
    sc, extra = ctx.sc, extra or {}
    if sc.micro_batch_size == 1:
        return None
    per_rank = sc.micro_batch_size * sc.grad_accum
    sizes = [m for m in range(1, sc.micro_batch_size) if per_rank % m == 0]

    def keys(mb: int) -> dict[str, Any]:
        return {**extra, "micro_batch_size": mb, "grad_accum": per_rank // mb}

    i = _largest(0, len(sizes) - 1, lambda j: ctx.fits(keys(sizes[j])))
    k = keys(sizes[i] if i is not None else 1)
    ranks = k.get("num_gpus", sc.num_gpus) // sc.model_parallel_size
    return Change("smaller-micro-batch", f"micro-batch {k['micro_batch_size']} with {k['grad_accum']} accumulation "
                  f"steps (effective batch {per_rank * ranks})", k, "free", "same effective batch, more optimizer micro-steps")


def _seq_len(ctx: _Ctx, extra: dict[str, Any] | None = None) -> Change | None:
    sc, extra = ctx.sc, extra or {}
    if sc.seq_len <= 64:
        return None
    step = 64 if sc.seq_len > 128 else 1
    lo = -(-min_seq_len(sc) // step)  # a generating stage's seq_len holds its completion (stage_keys)
    best = _largest(lo, (sc.seq_len - 1) // step, lambda k: ctx.fits({**extra, "seq_len": k * step}))
    if best is None:
        return None
    return Change("shorter-sequence", f"sequences of {best * step} tokens instead of {sc.seq_len}",
                  {**extra, "seq_len": best * step}, "training", "truncates or re-packs the data; long-context skills may suffer")


def _more_gpus(ctx: _Ctx, extra: dict[str, Any] | None = None) -> Change | None:
    """More cards of one node, sharded, as the planner plans them: no more data-parallel ranks than the effective batch,
    each rank's share rounded up where they do not divide it (then stated, as plan rows state it), at the largest micro-batch
    up to the current one dividing the share, with the accumulation completing it; tensor/pipeline/context degrees stay."""
    sc, extra = ctx.sc, extra or {}
    shard = "fsdp" if sc.parallelism in FSDP_FAMILY else "zero3"
    eff, mp = sc.effective_batch, sc.model_parallel_size
    tried = None
    for n in (2, 4, 8):
        if n <= sc.num_gpus or n % mp or n // mp > eff:
            continue
        share = -(-eff // (n // mp))
        cap = min(extra.get("micro_batch_size", sc.micro_batch_size), share)
        mb = max(m for m in range(1, cap + 1) if share % m == 0)
        tried = {**extra, "num_gpus": n, "parallelism": shard, "micro_batch_size": mb, "grad_accum": share // mb}
        if ctx.fits(tried):
            break
    if tried is None:
        return None
    n = tried["num_gpus"]
    now = tried["micro_batch_size"] * tried["grad_accum"] * (n // mp)
    batch = "" if now == eff else f" (effective batch {now}: the nearest multiple of {n // mp} ranks at or above {eff})"
    return Change("more-gpus", f"{n} x {ctx.g.gpu_id} in one node with {shard.upper() if shard == 'fsdp' else 'ZeRO-3'}"
                  + batch, tried, "hardware", "more cards to rent; GPU-to-GPU traffic every micro-batch")


def _combination(ctx: _Ctx, singles: list[Change]) -> Change | None:
    """Cheapest-first accumulation of changes until the run fits, then drop the unneeded ones."""
    by = {c.name: c for c in singles}
    ladder = [n for n in ("fused-loss", "8bit-optimizer", "quantize-experts", "checkpointing-full") if n in by]
    applied: dict[str, dict[str, Any]] = {}
    keys: dict[str, Any] = {}

    def add(name: str, ch: dict[str, Any] | None) -> bool:
        if ch:
            applied[name] = ch
            keys.update(ch)
        return ctx.fits(keys)

    done = False
    for name in ladder:
        if add(name, by[name].changes):
            done = True
            break
    steps = [("smaller-micro-batch", lambda: _micro_batch(ctx, dict(keys))),
             ("qlora", lambda: by.get("qlora")),
             ("more-gpus", lambda: _more_gpus(ctx, dict(keys))),
             ("offload-optimizer", lambda: by.get("offload-optimizer")),
             ("offload-params", lambda: by.get("offload-params")),
             ("shorter-sequence", lambda: _seq_len(ctx, dict(keys)))]
    for name, make in steps:
        if done:
            break
        ch = make()
        if not ctx.allows(ch):
            continue
        extra = {k: v for k, v in ch.changes.items() if keys.get(k) != v}
        if name == "offload-optimizer" and keys.get("num_gpus", 1) > 1:
            extra["parallelism"] = keys.get("parallelism", "zero3")
        done = add(name, extra)
    if not done:
        return None
    for name in reversed(list(applied)):  # drop what is not needed, most disruptive first
        trial = {k: v for n2, ch in applied.items() if n2 != name for k, v in ch.items()}
        if trial and ctx.fits(trial):
            del applied[name]
    final = {k: v for ch in applied.values() for k, v in ch.items()}
    names = list(applied)
    kind = max((by[n].kind if n in by else ("hardware" if n == "more-gpus" else "training" if n == "shorter-sequence" else "free")
                for n in names), key=KINDS.index)
    return Change("combined", "together: " + " + ".join(names), final, kind, "all the trade-offs of its parts")


def at_effective_batch(sc: Scenario, effective_batch: int | None) -> Scenario:
    """``sc`` with the accumulation that reaches ``effective_batch`` (rounded up) at its micro-batch and GPUs; where the
    optimizer steps in backward (no accumulation), with the micro-batch that reaches it in one step."""
    if effective_batch is None:
        return sc
    ranks = sc.data_parallel_size  # tensor, pipeline and context parallel ranks share their sequences
    if sc.optimizer_in_backward:
        mb = max(1, -(-effective_batch // ranks))
        return sc if (mb, sc.grad_accum) == (sc.micro_batch_size, 1) else sc.replace(micro_batch_size=mb, grad_accum=1)
    ga = max(1, -(-effective_batch // (sc.micro_batch_size * ranks)))
    return sc if ga == sc.grad_accum else sc.replace(grad_accum=ga)


def changes_to_fit(scenario: Scenario | dict, gpu_id: str, *, safety_margin: float = SAFETY_MARGIN,
                   mfu: float | None = None, effective_batch: int | None = None,
                   calibration: Calibration | None = None,
                   seq_len_at: Callable[[int], int] | None = None,
                   eval_follows_micro: bool = False, only_keys: Collection[str] | None = None) -> list[Change]:
    """Ranked changes that make ``scenario`` fit one ``gpu_id`` card per GPU (empty if it already fits).

    ``effective_batch``: sequences per optimizer step the run needs; every change is estimated at the
    accumulation that reaches it (gradients held across accumulation steps cost memory). ``seq_len_at``: a
    dataset's peak row at each micro-batch size (:class:`vramfit.plan.evaluate.Evaluator`); a change of the
    micro-batch then sets that ``seq_len`` too. ``only_keys``: only changes of these scenario keys (what a config
    file can hold, ``fit --write-to``), the combination built from them alone.
    """
    given = parse_scenario(scenario)
    sc = at_effective_batch(given, effective_batch)
    g = get_gpu(gpu_id)
    margin = fraction("safety_margin", safety_margin, lo_open=False)
    u = mfu_value(mfu) if mfu is not None else None
    ctx = _Ctx(sc, g, margin, u, calibration, seq_len_at, eval_follows_micro)
    if ctx.before <= ctx.limit:
        return []
    ctx.only = None if only_keys is None else frozenset(only_keys)
    singles = _candidates(sc)
    if _experts_unquantized(ctx):
        singles.append(Change("quantize-experts", "quantize the MoE experts too (4-bit like the other linears)",
                              {"quantize_experts": "yes"}, "free",
                              "transformers 5 + bitsandbytes cannot (fused 3-D experts): use transformers 4, torchtune or litgpt"))
    singles += [c for c in (_micro_batch(ctx), _seq_len(ctx), _more_gpus(ctx)) if c is not None]
    singles = [c for c in singles if ctx.allows(c)]
    order = {c.name: i for i, c in enumerate(singles)}  # least effort first, for equal kind and time
    measured = [ctx.measure(c) for c in singles]
    measured = [c for c in measured if c.error is None and (c.saving_bytes or 0) > 0]
    # a combination too where only changes of what is trained fit alone (cutting 4,096-token rows to 128 was the one
    # answer while checkpointing + a smaller micro-batch, each short alone, fit together): the ranking below puts
    # the combination of gentler kinds first
    if not any(c.fits and c.kind != "training" for c in measured):
        combo = _combination(ctx, singles)
        if combo is not None and all(combo.changes != c.changes for c in measured):  # not a single change again
            measured.append(ctx.measure(combo))
    measured.sort(key=lambda c: (not c.fits, KINDS.index(c.kind), round(c.cost_factor or 1.0, 2),
                                 order.get(c.name, len(order)), -(c.saving_bytes or 0)))
    if sc.grad_accum != given.grad_accum:  # so that given.replace(gpu=card, **changes) reproduces each figure
        measured = [_with(c, changes={"grad_accum": sc.grad_accum, **c.changes}) for c in measured]
    return measured

