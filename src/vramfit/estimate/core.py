"""Model state and the step's overheads, per GPU: weights, quantized base, adapters, gradients,
master weights, optimizer state; communication buffers, optimizer temporaries, autocast copies,
sliding-window masks. The allocator's reserved slack and the process overheads outside it are
:mod:`vramfit.estimate.reserved`.

The step itself (which of these are alive in which phase) is :mod:`vramfit.estimate.step` and
:mod:`vramfit.estimate.contributions`.
"""

from __future__ import annotations

from dataclasses import dataclass

from vramfit.choices import BNB_4BIT, ZERO_FAMILY
from vramfit.estimate.allocator import round_allocation
from vramfit.estimate.constants import FSDP_INFLIGHT_ALLGATHERS, K_SMALL_SIZE
from vramfit.estimate.dora import dora_adapters
from vramfit.estimate.ds_offload import (
    host_optimizer,
    offload_grad_staging,
    offload_host_gradients,
    zero1_gpu_grads,
)
from vramfit.estimate.framework import (
    FrameworkProfile,
    OptimizerImpl,
    adapter_bytes,
    fsdp_gathers_16bit,
)
from vramfit.estimate.fsdp2_fused_head import check_fused_head_unit
from vramfit.estimate.fsdp_dtype import check_uniform_dtype, fp32_kept, param_bytes
from vramfit.estimate.moe_lora import fsdp2_block_adapters
from vramfit.estimate.params import ParamTensor, adapter_tensors, base_tensors, resolve_adapters
from vramfit.estimate.saved_modules import copied_tensors, copy_bytes, original_on_disk
from vramfit.estimate.state import (
    Sharding,
    fsdp1_keeps_grad_shards,
    gathered_quantized_bytes,
    optimizer_state_bytes,
    quantized_weight_bytes,
    shard,
    sharding_for,
    state_tensors,
)
from vramfit.estimate.torchao_optim import TORCHAO_OPTIMIZERS, torchao_step_bytes
from vramfit.estimate.vision import skipped_layers_split, trains_vision, vision_adapters, vision_quantized
from vramfit.estimate.zero12_partition import grads_in_partition
from vramfit.models.spec import ModelSpec
from vramfit.scenario import (
    Checkpointing,
    Loss,
    Method,
    Optimizer,
    Parallelism,
    Precision,
    Quantize,
    QuantizeExperts,
    Scenario,
    ShardScope,
)


@dataclass
class Parts:
    """Per-GPU bytes of every component as the step builds it: the model state from
    :func:`model_state`, the rest filled by :func:`vramfit.estimate.step.compute` (mutable while built,
    never changed after). How much of each is alive in which phase is the contributors' business."""

    weights: int = 0
    quantized_base: int = 0
    adapters: int = 0
    master_weights: int = 0
    gradients: int = 0
    optimizer_state: int = 0
    paged_optimizer_state: int = 0  # CUDA managed memory: device only
    workspaces: int = 0
    comm_buffers: int = 0
    activations: int = 0
    autocast_copies: int = 0
    logits_loss: int = 0
    temporaries: int = 0
    host: int = 0
    num_trainable: int = 0
    # ``gradients`` before any split: every trainable tensor's whole gradient as stored, this GPU's share of which
    # ``gradients`` is (state.shard, a ZeRO-2 partition, a model-parallel rank's frac: vision_backward.grads_share)
    whole_gradients: int = 0
    param_tensors: tuple[tuple[int, int], ...] = ()  # (bytes, count) of persistent tensors (for reserved)
    quant_state: int = 0  # of quantized_base: 4-bit quantization state kept whole on every GPU
    # modules_to_save (estimate/saved_modules.py): the gradient bytes of the embedding's and the output layer's
    # trained copies, which no block makes (the embedding's after the lowest block, the head's at the top)
    copy_grads: tuple[int, int] = (0, 0)
    # this GPU's gradients and device optimizer states in tensors above kSmallSize (1 MiB, pytorch/pytorch@eb42ad6e
    # c10/cuda/CUDACachingAllocator.cpp ``get_pool``): the ones the large pool serves, from the loss's cached segments
    # among others (estimate/transients.py ``first_step_note``); LoRA's rank-r tensors mostly sit in the small pool
    large_trainable: int = 0


