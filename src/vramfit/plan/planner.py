"""``plan(scenario, ...)``: which GPU, how many, how long, how much, and what to change to fit."""

from __future__ import annotations

from typing import Any

from vramfit.calibration import Calibration
from vramfit.choices import Generation, Stage
from vramfit.errors import ScenarioError
from vramfit.estimate import on_card
from vramfit.gpus import GPU, get_gpu, list_gpus
from vramfit.plan import layouts, vllm_split
from vramfit.plan.changes import at_effective_batch
from vramfit.plan.disk import disk_needed
from vramfit.plan.evaluate import Evaluator
from vramfit.plan.inputs import (
    GPUS_PER_NODE,
    fraction,
    gpu_counts,
    gpu_id_list,
    mfu_value,
    parse_count,
    positive_number,
)
from vramfit.plan.kernels import SPEED_ERROR_MEDIAN, SPEED_ERROR_P90, SPEED_ROWS, SPEED_SOURCE, card_speed
from vramfit.plan.rental import billed_gpus, node_limit, price_basis, stack_of
from vramfit.plan.rental import cannot_run as _cannot_run
from vramfit.plan.rental import check_ranking as _check_ranking
from vramfit.plan.rental import not_found as _not_found
from vramfit.plan.rental import ranking_assumptions as _ranking_assumptions
from vramfit.plan.report import Excluded, Plan, PlanReport
from vramfit.plan.search import (
    Config,
    Search,
    bridge_size,
    one_gpu_only,
    peer_gbs,
    pinned_layout,
    tried_words,
)
from vramfit.plan.stage_work import scenario_flops, stage_time_note
from vramfit.plan.throughput import MFU_DEFAULT, Constant, run_cost, run_hours, time_band
from vramfit.plan.verdict import PAGED_COMPONENT, SAFETY_MARGIN, definition, fits, limit_bytes, result_paging
from vramfit.scenario import Scenario, parse_scenario
from vramfit.units import GB, GiB

HOST_RAM_PER_GPU = Constant(
    256 * GB,
    "bytes of host RAM per GPU",
    "NVIDIA DGX H100 datasheet: 2 TB system memory for 8 GPUs",
    "offload plans whose host share exceeds it are dropped; rented single GPUs often come with less",
)

ASSUMPTIONS = (
    f"Multi-GPU plans of up to {GPUS_PER_NODE} cards are one node (the guide: rent the cards as one node, NVLink "
    "preferred); data parallel with DDP, ZeRO or FSDP as exported; with framework=torchtitan (full fine-tuning) also "
    "tensor and context parallel inside a node, pipeline stages (1f1b or interleaved) across nodes (plan/layouts.py).",
    "Recompute and de-quantization are timed; GPU-to-GPU traffic overlaps compute over NVLink or "
    "peer-to-peer PCIe only, offload traffic never; the CPU optimizer step of offload plans is timed at the host "
    "memory's bandwidth per GPU, or one CPU thread's AdamW rate where that is slower (plan/kernels.py).",
    "The dataset is packed into full sequences (no padding); time excludes evaluation, checkpoint writes and start-up.",
    "Prices are on-demand USD per GPU-hour read on the dates in price_details; the low end ranks plans.",
)


NODES_ASSUMPTION = (
    f"Above {GPUS_PER_NODE} GPUs a plan is whole nodes of {GPUS_PER_NODE} (2, 4, 8 ... nodes), flat ZeRO-3/FSDP over every "
    "rank or sharded inside a node and replicated across (FSDP HSDP, ZeRO++ hpZ); traffic between nodes runs at the "
    "node's NIC rate (interconnect; auto: the card's usual node, data/interconnects.csv), overlapped with compute "
    "except one layer's share and NCCL's latency per inter-node step.")


