"""LoRA and QLoRA on transformers-5 fused experts, as the activation walk needs them.

PEFT 0.21's ParamWrapper folds the adapter into the 3-D expert weight (``ModelSpec.peft_moe_names``,
``Adapter.param_wrapper``); QLoRA leaves those weights unquantized and fp32."""

from __future__ import annotations

from typing import Any

from vramfit.estimate.framework import FrameworkProfile
from vramfit.models.spec import Linear, ModelSpec
from vramfit.scenario import Method, Parallelism, Quantize, Scenario


def expert_bytes(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, quantized: bool) -> int:
    """Element size of the expert weights and the tensors the expert path makes: fp32 where QLoRA
    leaves the fused experts unquantized and prepare_model_for_kbit_training upcasts them (peft v0.21.2
    utils/other.py casts every non-4-bit 16-bit parameter to fp32; the simulator traces the gathered
    input, the grouped matmuls and the folded weight in fp32)."""
    from vramfit.estimate.core import experts_quantized
    from vramfit.estimate.framework import casts_params

    fp32 = (quantized and profile.qlora_unquantized_fp32 and profile.runs_transformers_modeling
            and not experts_quantized(sc, profile))
    # -mixed: fp32 banks, and the grouped matmul is not autocast (transformers v5.24.0 integrations/moe.py
    # _grouped_mm casts the input to the weight's dtype instead), so the whole expert path runs in fp32
    mixed = sc.precision.mixed and profile.runs_transformers_modeling and not casts_params(sc, profile)
    return 4 if spec.num_experts and (fp32 or mixed) else sc.precision.compute_bytes


def autocast_cast_spec(spec: ModelSpec, profile: FrameworkProfile) -> ModelSpec:
    """The spec whose block linears autocast casts to 16 bits: transformers 5's 3-D expert banks go through
    the grouped matmul, which autocast does not cover (integrations/moe.py ``_grouped_mm``: no autocast
    entry, the input is cast to the bank's dtype), so they get no 16-bit copy."""
    from dataclasses import replace

    if not spec.num_experts or not profile.runs_transformers_modeling:
        return spec
    return replace(spec, block_linears=tuple(x for x in spec.block_linears if x.group != "expert"))


def fused_expert_bank(blk: Any) -> bool:
    """The experts are transformers 5's 3-D parameter banks run by one grouped matmul (integrations/moe.py,
    v5.24.0), which no LoRA branch reads; other frameworks loop over per-expert linears. ``blk``: the
    walk's Block."""
    return blk.profile.runs_transformers_modeling


def folded_expert_weights(blk: Any, out: Any, mlp_lins: list[Linear]) -> None:
    """PEFT's ParamWrapper (_LoraFactorsProxy) materialises ``baddbmm(W, lhs, rhs)`` per expert
    weight and the expert matmuls keep it for backward; baddbmm keeps lhs and rhs, A and B cast to the
    bank's dtype (peft v0.21.2 tuners/lora/layer.py ``get_delta_factors``: ``lhs.to(param.dtype)``): new copies
    where the adapters' dtype differs from the bank's, the adapters themselves where it does not (``Tensor.to``
    returns self): fp32 banks under QLoRA or -mixed keep no copy (the simulator's tiny Qwen3-MoE: 3 x 16,777,216 B
    of bf16 copies beside bf16 banks, none beside fp32 ones). ``blk``/``out``: the walk's Block and Saved."""
    from vramfit.estimate.framework import adapter_bytes, casts_params

    out.add("experts.merged_weights", blk.expert_bytes * sum(x.weight_params for x in mlp_lins if x.group == "expert"))
    sc = blk.sc
    own = sc.precision.compute_bytes if casts_params(sc, blk.profile) else adapter_bytes(blk.profile, sc.precision)
    if own == blk.expert_bytes:
        return
    factors = sum(ad.per_layer * sc.lora_rank * ad.slices * (ad.in_features + ad.out_features)
                  for ad in blk.adapters if ad.param_wrapper and ad.per_layer > 1)
    out.add("experts.lora_factors", blk.expert_bytes * factors)


