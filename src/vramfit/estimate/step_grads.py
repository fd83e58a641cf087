"""The gradients a step holds and when (the gradient timing of :func:`vramfit.estimate.step.compute`: what
backward holds per block and at its end, FSDP1 no_sync, the output layer's whole gradient) and the optimizer
step's temporaries; each rule cites the code it models."""

from __future__ import annotations

from vramfit.choices import ZERO_FAMILY
from vramfit.estimate.allocator import largest_weight, round_allocation
from vramfit.estimate.core import (
    Parts,
    _ds_mixed,
    optimizer_temporaries,
)
from vramfit.estimate.ds_offload import zero1_accumulated_grads
from vramfit.estimate.framework import (
    FrameworkProfile,
    OptimizerImpl,
    casts_params,
)
from vramfit.estimate.fsdp1_units import block_units_numel, mixed_block_units, mixed_unit_backward_grads
from vramfit.estimate.fsdp2 import accumulates_shards
from vramfit.estimate.moe_kernel import (
    every_token_top_grads,
    lowest_block_pending,
)
from vramfit.estimate.params import Adapter
from vramfit.estimate.titan_loss import head_reduced_in_loss
from vramfit.estimate.torchao_optim import TORCHAO_OPTIMIZERS
from vramfit.estimate.vision_backward import grads_share
from vramfit.estimate.zero2_step import zero12_norm_piece
from vramfit.models.spec import ModelSpec
from vramfit.scenario import (
    Method,
    Offload,
    Optimizer,
    Parallelism,
    Precision,
    Scenario,
)