def _check_inputs(effective_batch, dataset_tokens, epochs, budget_usd, safety_margin, mfu, sc: Scenario):
    eff = parse_count("effective_batch", effective_batch, 1, 10**6) if effective_batch is not None else sc.effective_batch
    tokens = parse_count("dataset_tokens", dataset_tokens) if dataset_tokens is not None else None
    ep = positive_number("epochs", epochs, 1000)
    budget = positive_number("budget", budget_usd, what="a positive number of US dollars") if budget_usd is not None else None
    margin = fraction("safety_margin", safety_margin, lo_open=False)
    u = mfu_value(mfu) if mfu is not None else MFU_DEFAULT.value
    return eff, tokens, ep, budget, margin, u


def _notes(g: GPU, c: Config, base: Scenario, eff: int, actual_eff: int, host: int, num_params: int = 0) -> tuple[str, ...]:
    out = []
    if c.num_gpus > 1 and peer_gbs(g, c.num_gpus) == g.host_link_gbs:
        out.append(f"no NVLink between {c.num_gpus} cards: GPU-to-GPU traffic over PCIe ({g.host_link_gbs:g} GB/s per direction)")
    elif c.num_gpus > 1 and bridge_size(g):  # the bridge is an add-on: say the time counts on it
        out.append(f"timed with an NVLink bridge between the {c.num_gpus} cards ({g.peer_gbs:g} GB/s per direction); "
                   f"without one, GPU-to-GPU traffic goes over PCIe ({g.host_link_gbs:g} GB/s)")
    if c.loss != base.loss.value:
        out.append("fused loss: needs Liger Kernel (use_liger_kernel=True) or Cut Cross-Entropy")
    if c.optimizer != base.optimizer.value:
        out.append(f"{c.optimizer}: bitsandbytes 8-bit AdamW instead of {base.optimizer.value}")
    if c.num_gpus > GPUS_PER_NODE:
        out.append(_nodes_note(g, c, base, num_params))
    ep = layouts.parse(c.parallelism).ep
    if ep > 1:
        out.append(f"expert parallel {ep} (torchtitan expert_parallel_degree): the routed experts split whole over {ep} "
                   "GPUs of a node, their tokens exchanged by all-to-all")
    if host:
        per = "per node" if c.num_gpus > GPUS_PER_NODE else "for the node"
        node = f" ({host * min(c.num_gpus, GPUS_PER_NODE) / GiB:,.0f} GiB {per})" if c.num_gpus > 1 else ""
        out.append(f"needs {host / GiB:,.0f} GiB of host RAM per GPU for offloaded state{node}")
    if actual_eff != eff:
        out.append(f"effective batch {actual_eff} (the nearest multiple of {c.num_gpus} GPUs at or above {eff})")
    if g.usable_kind == "marketing":
        out.append("usable memory unconfirmed: the marketing GB is used (conservative)")
    if stack_of(g).note:
        out.append(stack_of(g).note)
    elif g.vendor and g.vendor != "NVIDIA":
        out.append(f"vendor {g.vendor!r} not in the stack table: taken as CUDA; check your software runs on it")
    billed = billed_gpus(g, c.num_gpus)
    if billed != c.num_gpus:
        out.append(f"rented in units of {billed} GPUs ({g.rental_source}): the cost is for {billed}")
    if g.price_low is None:
        out.append("no dated rental price in the catalog: add one with --gpus")
    return tuple(out)


def _nodes_note(g: GPU, c: Config, base: Scenario, num_params: int) -> str:
    """How a plan of several nodes is laid out, which network it was timed over, host RAM for loading."""
    from vramfit.nodes import loading_copies, network_for
    from vramfit.plan.search import HYBRID

    net = network_for(base.interconnect, g.gpu_id)
    how = {"hsdp": "HSDP: sharded inside each node, replicated across nodes (FSDP2 2-D mesh / HYBRID_SHARD)",
           "zero3-hpz": "ZeRO-3 with ZeRO++ hpZ (zero_hpz_partition_size 8): backward gathers stay inside the node"}

    d = layouts.parse(c.parallelism)
    mp = d.tp * d.pp * d.cp
    layout = how[d.parallelism] if d.parallelism in HYBRID and mp == 1 else \
        f"{d.parallelism} over all {c.num_gpus} ranks" if mp == 1 else _layout_words(d, c.num_gpus)
    copies, where = loading_copies(d.parallelism, GPUS_PER_NODE)
    load = f"; loading needs {copies * 2 * num_params / GB:,.0f} GB of host RAM on {where} (16-bit checkpoint)"
    return f"{c.num_gpus // GPUS_PER_NODE} nodes of {GPUS_PER_NODE}; {layout}; timed over {net.name}" + load


