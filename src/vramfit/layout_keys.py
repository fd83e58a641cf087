"""The scenario keys of model parallelism (tensor, pipeline, context) and their rules, kept apart from
:mod:`vramfit.scenario` so that its table stays a table.

The layout is torchtitan's (v0.3.0, ``torchtitan/distributed/parallel_dims.py`` ``ParallelDims``): the world
is ``dp_replicate x dp_shard x cp x tp x pp`` ranks and FSDP shards over ``dp_shard x cp`` (its "fsdp"
mesh, ``fsdp = self.dp_shard * self.cp``). Rules that need the model (heads, layers) are checked by
:func:`check_against_model` when the architecture is known.
"""

from __future__ import annotations

from typing import Any

from vramfit.choices import Framework, Method, Parallelism, PipelineSchedule, ShardScope, Stage
from vramfit.errors import ScenarioError

LAYOUT_KEYS = ("tensor_parallel", "pipeline_parallel", "pipeline_schedule", "pipeline_virtual_stages",
               "context_parallel", "expert_parallel")


def LAYOUT_FIELDS(Field, CH, INT, max_gpus: int) -> tuple:  # noqa: N802, N803 - rows of the scenario table
    """The model-parallel rows of :data:`vramfit.scenario.FIELDS` (same row builder as the others)."""
    return (
        Field("tensor_parallel", INT, "Tensor-parallel degree: each block's linears split over this many GPUs "
              "(best inside a node over NVLink); must divide the attention and key/value heads.",
              ("Tensor parallel", "Paralelismo de tensor"), unit="GPUs", limits=(1, max_gpus)),
        Field("pipeline_parallel", INT, "Pipeline-parallel degree: the layers split into this many stages, one per "
              "GPU group; the first stage holds the embeddings and the most micro-batches in flight.",
              ("Pipeline stages", "Estágios de pipeline"), unit="stages", limits=(1, max_gpus)),
        Field("pipeline_schedule", CH, "Pipeline schedule: 1f1b, or interleaved-1f1b with "
              "pipeline_virtual_stages model chunks per GPU (smaller bubble, more activations in flight).",
              ("Pipeline schedule", "Agenda do pipeline"), choices=PipelineSchedule),
        Field("pipeline_virtual_stages", INT, "Model chunks per pipeline rank (interleaved-1f1b; 1 for 1f1b).",
              ("Virtual stages per GPU", "Estágios virtuais por GPU"), unit="chunks", limits=(1, 1024)),
        Field("context_parallel", INT, "Context-parallel degree: each sequence split over this many GPUs (ring "
              "attention); seq_len must divide into 2 × this many chunks.",
              ("Context parallel", "Paralelismo de contexto"), unit="GPUs", limits=(1, max_gpus)),
        Field("expert_parallel", INT, "Expert-parallel degree (MoE models): the routed experts split over this many "
              "GPUs, whole experts each, borrowed from the FSDP × tensor-parallel ranks; must divide the experts.",
              ("Expert parallel", "Paralelismo de especialistas"), unit="GPUs", limits=(1, max_gpus)),
    )


def _refuse(key: str, why: str, valid: list[str] | None = None) -> None:
    raise ScenarioError(key, why, valid)


