"""Parallel layouts the planner tries (tensor parallel inside a node, pipeline and data parallel across
nodes) and the work of one step under them.

Placement is torchtitan's device mesh, ``("pp", "dp_replicate", "fsdp", "tp")`` outermost to innermost
(torchtitan v0.3.0 ``distributed/parallel_dims.py``): tensor-parallel ranks are neighbours, inside one node
when ``tp`` divides the GPUs of a node; pipeline stages are the farthest apart, on other nodes once
``tp x dp x cp`` fills a node. Traffic per GPU per optimizer step (``A`` = one micro-batch's activation,
``tokens / c x hidden x 2`` bytes, ``m`` = micro-batches per step):

- tensor parallel: per layer and micro-batch two all-reduces in forward and two in backward (Shoeybi et
  al. 2019, Megatron-LM, sec. 3, operators ``f``/``g``; with sequence parallel the all-gather +
  reduce-scatter pairs move the same bytes, Korthikanti et al. 2022 sec. 4.2.2), two more when full
  recomputation repeats the forward; a ring all-reduce moves ``2 (t-1)/t x A`` per rank (nccl-tests
  doc/PERFORMANCE.md). Blocking: each layer waits for it (no async TP assumed);
- pipeline parallel: the bubble, ``(p - 1) / (m v)`` of the compute (Narayanan et al. 2021 sec. 2.2.1-2.2.2),
  and each micro-batch's activation sent forward and its gradient back, ``2 x A / t`` per stage boundary;
  interleaved with ``v`` chunks per rank, each micro-batch crosses every rank ``v`` times, so ``v`` times the
  sends (Narayanan et al. 2021 sec. 2.2.2: "the amount of communication also increases by v");
- context parallel: the ring passes every other rank's keys and values once in forward and, with their
  gradients, twice in backward: ``3 (c-1)/c x`` one layer's K,V per micro-batch (torch v2.13.0
  ``_context_parallel/_attention.py`` ring), overlapped with attention;
- data parallel (FSDP over ``dp_shard x cp``): the engine's ring traffic of the rank's ``1/(t p)`` share of
  the model. Rings that span nodes share the node's NICs with the other ``gpus_per_node / r`` rings of the
  node (``r`` = ranks of one ring inside a node), so their bytes count that many times at the node's rate.
  HSDP (``dp_replicate x dp_shard``, ``shard_scope=node``): gathers and reduce-scatters inside the node, the
  gradient shards all-reduced across the replicas (:func:`vramfit.plan.traffic.split_nodes`), those rings
  sharing the NICs the same way;
- expert parallel: per MoE layer and micro-batch the dispatch and the combine all-to-all in forward, both again
  in backward, again with full recomputation (torchtitan v0.3.0 ``models/common/token_dispatcher.py``
  ``AllToAllTokenDispatcher``), each sending ``(ep-1)/ep`` of the rank's ``tokens / (t c) x top_k x hidden``
  (nccl-tests doc/PERFORMANCE.md: alltoall bus bandwidth ``= algbw x (n-1)/n``). Blocking: the experts wait for
  their tokens. The ``ep`` ranks are innermost in torchtitan's sparse mesh ``("pp", "dp_replicate", "efsdp",
  "ep")``, so inside a node when ``ep`` divides its GPUs.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from vramfit.choices import Checkpointing, Framework, Method, ShardScope
from vramfit.estimate.ranks import data_parallel_view
from vramfit.gpus import GPUS_PER_NODE

if TYPE_CHECKING:
    from vramfit.models.spec import ModelSpec
    from vramfit.plan.throughput import ModelFlops, Work
    from vramfit.scenario import Scenario

#: Tensor-parallel degrees tried (within a node of 8 over NVLink), pipeline degrees tried (across nodes).
TP_DEGREES = (2, 4, 8)
PP_DEGREES = (1, 2, 4, 8)
#: Context-parallel degrees tried, with ``tp x cp`` inside a node: the ring passes keys and values every layer
#: (torchtitan's mesh puts ``cp`` just outside ``tp``, so such a ring stays on NVLink).
CP_DEGREES = (1, 2, 4, 8)
#: Context parallel is tried from this sequence length, where the engines that ship it start using it: NVIDIA
#: NeMo's long-context recipes turn CP on for their 16k and 64k Llama 3 recipes, not for the default 8k ones
#: (docs.nvidia.com/nemo-framework/user-guide/latest/longcontext/index.html, "Long Context Recipes").
CP_MIN_SEQ = 16384
#: Interleaved 1F1B is tried with torchtitan's default of two model chunks per pipeline rank (v0.3.0
#: ``distributed/pipeline_parallel.py``: ``stages_per_rank = 1 if is_single_stage_schedule else 2``).
VIRTUAL_STAGES = 2
#: Expert-parallel degrees tried for mixture-of-experts models: whole experts per rank (they divide the routed
#: experts, torchtitan ``moe_sharding.py`` ``Shard(0)`` on the expert dim) over ranks of one node (``ep`` is innermost
#: in torchtitan's sparse mesh, so such a group's all-to-alls stay on NVLink), borrowed from the ``dp_shard x cp x tp``
#: ranks (:func:`vramfit.layout_keys.expert_region`).
EP_DEGREES = (2, 4, 8)
SEP = "+"
_PART = re.compile(r"^(tp|pp|vpp|cp|ep)(\d+)$")


class Degrees(NamedTuple):
    """A plan's engine parallelism and model-parallel degrees (``vpp``: model chunks per pipeline rank; ``ep``: the
    expert-parallel degree, borrowed from the data-parallel ranks)."""

    parallelism: str
    tp: int = 1
    pp: int = 1
    cp: int = 1
    vpp: int = 1
    ep: int = 1


def name(parallelism: str, tp: int = 1, pp: int = 1, cp: int = 1, vpp: int = 1, ep: int = 1) -> str:
    """A plan's sharding name with its layout, e.g. ``fsdp+tp8+pp2+vpp2+cp2+ep8`` (``fsdp`` alone without one)."""
    parts = [parallelism] + [f"{k}{d}" for k, d in (("tp", tp), ("pp", pp), ("vpp", vpp), ("cp", cp), ("ep", ep))
                             if d > 1]
    return SEP.join(parts)