#: the linears only the MoE layers hold
_MOE_GROUPS = ("router", "expert", "shared_expert")


def dense_layers(spec: ModelSpec) -> tuple[ModelSpec, int] | None:
    """The dense layers of a model that mixes them with MoE layers, as a block of their own for the
    activation walk: (that block's spec, how many layers). DeepSeek-V2/V3 ``first_k_dense_replace``
    (transformers v5.24.0 models/deepseek_v3/modeling_deepseek_v3.py DeepseekV3DecoderLayer: ``DeepseekV3MLP``
    below it, ``DeepseekV3MoE`` from it on), Llama 4 ``interleave_moe_layer_step`` (modeling_llama4.py
    Llama4TextDecoderLayer ``is_moe_layer``). ``None`` when every layer is of one kind."""
    from dataclasses import replace

    dense = [lin for lin in spec.block_linears if lin.group == "dense_mlp"]
    if not dense or not spec.num_experts:
        return None
    mlp = tuple(replace(lin, group="mlp", layers=0) for lin in dense)
    kept = tuple(lin for lin in spec.block_linears if lin.group not in _MOE_GROUPS and lin.group != "dense_mlp")
    down = next((lin for lin in mlp if lin.out_features == spec.hidden_size), mlp[-1])
    block = replace(spec, block_linears=kept + mlp, num_experts=0, moe_intermediate_size=0,
                    intermediate_size=down.in_features, peft_moe_names=(), router_fp32=False)
    return block, max(lin.layers for lin in dense)


def position_kinds(spec: ModelSpec, sc: Scenario) -> tuple[bool, bool] | None:
    """Where MoE and dense layers mix (:func:`dense_layers`): whether the top block and the block of the lowest
    position of the backward (contributions._block_position) are MoE blocks; None where every layer is of one
    kind. A recomputed block re-creates its own kind's tensors and autocast copies, not the larger kind's with
    every linear of both (the simulator's tiny DeepSeek-V3, dense layer 0, LoRA, bf16-mixed, checkpointing:
    the lowest block's recompute casts attention and the dense MLP, 16,121,856 B, not those plus the router and
    shared expert, 17,711,104 B). The top block is decoder layer L - 1 (``spec.is_moe_layer``). The lowest
    position is layer 0, except in full fine-tuning where dense layers lie below the lowest MoE layer: there
    it is that MoE block (moe_kernel.lowest_block_pending)."""
    if dense_layers(spec) is None:
        return None
    lowest = True if sc.method is Method.FULL and spec.first_moe_layer else spec.is_moe_layer(0)
    return spec.is_moe_layer(spec.num_hidden_layers - 1), lowest


def kind_block(spec: ModelSpec, moe: bool) -> ModelSpec:
    """One decoder block of a mixed model as its own kind holds it: the MoE layers' linears without the dense MLP,
    or :func:`dense_layers`' dense block."""
    from dataclasses import replace

    if not moe:
        mixed = dense_layers(spec)
        return mixed[0] if mixed is not None else spec
    return replace(spec, block_linears=tuple(x for x in spec.block_linears if x.group != "dense_mlp"))


def block_autocast(spec: ModelSpec, cast: ModelSpec, sc: Scenario) -> tuple[int, tuple[int, int] | None]:
    """(the 16-bit autocast copies one block holds in the lowest position's backward, and where MoE and dense layers
    mix (an MoE block's, a dense block's)): each block's own kind's linears (:func:`position_kinds`). ``cast``: the
    spec whose linears autocast casts (:func:`autocast_cast_spec`)."""
    from vramfit.estimate.forward_extras import autocast_block_copies

    kinds = position_kinds(spec, sc)
    if kinds is None:
        return autocast_block_copies(cast, sc), None
    pair = (autocast_block_copies(kind_block(cast, True), sc), autocast_block_copies(kind_block(cast, False), sc))
    return pair[0 if kinds[1] else 1], pair