def _layout_words(d, num_gpus: int) -> str:
    """How a torchtitan layout (:class:`layouts.Degrees`) places its ranks, in words."""
    sched = f"interleaved, {d.vpp} chunks per GPU" if d.vpp > 1 else "1f1b"
    cp = f", context parallel {d.cp} inside each node" if d.cp > 1 else ""
    dp = (f"HSDP over the other {num_gpus // (d.tp * d.pp)} ranks (sharded inside a node: dp_shard × cp, replicated "
          "across nodes: dp_replicate" if d.parallelism == "hsdp" else
          f"fsdp over the other {num_gpus // (d.tp * d.pp)} ranks (dp_shard × cp")
    return (f"tensor parallel {d.tp} inside each node{cp}, {d.pp} pipeline stage{'s' * (d.pp > 1)} ({sched}), {dp}, "
            "torchtitan)")


def plan(
    scenario: Scenario | dict,
    *,
    effective_batch: int | str | None = None,
    dataset_tokens: int | str | None = None,
    epochs: float = 1.0,
    budget_usd: float | None = None,
    gpu_ids: list[str] | str | None = None,
    max_gpus: int = GPUS_PER_NODE,
    safety_margin: float = SAFETY_MARGIN,
    mfu: float | None = None,
    checkpoints_kept: int = 1,
    with_changes: bool = True,
    sort: str = "cost",
    deadline_hours: float | str | None = None,
    stacks: list[str] | str | None = None,
    dataset: Any | None = None,
    calibration: Calibration | None = None,
    eval_follows_micro: bool = False,
) -> PlanReport:
    """Ranked plans that fit, over the catalog (or ``gpu_ids``), for the user's scenario.

    The scenario fixes the model, method, precision, LoRA settings and sequence length; the search
    chooses the card, count (1, 2, 4, 8 up to ``max_gpus``), micro-batch and accumulation (to reach
    ``effective_batch`` sequences per step), checkpointing, sharding/offload, and the speed-free
    memory savers. ``dataset_tokens`` x ``epochs`` gives time and cost. Cards named in ``gpu_ids``
    (or the scenario's ``gpu``) that the scenario does not fit as given get ranked changes.
    Plans within budget and ``deadline_hours`` come first, then by ``sort`` (``cost`` per token or
    ``time``); ``stacks`` (cuda, rocm, habana) keeps only cards of those software stacks. A card is
    planned only in counts it is rented in (``rental_gpus``: GB200 up to its 4-GPU tray).
    ``dataset`` (a :class:`vramfit.dataset.DatasetReport`) replaces ``dataset_tokens``: disk from its
    real tokens, time and cost from the tokens the GPUs process at each plan's micro-batch (padding included).
    """
    sc = parse_scenario(scenario)
    eff, tokens, ep, budget, margin, u = _checked_amounts(effective_batch, dataset_tokens, epochs, budget_usd,
                                                          safety_margin, mfu, sc, dataset)
    vllm_split.check(sc, eff, max_gpus)
    all_counts, counts = _gpu_counts_for(max_gpus, eff)
    kept = parse_count("checkpoints_kept", checkpoints_kept, 0, 1000)
    named, cards = _named_cards(gpu_ids, sc)
    order, deadline, wanted = _check_ranking(sort, deadline_hours, stacks)
    user_mfu = u if mfu is not None else None
    sc = at_effective_batch(sc, eff)  # the user's settings at the accumulation the effective batch needs
    # a padding-free dataset's peak row grows with the micro-batch: each variant at its own (report.seq_len_at)
    ev = Evaluator(sc, calibration, dataset.seq_len_at if dataset is not None and dataset.varies_with_micro_batch else None,
                   eval_follows_micro)
    sc = ev.base
    # colocated vLLM takes a share of the card: the user's own figure is on the first card searched
    own = ev.estimate(**({"gpu": cards[0].gpu_id} if sc.generation is Generation.VLLM_COLOCATE and not sc.gpu else {}))
    trainable, num_params = own.model.num_trainable_params, own.model.num_params
    search = Search(ev, eff, scenario_flops(ev.spec, sc), trainable, user_mfu)
    search.raw_bytes = dataset.file_bytes if dataset is not None else None
    total = int((dataset.processed_tokens if dataset is not None else tokens) * ep) if tokens else None
    rank_args = (wanted, margin, counts, all_counts, order, dataset, ep, total, eff, budget, num_params, trainable,
                 tokens, kept, deadline)
    plans, excluded, blocked = _ranked_with_vllm(search, cards, sc, calibration, user_mfu, rank_args)
    changes = _changes_for_named(named if with_changes else None, blocked, ev, sc, margin, calibration, user_mfu, eff)
    assumptions = _report_assumptions(sc, u, mfu, eff, counts, all_counts, max_gpus, order, deadline, wanted, margin,
                                      calibration, dataset)
    return PlanReport(
        model_id=ev.model_id, num_params=num_params, num_trainable_params=trainable, scenario=sc.to_dict(),
        scenario_device_bytes=own.peak.device_bytes, scenario_required_bytes=own.peak.required_bytes, effective_batch=eff, dataset_tokens=tokens, epochs=ep,
        total_tokens=total, budget_usd=budget, safety_margin=margin, mfu=user_mfu,
        mfu_source=("user" if mfu is not None else SPEED_SOURCE), plans=tuple(plans),
        excluded=tuple(excluded), assumptions=tuple(list(ev.notes) + assumptions), changes=changes,
        search_estimates=ev.calls, sort=order, deadline_hours=deadline, stacks=wanted,
    )