def check_layout_keys(kw: dict[str, Any]) -> None:
    """Reject impossible model-parallel layouts with one line naming the key (after parallelism is set)."""
    t, p, c = kw.get("tensor_parallel", 1), kw.get("pipeline_parallel", 1), kw.get("context_parallel", 1)
    sched = kw.get("pipeline_schedule", PipelineSchedule.ONE_F_ONE_B)
    v = kw.get("pipeline_virtual_stages", 1)
    if sched is PipelineSchedule.INTERLEAVED and p == 1:
        _refuse("pipeline_schedule", "interleaved-1f1b needs pipeline_parallel of 2 or more", ["1f1b"])
    if sched is PipelineSchedule.ONE_F_ONE_B and v != 1:
        _refuse("pipeline_virtual_stages", "more than one model chunk per GPU needs pipeline_schedule=interleaved-1f1b",
                ["1"])
    if sched is PipelineSchedule.INTERLEAVED and v < 2:
        _refuse("pipeline_virtual_stages", "interleaved-1f1b needs 2 or more model chunks per GPU")
    m = kw.get("grad_accum", 1)
    if p > 1 and sched is PipelineSchedule.ONE_F_ONE_B and m < p:
        # torch v2.13.0 distributed/pipelining/schedules.py Schedule1F1B: "Number of microbatches (m) must be
        # greater than or equal to the number of stages (p)"
        _refuse("grad_accum", f"is the pipeline's micro-batches per step and must be at least pipeline_parallel ({p}) "
                              f"for 1f1b (torch's Schedule1F1B); got {m}")
    if p > 1 and sched is PipelineSchedule.INTERLEAVED and m % max(1, m // p):
        # ScheduleInterleaved1F1B: n_microbatches must be a multiple of the rounds, max(1, m // p)
        _refuse("grad_accum", f"must be a multiple of its rounds of {p} micro-batches for interleaved-1f1b "
                              f"(torch's ScheduleInterleaved1F1B); got {m}")
    e = kw.get("expert_parallel", 1)
    if t * p * c * e == 1:
        return
    world = kw.get("num_gpus", 1)
    if world % (t * p * c):
        _refuse("num_gpus", f"must be a multiple of tensor_parallel × pipeline_parallel × context_parallel "
                            f"({t} × {p} × {c} = {t * p * c}); got {world}", [str(t * p * c * k) for k in (1, 2, 4, 8)])
    if kw.get("framework", Framework.HF) is not Framework.TORCHTITAN:
        # torchtitan is the engine whose tensor/pipeline/context sharding is modelled and exported
        _refuse("framework", "tensor, pipeline, context and expert parallelism are modelled as torchtitan runs them; "
                             "set framework=torchtitan", ["torchtitan"])
    if kw.get("method", Method.LORA) is not Method.FULL:
        _refuse("method", "torchtitan trains every weight: model parallelism needs method=full", ["full"])
    if kw.get("stage", Stage.SFT) is not Stage.SFT:
        _refuse("stage", "model parallelism is modelled for supervised fine-tuning only", ["sft"])
    if kw["parallelism"] not in (Parallelism.NONE, Parallelism.DDP, Parallelism.FSDP):
        _refuse("parallelism", "torchtitan combines tensor/pipeline/context parallelism with FSDP2 or plain "
                               "replication", ["fsdp", "ddp"])
    if kw.get("shard_scope") is ShardScope.NODE:
        _check_hsdp(world, kw.get("num_nodes", 1), t, p, c)
    if e > 1:
        _check_ep(kw, world, t, p, e)
    seq = kw.get("seq_len", 2048)
    if seq % seq_len_multiple(c):
        _refuse("context_parallel", f"seq_len ({seq}) must split into 2 × context_parallel = {2 * c} equal chunks "
                                    "(torch's head-tail load balancer)")


def seq_len_multiple(context_parallel: int) -> int:
    """What ``seq_len`` must be a multiple of: under context parallelism torch's head-tail load balancer splits each
    sequence into 2 x ``context_parallel`` equal chunks (torch v2.13.0 distributed/tensor/experimental/
    _context_parallel/_load_balancer.py _HeadTailLoadBalancer: ``if seq_length % (world_size * 2) != 0: raise``); 1
    without it."""
    return 2 * context_parallel if context_parallel > 1 else 1


def hsdp_group(world: int, nodes: int, t: int, p: int) -> int:
    """HSDP beside model parallelism: the data-parallel ranks (``dp_shard x cp``) of one node, over which FSDP
    shards; the other data-parallel ranks are replicas (torchtitan ``ParallelDims``: ``dp_replicate x dp_shard``,
    the mesh ``("pp", "dp_replicate", "fsdp", "tp")`` putting ``tp`` then ``fsdp`` innermost)."""
    ranks = world // (t * p)
    return max(1, min(ranks, world // nodes // t))


def _check_hsdp(world: int, nodes: int, t: int, p: int, c: int) -> None:
    g = world // nodes
    if t * c > g:
        _refuse("shard_scope", f"HSDP shards inside a node: tensor_parallel × context_parallel ({t * c}) must fit its "
                               f"{g} GPUs", ["all"])
    ranks, group = world // (t * p), hsdp_group(world, nodes, t, p)
    if ranks % group:
        _refuse("shard_scope", f"HSDP needs whole nodes of data-parallel ranks: {ranks} ranks do not split into "
                               f"replicas of {group}; make pipeline_parallel divide num_nodes ({nodes})", ["all"])


def expert_region(world: int, nodes: int, t: int, p: int, hsdp: bool) -> int:
    """The ranks one copy of the experts spreads over, ``dp_shard x cp x tp`` (torchtitan v0.3.0
    ``config/configs.py`` ``expert_parallel_degree``: "dp_shard * cp * tp == efsdp * ep"; ``pp`` and
    ``dp_replicate`` are outer): the world over the pipeline stages and the HSDP replicas."""
    return world // p // ((world // (t * p)) // hsdp_group(world, nodes, t, p) if hsdp else 1)


def _check_ep(kw: dict[str, Any], world: int, t: int, p: int, e: int) -> None:
    if kw["parallelism"] is not Parallelism.FSDP:
        # torchtitan wraps the experts in FSDP over its efsdp mesh whenever ep > 1 (parallel_dims.py
        # _mesh_exist: "we need FSDP wrapping to help the MoE layers do mixed precision training")
        _refuse("parallelism", "expert parallelism is modelled with FSDP2 (torchtitan shards the experts over "
                               "its efsdp mesh)", ["fsdp"])
    region = expert_region(world, kw.get("num_nodes", 1), t, p, kw.get("shard_scope") is ShardScope.NODE)
    if region % e:
        # torchtitan v0.3.0 parallel_dims.py build_mesh: efsdp = dp_shard * cp * tp // ep, the sparse mesh
        # ("pp", "dp_replicate", "efsdp", "ep") must cover the same ranks as the dense one
        _refuse("expert_parallel", f"must divide the dp_shard × context_parallel × tensor_parallel ranks ({region}) "
                                   f"that torchtitan's expert mesh borrows from; got {e}",
                [str(d) for d in range(1, region + 1) if region % d == 0])


def check_against_model(sc, num_heads: int, num_kv_heads: int, layers: int, experts: int = 0) -> None:
    """Degrees the architecture must allow: heads split evenly over TP ranks (torchtitan shards wq/wk/wv
    column-wise, whole heads per rank), at least one layer per pipeline chunk, whole routed experts per EP rank
    (torchtitan ``moe_sharding.py`` ``expert_param_placement_sparse``: ``EP: Shard(0)`` on the expert dim)."""
    e = sc.expert_parallel
    if e > 1 and not experts:
        _refuse("expert_parallel", "needs a mixture-of-experts model; this model has no routed experts", ["1"])
    if experts % e:
        _refuse("expert_parallel", f"must divide the model's {experts} routed experts; got {e}",
                [str(d) for d in range(1, experts + 1) if experts % d == 0])
    t = sc.tensor_parallel
    if num_heads % t or num_kv_heads % t:
        ok = [str(d) for d in range(1, num_kv_heads + 1) if num_heads % d == 0 and num_kv_heads % d == 0]
        _refuse("tensor_parallel", f"must divide the model's {num_heads} attention and {num_kv_heads} key/value "
                                   f"heads; got {t}", ok)
    chunks = sc.pipeline_parallel * sc.pipeline_virtual_stages
    if chunks > layers:
        _refuse("pipeline_parallel", f"pipeline_parallel × pipeline_virtual_stages ({chunks}) is more than the "
                                     f"model's {layers} layers")
