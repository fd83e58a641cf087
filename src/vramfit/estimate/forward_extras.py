"""Tensors a forward makes beside the saved activations: autocast's 16-bit weight copies and the sliding-window
masks transformers builds (moved out of estimate/core.py, which keeps the model state and buffers)."""

from __future__ import annotations

from vramfit.estimate.allocator import round_allocation
from vramfit.estimate.attention import (
    image_mask_applies,
    mask_count,
    masked_layer_kv_repeat,
    masked_layers,
    runs_eager_attention,
    sliding_layers,
    window_masked,
)
from vramfit.estimate.framework import FrameworkProfile
from vramfit.models.spec import ModelSpec
from vramfit.scenario import Attention, Checkpointing, Method, Quantize, Scenario


def sliding_window_masks(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """The masks an SDPA run keeps where a sliding window no longer than the sequence makes transformers build
    one (attention.window_masked), or the image tokens' mask masks every layer (attention.image_mask_applies:
    each masked layer, attention.masked_layers, keeps its bias); none where the model runs eager attention (attention.runs_eager_attention:
    Gemma 2, gpt-oss, BLOOM; their masks are block_extras.eager_mask's).

    masking_utils (``profile.masks_per_layer_type``, transformers v5.24.0 sdpa_mask) hands SDPA a boolean mask,
    which torch converts to a 16-bit additive bias in each call (torch v2.13.0 aten/src/ATen/native/transformers/
    attention.cpp convert_boolean_attn_mask; the simulator traces ``logical_not`` and ``zeros_like`` in every
    sliding layer); the memory-efficient kernel then saves that [B, 1, S, S] bias for backward in every such layer
    (not under checkpointing: the forward keeps nothing and each recompute makes its own). Before (v4.44.2
    models/mistral/modeling_mistral.py _update_causal_mask l. 845-951), one float mask in the embeddings' dtype,
    the window baked in, is every layer's ``attn_mask``: saved by each kernel (or held by each checkpointed layer as
    its argument), one tensor through backward; Gemma 3 then builds it whatever the sequence, with a copy per sliding
    layer (:func:`_model_masks_v4`)."""
    image_mask = image_mask_applies(spec, sc, profile)
    v4_copies = spec.sliding_mask_copies_v4 and not profile.masks_per_layer_type
    if (
        not profile.runs_transformers_modeling  # transformers' masking (masking_utils); others use flash/flex
        or not (window_masked(spec, sc) or image_mask or v4_copies)
        or sc.attention is not Attention.SDPA
        or runs_eager_attention(spec, sc, profile)
    ):
        return 0
    squares = sc.micro_batch_size * sc.seq_len * sc.seq_len
    if not profile.masks_per_layer_type:
        # the profile decides first: before masking_utils a model with ``layer_types`` (Qwen2/3 with
        # use_sliding_window, models/hf_config.py) still gets the model's one shared float mask
        return _model_masks_v4(spec, sc, profile, squares)
    layers = masked_layers(spec, sc, profile)
    if not layers:
        return 0
    if sc.gradient_checkpointing is not Checkpointing.NONE:
        # the boolean mask itself, [1, 1, S, S] (masking_utils.sdpa_mask expands a batch-free mask), is every
        # checkpointed layer's argument: kept through backward (the simulator's ``bitwise_and`` tensor); the image
        # tokens' masks (attention.image_mask_applies) are one [B, 1, S, S] per attention type (``bitwise_or`` and
        # ``bitwise_and`` in the simulator's trace of Gemma 3 with an image)
        if image_mask:
            return mask_count(spec, profile) * round_allocation(squares)
        return round_allocation(sc.seq_len * sc.seq_len)
    return layers * round_allocation(sc.precision.compute_bytes * squares)


def _model_masks_v4(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, squares: int) -> int:
    """Before masking_utils: the model's one float [B, 1, S, S] mask in the embeddings' dtype, and where the model makes
    each sliding layer its own masked copy (``ModelSpec.sliding_mask_copies_v4``, Gemma 3 at transformers v4.52.4:
    ``torch.where`` then an indexed copy, the copy passed to SDPA), that copy too, saved by every sliding layer's
    memory-efficient kernel (its ``attn_bias``). Under checkpointing the model mask alone, every checkpointed layer's
    argument; each recompute makes its copy again (:func:`sliding_window_recompute`)."""
    from vramfit.estimate.activations import dtypes_for

    one = round_allocation(dtypes_for(sc, profile, spec).residual * squares)
    if not spec.sliding_mask_copies_v4 or sc.gradient_checkpointing is not Checkpointing.NONE:
        return one
    return (1 + sliding_layers(spec)) * one


def sliding_window_recompute(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """What a checkpointed sliding layer's recompute adds where masking_utils hands SDPA a boolean mask
    (:func:`sliding_window_masks`): torch converts it again, and the memory-efficient kernel keeps that [B, 1, S, S]
    16-bit bias until the layer's attention backward has run; with ``layer_types`` the layer also keeps k and v
    repeated to every query head (attention.sliding_layers_kv_repeat, which counts them without checkpointing only).
    The simulator's trace of a tiny Mistral (window 128, 2048 tokens, full checkpointing) peaks in the top block's
    backward with that layer's ``zeros_like`` bias beside the model's boolean mask: -25 % without them."""
    if sc.gradient_checkpointing is Checkpointing.NONE or not sliding_window_masks(spec, sc, profile):
        return 0
    if not profile.masks_per_layer_type:  # transformers 4: a recomputed sliding layer's own masked copy, if it makes one
        return sliding_window_masks(spec, sc, profile) if spec.sliding_mask_copies_v4 and sliding_layers(spec) else 0
    bias = round_allocation(sc.precision.compute_bytes * sc.micro_batch_size * sc.seq_len * sc.seq_len)
    return bias + masked_layer_kv_repeat(spec, sc, profile)


def autocast_copies(spec: ModelSpec, sc: Scenario, head_calls: int = 1) -> tuple[int, int]:
    """16-bit weight copies made by autocast: (extra at the end of forward, alive into backward).

    Autocast caches the cast of leaf tensors that require grad for the whole autocast region
    (ATen autocast_mode.cpp ``cached_cast``); frozen weights are cast at each use. Either copy is
    kept by the matmul's backward (the input gradient needs the weight) unless the block is
    checkpointed. 4-bit weights are de-quantized by bitsandbytes, never cast by autocast. The
    output layer's weight is cast even when tied to the embeddings; a frozen one once per call when
    the framework runs it ``head_calls`` times (lit-gpt's 128-token chunks, :func:`loss.head_calls`).
    """
    quantized = sc.quantize is not Quantize.NONE and sc.method is not Method.FULL
    block = 0 if quantized else sum(x.weight_params * spec.layers_of(x) for x in spec.block_linears)
    head = head_autocast_copy(spec, sc, head_calls)
    if sc.gradient_checkpointing is Checkpointing.NONE:
        return 0, 2 * block + head
    # checkpointed blocks save nothing; the trainable weights' cached copies live until the forward's
    # autocast region ends, the output layer's copy is saved by its matmul
    trainable = block if sc.method is Method.FULL else 0
    return 2 * trainable, head


def autocast_adapter_copies(adapters, sc: Scenario, profile: FrameworkProfile, layers: int) -> int:
    """Bytes of the 16-bit casts of the fp32 LoRA weights that autocast caches where the framework's adapters are
    leaves handed to F.linear (``profile.autocast_caches_adapters``, PEFT): like the trainable weights of
    :func:`autocast_copies`, each lives until the forward's autocast region ends, and into backward where its matmul
    saves it (no checkpointing). Not an embedding's LoRA (F.embedding is not cast; its B enters the matmul transposed, a
    view the cache skips) nor a PEFT ParamWrapper on an expert bank (the grouped matmul has no autocast entry). The
    simulator's Llama-3.2-1B LoRA r256 on every linear under bf16-mixed (1 x 512, full checkpointing) holds 845.0 MiB
    of autocast copies at its forward peak: the output layer's 501.0 and the adapters' 344.0 (688.0 MiB of fp32
    adapters), where the estimate counted the first alone (-4.2 % at that moment)."""
    from vramfit.estimate.framework import adapter_bytes

    c = sc.precision.compute_bytes
    if not profile.autocast_caches_adapters or adapter_bytes(profile, sc.precision) <= c:
        return 0
    linear = [ad for ad in adapters if ad.target != "embed_tokens" and not ad.param_wrapper]
    return c * sum(t.total for ad in linear for t in ad.tensors(sc.lora_rank, layers) if t.kind in ("lora_A", "lora_B"))


def head_autocast_copy(spec: ModelSpec, sc: Scenario, head_calls: int = 1) -> int:
    """Bytes of the output layer's 16-bit autocast copies, which its matmul saves for backward whether or not the
    blocks are checkpointed (:func:`autocast_copies`): one per call of a frozen head (``head_calls``)."""
    return 2 * (spec.lm_head_params or spec.embedding_params) * (1 if sc.method is Method.FULL else head_calls)


def autocast_block_copies(spec: ModelSpec, sc: Scenario) -> int:
    """16-bit copies of one block's linear weights, alive in that block's backward under autocast.

    The output layer's and the upper blocks' copies are freed once their matmul backward has run (the
    graph releases a node's saved tensors after it runs, retain_graph=False); the block in backward keeps
    its own: saved in forward, or made again by its recompute, which torch.utils.checkpoint runs under the
    forward's autocast state (torch 2.13 torch/utils/checkpoint.py, ``device_autocast_ctx`` in
    ``_checkpoint_without_reentrant_generator``'s recompute_fn). 4-bit weights are de-quantized instead.
    """
    if sc.quantize is not Quantize.NONE and sc.method is not Method.FULL:
        return 0
    return 2 * sum(x.weight_params for x in spec.block_linears)