def _ranked_with_vllm(search: Search, cards: list[GPU], sc: Scenario, calibration: Calibration | None, user_mfu,
                      rank_args: tuple) -> tuple[list, list, set]:
    """:func:`_ranked_plans`; GRPO with a vLLM server takes cards of the node for it (vllm_split), and
    colocated vLLM is ranked against that split: the same job with vLLM on cards of its own."""
    num_params = rank_args[10]
    if sc.generation is Generation.VLLM_SERVER and sc.stage is Stage.GRPO:
        search.server_of = lambda g: vllm_split.server_gpus(num_params, g)
    colocated = _ranked_plans(search, cards, sc, *rank_args)
    if not (vllm_split.wants_split(sc) and sc.generation is Generation.VLLM_COLOCATE):
        return colocated
    server = vllm_split.as_server(sc)
    ev = Evaluator(server, calibration)
    split = Search(ev, search.eff, scenario_flops(ev.spec, sc), search.trainable, user_mfu)
    split.raw_bytes = search.raw_bytes
    split.server_of = lambda g: vllm_split.server_gpus(num_params, g)
    plans, _, blocked = _ranked_plans(split, cards, server, *rank_args)
    both = sorted([*colocated[0], *plans], key=lambda p: _rank(p, rank_args[4]))
    planned = {p.gpu_id for p in both}
    return both, [e for e in colocated[1] if e.gpu_id not in planned], colocated[2] & blocked


