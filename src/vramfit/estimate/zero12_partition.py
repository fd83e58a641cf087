"""ZeRO-1/2's partitions as DeepSpeed cuts them: each parameter group's flat 16-bit buffer split into equal parts,
a parameter belonging to every rank whose part it overlaps (DeepSpeed 0.19.8 runtime/zero/stage_1_and_2.py
``get_data_parallel_partitions``, ``get_partition_info``, ``get_grad_position``; v0.16.2 and v0.18.6 the same).
Rank 0's partition (the one the estimator reports) starts with the embedding."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from vramfit.choices import Method, Offload, Parallelism
from vramfit.estimate.allocator import round_allocation

if TYPE_CHECKING:
    from vramfit.estimate.params import Adapter
    from vramfit.models.spec import Linear, ModelSpec
    from vramfit.scenario import Scenario


def module_order(spec: ModelSpec, banks: bool = False) -> list[tuple[int, bool]]:
    """(elements, in the weight-decay group) of each parameter full fine-tuning trains, in module order: the
    embedding, each decoder layer's linears (biases apart) and norms, the final norm, an untied output layer. The HF
    Trainer puts biases and norms in a second parameter group without weight decay (transformers 5.24.0 trainer.py
    ``get_decay_parameter_names``: ``ALL_LAYERNORM_LAYERS`` and names with "bias" left out), and ZeRO-1/2 flatten and
    partition each group on its own (DeepSpeed 0.19.8 runtime/zero/stage_1_and_2.py ``__init__``: one
    ``bit16_groups_flat`` and ``get_data_parallel_partitions`` per ``param_group``). A layer's norms count as one
    tensor; a vision tower is left out. ``banks``: the experts are transformers 5's 3-D parameter banks, one
    parameter per expert linear and layer (``FrameworkProfile.runs_transformers_modeling``; v5.24.0
    models/mixtral/modeling_mixtral.py MixtralExperts ``gate_up_proj`` (E, 2I, H), ``down_proj`` (E, H, I)), not
    ``count`` per-expert ``nn.Linear`` s. MoE and dense layers sit where :func:`_moe_layer` puts them."""
    return list(_module_order(spec, banks))


@lru_cache(maxsize=64)  # a pure function of the (frozen) spec: the planner asks it for each of its estimates
def _module_order(spec: ModelSpec, banks: bool) -> tuple[tuple[int, bool], ...]:
    out = [(spec.embedding_params, True)]
    for i in range(spec.num_hidden_layers):
        for lin in _layer_linears(spec, i, banks):
            count = 1 if banks and lin.group == "expert" else lin.count
            out += [(lin.weight_params // count, True)] * count
            out += [(lin.bias_params // count, False)] * (count if lin.bias else 0)
        out += [(spec.block_norm_params, False)] if spec.block_norm_params else []
    out += [(spec.final_norm_params, False)] if spec.final_norm_params else []
    return tuple(out + ([(spec.lm_head_params, True)] if spec.lm_head_params else []))


def _layer_linears(spec: ModelSpec, i: int, banks: bool) -> list[Linear]:
    """The linears decoder layer ``i`` holds, in module order. With ``banks`` a gated expert MLP's gate and up
    projections (two expert linears of one shape in a row: Mixtral's ``w1``/``w3``, Qwen-MoE's ``gate_proj``/
    ``up_proj``) are one ``gate_up_proj`` parameter (transformers v5.24.0 modeling_mixtral.py l. 65
    ``torch.empty(self.num_experts, 2 * self.intermediate_dim, self.hidden_dim)``, modeling_qwen3_moe.py l. 219)."""
    from dataclasses import replace

    out: list[Linear] = []
    for lin in (x for x in spec.block_linears if _holds(spec, x, i)):
        prev = out[-1] if out else None
        if (banks and lin.group == "expert" and prev is not None and prev.group == "expert" and prev.bias == lin.bias
                and (prev.in_features, prev.out_features, prev.count) == (lin.in_features, lin.out_features, lin.count)):
            out[-1] = replace(prev, name="gate_up_proj", out_features=2 * lin.out_features)
        else:
            out.append(lin)
    return out


def _holds(spec: ModelSpec, lin: Linear, i: int) -> bool:
    """Whether decoder layer ``i`` holds ``lin``: the router and (shared) experts on the MoE layers, the dense MLP
    on the others, any other linear on the first ``spec.layers_of(lin)``."""
    if lin.group in ("router", "expert", "shared_expert"):
        return _moe_layer(spec, i)
    if lin.group == "dense_mlp":
        return not _moe_layer(spec, i)
    return i < spec.layers_of(lin)


def _moe_layer(spec: ModelSpec, i: int) -> bool:
    """Whether decoder layer ``i`` is an MoE layer: ``spec.moe_layers`` where MoE and dense layers mix (DeepSeek-V2/V3
    dense first, Llama 4's ``moe_layers`` or interleaving, irregular lists included), every layer otherwise."""
    return spec.is_moe_layer(i)


def adapter_order(adapters: list[Adapter], rank: int, layers: int) -> list[tuple[int, bool]]:
    """:func:`module_order` of LoRA's trainable tensors: each adapter's ``lora_A`` then ``lora_B`` (peft v0.21.2
    tuners/lora/layer.py ``LoraLayer.update_layer`` registers them in that order), a vision tower's first (the
    multimodal models register it before the language model), then an embedding adapter, the decoder layers' in
    layer order, an output layer's last; all in the weight-decay group (no bias, no norm)."""
    def tensors(ad: Adapter, count: int) -> list[tuple[int, bool]]:  # (DoRA's magnitude after them: a 1-D weight)
        return [(t.numel, True) for t in ad.tensors(rank, layers)] * count

    out = [t for ad in adapters if ad.vision for t in tensors(ad, ad.per_layer * (ad.layers or layers))]
    out += [t for ad in adapters if not ad.per_layer and ad.target != "lm_head" for t in tensors(ad, 1)]
    for i in range(layers):
        out += [t for ad in adapters if ad.per_layer and not ad.vision and i < (ad.layers or layers)
                for t in tensors(ad, ad.per_layer)]
    return out + [t for ad in adapters if not ad.per_layer and ad.target == "lm_head" for t in tensors(ad, 1)]


def rank0_partition(order: list[tuple[int, bool]], num_gpus: int) -> tuple[int, list[int]]:
    """(elements of the parameters that lie in rank 0's partitions, each counted whole; rank 0's slice of each of
    them, in backward order, reverse module order) under ZeRO-1/2; ``order``: :func:`module_order`. Each group
    is split into ``num_gpus`` equal partitions of its flat buffer (``get_data_parallel_partitions``); a parameter
    is in rank 0's if it starts inside it (``get_partition_info``: ``params_in_partition``, the one straddling the
    boundary included) and its slice there is what ``get_grad_position`` records (``num_elements``, cut at the
    partition's end)."""
    inside = [(i, n, piece) for i, n, piece in _walk(order, num_gpus) if piece]
    return sum(n for _, n, _ in inside), [piece for _, _, piece in sorted(inside, reverse=True)]


def rank0_outside(order: list[tuple[int, bool]], num_gpus: int) -> list[int]:
    """Elements of each parameter wholly outside rank 0's partitions (``params_not_in_partition``), module order."""
    return [n for _, n, piece in _walk(order, num_gpus) if not piece]


def _walk(order: list[tuple[int, bool]], num_gpus: int) -> tuple[tuple[int, int, int], ...]:
    """(module index, elements, elements in rank 0's partition) of every parameter, group by group."""
    return _walk_of(tuple(order), num_gpus)


@lru_cache(maxsize=256)  # a pure function of the order: the plan search asks it for each micro-batch of a layout
def _walk_of(order: tuple[tuple[int, bool], ...], num_gpus: int) -> tuple[tuple[int, int, int], ...]:
    out = []
    for decay in (True, False):
        size = -(-sum(n for n, d in order if d is decay) // num_gpus)
        offset = 0
        for i, (n, d) in enumerate(order):
            if d is decay:
                out.append((i, n, max(0, min(n, size - offset))))
                offset += n
    return tuple(out)


def grads_in_partition(spec: ModelSpec, sc: Scenario, banks: bool) -> int:
    """Elements of ZeRO-1/2's 16-bit gradient partition buffer on rank 0 (0 where none is made): ``copy_grads_in_partition``
    sizes it by the parameters in the partition counted whole (``total_size += param_in_partition.numel()`` over
    ``self.params_in_partition``: DeepSpeed v0.16.2 stage_1_and_2.py l. 1339-1345, v0.18.6 l. 1482-1488, 0.19.8 the
    same), the one straddling the partition's end included, not by the partition: on rank 0 the embedding alone
    where it is larger than a partition. Full fine-tuning without offload (the offloaded path copies each gradient
    out instead; LoRA's adapters are small tensors, the partition stands for them). ZeRO-1 makes the same buffer:
    ``reduce_ipg_grads``' stage-1 branch ("zero stage 1 - partition only optimizer state": ``if
    self.contiguous_gradients and self.is_param_in_current_partition[param_id]: self.copy_grads_in_partition(param)``,
    DeepSpeed 0.19.8 stage_1_and_2.py), and without ``contiguous_gradients`` the step still holds those parameters'
    own whole gradients (``free_grad_in_param_list`` frees only ``params_not_in_partition``). ``banks``:
    :func:`module_order`'s."""
    if (sc.parallelism not in (Parallelism.ZERO1, Parallelism.ZERO2) or sc.offload is not Offload.NONE
            or sc.method is not Method.FULL or sc.num_gpus < 2):
        return 0
    return rank0_partition(module_order(spec, banks), sc.num_gpus)[0]



def zero1_step_grads(spec: ModelSpec, sc: Scenario, all_grads: int, banks: bool) -> int:
    """ZeRO-1 holds every 16-bit gradient through backward but frees those outside its partition first thing in the
    step (DeepSpeed 0.19.8 stage_1_and_2.py step: ``self.free_grad_in_param_list(self.params_not_in_partition[i])``):
    rank 0's partition's parameters are left, counted whole (full fine-tuning: :func:`grads_in_partition`;
    else the partition's share), bytes. With the optimizer offloaded the epilogue has cleared them all
    (``_clear_param_grad_only``; estimate/ds_offload.py ``zero1_gpu_grads``): none."""
    if sc.parallelism is not Parallelism.ZERO1 or sc.offload is not Offload.NONE:
        return all_grads if sc.parallelism is not Parallelism.ZERO1 else 0
    whole = grads_in_partition(spec, sc, banks)
    return round_allocation(sc.precision.compute_bytes * whole) if whole else -(-all_grads // sc.num_gpus)


def reduction_order(order: list[tuple[int, bool]], num_gpus: int, backward: bool) -> list[tuple[int, tuple[int, ...]]]:
    """(elements, the ranks whose partitions it overlaps, ascending) of each trainable parameter in the order ZeRO-1/2
    put their gradients in the IPG bucket; ``order``: :func:`module_order`. ``backward``: as backward makes them
    (the gradient hooks: ZeRO-2, and ZeRO-1 with ``overlap_comm``), reverse module order; otherwise group by group
    in module order (DeepSpeed 0.19.8 stage_1_and_2.py ``reduce_gradients``, ZeRO-1 without ``overlap_comm``: ``for
    i, group in enumerate(self.bit16_groups): for param in group: ... reduce_ready_partitions_and_remove_grads``).
    Each group's flat buffer is cut in ``num_gpus`` equal parts (``get_data_parallel_partitions``)."""
    return list(_reduction_order(tuple(order), num_gpus, backward))


@lru_cache(maxsize=256)  # a pure function of its arguments (as _walk_of)
def _reduction_order(order: tuple[tuple[int, bool], ...], num_gpus: int,
                     backward: bool) -> tuple[tuple[int, tuple[int, ...]], ...]:
    placed: list[tuple[int, int, tuple[int, ...]]] = []  # (module index, elements, ranks)
    for decay in (True, False):
        size = -(-sum(n for n, d in order if d is decay) // num_gpus)
        offset = 0
        for i, (n, d) in enumerate(order):
            if d is decay:
                placed.append((i, n, tuple(range(offset // size, (offset + max(n, 1) - 1) // size + 1))))
                offset += n
    if backward:
        placed.sort(key=lambda t: t[0], reverse=True)
    return tuple((n, ranks) for _, n, ranks in placed)


def ipg_flats(params: list[tuple[int, tuple[int, ...]]], bucket: int) -> list[int]:
    """Elements of the flat copy each reduction of ZeRO-1/2's IPG bucket makes, in order (0: none); ``params``:
    :func:`reduction_order`; ``bucket``: ``reduce_bucket_size``.

    DeepSpeed 0.19.8 runtime/zero/stage_1_and_2.py (v0.16.2 l. 890-960 and v0.18.6 l. 1010-1080 the same rule):
    ``reduce_independent_p_g_buckets_and_remove_grads`` reduces the bucket before a gradient that would overflow it
    (``if bucket.elements + param.numel() > self.reduce_bucket_size: self.reduce_ipg_grads()``) and
    ``independent_gradient_partition_epilogue`` reduces what is left at the end of backward. ``reduce_ipg_grads``
    -> ``average_tensor`` (``reduce_scatter``, the default) cuts the bucket into one slice per destination rank,
    merging neighbours bound for the same rank ("Merge bucket ranges if they share the same reduction and
    consumers"), and -> ``allreduce_and_scatter`` (``use_multi_rank_bucket_allreduce``, default true: every slice in
    one list, cut only past ``reduce_bucket_size`` elements) -> ``allreduce_bucket``: ``tensor =
    self.flatten(bucket)``, a new tensor of the whole bucket when it holds two slices or more (a bucket that spans a
    partition edge), freed once unflattened back; one slice is flattened to a view of itself (torch
    ``flatten_dense_tensors``: ``tensors[0].contiguous().view({-1})`` for one tensor). A gradient larger than the
    bucket is reduced alone (``extra_large_param_to_reduce``). The simulator's engine (tests/sim/
    test_sim_deepspeed_grid.py) makes exactly these copies."""
    out, filled, ranks = [], 0, []
    for n, own in params:
        if filled and filled + n > bucket:
            out.append(filled if len(ranks) > 1 else 0)
            filled, ranks = 0, []
        filled += n
        ranks += [r for r in own if not ranks or ranks[-1] != r]
    return out + ([filled if len(ranks) > 1 else 0] if filled else [])
