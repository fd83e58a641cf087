"""ZeRO-1/2's partitions as DeepSpeed cuts them: each parameter group's flat 16-bit buffer split into equal parts,
a parameter belonging to every rank whose part it overlaps (DeepSpeed 0.19.8 runtime/zero/stage_1_and_2.py
``get_data_parallel_partitions``, ``get_partition_info``, ``get_grad_position``; v0.16.2 and v0.18.6 the same).
Rank 0's partition (the one the estimator reports) starts with the embedding."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vramfit.choices import Method, Offload, Parallelism

if TYPE_CHECKING:
    from vramfit.models.spec import ModelSpec
    from vramfit.scenario import Scenario


def module_order(spec: ModelSpec) -> list[tuple[int, bool]]:
    """(elements, in the weight-decay group) of each parameter full fine-tuning trains, in module order: the
    embedding, each decoder layer's linears (biases apart) and norms, the final norm, an untied output layer. The HF
    Trainer puts biases and norms in a second parameter group without weight decay (transformers 5.24.0 trainer.py
    ``get_decay_parameter_names``: ``ALL_LAYERNORM_LAYERS`` and names with "bias" left out), and ZeRO-1/2 flatten and
    partition each group on its own (DeepSpeed 0.19.8 runtime/zero/stage_1_and_2.py ``__init__``: one
    ``bit16_groups_flat`` and ``get_data_parallel_partitions`` per ``param_group``). A layer's norms count as one
    tensor; a vision tower is left out."""
    out = [(spec.embedding_params, True)]
    for i in range(spec.num_hidden_layers):
        for lin in spec.block_linears:
            if i < spec.layers_of(lin):
                out += [(lin.in_features * lin.out_features, True)] * lin.count
                out += [(lin.out_features, False)] * (lin.count if lin.bias else 0)
        out += [(spec.block_norm_params, False)] if spec.block_norm_params else []
    out += [(spec.final_norm_params, False)] if spec.final_norm_params else []
    return out + ([(spec.lm_head_params, True)] if spec.lm_head_params else [])


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


def _walk(order: list[tuple[int, bool]], num_gpus: int) -> list[tuple[int, int, int]]:
    """(module index, elements, elements in rank 0's partition) of every parameter, group by group."""
    out = []
    for decay in (True, False):
        size = -(-sum(n for n, d in order if d is decay) // num_gpus)
        offset = 0
        for i, (n, d) in enumerate(order):
            if d is decay:
                out.append((i, n, max(0, min(n, size - offset))))
                offset += n
    return out


def grads_in_partition(spec: ModelSpec, sc: Scenario) -> int:
    """Elements of ZeRO-2's 16-bit gradient partition buffer on rank 0 (0 where none is made): ``copy_grads_in_partition``
    sizes it by the parameters in the partition counted whole (``total_size += param_in_partition.numel()`` over
    ``self.params_in_partition``: DeepSpeed v0.16.2 stage_1_and_2.py l. 1339-1345, v0.18.6 l. 1482-1488, 0.19.8 the
    same), the one straddling the partition's end included, not by the partition: on rank 0 the embedding alone
    where it is larger than a partition. Full fine-tuning without offload (the offloaded path copies each gradient
    out instead; LoRA's adapters are small tensors, the partition stands for them)."""
    if (sc.parallelism is not Parallelism.ZERO2 or sc.offload is not Offload.NONE or sc.method is not Method.FULL
            or sc.num_gpus < 2):
        return 0
    return rank0_partition(module_order(spec), sc.num_gpus)[0]