def _checked_amounts(effective_batch, dataset_tokens, epochs, budget_usd, safety_margin, mfu, sc: Scenario,
                     dataset: Any | None):
    """The checked batch, tokens (the dataset's real tokens when given), epochs, budget, margin and utilisation."""
    if dataset is not None and dataset_tokens is not None:
        raise ScenarioError("dataset_tokens", "give the dataset or its token count, not both")
    eff, tokens, ep, budget, margin, u = _check_inputs(effective_batch, dataset_tokens, epochs, budget_usd, safety_margin, mfu, sc)
    tokens = dataset.train_tokens if dataset is not None else tokens
    return eff, tokens, ep, budget, margin, u


def _gpu_counts_for(max_gpus: int, eff: int) -> tuple[tuple, tuple]:
    """Every GPU count up to ``max_gpus``, and those the effective batch can use."""
    all_counts = gpu_counts(max_gpus)
    counts = tuple(n for n in all_counts if n <= eff)  # every GPU needs a sequence per step
    return all_counts, counts


def _named_cards(gpu_ids, sc: Scenario) -> tuple[list[str] | None, list[GPU]]:
    """The cards the user named (``gpu_ids`` or the scenario's ``gpu``), and the cards to search (those, or the catalog)."""
    named = gpu_id_list(gpu_ids) or ([sc.gpu] if sc.gpu else None)
    cards = [get_gpu(g) for g in named] if named else list_gpus()
    return named, cards


def _ranked_plans(search: Search, cards: list[GPU], sc: Scenario, wanted: tuple[str, ...], margin: float, counts: tuple,
                  all_counts: tuple, order: str, dataset: Any | None, ep: float, total: int | None, eff: int,
                  budget: float | None, num_params: int, trainable: int, tokens: int | None, kept: int,
                  deadline: float | None) -> tuple[list[Plan], list[Excluded], set]:
    """The best plan per card and GPU count, ranked; the cards with none and why; the cards that cannot run at all."""
    plans: list[Plan] = []
    excluded: list[Excluded] = []
    blocked = set()
    for g in cards:
        why = _cannot_run(g, sc, wanted)
        if why:
            excluded.append(Excluded(g.gpu_id, why))
            blocked.add(g.gpu_id)
            continue
        limit = limit_bytes(g, margin)
        per_node = node_limit(g, GPUS_PER_NODE)  # several nodes only of cards rented in nodes of 8
        mine = tuple(n for n in counts if n <= per_node or per_node == GPUS_PER_NODE)
        server = search.server_of(g) if search.server_of else 0
        if server is None:
            excluded.append(Excluded(g.gpu_id, f"the vLLM server does not hold the model on {vllm_split.TENSOR_PARALLEL[-1]}"
                                               f" x {g.gpu_id} (16-bit weights in {vllm_split.VLLM_SERVE_UTILIZATION:g} of each)"))
            continue
        mine = tuple(n for n in mine if not server or n + server <= per_node)  # the server shares the node
        lacking = []
        lacks = stack_of(g).lacks
        for n in mine:
            # only settings the card's stack runs compete (Gaudi: no 8-bit AdamW, no fused loss)
            best = search.best(g, n, limit, HOST_RAM_PER_GPU.value, lacks)
            if best is None and lacks and search.best(g, n, limit, HOST_RAM_PER_GPU.value) is not None:
                lacking.append(n)  # it would fit only with what the stack lacks
            elif best is not None:
                best = best if dataset is None else _least_time_with_padding(search, g, n, best, limit, dataset)
                at_mb = int(dataset.processed_at(best[1]) * ep) if dataset is not None else total  # padding varies with mb
                plans.append(_make_plan(search, g, best[0], best[1], limit, eff, at_mb, budget, num_params, trainable,
                                        tokens, kept, deadline))
        if not any(p.gpu_id == g.gpu_id for p in plans):
            excluded.append(Excluded(g.gpu_id, _not_found(g, mine, counts, all_counts, eff, lacking,
                                                          pinned_layout(search.ev.base), _host_bound(search, g, mine, limit, lacks),
                                                          tried_words(search.ev.base, max(mine, default=1)),
                                                          one_gpu_only(search.ev.base))))
    plans.sort(key=lambda p: _rank(p, order))
    return plans, excluded, blocked