def experts_quantized(sc: Scenario, profile: FrameworkProfile) -> bool:
    """MoE experts in the quantized base: the scenario's quantize_experts, ``auto`` = the profile
    (transformers 5 fused 3-D experts are not nn.Linear, so bitsandbytes leaves them unquantized)."""
    if sc.quantize_experts is QuantizeExperts.AUTO:
        return not profile.quantizes_exact_linear_only
    return sc.quantize_experts is QuantizeExperts.YES


def _is_quantized_linear(
    t: ParamTensor, sc: Scenario, profile: FrameworkProfile, spec: ModelSpec | None = None
) -> bool:
    if sc.quantize is Quantize.NONE:
        return False
    if t.kind in ("vision_linear", "vision_unused_linear"):
        return vision_quantized(sc, profile)  # exactly nn.Linear in every tower the readers describe
    if t.kind == "expert":
        return experts_quantized(sc, profile)
    if t.kind == "router":  # no exact nn.Linear under transformers 5 unless the spec says so (ModelSpec)
        return not (profile.quantizes_exact_linear_only and spec is not None and not spec.router_exact_linear)
    if t.kind == "linear":
        if profile.quantizes_exact_linear_only and spec is not None:
            if spec.linear_subclass:
                return False  # FalconLinear is not exactly nn.Linear
        return True
    return t.kind == "lm_head" and profile.qlora_quantizes_lm_head


def _base_state(p: Parts, spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, shd: Sharding) -> list:
    """Weights / quantized base / master weights of the base model; returns the trainable tensors
    as (tensor, dtype bytes of the trainable copy) and records every tensor size in ``p``."""
    ds_mixed = _ds_mixed(sc)
    pb = sc.precision.param_bytes
    sizes: list[tuple[int, int]] = []
    trainable: list[tuple[ParamTensor, int]] = []
    # a tower that sees no image gets no gradient, so no optimizer state (torch.optim skips grad=None)
    frozen_tower = not trains_vision(sc, profile) or not sc.sees_pixels
    fp32_names = () if ds_mixed else fp32_kept(spec, sc, profile)  # fp32 in a 16-bit load (estimate/fsdp_dtype.py)
    for t, unused in skipped_layers_split(base_tensors(spec), spec, sc):
        frozen = unused or t.kind.startswith("vision_unused") or (t.kind.startswith("vision") and frozen_tower)
        if sc.method is Method.FULL and not frozen:
            if ds_mixed:  # DeepSpeed: 16-bit params + fp32 master in the optimizer partition
                w, m = 2, 4
            elif _ds_fp32_master(sc):
                w, m = pb, 4
            elif sc.precision.mixed:  # torch AMP: the fp32 parameters are the master copy
                w, m = 0, 4
            else:
                w, m = param_bytes(t.name, pb, fp32_names), 0
            p.weights += shard(round_allocation(t.numel * w) * t.count, shd.weights) if w else 0
            p.weights += _secondary(t, shd)
            p.master_weights += shard(round_allocation(t.numel * m) * t.count, shd.optimizer) if m else 0
            sizes.append((t.numel * max(w, m), t.count))
            trainable.append((t, 2 if ds_mixed else param_bytes(t.name, pb, fp32_names)))
            continue
        if _is_quantized_linear(t, sc, profile, spec):
            q = quantized_weight_bytes(t.shape[0], t.shape[1], sc.quantize)
            kept = _module_quant_state(t, sc, profile, shd, q)
            p.quantized_base += shard(round_allocation(q - kept) * t.count, shd.weights) + round_allocation(kept) * t.count
            p.quant_state += round_allocation(kept) * t.count
            sizes.append((q, t.count))
            continue
        if sc.method is Method.QLORA and profile.qlora_unquantized_fp32:
            w = 2 if _embedding_back_to_bf16(t, sc, profile) else 4
        elif ds_mixed:
            w = 2  # zero.Init keeps the frozen base in 16 bits
        else:
            w = param_bytes(t.name, pb, fp32_names)
        if not (sc.modules_to_save and original_on_disk(spec, sc, profile, t)):
            p.weights += shard(round_allocation(t.numel * w) * t.count, shd.weights) + _secondary(t, shd)
            sizes.append((t.numel * w, t.count))
        _add_copies(p, spec, sc, profile, shd, t, copy_bytes(sc, profile, w), sizes, trainable)
    p.param_tensors = tuple(sizes)
    return trainable