def shared_experts_saved(blk: Any, out: Any, mlp_in_key: str, m: int) -> None:
    """The shared expert: a gated MLP every token passes beside the routed experts (DeepSeek-V3
    ``shared_experts``, transformers v5.24.0 modeling_deepseek_v3.py DeepseekV3MoE.forward). ``blk``/``out``:
    the walk's Block and Saved; ``m``: bytes of its intermediate tensors."""
    from vramfit.estimate.activations import _linear_input
    from vramfit.estimate.params import mlp_down

    lins = blk.group("shared_expert")
    down = mlp_down(blk.spec, lins)  # the last one back to the hidden size (gate/up can be as wide)
    if down is None:
        return
    T, width = blk.T, down.in_features
    for lin in lins:
        if lin is down:
            _linear_input(blk, out, lin, "shared.mid", m, T)
        else:
            _linear_input(blk, out, lin, mlp_in_key, blk.dt.norm_out, T)
    out.add("shared.gate_out", m * T * width)
    if not blk.sc.compile:
        out.add("shared.act_out", m * T * width)
    out.add("shared.up_out", m * T * width)


def fsdp2_block_adapters(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """Bytes of one block's LoRA adapters in its FSDP2 all-gather: ``fully_shard(block)`` puts every parameter under
    the block, the adapters too, in one param group, and ``foreach_all_gather`` gathers them all into one output
    (torch v2.13.0 distributed/fsdp/_fully_shard/_fsdp_collectives.py: ``all_gather_input_numel`` sums every
    parameter's shard, a uint8 buffer where their dtypes differ), each in the policy's ``param_dtype`` where the
    MixedPrecisionPolicy casts (-mixed) and in its own dtype otherwise (_fsdp_param.py ``all_gather_inputs``). A
    few MiB on a dense block; PEFT's ParamWrapper on fused experts holds rank x experts rows per bank (the
    simulator's tiny Qwen3-MoE block all-gathers 236,857,856 B, 33,824,768 B of them fp32 adapters)."""
    from vramfit.estimate.framework import adapter_bytes, casts_params

    if not (profile.fsdp2 and sc.parallelism in (Parallelism.FSDP, Parallelism.FSDP_GRAD_OP)):
        return 0
    elem = sc.precision.compute_bytes if casts_params(sc, profile) else adapter_bytes(profile, sc.precision)
    return elem * _block_adapter_params(spec, sc, profile)


def fsdp2_lora_middle_block(step: Any) -> tuple[int, int, int, int] | None:
    """FSDP2 LoRA: (gradients, activations, autocast copies, communication bytes beyond ``parts.comm_buffers``) in
    the backward of a block with one above and one below it, the LoRA counterpart of
    fsdp2.second_lowest_block; None elsewhere. Its own unit and the one below (prefetched) are gathered (in
    ``parts.comm_buffers``), and FSDP2 still holds the block above's flat reduce-scatter input (estimate/fsdp2.py,
    1: ``post_backward`` keeps ``comm_ctx.reduce_scatter_state`` until the next unit's post-backward): that block's
    adapter gradients whole, in the reduce dtype (the policy's ``reduce_dtype`` where it casts, else the adapters'
    own; torch v2.13.0 _fsdp_collectives.py ``foreach_reduce``). A few MiB on a dense block; PEFT's ParamWrapper
    on fused experts makes it weight-sized (the simulator's tiny Qwen3-MoE: the middle block's backward holds the
    top block's 33,824,768 B fp32 input); under accelerate's split units the embedding is not gathered there.
    ``step``: the estimator's Step."""
    from vramfit.estimate.framework import adapter_bytes, casts_params
    from vramfit.estimate.fsdp2 import fsdp2_shards, root_resharded

    sc, spec, profile = step.sc, step.spec, step.profile
    L = spec.num_hidden_layers
    if not fsdp2_shards(sc, profile) or sc.optimizer_in_backward or sc.method is Method.FULL or L < 3:
        return None
    if casts_params(sc, profile):
        elem = sc.precision.compute_bytes if profile.fsdp_reduce_in_param_dtype else 4
    else:
        elem = adapter_bytes(profile, sc.precision)
    # accelerate's split units: only the lowest block prefetches the embedding unit (estimate/fsdp2.py, 4)
    held = elem * _block_adapter_params(spec, sc, profile) - root_resharded(step, backward=False)
    a, shard = step.acts, step.layer_grads
    # going down, each block frees its kept tensors and adds its adapters' gradient shard (the reduce-scatter
    # output): linear in the position, so the high point is an end. Just under the top: every block's kept tensors
    # but the top's, one shard (Qwen3-30B-A3B without checkpointing). The second-lowest: two blocks' kept tensors,
    # the shards of the L - 2 blocks above (the simulator's tiny 6-layer Qwen3-MoE peaks there: 4 x 8,456,192 B).
    under_top = (step.held_grads + shard, a.blocks - a.blocks // L + a.masks + a.recompute - a.top_freed)
    second = (step.held_grads + (L - 2) * shard, a.lowest + a.blocks // L + a.masks + a.recompute)
    grads, kept = max(under_top, second, key=sum)
    return grads, kept, step.lowest_autocast, held


def _block_adapter_params(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """Elements of one decoder block's LoRA adapters (none in full fine-tuning)."""
    from vramfit.estimate.params import resolve_adapters

    if sc.method is Method.FULL:
        return 0
    adapters = resolve_adapters(spec, sc, profile.fused_qkv_lora, profile.runs_transformers_modeling)
    return sum(t.numel * ad.per_layer for ad in adapters if ad.per_layer and not ad.vision
               for t in ad.tensors(sc.lora_rank, 1))


def folded_bank_backward(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, adapters: list[Any]) -> int:
    """Working set of the folded down bank's grouped-matmul backward, the first expert op a block's backward runs
    (0 where no ParamWrapper folds a LoRA into the experts). PEFT's ParamWrapper parametrizes the frozen 3-D bank
    as ``baddbmm(W, lhs, rhs)`` (peft v0.21.2 tuners/lora/layer.py ``_LoraFactorsProxy.forward``; the
    ``_LoraParameterProxy`` path adds the delta the same way): the folded weight requires grad through A and B,
    so ``torch._grouped_mm``'s backward computes the mat2 gradient (torch v2.13.0 tools/autograd/derivatives.yaml
    ``_grouped_mm: mat2: _grouped_mm_mat2_backward``), a whole bank of the folded weight's dtype, next to the
    gradient it receives (rows x hidden) and the input gradient it makes (rows x moe_intermediate_size);
    baddbmm's backward then reduces it to A's and B's gradients and it is freed. The gate/up bank's turn comes
    after the down bank's folded weight is freed, so it is at most as high (gate/up = 2 x down). No gradient of
    the block exists yet: it counts net of the block's gradients (as ``block_extras.unpermute_backward``). The
    simulator's tiny Qwen3-MoE top block: 67,108,864 B bank gradient + 8,388,608 B of (4096, 512) gradients."""
    if sc.method is Method.FULL or not profile.runs_transformers_modeling or not spec.num_experts:
        return 0
    if not any(ad.param_wrapper and ad.per_layer > 1 for ad in adapters):
        return 0
    from vramfit.estimate.core import experts_quantized

    if experts_quantized(sc, profile):
        return 0
    from vramfit.estimate.params import mlp_down

    # the last bank back to the hidden size: the fused gate/up bank listed before it is as wide where
    # 2 x moe_intermediate_size = hidden_size (GLM-4-MoE / DeepSeek-style tiny configs), and picking it counted a
    # bank gradient twice the down bank's
    down = mlp_down(spec, (lin for lin in spec.block_linears if lin.group == "expert"))
    if down is None:
        return 0
    elem = expert_bytes(spec, sc, profile, sc.quantize is not Quantize.NONE)
    rows = sc.micro_batch_size * sc.seq_len * spec.expert_rows_per_token
    return elem * (down.weight_params + rows * (down.in_features + down.out_features))