def _least_time_with_padding(search: Search, g: GPU, n: int, best: tuple, limit: int, dataset: Any) -> tuple:
    """With a dataset the time is the tokens processed (padding included) times the seconds per token, and padding
    grows with the micro-batch, which the search's choice (seconds per token at one length) does not see: among the
    micro-batches of the chosen setting up to its own that fit, the one that takes least time (8 H100s at 2 x 4 had
    been chosen over 1 x 8, 33 % slower on a dataset of varied lengths)."""
    c, mb = best
    cls = search.classes.get(g.gpu_id, g.gpu_id) or None
    fitting = [m for m in search.micro_batches(n)
               if m == mb or (m < mb and search.fits(c, m, limit, HOST_RAM_PER_GPU.value, cls))]
    return c, min(fitting, key=lambda m: (dataset.processed_at(m) * search._seconds_per_token(c, m, g), -m))


def _host_bound(search, g: GPU, mine: tuple[int, ...], limit: int, lacks: tuple[str, ...]) -> tuple[int, int] | None:
    """(GPUs, host bytes per GPU) of the fewest ``g`` that fit only with more host RAM than :data:`HOST_RAM_PER_GPU`
    allows offloaded state (then that cap, not the card, is why no plan was found); None where none fit anyway."""
    for n in mine:
        if (pick := search.best(g, n, limit, None, lacks)) is not None:
            return n, search.figs.get(pick[0], pick[1], None).host
    return None


def _changes_for_named(named: list[str] | None, blocked: set, ev: Evaluator, sc: Scenario, margin: float,
                       calibration: Calibration | None, user_mfu: float | None, eff: int) -> dict[str, list]:
    """Ranked changes for each named card the scenario does not fit as given (cards that cannot run it excepted)."""
    changes: dict[str, list] = {}
    if not named:
        return changes
    from vramfit.plan.changes import changes_to_fit

    for gid in named:
        g = get_gpu(gid)
        if g.gpu_id not in blocked and not fits(ev.estimate(gpu=g.gpu_id), limit_bytes(g, margin)):
            changes[g.gpu_id] = changes_to_fit(sc, g.gpu_id, safety_margin=margin, calibration=calibration, mfu=user_mfu,
                                              effective_batch=eff, seq_len_at=ev.seq_len_at,
                                              eval_follows_micro=ev.eval_follows_micro)
    return changes


def _report_assumptions(sc: Scenario, u: float, mfu, eff: int, counts: tuple, all_counts: tuple, max_gpus, order: str,
                        deadline: float | None, wanted: tuple[str, ...], margin: float,
                        calibration: Calibration | None, dataset: Any | None) -> list[str]:
    """The plan's assumptions, with the calibration's notes and the dataset's measured lengths when given."""
    assumptions = _plan_assumptions(sc, u, mfu, eff, counts, all_counts, max_gpus, order, deadline, wanted, margin)
    fams = [fc for _, fc in sorted(calibration.families.items())] if calibration is not None else []
    assumptions += [fc.note() for fc in fams]
    assumptions += [fc.speed_note().capitalize() + ": each step time predicted for a card of that family is "
                    "multiplied by it" for fc in fams if fc.speed_factor is not None and mfu is None]
    if (line := stage_time_note(sc)) is not None:
        assumptions.append(line)
    if sc.deepspeed_config is not None and sc.deepspeed_config.trainer_values:
        given = ", ".join(f"{k} {v}" for k, v in sc.deepspeed_config.trainer_values)
        assumptions.append(f"Your DeepSpeed file gives {given}: the HF Trainer refuses it with a plan whose micro-batch, "
                           "accumulation or GPU count makes other values (trainer_config_finalize); write \"auto\" "
                           "there (--export deepspeed writes the plan's own).")
    if dataset is not None:  # the measured lengths replace the packed-dataset assumption
        packed = next(a for a in ASSUMPTIONS if a.startswith("The dataset is packed"))
        assumptions[assumptions.index(packed)] = (
            f"Time from the tokens the GPUs process per epoch of the dataset at each plan's micro-batch, padding "
            f"included ({dataset.processed_tokens:,} at micro-batch {dataset.policy['micro_batch_size']}); time "
            "excludes evaluation, checkpoint writes and start-up.")
    return assumptions