def _add_copies(p: Parts, spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, shd: Sharding, t: ParamTensor,
                w: int, sizes: list, trainable: list) -> None:
    """modules_to_save (estimate/saved_modules.py): the trained copies of the frozen base tensor ``t``, ``w`` bytes
    per element (saved_modules.copy_bytes), into ``p.adapters``, the trainable tensors and ``p.copy_grads``."""
    for c in copied_tensors(spec, sc, t):
        p.adapters += shard(round_allocation(c.numel * w) * c.count, shd.weights)
        sizes.append((c.numel * w, c.count))
        trainable.append((c, w))
        grad, (embed, head) = round_allocation(c.numel * w) * c.count, p.copy_grads
        p.copy_grads = (embed + grad, head) if c.name.startswith("embed_tokens") else (embed, head + grad)


def qlora_embeddings_bf16(sc: Scenario, profile: FrameworkProfile) -> bool:
    """TRL's cast of a 4-bit model's fp32 embeddings and head back to bf16 (profile ``qlora_16bit_embeddings``),
    made only under ``args.bf16`` and after prepare_model_for_kbit_training (trl v0.21.0 trainer/sft_trainer.py
    l. 608-629)."""
    bf16 = sc.precision in (Precision.BF16_TRUE, Precision.BF16_MIXED)
    return profile.qlora_16bit_embeddings and profile.qlora_unquantized_fp32 and bf16 and sc.method is Method.QLORA


def _embedding_back_to_bf16(t: ParamTensor, sc: Scenario, profile: FrameworkProfile) -> bool:
    return qlora_embeddings_bf16(sc, profile) and t.kind in ("embedding", "lm_head")