def _gradient_timing(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, parts: Parts,
                     head_trains: bool) -> tuple[int, int, int, int]:
    """(held between micro-batches, the output layer's, one block's, in the lowest block's backward) gradient bytes.

    ``head_trains``: the output layer's weight has a gradient (full fine-tuning, or its modules_to_save copy: that
    copy's own bytes, ``parts.copy_grads``); LoRA on lm_head leaves the weight frozen, so there is none.

    Held gradients are added into as backward makes new ones (accumulate_grad.h ``variable_grad += new_grad``), so a
    held step makes no output-layer or block gradients beside them, except under FSDP1's ``no_sync`` in full
    fine-tuning. There a unit's parameters are views of its flat parameter (torch v2.13.0 distributed/fsdp/
    _flat_param.py ``_get_unflat_views_unaligned``: ``torch.split``), so each micro-batch's new weight gradients wait
    in autograd's input buffer for the split's backward, which concatenates them into a new flat gradient before the
    held one takes it: the output layer's until the root's embedding backward, a block's until its last one, as
    without accumulation. The simulator's FSDP1 of a 4-layer Llama (full, bf16, 4 GPUs, 2 x 512, grad_accum 2) peaks
    in the last micro-batch's top block with the output layer's and that block's new gradients beside every held
    one: 334,048,768 B; the estimate without them read -5.1 %, now -1.0 %."""
    from vramfit.estimate.deepspeed import zero3_grads_resident

    in_bwd = sc.optimizer_in_backward
    resident = zero3_grads_resident(sc)  # ZeRO-3's flat gradient buffer: held from init on
    # ZeRO-1 offload: every 16-bit gradient on the GPU between micro-batches (estimate/ds_offload.py)
    held = zero1_accumulated_grads(sc, parts.num_trainable) or (
        parts.gradients if ((sc.grad_accum > 1 or resident) and not in_bwd) else 0)
    if held and profile.fsdp_unsharded_accum_grads and sc.parallelism is Parallelism.FSDP and profile.fsdp2:
        held *= sc.num_gpus  # no_sync: every GPU accumulates the whole unsharded gradients
    flat_views = False
    if sc.grad_accum > 1 and not in_bwd and fsdp1_no_sync(sc, profile):
        held = _fsdp1_no_sync_grads(spec, sc, profile, parts)
        # full fine-tuning: a unit's new gradients wait for its flat parameter's split backward (docstring)
        flat_views = sc.method is Method.FULL
    grad_bytes_per = max(1, parts.gradients // max(1, parts.num_trainable)) if parts.num_trainable else 0
    if sc.method is Method.FULL:
        # the output layer's gradient as autograd makes it, whole, before any reduce-scatter or offload (the
        # per-GPU ``parts.gradients`` are the sharded, possibly host-side copies): the dtype it is computed in
        grad_bytes_per = _grad_dtype_bytes(sc, profile)
    head_grad = 0
    # FSDP2 accumulates shards: the output layer's whole gradient is made again in each backward (estimate/fsdp2.py, 6)
    # torchtitan 0.3's chunked loss reduces it to its shard inside the loss call (estimate/titan_loss.py, 4)
    if (head_trains and (not held or resident or accumulates_shards(sc, profile) or flat_views)
            and not head_reduced_in_loss(sc, profile)):
        head_grad = parts.copy_grads[1] or whole_head_grad(spec, grad_bytes_per)
    layer_grads = 0 if (held and not flat_views) or in_bwd else _one_block_grads(spec, sc, parts)
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


def _one_block_grads(spec: ModelSpec, sc: Scenario, parts: Parts) -> int:
    """One decoder block's share of the step's gradients (``parts.gradients``, per GPU): an even share of the
    adapters; under full fine-tuning the block's parameters' share, never the input embedding's, the output
    layer's or a vision tower's, which are no block's (the output layer's is ``head_grad``). An even share of
    every gradient put a 3-layer Gemma-2-2B's 256,000 x 2,304 embedding gradient a third into each block: +5.8 %
    against the simulator at its top block's backward (and +3.5 % for a 3-layer Llama-3.2-1B), where only that
    block's own gradients and the output layer's exist (torch/csrc/autograd/functions/accumulate_grad.h: a
    parameter's ``.grad`` is set when its AccumulateGrad node runs)."""
    layers = max(1, spec.num_hidden_layers)
    even = min(parts.gradients, (parts.gradients - sum(parts.copy_grads)) // layers)  # no block makes the copies'
    if sc.method is not Method.FULL or not parts.num_trainable:
        return even
    block = sum(lin.params * spec.layers_of(lin) for lin in spec.block_linears) + spec.block_norm_params * layers
    return min(even, parts.gradients * block // (parts.num_trainable * layers))


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
    if sc.method is Method.FULL and fsdp1_split_cat_grads(spec, sc, profile):
        # FSDP1: ``parts.gradients`` are shards; every block above has reduced its own, the output layer's is whole
        # while the root unit waits for the embedding's, and the lowest block's are whole, the MLP output's made
        # (estimate/fsdp1_moments.py fsdp1_second_lowest)
        head = whole_head_grad(spec, grad_bytes_per) if spec.lm_head_params else 0
        return (_one_block_grads(spec, sc, parts) * (spec.num_hidden_layers - 1) + head
                + fsdp1_lowest_made(spec, sc, profile))
    later = parts.copy_grads[0]  # modules_to_save: the embedding copy's comes after the lowest block
    if sc.method is Method.FULL:
        later = lowest_block_pending(spec, grad_bytes_per)
        if not spec.tie_word_embeddings:
            later += round_allocation(spec.embedding_params * grad_bytes_per)
    # a trained vision tower runs its backward after the language model's: this GPU's share of its gradients
    # (estimate/vision_backward.py grads_share; its whole bytes against the split ``parts.gradients`` over-counted)
    later += grads_share(parts, spec, sc, profile, embedding=False, lm_block=True)
    return max(0, parts.gradients - later)


def whole_head_grad(spec: ModelSpec, bytes_per: int) -> int:
    """The output layer's whole weight gradient at ``bytes_per`` bytes an element, as its MmBackward makes it (the
    embedding's shape where the head is tied: ``lm_head_params`` is 0)."""
    return round_allocation((spec.lm_head_params or spec.embedding_params) * bytes_per)


def _grad_dtype_bytes(sc: Scenario, profile: FrameworkProfile) -> int:
    """Bytes per element of a full fine-tune's gradient as autograd makes it, whole, before any reduce-scatter or
    offload: the dtype the parameters run in (16-bit under FSDP's parameter cast or the DeepSpeed engine)."""
    return sc.precision.compute_bytes if casts_params(sc, profile) or _ds_mixed(sc) else sc.precision.param_bytes


def fsdp1_lowest_made(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """FSDP1 full fine-tuning: the lowest block's own weight gradients made at its block phase's moment, whole (the MLP
    output's: moe_kernel.lowest_block_pending)."""
    return max(0, _fsdp_block_grads(spec, sc, profile) - lowest_block_pending(spec, _grad_dtype_bytes(sc, profile)))


def fsdp1_split_cat_grads(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """FSDP1 FULL_SHARD full fine-tuning: a block's weight gradients and the whole flat gradient the split's backward
    concatenates them into, both alive (fsdp1_units.mixed_unit_backward_grads; estimate/fsdp1_moments.py, 3); 0
    elsewhere."""
    from vramfit.estimate.fsdp1_moments import fsdp1_full_shard

    return 2 * _fsdp_block_grads(spec, sc, profile) if fsdp1_full_shard(sc, profile) else 0


def _fsdp_block_grads(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """One decoder block's whole gradients under FSDP full fine-tuning (FULL_SHARD / SHARD_GRAD_OP), made by its
    backward before FSDP copies them into the reduce-scatter input (torch v2.13.0 distributed/fsdp/_fully_shard/
    _fsdp_collectives.py foreach_reduce); 0 where gradients are not sharded or the step runs in backward."""
    if (sc.method is not Method.FULL or sc.num_gpus < 2 or sc.optimizer_in_backward
            or sc.parallelism not in (Parallelism.FSDP, Parallelism.FSDP_GRAD_OP)):
        return 0
    params = sum(lin.weight_params + lin.bias_params for lin in spec.block_linears) + spec.block_norm_params
    return round_allocation(params * _grad_dtype_bytes(sc, profile))


def _largest_trained(spec: ModelSpec, sc: Scenario, adapters: list[Adapter]) -> int:
    """Elements of the largest tensor a per-parameter optimizer step updates under LoRA: an adapter tensor, or a
    modules_to_save copy (estimate/saved_modules.py), whole-module copies trained beside the adapters (a tied head's
    copy is the embedding's size)."""
    head = spec.lm_head_params or spec.embedding_params
    saved = [n for name, n in (("embed_tokens", spec.embedding_params), ("lm_head", head)) if name in sc.modules_to_save]
    return max([t.numel for ad in adapters for t in ad.tensors(sc.lora_rank, spec.num_hidden_layers)] + saved, default=0)


def _torchao_stepped(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, adapters: list[Adapter]) -> int:
    """Elements of the largest tensor torchao's per-parameter step updates at once (pytorch/ao v0.12.0
    torchao/optim/adam.py l. 94-134 ``_AdamBase.step``: one compiled ``single_param_adam`` call per trainable
    parameter): LoRA's largest trained tensor (:func:`_largest_trained`); in full fine-tuning the largest parameter
    (a MoE layer's expert bank is one 3-D parameter), under FSDP2 its local shard (l. 64 ``p.to_local()`` of the
    DTensor, sharded on dim 0)."""
    if sc.method is not Method.FULL:
        return _largest_trained(spec, sc, adapters)
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
    elif sc.method is not Method.FULL:  # Adafactor steps the trainable tensors only
        largest = _largest_trained(spec, sc, adapters)
    temp = optimizer_temporaries(sc, parts, profile, largest)
    if sc.parallelism in ZERO_FAMILY and sc.offload is Offload.NONE and sc.precision is not Precision.FP32:
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