def _plan_assumptions(sc: Scenario, u: float, mfu, eff: int, counts: tuple, all_counts: tuple, max_gpus,
                      order: str, deadline: float | None, wanted: tuple[str, ...], margin: float) -> list[str]:
    out = [definition(margin), *ASSUMPTIONS, *_ranking_assumptions(order, deadline, wanted)]
    out.insert(0, f"Precision {sc.precision.value}: {sc.precision.meaning}. Without --precision each framework's "
               "default applies (`vramfit estimate --help`).")
    out.insert(2, f"Utilisation {u:.0%} of the dense BF16 peak (set by --mfu)" if mfu is not None else
               "Speed by mechanism: matmuls at the card's measured matmul rate, FlashAttention, memory-bound ops, "
               "de-quantization, launch and ZeRO-3 overheads, GPU links (docs/planner.md 'Time and cost'). Against "
               f"{SPEED_ROWS} published and measured throughputs its tokens/s are off by {SPEED_ERROR_MEDIAN:.0%} at the median and "
               f"{SPEED_ERROR_P90:.0%} at p90 (benchmarks/speed_accuracy.py): read times and costs with that band.")
    cap = parse_count("max_gpus", max_gpus, 1, 100_000)  # as gpu_counts reads it ('1k' too)
    if cap not in all_counts:  # a cap between the counts planned: said, not dropped silently
        out.append(f"max_gpus {cap}: plans take 1, 2, 4 or {GPUS_PER_NODE} GPUs, then whole nodes of "
                   f"{GPUS_PER_NODE} (2, 4, 8 ... nodes), so at most {max(all_counts)} here.")
    if counts != all_counts:
        out.append(f"Effective batch {eff}: at most {max(counts)} GPUs (each needs a sequence per step); "
                   "give effective_batch to consider more.")
    if max(counts) > GPUS_PER_NODE:
        out.append(NODES_ASSUMPTION)
    out.append(f"Host RAM: at most {HOST_RAM_PER_GPU.value / GB:.0f} GB per GPU for offloaded state ({HOST_RAM_PER_GPU.source}).")
    return out


