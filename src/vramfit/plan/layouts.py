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
- context parallel: the ring passes every other rank's keys and values once in forward and, with their
  gradients, twice in backward: ``3 (c-1)/c x`` one layer's K,V per micro-batch (torch v2.13.0
  ``_context_parallel/_attention.py`` ring), overlapped with attention;
- data parallel (FSDP over ``dp_shard x cp``): the engine's ring traffic of the rank's ``1/(t p)`` share of
  the model. Rings that span nodes share the node's NICs with the other ``gpus_per_node / r`` rings of the
  node (``r`` = ranks of one ring inside a node), so their bytes count that many times at the node's rate.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from vramfit.choices import Checkpointing, Framework, Method
from vramfit.estimate.ranks import data_parallel_view
from vramfit.gpus import GPUS_PER_NODE

if TYPE_CHECKING:
    from vramfit.models.spec import ModelSpec
    from vramfit.plan.throughput import ModelFlops, Work
    from vramfit.scenario import Scenario

#: Tensor-parallel degrees tried (within a node of 8 over NVLink), pipeline degrees tried (across nodes).
TP_DEGREES = (2, 4, 8)
PP_DEGREES = (1, 2, 4, 8)
SEP = "+"


def name(parallelism: str, tp: int, pp: int) -> str:
    """A plan's sharding name with its layout, e.g. ``fsdp+tp8+pp2`` (``fsdp`` alone without one)."""
    return parallelism + (f"{SEP}tp{tp}" if tp > 1 else "") + (f"{SEP}pp{pp}" if pp > 1 else "")


def parse(text: str) -> tuple[str, int, int]:
    """(engine parallelism, tp, pp) of a plan's sharding name."""
    parts = text.split(SEP)
    deg = {p[:2]: int(p[2:]) for p in parts[1:]}
    return parts[0], deg.get("tp", 1), deg.get("pp", 1)


def searched(base: Scenario) -> bool:
    """Layouts are tried where the engine that runs them is the scenario's (torchtitan, full fine-tuning)."""
    return base.framework is Framework.TORCHTITAN and base.method is Method.FULL


def layouts_for(n: int, spec: ModelSpec) -> list[tuple[int, int]]:
    """(tp, pp) pairs for ``n`` GPUs: tp divides the heads and a node, pp leaves a layer per stage."""
    out = []
    for tp in (1, *TP_DEGREES):
        if tp > min(n, GPUS_PER_NODE) or spec.num_attention_heads % tp or spec.num_key_value_heads % tp:
            continue
        for pp in PP_DEGREES:
            if (tp, pp) != (1, 1) and n % (tp * pp) == 0 and pp <= spec.num_hidden_layers:
                out.append((tp, pp))
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
    single = dataclasses.replace(view, num_gpus=view.num_gpus, num_nodes=1)  # ring bytes, placed below
    w = step_work(single, mf, trainable)
    share, mp = t * p * c, t * p
    ga, g = sc.grad_accum, sc.gpus_per_node
    act = sc.micro_batch_size * sc.seq_len / c * mf.hidden_size * sc.precision.compute_bytes
    layers = math.ceil(mf.num_layers / p)
    tp_colls = 4 + (2 if sc.gradient_checkpointing in (Checkpointing.FULL, Checkpointing.OFFLOAD) else 0)
    tp_bytes = tp_colls * 2 * (t - 1) / t * act * layers * ga
    kv = sc.micro_batch_size * sc.seq_len / c * mf.kv_width / t * sc.precision.compute_bytes
    cp_bytes = 3 * (c - 1) / c * kv * layers * ga if c > 1 else 0.0
    dp_bytes = (w.peer_bytes + w.net_bytes) / mp
    waits = (w.exposed_peer_bytes + w.exposed_net_bytes) / mp  # ZeRO-3's unhidden gathers (none for FSDP)
    inside, nodes = _ring_placement(sc, view.num_gpus)
    peer, net, hops, exposed = dp_bytes, 0.0, 0, (waits, 0.0)
    if nodes > 1:
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
        bubble=(p - 1) / (ga * v) if p > 1 else 0.0, pp_bytes=(2 * act / t * ga) if p > 1 else 0.0, pp_net=pp_net,
    )


def blocking_seconds(w: Work, peer_bytes_s: float, net: tuple[float, float]) -> float:
    """Seconds of tensor-parallel collectives (blocking: each layer waits for its all-gather/reduce-scatter)
    and pipeline sends, over the link they cross (``w.pp_net``: the network's bus rate)."""
    if not (w.tp_bytes or w.pp_bytes):
        return 0.0
    pp_rate = net[0] if (w.pp_net and net[0]) else peer_bytes_s
    return w.tp_bytes / peer_bytes_s + w.pp_bytes / pp_rate