def parse(text: str) -> Degrees:
    """The :class:`Degrees` of a plan's sharding name (the inverse of :func:`name`)."""
    head, *rest = text.split(SEP)
    deg = {m.group(1): int(m.group(2)) for m in map(_PART.match, rest) if m}
    return Degrees(head, **deg)


def searched(base: Scenario) -> bool:
    """Layouts are tried where the engine that runs them is the scenario's (torchtitan, full fine-tuning)."""
    return base.framework is Framework.TORCHTITAN and base.method is Method.FULL


def interleaving_pays(tp: int, pp: int, cp: int, tie: float) -> bool:
    """Whether interleaving can make a pipeline more than ``tie`` faster than its 1F1B twin.

    Interleaving holds at least as much (its first rank ``1 + (p-1)/(p v)`` times 1F1B's micro-batches,
    :func:`vramfit.estimate.ranks.in_flight`) and sends ``v`` times more; what it saves is the bubble, from
    ``b = (p-1)/m`` to ``b/v`` of the compute. The bubble is largest with the fewest micro-batches, ``m = tp pp cp``
    (one per GPU of the group), so the step is at most ``b (1 - 1/v) / (1 + b)`` shorter; when that is within the
    planner's tie the 1F1B twin (fewer compromises, less memory) is the pick whenever the interleaved one would be.
    """
    b = (pp - 1) / (tp * pp * cp)
    return b * (1 - 1 / VIRTUAL_STAGES) / (1 + b) > 1 - 1 / (1 + tie)


def layouts_for(n: int, spec: ModelSpec, seq_len: int = 0, tie: float = 0.0, expert_parallel: bool = False) -> list[Degrees]:
    """Layouts for ``n`` GPUs: tp divides the heads and a node, ``tp x cp`` inside a node with ``seq_len`` long
    enough for context parallel (:data:`CP_MIN_SEQ`) and split into ``2 cp`` chunks, a layer per pipeline chunk;
    a pipeline also interleaved (:data:`VIRTUAL_STAGES` chunks per rank) where that can beat ``tie``
    (:func:`interleaving_pays`); on several nodes, layouts without a pipeline also as HSDP (sharded over the
    node's data-parallel ranks, replicated across nodes; with a pipeline the stages already sit on other nodes,
    and the search stays within its time budget); with ``expert_parallel`` (the engine runs it) and a
    mixture-of-experts ``spec``, each also with the expert-parallel degrees of :func:`expert_layouts`."""
    out = []
    node = min(n, GPUS_PER_NODE)
    cps = [c for c in CP_DEGREES if c == 1 or (seq_len >= CP_MIN_SEQ and seq_len % (2 * c) == 0)]
    for tp in (1, *TP_DEGREES):
        if tp > node or spec.num_attention_heads % tp or spec.num_key_value_heads % tp:
            continue
        for cp in (c for c in cps if tp * c <= node):
            for pp in PP_DEGREES:
                if (tp, pp, cp) == (1, 1, 1) or n % (tp * pp * cp) or pp > spec.num_hidden_layers:
                    continue
                out.append(Degrees("fsdp", tp, pp, cp))
                if pp == 1 and n > GPUS_PER_NODE:
                    out.append(Degrees("hsdp", tp, pp, cp))
                if pp > 1 and pp * VIRTUAL_STAGES <= spec.num_hidden_layers and interleaving_pays(tp, pp, cp, tie):
                    out.append(Degrees("fsdp", tp, pp, cp, VIRTUAL_STAGES))
    return out + (expert_layouts(n, spec.num_experts, out) if expert_parallel and spec.num_experts else [])


