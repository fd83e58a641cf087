"""Per-rank memory under tensor, pipeline and context parallelism, as torchtitan v0.3.0 shards a Llama
block; the most loaded rank is the peak.

The step is first built for the data-parallel view of the run (FSDP over ``dp_shard x cp`` ranks,
torchtitan ``distributed/parallel_dims.py``: ``fsdp = self.dp_shard * self.cp``), then each rank keeps:

- **model state**: its pipeline stage's layers split ``t`` ways (wq/wk/wv/w1/w3 column-wise, wo/w2
  row-wise: torchtitan ``models/llama3/sharding.py``), the first stage the token embeddings (vocab-sharded,
  Megatron ``VocabParallelEmbedding``), the last the final norm and the output layer (column-wise over the
  vocabulary): :func:`vramfit.estimate.model_parallel.stage_params`;
- **activations, tensor by tensor** (sequence parallel on, torchtitan's ``enable_sequence_parallel = True``):
  the norms and the residual stream run on ``Shard(1)`` (``/t``); the attention and MLP inputs are
  all-gathered to ``Replicate()`` before wq/wk/wv and w1/w3 (``PrepareModuleInput``), and the matmuls save
  that gathered tensor whole; heads and the MLP's inner width are ``/t``. Megatron-LM instead keeps the
  sharded input and gathers it again in backward (Korthikanti et al. 2022 sec. 4.2.2, eq. 4: everything
  ``/t``), which :mod:`vramfit.estimate.model_parallel` models and the tests compare;
- **MoE blocks** (torchtitan v0.3.0 ``models/common/moe_sharding.py``, expert parallel off): the routed experts'
  weights split over the inner width (``w1_EFD``/``w3_EFD`` ``Shard(1)``, ``w2_EDF`` ``Shard(2)``,
  ``models/qwen3/sharding.py`` ``_GROUPED_EXPERTS_PARAM_LAYOUT``), the shared expert column-/row-wise like a
  dense MLP, the router gate replicated (``_router_sharding_config``: ``tp=spmd.R``); the experts' input is
  all-gathered (``pre_experts_input_layout = Replicate``), so every rank keeps the routed tokens whole and
  their inner activations ``/t``; norms' weights stay whole on every rank, the q/k norms run on the head
  dimension (``qk_norm`` ``Shard(2)``: ``/t``);
- **context parallel**: every token-shaped tensor ``/c`` (each rank holds ``s/c`` tokens, Megatron-LM
  ``docs/source/api-guide/context_parallel.rst``), plus ring attention's receive buffer for the next
  rank's keys and values (torch v2.13.0 ``distributed/tensor/experimental/_context_parallel/_attention.py``
  ``_templated_ring_attention``: ``next_kv = rotater.exchange_buffers(...)`` while the current chunk computes);
- **micro-batches in flight** (``grad_accum`` pipeline micro-batches per step): 1F1B stage ``i`` of ``p``
  holds ``min(p - i, m)`` (Narayanan et al. 2021 sec. 2.2.1: ``p - i - 1`` warm-up forwards, then one
  forward before each backward); interleaved with ``v`` chunks per rank, rank ``i`` holds
  ``(v - 1) * p + 2 * (p - i - 1) + 1`` chunk micro-batches (torch v2.13.0
  ``distributed/pipelining/schedules.py`` ``_get_warmup_ops`` with ``p`` micro-batches per round, plus the
  first steady-state forward; the same count as Megatron-LM's ``num_warmup_microbatches`` in
  ``core/pipeline_parallel/schedules.py``), i.e. the first rank ``1 + (p - 1)/(p v)`` times ``p`` stages'
  worth, Korthikanti et al. eq. 5 / sec. 4.2.3;
- **expert parallel** ``ep`` (torchtitan v0.3.0 ``models/common/moe_sharding.py`` ``expert_param_placement_sparse``:
  ``EP: Shard(0)``, the expert dim): each rank holds ``E/ep`` whole routed experts (no TP split on them), FSDP-
  sharded over ``efsdp = dp_shard * cp * tp / ep`` (``distributed/parallel_dims.py`` ``build_mesh``), so the
  sharded state per rank is ``experts / (dp_shard * cp * tp)``, the same as under TP; the all-gathered working
  copy of a block holds ``E/ep`` experts. The router and the routed experts run on the rank's own
  sequence-sharded tokens (``_router_sharding_config`` / ``_routed_experts_sharding_configs`` with EP on:
  ``dense_sequence_parallel_placement``: ``/t``), dispatched by all-to-all (``models/common/token_dispatcher.py``
  ``AllToAllTokenDispatcher.dispatch``: ``_local_reorder`` to ``(N, D)``, ``N = tokens x top_k``, then
  ``all_to_all_single`` into ``(R, D)`` and ``_permute`` into the experts' saved input): send and receive
  buffers, ``2 x N x D``, live beside each other (the combine mirrors it); with balanced routing ``R = N``, so
  the saved expert activations per rank are those of its own tokens (imbalance is not modelled);
- **logits and loss** on the last stage only, vocabulary-sharded (torchtitan's loss parallel: the output
  layer's ``Shard(-1)``) and ``/c``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TYPE_CHECKING

from vramfit.choices import Checkpointing, Parallelism, PipelineSchedule, ShardScope
from vramfit.estimate.constants import FSDP_INFLIGHT_ALLGATHERS
from vramfit.estimate.loss import LossMemory
from vramfit.estimate.model_parallel import Layout
from vramfit.estimate.state import shard

if TYPE_CHECKING:
    from vramfit.estimate.step import Step
    from vramfit.models.spec import ModelSpec
    from vramfit.scenario import Scenario

#: torchtitan TP with sequence parallel: how each saved tensor of a block is split over ``t`` ranks
#: (module docstring). Keys are :func:`vramfit.estimate.activations.block_saved`'s.
GATHERED = frozenset({"attn_in", "mlp_in", "block_in.gathered"})  # all-gathered inputs of column-wise linears


def ep_sharded_keys(spec: ModelSpec, ep: int) -> tuple[str, ...]:
    """Saved tensors that expert parallel keeps on the rank's sequence shard: the router's and the routed
    experts' (their inputs stay ``Shard(1)``), and the MoE input itself unless a shared expert all-gathers it
    (``_shared_experts_sharding_configs``: ``desired_input_layout`` ``Replicate``)."""
    if ep == 1:
        return ()
    shared = any(x.group == "shared_expert" for x in spec.block_linears)
    return ("experts.", "router.") + (() if shared else ("mlp_in",))


def tp_split(key: str, ep_keys: tuple[str, ...] = ()) -> bool:
    """True when a saved tensor is ``1/t`` per rank; False when every rank keeps it whole (the gathered inputs,
    MoE's routed tokens ``experts.*`` and router scores ``router.*``, unless expert parallel keeps them on the
    rank's sequence shard: ``ep_keys``, :func:`ep_sharded_keys`)."""
    if ep_keys and key.startswith(ep_keys):
        return True
    if key in GATHERED:
        return False
    if key.startswith(("norm", "block_in", "resid_mid")):  # Shard(1) under SequenceParallel
        return True
    # heads (q/k norms on Shard(2)), the MLP's and the shared expert's inner width
    return key in ("q", "k", "v", "mlp_mid") or key.startswith(("attn.", "mlp.", "q_norm.", "k_norm.", "shared."))


def tp_layer_params(spec: ModelSpec, t: int, ep: int = 1) -> int:
    """One decoder layer's parameters on one of ``t`` tensor-parallel ranks (mean over layers): the linears
    split ``t`` ways, the MoE router and the norms whole, the routed experts ``ep`` ways when expert parallel
    is on (module docstring)."""
    def ways(group: str) -> int:
        return 1 if group == "router" else ep if group == "expert" and ep > 1 else t

    L = spec.num_hidden_layers
    lin = sum(x.params * spec.layers_of(x) // ways(x.group) for x in spec.block_linears)
    return lin // L + spec.block_norm_params


@dataclass(frozen=True)
class RankMemory:
    """One pipeline rank's share: which stage, its parameters and layers, micro-batches in flight, its peak."""

    stage: int
    role: str  # "first stage", "last stage", "every rank"
    params: int  # parameters held by this rank before data-parallel sharding
    layers: int
    in_flight: float  # micro-batches (chunk micro-batches / v for interleaved) whose activations it holds
    allocated_bytes: int = 0  # the rank's allocated peak
    activations_bytes: int = 0  # its saved activations at their high point (end of forward)
    breakdown: tuple[tuple[str, int], ...] = ()  # what is alive at the rank's peak

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["breakdown"] = dict(self.breakdown)
        return d


def layout_of(sc: Scenario) -> Layout:
    return Layout(t=sc.tensor_parallel, p=sc.pipeline_parallel, c=sc.context_parallel, sequence_parallel=True,
                  interleave=sc.pipeline_virtual_stages)


def data_parallel_view(sc: Scenario) -> Scenario:
    """The scenario as its FSDP mesh sees it: ``dp_shard x cp`` ranks (num_nodes kept dividing them); with HSDP
    (``shard_scope=node``) as many "nodes" as replicas, so that its shard group is a node's data-parallel ranks
    (:func:`vramfit.layout_keys.hsdp_group`)."""
    from vramfit.layout_keys import hsdp_group

    t, p = sc.tensor_parallel, sc.pipeline_parallel
    ranks = sc.num_gpus // (t * p)
    nodes = math.gcd(ranks, sc.num_nodes)
    if sc.shard_scope is ShardScope.NODE:
        nodes = ranks // hsdp_group(sc.num_gpus, sc.num_nodes, t, p)
    return replace(sc, num_gpus=ranks, num_nodes=nodes, tensor_parallel=1,
                   pipeline_parallel=1, context_parallel=1, expert_parallel=1, pipeline_schedule=PipelineSchedule.ONE_F_ONE_B,
                   pipeline_virtual_stages=1)


def in_flight(stage: int, sc: Scenario) -> float:
    """Micro-batches of activations stage ``stage`` holds at its peak (module docstring for the sources)."""
    p, v, m = sc.pipeline_parallel, sc.pipeline_virtual_stages, sc.grad_accum
    if p == 1:
        return 1.0
    if sc.pipeline_schedule is PipelineSchedule.INTERLEAVED:
        per_round = m // max(1, m // p)  # torch's microbatches_per_round: p when m is a multiple of p
        chunks = (v - 1) * per_round + 2 * (p - stage - 1) + 1
        return min(chunks, m * v) / v
    return float(min(p - stage, m))


def rank_shapes(spec: ModelSpec, sc: Scenario) -> list[RankMemory]:
    """The first and the last pipeline stage (one rank when there is no pipeline)."""
    lay = layout_of(sc)
    L = spec.num_hidden_layers
    head = spec.lm_head_params or spec.embedding_params
    per_chunk = -(-L // (lay.p * lay.interleave))
    layers = min(L, per_chunk * lay.interleave)
    middle = layers * tp_layer_params(spec, lay.t, sc.expert_parallel)
    first = middle + spec.embedding_params // lay.t  # vocab-parallel embedding
    last = middle + head // lay.t + spec.final_norm_params
    if lay.p == 1:  # a tied output layer is the embedding itself: counted once
        return [RankMemory(0, "every rank", first + spec.lm_head_params // lay.t + spec.final_norm_params, layers, 1.0)]
    return [RankMemory(0, "first stage", first, layers, in_flight(0, sc)),
            RankMemory(lay.p - 1, "last stage", last, layers, in_flight(lay.p - 1, sc))]


def _tp_ratio(step: Step, t: int, ep: int = 1) -> float:
    """Per-rank over whole bytes of one block's saved tensors under torchtitan TP + SP."""
    items = step.acts.saved.items
    whole = sum(items.values())
    keys = ep_sharded_keys(step.spec, ep)
    return sum(v / t if tp_split(k, keys) else v for k, v in items.items()) / whole if whole else 1.0


def a2a_buffers(step: Step, sc: Scenario) -> int:
    """Expert parallel's dispatch: the all-to-all send and receive buffers of the rank's routed tokens, each
    ``tokens / (t x c) x top_k x hidden`` in the compute dtype (module docstring); 0 without expert parallel."""
    if sc.expert_parallel == 1:
        return 0
    spec = step.spec
    tokens = sc.tokens_per_micro_batch // (sc.tensor_parallel * sc.context_parallel)
    return 2 * tokens * spec.num_experts_per_tok * spec.hidden_size * step.sc.precision.compute_bytes


def _activations(step: Step, rank: RankMemory, sc: Scenario, last: bool):
    """The rank's saved tensors: its layers' share x micro-batches in flight, ``/t`` as torchtitan splits
    them, ``/c`` for context parallel; full checkpointing keeps block inputs (``Shard(1)``: ``/t``)."""
    a, L = step.acts, step.spec.num_hidden_layers
    t, c, ep = sc.tensor_parallel, sc.context_parallel, sc.expert_parallel
    ratio = 1 / t if sc.gradient_checkpointing is Checkpointing.FULL else _tp_ratio(step, t, ep)
    blocks = round(a.blocks / L * rank.layers * rank.in_flight * ratio / c)
    kv = sum(v for k, v in a.saved.items.items() if k in ("k", "v")) / t / c
    # outside the blocks: the final norm runs on Shard(1) (/t), the output layer saves its all-gathered input
    # whole (torchtitan: norm SequenceParallel, output ColwiseParallel(input_layouts=Shard(1)))
    head_in = step.sc.precision.compute_bytes * step.sc.tokens_per_micro_batch * step.spec.hidden_size
    head_in = min(head_in, a.outside_blocks) if step.lm_head_trainable else 0
    outside = ((a.outside_blocks - head_in) / t + head_in) / c
    return replace(a, blocks=blocks, per_layer=round(a.per_layer * _tp_ratio(step, t, ep) / c),
                   recompute=round(a.recompute * ratio / c), outside_blocks=round(outside) if last else 0,
                   masks=0), round(kv if c > 1 else 0)


def _comm(step: Step, sc: Scenario, base: Scenario, root_params: int, frac: float) -> int:
    """FSDP: two blocks' all-gather buffers (``/t``) plus this stage's root unit gathered; DDP: buckets."""
    from vramfit.estimate.core import _layer_param_bytes

    if base.parallelism is Parallelism.DDP:
        return round(step.parts.comm_buffers * frac)
    if base.parallelism is not Parallelism.FSDP:
        return 0
    layer = _layer_param_bytes(step.spec, base, step.profile) // sc.tensor_parallel
    if sc.expert_parallel > 1:  # E/ep whole experts gathered instead of every expert's 1/t (module docstring)
        t = sc.tensor_parallel
        layer = layer * tp_layer_params(step.spec, t, sc.expert_parallel) // tp_layer_params(step.spec, t)
    root = root_params * base.precision.compute_bytes if step.profile.fsdp_root_gathered else 0
    # FSDP2 gathers into a buffer of its own beside the shard (estimate/fsdp2.py, 3)
    return FSDP_INFLIGHT_ALLGATHERS.value * layer + root - (0 if step.profile.fsdp2 else shard(root, base.shard_group))


def _rank_step(step: Step, sc: Scenario, rank: RankMemory, contributors) -> Step:
    """The step one rank runs: state, activations, loss and buffers scaled to its share."""
    from vramfit.estimate.contributions import phase_breakdowns

    spec, t, c, ep = step.spec, sc.tensor_parallel, sc.context_parallel, sc.expert_parallel
    first, last = rank.role != "last stage", rank.role != "first stage"
    # sharded state: experts / (ep x efsdp) = experts / (dp_shard x cp x t), as under TP (module docstring)
    frac = (rank.params + rank.layers * (tp_layer_params(spec, t) - tp_layer_params(spec, t, ep))) / spec.num_params
    p = step.parts
    acts, ring = _activations(step, rank, sc, last)
    # the root FSDP unit: embeddings (first stage), final norm and output layer (last; a tied one is the
    # embedding, a second copy only on a last stage that is not also the first)
    head = spec.lm_head_params or (0 if first else spec.embedding_params)
    root = (spec.embedding_params // t if first else 0) + ((head // t + spec.final_norm_params) if last else 0)
    state = {k: round(getattr(p, k) * frac) for k in ("weights", "master_weights", "gradients", "optimizer_state",
                                                     "paged_optimizer_state", "autocast_copies")}
    parts = replace(p, **state, activations=acts.total, host=round(p.host * frac),
                    logits_loss=p.logits_loss // (t * c) if last else 0,
                    comm_buffers=_comm(step, sc, step.sc, root, frac),
                    temporaries=max(round(step.block_transient * _tp_ratio(step, t, ep) / c) + ring,
                                    a2a_buffers(step, sc), round(step.opt_temp * frac)))
    loss = _rank_loss(step, sc, last)
    if last:
        parts = replace(parts, logits_loss=loss.forward_peak)
    out = replace(step, sc=sc, parts=parts, acts=acts, loss=loss, autocast_forward=round(step.autocast_forward * frac),
                  block_transient=max(round(step.block_transient * _tp_ratio(step, t, ep) / c) + ring, a2a_buffers(step, sc)),
                  opt_temp=round(step.opt_temp * frac), held_grads=round(step.held_grads * frac),
                  head_grad=step.head_grad // t if last else 0, layer_grads=step.layer_grads // t,
                  lowest_grads=0,  # the lowest-block position is modelled for data parallelism only
                  block_grads=step.block_grads // t,
                  lm_head_trainable=step.lm_head_trainable and last)
    return replace(out, phases=phase_breakdowns(out, contributors))


def _rank_loss(step: Step, sc: Scenario, last: bool) -> LossMemory:
    """The rank's loss: none off the last stage; the logits' tensors ``/t`` (vocabulary) and ``/c`` (tokens) on it,
    or torchtitan 0.3's chunked loss worked out for the rank (estimate/titan_loss.py: its fp32 buffer and hidden-state
    gradient are the rank's tokens whole over TP, its output-layer gradient ``vocab/t`` rows whole over CP)."""
    from vramfit.estimate.loss import compiles_loss, logits_bytes_per_element, vocab_rows
    from vramfit.estimate.titan_loss import runs_titan_chunked_loss, titan_chunked_loss

    t, c, loss = sc.tensor_parallel, sc.context_parallel, step.loss
    if not last:
        return LossMemory(0, 0, 0, "none on this pipeline stage (the last stage computes the logits and loss)")
    if runs_titan_chunked_loss(step.sc, step.profile):
        m = titan_chunked_loss(step.spec, step.sc, step.profile, vocab_rows(step.spec),
                               logits_bytes_per_element(step.sc, step.profile),
                               compiles_loss(step.sc, step.profile), tp=t, cp=c)
        return replace(m, detail=m.detail + f"; vocabulary split {t} ways" * (t > 1))
    return LossMemory(loss.saved // (t * c), loss.forward_peak // (t * c), loss.backward_peak // (t * c),
                      loss.detail + f"; vocabulary split {t} ways" * (t > 1), loss.held // (t * c),
                      loss.kept // (t * c))


@lru_cache(maxsize=64)
def _view_step(spec: ModelSpec, view: Scenario, card, compute: Callable) -> Step:
    """The data-parallel view's step, shared by the layouts whose view is the same (a pipeline and its
    interleaved twin; ``tp x pp`` pairs with as many data-parallel ranks): the planner tries many."""
    return compute(spec, view, card)


def model_parallel_step(spec: ModelSpec, sc: Scenario, card, compute: Callable) -> Step:
    """The most loaded rank's step of a tensor/pipeline/context-parallel run, every rank's summary in ``ranks``."""
    from vramfit.estimate.contributions import CONTRIBUTORS
    from vramfit.layout_keys import check_against_model

    check_against_model(sc, spec.num_attention_heads, spec.num_key_value_heads, spec.num_hidden_layers,
                        spec.num_experts)
    base = _view_step(spec, data_parallel_view(sc), card, compute)
    steps = []
    for rank in rank_shapes(spec, sc):
        s = _rank_step(base, sc, rank, CONTRIBUTORS)
        peak = max(s.phases, key=lambda b: sum(dict(b.parts).values()))
        total = sum(dict(peak.parts).values())
        steps.append((total, s, replace(rank, allocated_bytes=total, activations_bytes=s.acts.total,
                                        breakdown=tuple(sorted(peak.parts)))))
    total, step, _ = max(steps, key=lambda x: x[0])
    return replace(step, ranks=tuple(r for _, _, r in steps))


def layout_note(sc: Scenario, ranks: tuple[RankMemory, ...]) -> str:
    """The assumption that says how the ranks were laid out and which one is the peak."""
    peak = max(ranks, key=lambda r: r.allocated_bytes)
    pp = (f"{sc.pipeline_parallel} pipeline stages ({sc.pipeline_schedule.value}"
          + (f", {sc.pipeline_virtual_stages} chunks per GPU" if sc.pipeline_virtual_stages > 1 else "")
          + f", {sc.grad_accum} micro-batches per step)") if sc.pipeline_parallel > 1 else "no pipeline"
    view = data_parallel_view(sc)
    dp = (f"DDP over the remaining {view.num_gpus} ranks (dp_replicate)" if sc.parallelism is Parallelism.DDP else
          f"HSDP: FSDP over the {view.shard_group} data-parallel ranks of a node (dp_shard × cp), replicated "
          f"{view.num_nodes} times (dp_replicate)" if sc.shard_scope is ShardScope.NODE else
          f"FSDP over the remaining {view.num_gpus} ranks (dp_shard × cp)")
    ep = (f"; expert parallel {sc.expert_parallel} (each rank holds 1/{sc.expert_parallel} of the routed experts, "
          f"tokens exchanged by all-to-all)") if sc.expert_parallel > 1 else ""
    return (f"Model parallel as torchtitan v0.3.0 shards it: tensor {sc.tensor_parallel} (sequence parallel on), {pp}, "
            f"context {sc.context_parallel}{ep}; {dp}. Per rank; the peak is the {peak.role} ({peak.layers} layers, "
            f"{peak.in_flight:g} micro-batches in flight); see 'ranks' for each.")