def _make_plan(search: Search, g: GPU, c: Config, mb: int, limit: int, eff: int, total: int | None, budget: float | None,
               num_params: int, trainable: int, tokens: int | None, kept: int, deadline: float | None) -> Plan:
    ev = search.ev
    per = search.per_gpu(c.num_gpus)
    keys: dict[str, Any] = c.keys(mb, per // mb)
    cls = search.classes.get(g.gpu_id, g.gpu_id)
    r = ev.estimate(**keys, gpu=cls or None)  # same figure as gpu=g: one estimate per estimator class
    if cls and cls != g.gpu_id and r.peak.device_bytes == get_gpu(cls).usable_bytes:  # it filled the class's card
        r = ev.estimate(**keys, gpu=g.gpu_id)  # (estimate.on_card): this card's own figure
    sc = r.scenario
    scenario = {**search.scenario_dict(sc), "gpu": g.gpu_id}
    speed = search.speed(c, mb, g, paged=result_paging(r, limit) or 0)  # what pages out on this card
    hours = run_hours(total, speed.tokens_per_s) if (speed and total) else None
    server = search.server_of(g) if search.server_of else 0  # vLLM server cards on the node, paid for too
    billed = billed_gpus(g, c.num_gpus + server)
    lo = run_cost(hours, billed, g.price_low) if hours is not None else None
    hi = run_cost(hours, billed, g.price_high) if hours is not None else None
    per_m = (g.price_low * billed / (speed.tokens_per_s * 3600) * 1e6) if (speed and g.price_low is not None) else None
    within = None if budget is None or lo is None else lo <= budget
    host = r.host_bytes  # per GPU
    # a class card's figure, on this card: reserved stops at what it holds (estimate.on_card)
    reserved, device, _ = on_card(g, r.peak.reserved_bytes, r.peak.device_bytes, r.peak.required_bytes,
                                  r.component(PAGED_COMPONENT))
    return Plan(
        gpu_id=g.gpu_id, gpu_name=g.name, num_gpus=c.num_gpus, micro_batch_size=mb, grad_accum=sc.grad_accum,
        effective_batch=per * c.num_gpus, gradient_checkpointing=c.gradient_checkpointing, optimizer=c.optimizer,
        loss=c.loss, parallelism=sc.parallelism.value, offload=c.offload, scenario=scenario,
        allocated_bytes=r.peak.allocated_bytes, reserved_bytes=reserved, device_bytes=device,
        usable_bytes=g.usable_bytes, limit_bytes=limit, headroom_bytes=limit - r.peak.required_bytes + (result_paging(r, limit) or 0),
        required_bytes=r.peak.required_bytes,
        host_ram_bytes=host * sc.gpus_per_node, speed=speed, hours=hours, usd_per_gpu_hour_low=g.price_low,
        usd_per_gpu_hour_high=g.price_high, cost_usd_low=lo, cost_usd_high=hi, usd_per_million_tokens=per_m,
        within_budget=within, disk=disk_needed(sc, num_params, trainable, tokens, kept, search.raw_bytes),
        price_details=g.price_details,
        notes=_notes(g, c, ev.base, eff, per * c.num_gpus, host, num_params) + ((vllm_split.note(server),) if server else ())
        + _speed_note(search, g),
        billed_gpus=billed, price_basis=price_basis(g), stack=stack_of(g).name,
        meets_deadline=None if deadline is None or hours is None else hours <= deadline,
        measured_path=bool(r.accuracy and r.accuracy["measured_path"]),
        accuracy_note=r.accuracy["note"] if r.accuracy else "", hours_range=time_band(hours, search.mfu),
    )


def _speed_note(search: Search, g: GPU) -> tuple[str, ...]:
    """The plan's note when its times carry the user's measured step-time factor (``Search.speed``)."""
    fc = search.ev.calibration.for_card(g.gpu_id) if search.ev.calibration is not None else None
    timed = fc is not None and fc.speed_factor is not None and search.mfu is None and card_speed(g) is not None
    return (fc.speed_note(),) if timed else ()


#: within_budget / meets_deadline -> rank: True (known to), None (none given, or no price or time to tell), False
_KNOWN_RANK = {True: 0, None: 1, False: 2}


def _rank(p: Plan, sort: str = "cost") -> tuple:
    """Within budget and deadline first (under a budget, an unpriced plan, whose cost is unknown, after those known
    to be within it and before those over it; the same for an untimed plan under a deadline); then cheapest per
    token (``cost``) or fastest (``time``)."""
    cost = (p.usd_per_million_tokens is None, p.usd_per_million_tokens or 0.0)
    speed = (p.tokens_per_s is None, -(p.tokens_per_s or 0.0))
    return (_KNOWN_RANK[p.within_budget], _KNOWN_RANK[p.meets_deadline],
            *(cost + speed if sort == "cost" else speed + cost), p.num_gpus)


def check_gpu_file(path: str) -> list[str]:
    """Load a user GPU file (errors keyed ``gpus``); returns the ids it adds or changes."""
    from vramfit.gpus import load_user_gpus

    if not isinstance(path, str) or not path.strip():
        raise ScenarioError("gpus", f"must be a path to a CSV file, got {path!r}")
    return load_user_gpus(path)