def runs_expert_parallel(base: Scenario) -> bool:
    """Whether the scenario's engine runs expert parallelism (its profile's ``expert_parallel``)."""
    from vramfit.estimate.framework import scenario_profile

    return scenario_profile(base).expert_parallel


def plain_expert_parallel(d: Degrees) -> bool:
    """FSDP or HSDP with expert parallel and no tensor, pipeline or context parallel."""
    return d.ep > 1 and d.tp * d.pp * d.cp == 1


def expert_layouts(n: int, experts: int, dense: list[Degrees]) -> list[Degrees]:
    """FSDP and HSDP alone and each 1F1B/no-pipeline layout of ``dense``, with the largest expert-parallel degree
    of :data:`EP_DEGREES` that divides the ``experts``, fits a node and divides the ranks the expert mesh borrows
    from (torchtitan v0.3.0 ``config/configs.py``: "dp_shard * cp * tp == efsdp * ep").

    One degree per layout keeps the search within its time budget; the largest is the one that can win: what
    expert parallel saves, the experts gathered per layer and their FSDP ring bytes, shrinks as ``1/ep``, while its
    all-to-all grows only as ``(ep-1)/ep`` (from 1/2 to 7/8 of the routed tokens, :func:`expert_parallel_work`).
    Interleaved pipelines are left without: their 1F1B twin with the same degree holds less and is tried."""
    from vramfit.layout_keys import expert_region

    nodes = max(1, n // GPUS_PER_NODE)
    bases = [Degrees("fsdp"), *([Degrees("hsdp")] if n > GPUS_PER_NODE else []), *(d for d in dense if d.vpp == 1)]
    out = []
    for d in bases:
        region = expert_region(n, nodes, d.tp, d.pp, d.parallelism == "hsdp")
        fits = [ep for ep in EP_DEGREES if ep <= min(n, GPUS_PER_NODE) and experts % ep == 0 and region % ep == 0]
        out += [d._replace(ep=fits[-1])] if fits else []
    return out


def _ring_placement(sc: Scenario, ranks: int) -> tuple[int, int]:
    """(ranks of one data-parallel ring inside a node, nodes it spans), tp innermost in the mesh."""
    per_node = max(1, sc.gpus_per_node // sc.tensor_parallel)
    inside = min(ranks, per_node)
    return inside, max(1, ranks // inside)


def model_parallel_work(sc: Scenario, mf: ModelFlops, trainable: int, step_work: Callable) -> Work:
    """The per-GPU work of one step of a tensor/pipeline/context-parallel run (module docstring)."""
    t, p, c = sc.tensor_parallel, sc.pipeline_parallel, sc.context_parallel
    view = data_parallel_view(sc)
    hsdp = view.shard_scope is ShardScope.NODE and view.num_nodes > 1
    # flat FSDP: ring bytes, placed below; HSDP: split inside/across by traffic.split_nodes on the view
    w = step_work(view if hsdp else dataclasses.replace(view, num_nodes=1), mf, trainable)
    share, mp = t * p * c, t * p
    ga, g = sc.grad_accum, sc.gpus_per_node
    act = sc.micro_batch_size * (sc.seq_len + mf.image_lm_tokens) / c * mf.hidden_size * sc.precision.compute_bytes
    layers = math.ceil(mf.num_layers / p)
    tp_colls = 4 + (2 if sc.gradient_checkpointing in (Checkpointing.FULL, Checkpointing.OFFLOAD) else 0)
    tp_bytes = tp_colls * 2 * (t - 1) / t * act * layers * ga
    kv = sc.micro_batch_size * (sc.seq_len + mf.image_lm_tokens) / c * mf.kv_width / t * sc.precision.compute_bytes
    cp_bytes = 3 * (c - 1) / c * kv * layers * ga if c > 1 else 0.0
    dp_bytes = (w.peer_bytes + w.net_bytes) / mp
    waits = (w.exposed_peer_bytes + w.exposed_net_bytes) / mp  # ZeRO-3's unhidden gathers (none for FSDP)
    inside, nodes = _ring_placement(sc, view.num_gpus)
    peer, net, hops, exposed = dp_bytes, 0.0, 0, (waits, 0.0)
    if hsdp:  # shards gathered inside the node; each replica ring (one per node rank) shares the node's NICs
        peer, net = w.peer_bytes / mp, w.net_bytes / mp * (g / view.gpus_per_node)
        hops = 2 * (view.num_nodes - 1) * layers * ga
    elif nodes > 1:
        peer, net, hops = 0.0, dp_bytes * (g / inside), 2 * (nodes - 1) * layers * ga
        exposed = (0.0, waits * (g / inside))
    if t * c <= g:
        peer += cp_bytes
    else:
        net += cp_bytes
    pp_net = t * view.num_gpus >= g  # the next stage is on another node
    v = sc.pipeline_virtual_stages
    return dataclasses.replace(
        w, flops=w.flops / share, peer_bytes=peer, net_bytes=net, net_hops=hops,
        exposed_peer_bytes=exposed[0], exposed_net_bytes=exposed[1],
        tokens_per_step=w.tokens_per_step // c, mm_flops_mb=w.mm_flops_mb / share,
        attn_flops_mb=w.attn_flops_mb / share, elem_bytes_mb=w.elem_bytes_mb / share, layers=layers,
        opt_bytes=w.opt_bytes / mp, stream_bytes=w.stream_bytes / share, tp_bytes=tp_bytes,
        bubble=(p - 1) / (ga * v) if p > 1 else 0.0, pp_bytes=(2 * act / t * ga * v) if p > 1 else 0.0, pp_net=pp_net,
    )


def expert_parallel_work(sc: Scenario, mf: ModelFlops, w: Work) -> Work:
    """``w`` (the run without expert parallel) plus the all-to-all of its routed tokens, less the FSDP traffic of
    the routed experts inside the node (module docstring)."""
    ep, passes = sc.expert_parallel, 4 + (2 if sc.gradient_checkpointing in (Checkpointing.FULL,
                                                                             Checkpointing.OFFLOAD) else 0)
    tokens = sc.micro_batch_size * (sc.seq_len + mf.image_lm_tokens) / (sc.tensor_parallel * sc.context_parallel)
    moved = passes * (ep - 1) / ep * tokens * mf.routed_elems_per_token * sc.precision.compute_bytes
    return dataclasses.replace(w, ep_bytes=moved * sc.grad_accum / sc.pipeline_parallel,
                               ep_net=ep > sc.gpus_per_node, peer_bytes=w.peer_bytes * _expert_ring_share(sc, mf))


def _expert_ring_share(sc: Scenario, mf: ModelFlops) -> float:
    """The share of the data-parallel ring bytes inside a node left under expert parallel.

    torchtitan v0.3.0 ``distributed/parallel_dims.py`` shards the routed experts with FSDP over the ``efsdp`` mesh,
    ``dp_shard x cp x tp / ep`` ranks, each holding ``E / ep`` whole experts; without expert parallel every rank
    gathers its ``1/t`` of every expert over the ``dp_shard x cp`` ranks. A ring moves ``(g-1)/g`` of what it
    gathers per rank (nccl-tests doc/PERFORMANCE.md), so the experts' share of the bytes is scaled by
    ``(t/ep) x ((e-1)/e) / ((d-1)/d)`` (``e`` = efsdp, ``d`` = dp_shard x cp), none at all when ``ep`` covers the
    region. Across nodes the NICs of a node carry every expert's shard either way (``ep`` rings of ``E/ep``
    experts each), so the network's bytes stay as they are."""
    from vramfit.layout_keys import expert_region

    if not mf.num_params or not mf.routed_expert_params:
        return 1.0
    t, ep = sc.tensor_parallel, sc.expert_parallel
    region = expert_region(sc.num_gpus, sc.num_nodes, t, sc.pipeline_parallel, sc.shard_scope is ShardScope.NODE)
    d, e = region // t, region // ep
    if d <= 1:
        return 1.0
    scale = (t / ep) * ((e - 1) / e) / ((d - 1) / d)
    share = mf.routed_expert_params / mf.num_params
    return 1.0 - share + share * scale


def blocking_seconds(w: Work, peer_bytes_s: float, net: tuple[float, float]) -> float:
    """Seconds of tensor-parallel collectives (blocking: each layer waits for its all-gather/reduce-scatter),
    pipeline sends and expert-parallel all-to-alls, over the link they cross (``w.pp_net``, ``w.ep_net``: the
    network's bus rate)."""
    if not (w.tp_bytes or w.pp_bytes or w.ep_bytes):
        return 0.0
    pp_rate = net[0] if (w.pp_net and net[0]) else peer_bytes_s
    ep_rate = net[0] if (w.ep_net and net[0]) else peer_bytes_s
    return w.tp_bytes / peer_bytes_s + w.pp_bytes / pp_rate + w.ep_bytes / ep_rate