def _module_quant_state(t: ParamTensor, sc: Scenario, profile: FrameworkProfile, shd: Sharding, q: int) -> int:
    """Bytes of a 4-bit weight's quantization state (absmax, nested absmax, code) that FSDP/ZeRO-3 neither shard
    nor offload: bitsandbytes >= 0.43.0 keeps the QuantState on the Linear4bit module (nn/modules.py Params4bit
    ``self.module.quant_state = quant_state``; fix_4bit_weight_quant_state_from_module: "the quant state got lost when
    the parameter got converted. This happens for example for fsdp"), and only parameters are sharded."""
    sharded = shd.weights > 1 or shd.weights_on_host
    if not (sharded and profile.qlora_module_quant_state) or sc.quantize not in BNB_4BIT:
        return 0
    return q - -(-t.numel // 2)  # all but the packed 4-bit data (two per byte)


def _hpz(sc: Scenario) -> int:
    """ZeRO++ hpZ's secondary group size (``zero_hpz_partition_size`` = the GPUs of a node); 0 without hpZ."""
    return sc.gpus_per_node if sc.shard_scope is ShardScope.NODE and sc.num_nodes > 1 else 0


def _secondary(t: ParamTensor, shd: Sharding) -> int:
    """ZeRO++ hpZ's second, node-local shard of a weight in 16 bits (``Sharding.secondary_weights``)."""
    return shard(round_allocation(t.numel * 2) * t.count, shd.secondary_weights) if shd.secondary_weights else 0


def _ds_mixed(sc: Scenario) -> bool:
    """DeepSpeed's ZeRO optimizer keeps an fp32 master partition (and fp32 states) whenever the model
    runs in 16 bits, "-true" or "-mixed" alike (deepspeed/runtime/zero/stage_1_and_2.py
    single_partition_of_fp32_groups; stage3.py fp32_partitioned_groups_flat)."""
    return sc.parallelism in ZERO_FAMILY and sc.precision is not Precision.FP32


def _ds_fp32_master(sc: Scenario) -> bool:
    """fp32 ZeRO still copies this rank's partition for the optimizer. ZeRO-1/2 clone whatever the dtype (DeepSpeed
    0.19.8 runtime/zero/stage_1_and_2.py ``weights_partition = self.parallel_partitioned_bit16_groups[i][partition_id]
    .detach().clone().to(device=self.device, dtype=self.master_weights_and_grads_dtype)``). ZeRO-3 would reuse an
    fp32 partition already on its device (stage3.py _create_fp32_partitions: ``...dtype == self.master_weights_and_
    grads_dtype and self.fp16_partitioned_groups_flat[i].device == self.device``), but ``self.device`` is the string
    ``get_accelerator().current_device_name()`` ('cuda:0') and ``torch.device('cuda:0') == 'cuda:0'`` is False in
    torch 2.13, so it takes the ``converted.clone().detach()`` branch too."""
    return sc.precision is Precision.FP32 and sc.parallelism in ZERO_FAMILY


def state_param_bytes(sc: Scenario, trainable_bytes: int) -> int:
    """Element size of the parameter an optimizer builds its states on: DeepSpeed's fp32 master partition
    (:func:`_ds_mixed`) and ``-mixed`` full fine-tuning's fp32 weights, else the trainable copy's own dtype."""
    return 4 if _ds_mixed(sc) or (sc.precision.mixed and sc.method is Method.FULL) else trainable_bytes


def _trainable_state(p: Parts, sc: Scenario, shd: Sharding, trainable: list) -> int:
    """Gradients and optimizer state of the trainable tensors; returns the optimizer's host bytes."""
    opt_host = 0
    for t, dtype_bytes in trainable:
        p.num_trainable += t.total
        grad = round_allocation(t.numel * dtype_bytes) * t.count
        p.whole_gradients += grad
        p.gradients += shard(grad, shd.grads)
        st = optimizer_state_bytes(t, host_optimizer(sc), state_param_bytes(sc, dtype_bytes))
        device = shard(st.device_bytes, shd.optimizer)
        p.large_trainable += _large(shard(grad, shd.grads), t.count) + _large(device, t.count * state_tensors(host_optimizer(sc)))
        p.optimizer_state += device
        p.paged_optimizer_state += shard(st.paged_bytes, shd.optimizer)
        opt_host += device
    return opt_host


def _large(total: int, tensors: int) -> int:
    """``total`` bytes in ``tensors`` equal tensors where each is above kSmallSize (a large-pool block), else 0."""
    return total if tensors and total // tensors > K_SMALL_SIZE.value else 0


def model_state(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> tuple[Parts, list]:
    """Weights, quantized base, adapters, grads, master weights and optimizer state per GPU."""
    p = Parts()
    shd = sharding_for(sc.parallelism, sc.num_gpus, sc.offload, sc.shard_group, _hpz(sc))
    ds_mixed = _ds_mixed(sc)
    check_fused_head_unit(spec, sc, profile)
    check_uniform_dtype(spec, sc, profile)
    adapters = resolve_adapters(spec, sc, profile.fused_qkv_lora, profile.runs_transformers_modeling)
    adapters = dora_adapters(adapters + vision_adapters(spec, sc, profile), sc)  # each with its magnitude (dora.py)
    trainable = _base_state(p, spec, sc, profile, shd)
    ab = adapter_bytes(profile, sc.precision)
    for ad in adapters:
        for t in ad.tensors(sc.lora_rank, spec.num_hidden_layers):
            stored = 2 if ds_mixed else ab
            p.adapters += shard(round_allocation(t.numel * stored) * t.count, shd.weights)
            if ds_mixed or _ds_fp32_master(sc):
                p.master_weights += shard(round_allocation(t.numel * 4) * t.count, shd.optimizer)
            if not (ad.vision and not sc.sees_pixels):  # a tower that sees no image: no gradient
                trainable.append((t, stored))
    opt_host = _trainable_state(p, sc, shd, trainable)
    banks = profile.runs_transformers_modeling
    if sc.parallelism is Parallelism.ZERO2 and (whole := grads_in_partition(spec, sc, banks)):  # rank 0's params whole
        p.gradients = round_allocation(sc.precision.compute_bytes * whole)
    shards = p.gradients if fsdp1_keeps_grad_shards(sc, profile) else 0  # on the GPU to the end of backward
    if shd.optimizer_on_host:
        # a paged state is the optimizer's too: on the host with the rest, as the unpaged one (the 8-bit step on the
        # host's parameters), not left in the GPU's managed memory (property sweep, 2026-12-07: paged-adamw-8bit under
        # FSDP offload kept 1.9 GiB on the GPU that adamw-8bit moved)
        p.host += opt_host + p.paged_optimizer_state + p.master_weights + _offload_host_grads(p, spec, sc, profile, shd)
        p.optimizer_state = p.paged_optimizer_state = 0
        p.master_weights = 0
        # the GPU keeps the 16-bit gradients of the bucket in flight only (ZeRO-Offload, sec. 4); ZeRO-1 those
        # outside its partition until the end of backward (estimate/ds_offload.py zero1_gpu_grads)
        p.gradients = shards or zero1_gpu_grads(spec, sc, p.gradients, adapters, banks)
    if shd.weights_on_host:
        p.host += p.weights + p.quantized_base - p.quant_state + p.adapters
        p.weights = p.adapters = 0
        p.quantized_base = p.quant_state
    if sc.parallelism is Parallelism.ZERO3:
        _zero3_persistent(p, spec, sc, profile, shd, adapters)
    return p, adapters


def _offload_host_grads(p: Parts, spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, shd: Sharding) -> int:
    """Host bytes of the offloaded gradients: DeepSpeed's pinned gradient buffers (estimate/ds_offload.py
    ``offload_host_gradients``; ZeRO-1 keeps whole 16-bit gradients on the GPU, its host share is the partition's),
    else the per-GPU gradients the CPU step reads (FSDP ``CPUOffload``)."""
    if sc.parallelism not in ZERO_FAMILY:
        return p.gradients
    grad16 = p.gradients if shd.grads > 1 else shard(p.gradients, shd.optimizer)
    return offload_host_gradients(spec, sc, profile, p.master_weights, grad16)


def _zero3_persistent(p: Parts, spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, shd: Sharding,
                      adapters: list) -> None:
    """ZeRO-3 keeps every parameter of at most stage3_param_persistence_threshold elements gathered on each
    GPU (DeepSpeed v0.19.6 runtime/zero/partition_parameters.py: ``param.ds_numel <= param_persistence_threshold``
    -> ds_persist; parameter_offload.py mark_persistent_parameters): whole, not 1/N, and not on the host."""
    from vramfit.estimate import deepspeed as ds

    limit = ds.resolve(sc.deepspeed_config, spec.hidden_size, 3).persistence_threshold
    wb = 2 if _ds_mixed(sc) else sc.precision.param_bytes
    base = sum(round_allocation(t.numel * wb) * t.count for t in base_tensors(spec)
               if t.numel <= limit and (sc.method is Method.FULL or not _is_quantized_linear(t, sc, profile, spec)))
    lora = sum(round_allocation(t.numel * (2 if _ds_mixed(sc) else adapter_bytes(profile, sc.precision))) * t.count
               for t in adapter_tensors(adapters, sc.lora_rank, spec.num_hidden_layers) if t.numel <= limit)
    p.weights += base if shd.weights_on_host else base - shard(base, shd.weights)
    p.adapters += lora if shd.weights_on_host else lora - shard(lora, shd.weights)


def _layer_param_bytes(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """Unsharded bytes of one decoder block's parameters: its weights in the compute dtype (quantized under
    QLoRA), biases and norms, plus its LoRA adapters in the dtype FSDP2 all-gathers them in, where it gathers
    them with the block (moe_lora.fsdp2_block_adapters). The block unit ZeRO-3/FSDP all-gathers (core, fsdp2, ranks: one
    tensor-parallel rank's share), FSDP1's ``_mp_shard`` copy (no_shard), fsdp-grad-op's gathered blocks (grad_op)."""
    total = 0
    for lin in spec.block_linears:
        if sc.quantize is not Quantize.NONE and sc.method is not Method.FULL:
            total += gathered_quantized_bytes(lin.out_features, lin.in_features, sc.quantize) * lin.count
        else:
            total += lin.weight_params * sc.precision.compute_bytes
        total += lin.bias_params * sc.precision.compute_bytes
    return total + spec.block_norm_params * sc.precision.compute_bytes + fsdp2_block_adapters(spec, sc, profile)


def comm_buffers(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, parts: Parts) -> int:
    """Communication buffers of the data-parallel engine, per GPU, live during forward/backward."""
    if sc.num_gpus == 1 and sc.parallelism in (Parallelism.NONE, Parallelism.DDP):
        return 0
    if sc.parallelism is Parallelism.DDP:
        # gradient_as_bucket_view=False (default): buckets are a second copy of all gradients
        # (pytorch/pytorch PR #41954; Lightning DDP optimizations doc)
        return parts.gradients
    if sc.parallelism in ZERO_FAMILY:
        return _zero_buffers(spec, sc, profile)
    if sc.parallelism is Parallelism.FSDP_NO_SHARD:  # no all-gather, gradients all-reduced in place
        from vramfit.estimate.no_shard import mixed_precision_copies

        return mixed_precision_copies(spec, sc, profile)
    layer = _layer_param_bytes(spec, sc, profile)
    if sc.parallelism is Parallelism.FSDP:
        # two all-gathers in flight (FSDP_INFLIGHT_ALLGATHERS); the root unit (embeddings, final
        # norm, lm_head) stays gathered until the end of backward
        gathered = FSDP_INFLIGHT_ALLGATHERS.value * layer
        if not profile.fsdp_root_gathered:
            return gathered
        # a buffer of its own beside the shard: FSDP2's foreach_all_gather output (estimate/fsdp2.py, 3), FSDP1's padded
        # unsharded flat parameter (torch v2.13.0 distributed/fsdp/_flat_param.py ``_alloc_padded_unsharded_flat_param``
        # sizes ``_full_param_padded`` to the whole unit while ``_local_shard`` keeps the shard; the simulator's FSDP1
        # root of a 4-layer Llama on 4 ranks is one 16,779,264 B bf16 tensor, its whole 8,389,632 elements)
        return gathered + _root_gathered_bytes(spec, sc, profile)
    if sc.parallelism is Parallelism.FSDP_GRAD_OP:
        # every unit stays gathered from its forward to its post-backward: FSDP2 ``FSDPParamGroup.reshard`` returns
        # in forward when ``not self._reshard_after_forward`` and post_backward reshards (``reshard_after_backward``
        # defaults True), torch v2.13.0 distributed/fsdp/_fully_shard/_fsdp_param_group.py; FSDP1 frees the unsharded
        # flat parameter after forward only for RESHARD_AFTER_FORWARD_HANDLE_STRATEGIES (FULL_SHARD, HYBRID_SHARD;
        # _runtime_utils.py _post_forward_reshard) and after backward when gradients sync (_should_free_in_backward).
        # Each gathered copy is a buffer of its own beside the shard (state.sharding_for), in the compute dtype
        # (quantized for a QLoRA base); a frozen unit is kept just the same. Plus, in full fine-tuning, the unsharded
        # gradients of the unit being reduce-scattered (a LoRA unit's gradients are its adapters', a few MiB)
        grads = 2 * layer if sc.method is Method.FULL else 0
        return spec.num_hidden_layers * layer + _root_gathered_bytes(spec, sc, profile) + grads
    return 0


def _root_gathered_bytes(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """Unsharded bytes of the units outside the blocks (embeddings, final norm, lm_head), gathered in the
    compute dtype (fp32 for a QLoRA base the profile keeps unquantized in fp32, unless FSDP's mixed precision
    gathers it in 16 bits: the HF Trainer's bf16/fp16, which its QLoRA recipe runs under, makes accelerate's policy
    ``param_dtype`` 16-bit (accelerate v1.15.0 utils/fsdp_utils.py fsdp2_prepare_model l. 779, FSDP1's
    MixedPrecision alike), and the all-gather casts the fp32 shards to it (torch v2.13.0 distributed/fsdp/
    _fully_shard/_fsdp_param.py ``all_gather_inputs``: ``sharded_param.to(self.param_dtype)``). The simulator's
    accelerate FSDP2 of a 3-layer Gemma-2-2B QLoRA gathers the fp32 embedding into a 1,179,648,000 B bf16 buffer;
    counted in fp32 the estimate read +21 %)."""
    root = (spec.embedding_params + spec.lm_head_params + spec.final_norm_params) * sc.precision.compute_bytes
    if sc.method is Method.QLORA and profile.qlora_unquantized_fp32 and not fsdp_gathers_16bit(sc, profile):
        root *= 2
    return root


def zero3_eval_head_relief(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """Bytes of ZeRO-3 parameters an evaluation pass gathers fewer than the training step when the fused training loss
    made the output layer an external parameter of the CausalLM module (``profile.fused_loss_head_external``): the
    module fetches it at the first step of every forward, so the head counts in the elements the prefetch fills up to
    stage3_max_live_parameters, and one block parameter, not the head, comes on top. Training keeps the head on top:
    the blocks kept for their reuse in backward, not the prefetch, fill the forward's end. The simulator on DeepSpeed
    0.19.8 (Qwen2.5-7B, 28 layers, 4 GPUs, max_live 1e9): 1.09e9 elements available at most in evaluation with the
    fused training loss against 1.48e9 with the standard one; 1.49e9 and 1.51e9 in training."""
    if sc.parallelism is not Parallelism.ZERO3 or sc.loss is not Loss.FUSED or not profile.fused_loss_head_external:
        return 0
    return zero3_head_on_top(spec, sc, profile)


def zero3_head_on_top(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """ZeRO-3: bytes by which the gathered parameters with the output layer on top of stage3_max_live_parameters exceed
    those with one block parameter on top. The blocks' backward holds the latter: the output layer's parameters were
    released after its own backward, or (Liger's loss, :func:`zero3_eval_head_relief`) count inside the cap, and the
    prefetch fills up to the cap with one parameter's overshoot (DeepSpeed v0.16.5 partitioned_param_coordinator.py
    l. 380-405). The simulator (DeepSpeed 0.19.8, Qwen2.5-7B, 4 GPUs, ZeRO-3, full checkpointing, Liger's loss, seq
    8192): backward peak 34.19 GiB simulated, 35.41 estimated with the head on top, 34.52 now; with optimizer offload
    9.46, 10.58 and 9.70 GiB; every ZeRO-1/2/3 simulator test (tests/sim/test_sim_deepspeed*.py) stays within its
    bound."""
    if sc.parallelism is not Parallelism.ZERO3:
        return 0
    return max(0, _zero_buffers(spec, sc, profile) - _zero_buffers(spec, sc, profile, head_inside=True))


def _zero_buffers(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, head_inside: bool = False) -> int:
    """ZeRO reduce buckets and (stage 3) gathered parameters, sized from the scenario's DeepSpeed config
    (estimate/deepspeed.py; the HF docs' example config when none is given); ``head_inside``: the output layer counts
    in the live elements, one block parameter overshoots them (:func:`zero3_eval_head_relief`)."""
    from vramfit.estimate import deepspeed as ds

    stage = {Parallelism.ZERO1: 1, Parallelism.ZERO2: 2, Parallelism.ZERO3: 3}[sc.parallelism]
    z = ds.resolve(sc.deepspeed_config, spec.hidden_size, stage)
    grad_dtype = 4 if sc.precision is Precision.FP32 else 2  # the engine's (optimizer's) dtype, _ds_mixed
    ipg = ds.ipg_bytes(z, stage, grad_dtype)
    if stage < 3:
        return ipg + offload_grad_staging(spec, sc, profile)
    layer = _layer_param_bytes(spec, sc, profile)
    quantized = sc.quantize is not Quantize.NONE and sc.method is not Method.FULL
    elems = sum(lin.weight_params + lin.bias_params for lin in spec.block_linears) + spec.block_norm_params
    if quantized:
        # ZeRO-3 QLoRA packs the 4-bit weights in the 16-bit storage dtype (peft v0.21.2
        # docs/source/accelerate/deepspeed.md, ZeRO-3 QLoRA: --bnb_4bit_quant_storage_dtype bfloat16, "4-bit params
        # are packed together"): DeepSpeed's ds_numel counts 2-byte elements
        per_elem = 2.0
    else:
        per_elem = layer / max(1, elems)
    largest, block = ds.zero3_largest(spec, sc, profile)
    model = layer * spec.num_hidden_layers + ds.largest_head(spec, sc, profile)
    tied = not spec.lm_head_params and ds.tied_head_inside(z, spec.num_hidden_layers, elems, spec.final_norm_params)
    gathered = ds.gathered_bytes(z, per_elem, block if head_inside or tied else largest, model)
    if sc.method is not Method.FULL:  # a frozen base keeps its secondary partitions (ds.hpz_gathered)
        return ipg + gathered
    head = spec.lm_head_params or spec.embedding_params
    recompute = sc.gradient_checkpointing in (Checkpointing.FULL, Checkpointing.OFFLOAD)
    kept = ds.reuse_kept_bytes(z, spec.num_hidden_layers, elems, head, recompute, per_elem)
    return ipg + ds.hpz_gathered(gathered, largest, _hpz(sc), kept)


def optimizer_temporaries(sc: Scenario, parts: Parts, profile: FrameworkProfile, largest_param: int) -> int:
    """Temporaries of the optimizer step.

    torch foreach AdamW: ``torch._foreach_sqrt(exp_avg_sqs)`` copies the whole second moment of a
    (device, dtype) group (torch/optim/adamw.py ``_multi_tensor_adamw``); fused: none assumed.
    Adafactor: fp32 copies of grad, param and update of one parameter at a time. torchao 4-bit and
    8-bit: both states of one parameter dequantized to fp32 (:func:`torchao_step_bytes`). bitsandbytes
    8-bit: none (its blockwise kernel updates the uint8 states in place).
    """
    if sc.offload is not sc.offload.NONE:
        return 0
    if sc.optimizer is Optimizer.ADAMW and profile.torch_optimizer_impl is OptimizerImpl.FOREACH:
        return parts.optimizer_state // 2
    if sc.optimizer is Optimizer.ADAFACTOR:
        # transformers Adafactor.step, per parameter: grad.float() and p.float() (new tensors unless
        # already fp32), `update` and the rank-1 `_approx_sq_grad` that replaces it (both alive at
        # the assignment), then `-update * lr`: up to four full-size fp32 tensors
        copies = 2 + (0 if sc.precision.param_bytes == 4 else 2)
        return copies * 4 * largest_param
    if sc.optimizer in TORCHAO_OPTIMIZERS:
        return torchao_step_bytes(largest_param)
    return 0




__all__ = ["model_state", "Parts"]
