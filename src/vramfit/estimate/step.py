"""One training step as a typed, frozen record: every figure the phases are built from.

:func:`compute` resolves the model state (:mod:`vramfit.estimate.core`), the saved activations
(:mod:`vramfit.estimate.activations`), the loss (:mod:`vramfit.estimate.loss`) and the transients into
a :class:`Step`; the contributors of :mod:`vramfit.estimate.contributions` then give each phase its
named contributions, and a phase's peak is their sum.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from vramfit.estimate import activations as act
from vramfit.estimate import block_extras as extras
from vramfit.estimate import vision
from vramfit.estimate.allocator import largest_weight, round_allocation
from vramfit.estimate.attention import qk_l2_norm_saved, sliding_layers_kv_repeat
from vramfit.estimate.constants import (
    BNB_4BIT_BLOCK,
    CUBLAS_WORKSPACE,
    CUBLAS_WORKSPACE_HOPPER,
    CUBLASLT_WORKSPACE,
)
from vramfit.estimate.core import (
    Parts,
    _ds_mixed,
    comm_buffers,
    model_state,
    optimizer_temporaries,
)
from vramfit.estimate.deepspeed import zero3_fetch_copies
from vramfit.estimate.ds_offload import zero1_accumulated_grads
from vramfit.estimate.forward_extras import (
    autocast_block_copies,
    autocast_copies,
    head_autocast_copy,
    sliding_window_masks,
    sliding_window_recompute,
)
from vramfit.estimate.framework import (
    FrameworkProfile,
    OptimizerImpl,
    casts_params,
    runs_under_autocast,
    scenario_profile,
)
from vramfit.estimate.fsdp1_units import block_units_numel, mixed_block_units, mixed_unit_backward_grads
from vramfit.estimate.fsdp2 import accumulates_shards
from vramfit.estimate.loss import LossMemory, head_calls, loss_memory
from vramfit.estimate.moe_kernel import (
    every_token_top_freed,
    every_token_top_grads,
    index_backward_transient,
    lowest_block_pending,
)
from vramfit.estimate.moe_lora import autocast_cast_spec, dense_layers, folded_bank_backward
from vramfit.estimate.params import Adapter
from vramfit.estimate.phases import PhaseBreakdown
from vramfit.estimate.torchao_optim import TORCHAO_OPTIMIZERS
from vramfit.estimate.vision import tower_autocast_copies
from vramfit.estimate.vision_backward import tower_backward_kept, tower_grads_pending
from vramfit.estimate.zero2_step import zero12_norm_piece
from vramfit.gpus import GPU, Arch
from vramfit.models.spec import ModelSpec
from vramfit.scenario import (
    Checkpointing,
    Method,
    Offload,
    Optimizer,
    Parallelism,
    Precision,
    Quantize,
    Scenario,
)

_DS = (Parallelism.ZERO1, Parallelism.ZERO2, Parallelism.ZERO3)


@dataclass(frozen=True)
class Activations:
    """Saved tensors of the blocks and of the rest of the model, per micro-batch (bytes per GPU)."""

    saved: act.Saved  # one block without checkpointing, tensor by tensor
    per_layer: int  # that block's saved bytes, each tensor rounded by the allocator
    blocks: int  # all blocks as kept under the checkpointing policy
    recompute: int  # re-created inside one block's backward (checkpointing)
    outside_blocks: int  # final norm, lm_head input, eager mask ... (model_extra_saved)
    masks: int  # sliding-window SDPA biases (and the k/v a masked sliding layer repeats to every head)
    host: int  # offloaded block inputs
    tower: int = 0  # a VLM's trained vision tower: its blocks as kept (part of blocks)
    tower_recompute: int = 0  # one tower block re-created in its backward (checkpointing)
    lowest: int = 0  # block tensors still kept in the lowest block's backward (the others' consumed)
    forward_only: int = 0  # alive until the forward returns only (a VLM's tower output in the model's output)
    tower_backward: int = 0  # kept while the tower's top block runs backward (estimate/vision_backward.py)
    tower_backward_lowest: int = 0  # kept while its lowest block does
    top_freed: int = 0  # the top block's kept tensors freed before its working set (moe_kernel.every_token_top_freed)

    @property
    def total(self) -> int:
        return self.blocks + self.outside_blocks + self.masks


@dataclass(frozen=True)
class Step:
    """Every figure of one training step that a phase contribution reads (bytes per GPU)."""

    spec: ModelSpec
    sc: Scenario
    profile: FrameworkProfile
    parts: Parts  # the component table (final; not modified after compute)
    adapters: tuple[Adapter, ...]
    acts: Activations
    loss: LossMemory
    autocast_forward: int  # autocast copies that die at the end of forward
    block_transient: int  # gradient working set inside one block's backward
    dequant: int  # de-quantized copy of the largest 4-bit weight
    opt_temp: int  # temporaries of the optimizer step (0 when it runs in backward)
    held_grads: int  # gradients kept between micro-batches (grad_accum > 1)
    head_grad: int  # the output layer's weight gradient
    layer_grads: int  # one block's weight gradients during its backward
    lm_head_trainable: bool
    lowest_grads: int = 0  # gradients alive in the lowest block's backward (0: that position is not modelled)
    lowest_autocast: int = 0  # autocast weight copies alive in the lowest block's backward
    head_autocast: int = 0  # the output layer's autocast copy: freed by its matmul backward, before any block's
    phases: tuple[PhaseBreakdown, ...] = ()
    card: GPU | None = None  # the target card (a colocated vLLM takes a fraction of it)
    ranks: tuple = ()  # tensor/pipeline/context parallel: each pipeline rank's share (estimate/ranks.py)
    fetch_copy: tuple[int, int] = (0, 0)  # ZeRO-3 host partitions copied to the GPU (forward, block backward)
    block_grads: int = 0  # FSDP full fine-tuning: one block's whole gradients before their reduce-scatter
    eager_forward: tuple[int, int] = (0, 0)  # top block's eager softmax in forward: (working set, kept)

    # names read by estimate/__init__ (assumptions, reserved bytes)
    @property
    def saved(self) -> act.Saved:
        return self.acts.saved

    @property
    def per_layer(self) -> int:
        return self.acts.per_layer


def _workspaces(card: GPU | None) -> int:
    """cuBLAS + cuBLASLt workspaces, allocated through the caching allocator (CublasHandlePool.cpp).

    sm90 cards get the 32 MiB cuBLAS workspace (CublasHandlePool.cpp); the catalog's architecture
    column says which card is sm90 (``card`` is the GPU record of the scenario's ``gpu``). One set
    for the forward thread and one for autograd's backward thread: cuBLAS workspaces are per thread
    since pytorch/pytorch PR #180283."""
    hopper = card is not None and card.arch is Arch.HOPPER
    return 2 * ((CUBLAS_WORKSPACE_HOPPER if hopper else CUBLAS_WORKSPACE).value + CUBLASLT_WORKSPACE.value)


def _activations(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, adapters: list, lm_head_trainable: bool) -> Activations:
    quantized = sc.quantize is not Quantize.NONE and sc.method is not Method.FULL
    saved = act.block_saved(spec, sc, profile, adapters, quantized)
    if quantized and sc.quantize is Quantize.GPTQ_INT4:
        # GPTQ for training runs the torch path (ModelCloud/GPTQModel v4.2.5 gptqmodel/nn_modules/qlinear/torch.py
        # TorchQuantLinear._forward: `weights = self.dequantize_weight(...).to(x.dtype)`, then
        # `torch.matmul(x, weights)`): the matmul saves the de-quantized 16-bit weight for the input's gradient,
        # so a block keeps every linear's weight in 16 bits (the recomputed block, under checkpointing)
        saved.add("gptq.dequantized_weights", sc.precision.compute_bytes * sum(
            lin.in_features * lin.out_features * lin.count for lin in spec.block_linears))
    # a VLM's image side of the language model (Llama 3.2 Vision's cross-attention layers) beside the walked layers
    cross, cross_recompute = vision.lm_image_activations(spec, sc, profile, adapters)
    per_layer = sum(round_allocation(v) for v in saved.items.values())
    layers_sum, per_layer_max = _layer_kinds(spec, sc, profile, adapters, quantized, saved)
    tower, tower_recompute = vision.vision_activations(spec, sc, profile, adapters)
    block_in = round_allocation(extras.block_input_bytes(spec, sc, profile))
    L = spec.num_hidden_layers
    ck, host = sc.gradient_checkpointing, 0
    if ck is Checkpointing.NONE:
        blocks, recompute = layers_sum, 0
    elif ck is Checkpointing.SELECTIVE:
        kernel = sum(round_allocation(v) for k, v in saved.items.items() if k.startswith("attn."))
        blocks, recompute = layers_sum - L * kernel, kernel
    elif ck is Checkpointing.SELECTIVE_OP:
        kept = extras.op_sac_saved(spec, sc, profile)
        blocks, recompute = L * (block_in + kept), max(0, per_layer_max - kept)
    elif ck is Checkpointing.FULL:
        blocks, recompute = L * block_in, per_layer_max
    else:  # offload: block inputs in host memory; on the GPU as many as the profile says
        blocks, recompute, host = profile.offload_ckpt_block_tensors * block_in, per_layer_max, L * block_in
    # the lowest block's backward: the blocks above have consumed what they kept; offloaded inputs come back a
    # fixed number at a time (profile.offload_ckpt_block_tensors), less the next block's prefetched input,
    # which the lowest block does not have (profile.offload_ckpt_prefetched)
    lowest = ((profile.offload_ckpt_block_tensors - profile.offload_ckpt_prefetched) * block_in
              if ck is Checkpointing.OFFLOAD else blocks // L)
    blocks, recompute = blocks + cross, max(recompute, cross_recompute)
    recompute += sliding_window_recompute(spec, sc, profile)  # a recomputed sliding layer's SDPA bias
    return Activations(
        saved, per_layer, blocks + tower, max(recompute, tower_recompute),
        extras.model_extra_saved(spec, sc, profile, lm_head_trainable),
        sliding_window_masks(spec, sc, profile) + sliding_layers_kv_repeat(spec, sc, profile)
        + (extras.eager_mask(spec, sc, profile) if ck is not Checkpointing.NONE else 0), host,
        tower, tower_recompute, lowest + tower,
        vision.forward_only_bytes(spec, sc, profile) + extras.forward_only_masks(spec, sc, profile),
        *tower_backward_kept(spec, sc, profile, adapters), every_token_top_freed(spec, saved.items),
    )


def _layer_kinds(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, adapters: list, quantized: bool,
                 saved: act.Saved) -> tuple[int, int]:
    """(every block's saved bytes together, the largest block's): the MoE block walked for the MoE layers,
    a dense MLP block for the dense ones (moe_lora.dense_layers). The attention part is the same in both."""
    per_layer = sum(round_allocation(v) for v in saved.items.values())
    L = spec.num_hidden_layers
    # Llama 4's weightless q/k norm on its RoPE layers only (attention.qk_l2_norm_saved)
    l2 = spec.qk_l2_norm_layers * qk_l2_norm_saved(spec, sc.micro_batch_size * sc.seq_len)
    mixed = dense_layers(spec)
    if mixed is None:
        return L * per_layer + l2, per_layer
    block, n_dense = mixed
    own = [ad for ad in adapters if not ad.param_wrapper]  # the expert banks' ParamWrappers are not in it
    dense = sum(round_allocation(v) for v in act.block_saved(block, sc, profile, own, quantized).items.values())
    return (L - n_dense) * per_layer + n_dense * dense + l2, max(per_layer, dense)


def _dequant(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """bnb MatMul4Bit forward/backward: F.dequantize_4bit(B).to(A.dtype) -> one full weight in the
    compute dtype (+ fp32 absmax when double-quantized) (bitsandbytes autograd/_functions.py:315,346), two
    when the state's dtype is not the compute dtype; none while the fused kernel runs (``profile.qlora_fused_max_tokens``)."""
    quantized = sc.quantize is not Quantize.NONE and sc.method is not Method.FULL
    if not quantized or sc.micro_batch_size * sc.seq_len <= profile.qlora_fused_max_tokens:
        return 0
    biggest_q = max(lin.in_features * lin.out_features for lin in spec.block_linears)
    if profile.qlora_quantizes_lm_head:
        biggest_q = max(biggest_q, spec.lm_head_params or spec.embedding_params)
    # an fp16 de-quantized weight cast to bf16: both copies alive in the `.to` (profile.qlora_dequant_via_fp16)
    copies = 2 if profile.qlora_dequant_via_fp16 and sc.precision in (Precision.BF16_TRUE, Precision.BF16_MIXED) else 1
    return copies * sc.precision.compute_bytes * biggest_q + 4 * (-(-biggest_q // BNB_4BIT_BLOCK.value))


def _gradient_timing(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, parts: Parts,
                     lm_head_trainable: bool) -> tuple[int, int, int, int]:
    """(held between micro-batches, the output layer's, one block's, in the lowest block's backward) gradient bytes."""
    from vramfit.estimate.deepspeed import zero3_grads_resident

    in_bwd = sc.optimizer_in_backward
    resident = zero3_grads_resident(sc)  # ZeRO-3's flat gradient buffer: held from init on
    # ZeRO-1 offload: every 16-bit gradient on the GPU between micro-batches (estimate/ds_offload.py)
    held = zero1_accumulated_grads(sc, parts.num_trainable) or (
        parts.gradients if ((sc.grad_accum > 1 or resident) and not in_bwd) else 0)
    if held and profile.fsdp_unsharded_accum_grads and sc.parallelism is Parallelism.FSDP and profile.fsdp2:
        held *= sc.num_gpus  # no_sync: every GPU accumulates the whole unsharded gradients
    if sc.grad_accum > 1 and not in_bwd and fsdp1_no_sync(sc, profile):
        held = _fsdp1_no_sync_grads(spec, sc, profile, parts)
    grad_bytes_per = max(1, parts.gradients // max(1, parts.num_trainable)) if parts.num_trainable else 0
    if sc.method is Method.FULL:
        # the output layer's gradient as autograd makes it, whole, before any reduce-scatter or offload (the
        # per-GPU ``parts.gradients`` are the sharded, possibly host-side copies): the dtype it is computed in
        grad_bytes_per = _grad_dtype_bytes(sc, profile)
    head_grad = 0
    # FSDP2 accumulates shards: the output layer's whole gradient is made again in each backward (estimate/fsdp2.py, 6)
    if lm_head_trainable and (not held or resident or accumulates_shards(sc, profile)):
        head_grad = whole_head_grad(spec, grad_bytes_per)
    layer_grads = 0 if held or in_bwd else min(parts.gradients, parts.gradients // max(1, spec.num_hidden_layers))
    # Llama 4's every-token experts: the top block has made only its shared expert's and down bank's (moe_kernel.py)
    layer_grads = (every_token_top_grads(spec, sc, grad_bytes_per) or layer_grads) if layer_grads else 0
    if accumulates_shards(sc, profile):  # the top block's whole gradients beside the shards (estimate/fsdp2.py, 6)
        layer_grads = _fsdp_block_grads(spec, sc, profile)
    # use_orig_params units mixing frozen weights and adapters: the whole unit's weight gradients and their cat
    layer_grads = max(layer_grads, mixed_unit_backward_grads(spec, sc, profile, parts))
    from vramfit.estimate.unsloth import replays_step

    if layer_grads and replays_step(spec, sc, profile):
        # the replayed offloaded step frees nothing as backward proceeds (its block inputs are on the host), so its
        # high point is the last block's backward, with every other block's gradients made (estimate/unsloth.py)
        layer_grads = parts.gradients
    return held, head_grad, layer_grads, _lowest_block_grads(spec, sc, profile, parts, grad_bytes_per, held)


def fsdp1_no_sync(sc: Scenario, profile: FrameworkProfile) -> bool:
    """FSDP1 (flat parameters) with the gradient sync off for every micro-batch but the last (the profile's
    ``fsdp_unsharded_accum_grads``: the HF Trainer's ``accelerator.no_sync``, Fabric's ``no_backward_sync``)."""
    no_sync = profile.fsdp_unsharded_accum_grads or (
        profile.fsdp_no_sync_when_offloaded and sc.offload is Offload.OPTIMIZER_PARAMS)
    return (no_sync and not profile.fsdp2 and sc.shard_group > 1
            and sc.parallelism in (Parallelism.FSDP, Parallelism.FSDP_GRAD_OP))


def _fsdp1_no_sync_grads(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, parts: Parts) -> int:
    """Gradients FSDP1 holds between micro-batches under ``no_sync``: every trainable FlatParameter's whole
    (unpadded, unsharded) gradient, on the GPU even when the shards are offloaded, in the dtype autograd made it in:
    the 16-bit ``param_dtype`` under MixedPrecision (fp32 adapters included), else the parameters' own.

    torch v2.13.0 distributed/fsdp/_runtime_utils.py ``_post_backward_hook`` l. 742-746: with
    ``not state._sync_gradients`` it reshards the parameter and returns before any cast or reduce-scatter, leaving
    ``flat_param.grad`` unsharded; _flat_param.py ``prepare_gradient_for_backward`` l. 1627-1630 keeps a gradient
    of ``_unpadded_unsharded_size`` for the next backward to add into, and ``reshard`` l. 1861-1868 (the
    ``accumulated_grad_in_no_sync`` views). The last micro-batch's post-backward reduce-scatters it and frees it
    unit by unit (the sharded gradients of ``parts.gradients`` then). A frozen flat parameter has no gradient, so
    LoRA holds its adapters' only (peft's fsdp_auto_wrap_policy gives them units of their own). Checked on CPU/gloo
    with 2 ranks (Llama, 2 layers, MixedPrecision(bf16)): fp32 full fine-tune, 115,008 elements -> 230,016 B of
    bf16 ``.grad`` on each rank after a no_sync micro-batch, fp32 shards of 230,016 B after the synced one; LoRA r8
    on q/v, 4,096 adapter elements -> 8,192 B bf16 unsharded. The HF Trainer enters ``accelerator.no_sync(model)``
    for every micro-batch but the last (transformers v5.24.0 trainer.py l. 1904-1915; v4.44 through
    ``accelerator.accumulate``, which enters ``self.no_sync(m)`` unless gradients sync or sync_each_batch is set:
    accelerate v0.33.0 accelerator.py l. 1063-1075), and accelerate v1.15.0
    accelerator.py l. 1172-1176 calls the FSDP1 module's own ``no_sync``; accelerate applies MixedPrecision from
    the Trainer's bf16/fp16 (utils/dataclasses.py l. 2109 set_mixed_precision, accelerator.py l. 1950).

    Adapters sharing their block's unit (``profile.fsdp_lora_block_units``: Lightning's use_orig_params=True):
    that FlatParameter requires grad when any of its tensors does (_flat_param.py l. 832), the adapters' views are
    split out of it (``_use_unsharded_views`` l. 1949-2010), so autograd's gradient for it is the whole flat
    parameter, frozen elements as zeros, in its one dtype: every block whole. CPU/gloo (tests/
    test_fsdp1_no_sync_torch.py): 43,136 elements per Llama block unit (41,088 frozen + 2,048 adapter)."""
    from vramfit.estimate.framework import adapter_bytes

    cast = casts_params(sc, profile) or (profile.fsdp_mixed_casts_params and not sc.precision.mixed)
    if cast:
        per = sc.precision.compute_bytes  # MixedPrecision's param_dtype (accelerate: from the Trainer's bf16/fp16)
    else:  # no cast: the trainable parameters' own dtype
        per = sc.precision.param_bytes if sc.method is Method.FULL else adapter_bytes(profile, sc.precision)
    if mixed_block_units(sc, profile):
        # one FlatParameter, one dtype: the frozen weights' (param_dtype when FSDP casts)
        return round_allocation(block_units_numel(spec, parts) * (per if cast else sc.precision.param_bytes))
    return round_allocation(parts.num_trainable * per)


def _lowest_block_grads(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, parts: Parts, grad_bytes_per: int,
                        held: int) -> int:
    """Gradients alive inside the lowest block's backward: every one but the input embedding's.

    Autograd runs the blocks' backward from the top down, and each parameter's ``.grad`` is set when its
    AccumulateGrad node runs (torch/csrc/autograd/functions/accumulate_grad.h), so by the lowest block every
    block above, the final norm and the output layer have theirs; the input embedding's
    (embedding_dense_backward) comes after it. Tied embeddings: the shared weight's gradient already exists,
    from the output layer's matmul backward (a fused loss makes it in forward), so nothing is left out; its
    second share meets it at the end of backward (``BACKWARD_END_TIED``). Of the lowest block's own, only the
    MLP's output linear has its gradient at the block phase's moment (the MLP backward, with the whole recompute
    alive and the working set of the next linears): the simulator traces 966,986,752 B for Qwen2.5-0.5B,
    every gradient but layer 0's gate, up, attention and norm ones. 0 when nothing grows during backward:
    gradients held between micro-batches (all exist from the start) or freed as made (optimizer in backward)."""
    if held or sc.optimizer_in_backward or not parts.num_trainable:
        return 0
    later = 0
    if sc.method is Method.FULL:
        later = lowest_block_pending(spec, grad_bytes_per)
        if not spec.tie_word_embeddings:
            later += round_allocation(spec.embedding_params * grad_bytes_per)
    # a trained vision tower runs its backward after the language model's (estimate/vision_backward.py)
    later += tower_grads_pending(spec, sc, profile, embedding=False, lm_block=True)
    return max(0, parts.gradients - later)


def whole_head_grad(spec: ModelSpec, bytes_per: int) -> int:
    """The output layer's whole weight gradient at ``bytes_per`` bytes an element, as its MmBackward makes it (the
    embedding's shape where the head is tied: ``lm_head_params`` is 0)."""
    return round_allocation((spec.lm_head_params or spec.embedding_params) * bytes_per)


def _grad_dtype_bytes(sc: Scenario, profile: FrameworkProfile) -> int:
    """Bytes per element of a full fine-tune's gradient as autograd makes it, whole, before any reduce-scatter or
    offload: the dtype the parameters run in (16-bit under FSDP's parameter cast or the DeepSpeed engine)."""
    return sc.precision.compute_bytes if casts_params(sc, profile) or _ds_mixed(sc) else sc.precision.param_bytes


def _fsdp_block_grads(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """One decoder block's whole gradients under FSDP full fine-tuning (FULL_SHARD / SHARD_GRAD_OP), made by its
    backward before FSDP copies them into the reduce-scatter input (torch v2.13.0 distributed/fsdp/_fully_shard/
    _fsdp_collectives.py foreach_reduce); 0 where gradients are not sharded or the step runs in backward."""
    if (sc.method is not Method.FULL or sc.num_gpus < 2 or sc.optimizer_in_backward
            or sc.parallelism not in (Parallelism.FSDP, Parallelism.FSDP_GRAD_OP)):
        return 0
    params = sum(lin.weight_params + lin.bias_params for lin in spec.block_linears) + spec.block_norm_params
    return round_allocation(params * _grad_dtype_bytes(sc, profile))


def _torchao_stepped(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, adapters: list[Adapter]) -> int:
    """Elements of the largest tensor torchao's per-parameter step updates at once (pytorch/ao v0.12.0
    torchao/optim/adam.py l. 94-134 ``_AdamBase.step``: one compiled ``single_param_adam`` call per trainable
    parameter): LoRA's largest adapter tensor; in full fine-tuning the largest parameter (a MoE layer's expert bank is
    one 3-D parameter), under FSDP2 its local shard (l. 64 ``p.to_local()`` of the DTensor, sharded on dim 0)."""
    if sc.method is not Method.FULL:
        return max((t.numel for ad in adapters for t in ad.tensors(sc.lora_rank, spec.num_hidden_layers)), default=0)
    largest = max([lin.weight_params if lin.group == "expert" else lin.in_features * lin.out_features
                   for lin in spec.block_linears] + [spec.embedding_params, spec.lm_head_params])
    if profile.fsdp2 and sc.parallelism is Parallelism.FSDP and sc.shard_group > 1 and not sc.per_rank_layout:
        return -(-largest // sc.shard_group)
    return largest


def _optimizer_step_temporaries(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, parts: Parts,
                                adapters: list[Adapter]) -> int:
    if sc.optimizer_in_backward:
        return 0
    largest = largest_weight(spec)
    if sc.optimizer in TORCHAO_OPTIMIZERS:
        largest = _torchao_stepped(spec, sc, profile, adapters)
    temp = optimizer_temporaries(sc, parts, profile, largest)
    if sc.parallelism in _DS and sc.offload is Offload.NONE and sc.precision is not Precision.FP32:
        from vramfit.estimate.deepspeed import fp32_grad_partition, grad_norm_transient, resolve

        group = -(-parts.num_trainable // sc.num_gpus)  # ZeRO-1/2: one flat fp32 partition per param group
        if sc.parallelism is Parallelism.ZERO3:  # per sub-group, cut at sub_group_size (_create_fp16_sub_groups)
            group = min(resolve(sc.deepspeed_config, spec.hidden_size, 3).sub_group_size, group)
        if sc.optimizer is Optimizer.ADAMW and profile.torch_optimizer_impl is OptimizerImpl.FOREACH:
            # ZeRO-1/2 free the 16-bit partition before _optimizer_step, and this phase counts it as gradients
            freed = 0 if sc.parallelism is Parallelism.ZERO3 else sc.precision.compute_bytes * group
            temp = ds_foreach_step(group) - freed
        if sc.method is Method.FULL:  # ZeRO-3 splits each parameter, ZeRO-1/2 the flat buffer (zero12_norm_piece)
            zero3 = sc.parallelism is Parallelism.ZERO3
            temp = max(temp, grad_norm_transient(-(-largest // sc.num_gpus) if zero3 else zero12_norm_piece(spec, group)))
        temp = max(temp, fp32_grad_partition(group))
    return temp


def ds_foreach_step(group_numel: int) -> int:
    """A foreach AdamW step inside DeepSpeed ZeRO (no optimizer offload), bytes: the engine points the optimizer at
    one flat fp32 tensor, this GPU's partition (ZeRO-1/2) or sub-group (ZeRO-3), whose fp32 gradient is alive through
    the step (DeepSpeed v0.16.2 and 0.19.8 runtime/zero/stage_1_and_2.py step: ``single_partition_of_fp32_groups[i]
    .grad = single_grad_partition``, ``self._optimizer_step(i)``, then ``.grad = None``; stage3.py _optimizer_step:
    ``param_groups[param_group_id]['params'] = [fp32_param]``), and torch's foreach AdamW copies that tensor's whole
    second moment (torch/optim/adamw.py _multi_tensor_adamw: ``exp_avg_sq_sqrt = torch._foreach_sqrt(...)``):
    4 + 4 bytes per element of the group. ZeRO-1/2 have freed the 16-bit partition by then (stage_1_and_2.py step:
    ``free_grad_in_param_list(self.params_in_partition[i])``, ``averaged_gradients[i] = None``), so the moment holds
    as much as the flatten before it (:func:`vramfit.estimate.deepspeed.fp32_grad_partition`) but in a new segment
    (:func:`vramfit.estimate.zero2_step.zero2_step_reserved`); ZeRO-3's 16-bit gradients stay in their flat buffer.
    ``vramfit simulate`` (DeepSpeed 0.19.8, Qwen2.5-0.5B ZeRO-2 on 2 GPUs, foreach vs fused): 0.92 GiB more at the
    first step's optimizer moment, 4 bytes per partition element."""
    return (4 + 4) * group_numel


def compute(spec: ModelSpec, sc: Scenario, card: GPU | None = None) -> Step:
    """The step record of a scenario on a resolved architecture, its phases filled in.

    ``card``: the GPU record of ``sc.gpu`` (hardware facts come from it, never from the id). A stage
    other than sft is the SFT step of its policy (``stages.policy_scenario``) plus its contributors."""
    from vramfit.estimate import stages
    from vramfit.estimate.contributions import CONTRIBUTORS, phase_breakdowns

    if sc.per_rank_layout:
        from vramfit.estimate.ranks import model_parallel_step

        return model_parallel_step(spec, sc, card, compute)
    user_sc, sc = sc, vision.lm_scenario(spec, stages.policy_scenario(sc))
    profile = scenario_profile(sc)
    if profile.untied_head_copy and spec.tie_word_embeddings:
        spec = replace(spec, tie_word_embeddings=False, lm_head_params=spec.embedding_params)
    state, adapters = model_state(spec, sc, profile)
    lm_head_trainable = sc.method is Method.FULL or "lm_head" in sc.lora_targets
    acts = _activations(spec, sc, profile, adapters, lm_head_trainable)
    autocast_fwd = autocast_kept = lowest_autocast = head_autocast = 0
    # FSDP (either strategy) computes on its gathered 16-bit copies: autocast finds nothing to cast; NO_SHARD
    # computes on the flat parameters themselves, cast only under MixedPrecision (estimate/no_shard.py)
    no_shard_cast = sc.parallelism is Parallelism.FSDP_NO_SHARD and casts_params(sc, profile)
    if (runs_under_autocast(sc, profile) and not no_shard_cast
            and sc.parallelism not in (Parallelism.FSDP, Parallelism.FSDP_GRAD_OP, *_DS)):
        cast = autocast_cast_spec(spec, profile)
        autocast_fwd, autocast_kept = autocast_copies(cast, sc, head_calls(sc, profile))
        autocast_kept += tower_autocast_copies(spec, sc, profile)  # the tower's backward runs last
        lowest_autocast = autocast_block_copies(cast, sc)
        head_autocast = head_autocast_copy(cast, sc, head_calls(sc, profile))
    loss = loss_memory(spec, sc, profile)
    tb = extras.block_backward_transient(spec, sc, profile, acts.saved)
    # transformers 4's indexed expert loop: a zero-filled bank per expert in backward (estimate/moe_kernel.py)
    tb = max(tb, index_backward_transient(spec, sc, profile, _grad_dtype_bytes(sc, profile)))
    dequant = _dequant(spec, sc, profile)
    opt_temp = _optimizer_step_temporaries(spec, sc, profile, state, adapters)
    parts = replace(
        state, workspaces=_workspaces(card), host=state.host + acts.host, activations=acts.total,
        autocast_copies=autocast_kept, logits_loss=loss.forward_peak,
        comm_buffers=comm_buffers(spec, sc, profile, state), temporaries=max(tb + dequant, opt_temp),
    )
    held, head_grad, layer_grads, lowest_grads = _gradient_timing(spec, sc, profile, parts, lm_head_trainable)
    # a MoE block's backward opens with the grouped experts' un-permute, before the block has made a gradient of its
    # own: that working set counts net of the block's gradients the block phase adds (block_extras.unpermute_backward)
    tb = max(tb, extras.unpermute_backward(spec, sc, profile) - layer_grads,
             folded_bank_backward(spec, sc, profile, adapters) - layer_grads)  # PEFT's folded bank (moe_lora.py)
    parts = replace(parts, temporaries=max(tb + dequant, opt_temp))
    step = stages.finish(Step(
        spec, user_sc, profile, parts, tuple(adapters), acts, loss, autocast_fwd, tb, dequant, opt_temp,
        held, head_grad, layer_grads, lm_head_trainable, lowest_grads, lowest_autocast, card=card,
        fetch_copy=zero3_fetch_copies(spec, sc, profile), block_grads=_fsdp_block_grads(spec, sc, profile),
        head_autocast=head_autocast, eager_forward=extras.forward_softmax_moment(
            spec, sc, profile, acts, loss.cache),
    ))
    return replace(step, phases=phase_breakdowns(step, CONTRIBUTORS + stages.contributors(step)))
