"""Attention's saved tensors and working set: q/k/v, the kernel's saved outputs, eager scores.

Which kernel runs, and what it keeps, follows from the spec's family facts (SDPA support, soft-capping,
broadcast k/v views) and the framework profile; see :mod:`vramfit.estimate.activations` for the rules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vramfit.estimate.framework import FrameworkProfile
from vramfit.models.spec import ModelSpec, PositionEncoding
from vramfit.scenario import Attention, Checkpointing, Scenario

if TYPE_CHECKING:
    from vramfit.estimate.activations import Block, Saved
    from vramfit.gpus import GPU


def score_elements(spec: ModelSpec, sc: Scenario) -> int:
    """Elements of one (B, H, S, S) attention-score tensor: eager attention's ``attn_weights`` and softmax output,
    SDPA's math-kernel probabilities (transformers v5.24.0 models/llama/modeling_llama.py eager_attention_forward
    ``torch.matmul(query, key_states.transpose(2, 3))``)."""
    return sc.micro_batch_size * spec.num_attention_heads * sc.seq_len * sc.seq_len


def runs_eager_attention(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> bool:
    """Eager attention also when the model has no path for the asked kernel: BLOOM (ALiBi) has neither SDPA
    nor flash; gpt-oss has no SDPA path but a flash one (``attention: flash`` runs a kernel taking its
    sinks, FA3's ``s_aux``: it saves q, k, v, the output and the fp32 log-sum-exp like any flash call,
    the sinks being a parameter already counted); and, in transformers, models with attention-logit
    soft-capping (Gemma 2), which SDPA kernels cannot apply."""
    supported = spec.flash_supported if sc.attention is Attention.FLASH else spec.sdpa_supported
    if sc.attention is Attention.EAGER or not supported:
        return True
    return profile.runs_transformers_modeling and bool(spec.attn_logit_softcapping)


def sdpa_math_fallback(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> bool:
    """When transformers' SDPA call can only run PyTorch's math kernel (fp32 probabilities kept):
    Falcon expands its single (or grouped) k/v head with a stride-0 view, which flash and
    memory-efficient kernels reject; and grouped-query attention in fp32 (`enable_gqa=True`, which
    the memory-efficient kernel does not take, while flash takes no fp32), or on a card without the flash backend
    (:func:`gqa_math_on_card`)."""
    if not profile.runs_transformers_modeling or spec.num_key_value_heads >= spec.num_attention_heads:
        return False
    return spec.kv_broadcast_view or sc.precision.compute_bytes == 4 or gqa_math_on_card(spec, sc, profile)


def gqa_math_on_card(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, card: GPU | None = None) -> bool:
    """Grouped-query SDPA on a card without the flash backend (the catalog's ``supports_flash_attn2``; ``card``, else
    the scenario's ``gpu``): transformers passes the grouped k and v with ``enable_gqa=True`` where no mask is
    built and the head dims are equal and at most 256 (v5.24.0 integrations/sdpa_attention.py ``use_gqa_in_sdpa``,
    no check of the card; ``profile.expands_kv_for_sdpa``: the releases before v4.54 repeat them instead), and
    PyTorch then has no fused kernel for it: flash and cuDNN attention need sm80, and the memory-efficient kernel's
    dense constraints take no grouped-query shapes (pytorch/pytorch aten/src/ATen/native/transformers/cuda/
    sdp_utils.cpp ``check_batch_size_and_num_heads_dense<false /*supports_grouped_query_attention=*/>``), so the
    math kernel runs (huggingface/transformers#48633: a Tesla T4, transformers 5.0, torch 2.10). Not modelled for a
    model whose layers differ in kind (``layer_types``: its sliding layers get a mask and repeated k and v)."""
    if not (profile.runs_transformers_modeling and sc.attention is Attention.SDPA and not profile.expands_kv_for_sdpa
            and spec.num_key_value_heads < spec.num_attention_heads and not spec.layer_types
            and not window_masked(spec, sc) and spec.head_dim <= 256 and spec.v_dim == spec.head_dim):
        return False
    return lacks_flash_attention(sc, card)


def lacks_flash_attention(sc: Scenario, card: GPU | None = None) -> bool:
    """Whether ``card`` (else the scenario's ``gpu``) is marked without FlashAttention-2 in the catalog (below sm80);
    no card named, or one the catalog does not mark: no."""
    if card is None and sc.gpu:
        from vramfit.gpus import get_gpu

        card = get_gpu(sc.gpu)
    return card is not None and card.supports_flash_attn2 is False


def window_masked(spec: ModelSpec, sc: Scenario) -> bool:
    """Whether transformers' SDPA path builds a sliding-window mask: only a sequence shorter than the window
    skips it. transformers v5.24.0 masking_utils.py _ignore_causal_mask_sdpa: ``if local_attention_size is not None
    and kv_length >= local_attention_size: return False`` (v4.53.0 alike); v4.44.2 modeling_attn_mask_utils.py
    AttentionMaskConverter._ignore_causal_mask_sdpa skips only where ``key_value_length < sliding_window``. So a
    sequence exactly as long as the window (Mistral 7B v0.1 at 4096) gets a mask too."""
    return bool(spec.sliding_window) and sc.seq_len >= spec.sliding_window


def mask_count(spec: ModelSpec, profile: FrameworkProfile) -> int:
    """How many (B, 1, S, S) masks transformers' eager path builds: one per attention type the layers use where
    masking_utils builds them (``profile.masks_per_layer_type``; transformers v5.24.0 models/gemma2/modeling_gemma2.py
    l. 421-433 ``causal_mask_mapping`` = create_causal_mask and create_sliding_window_causal_mask, Gemma 3 and
    gpt-oss alike, Qwen2/3 only ``if self.has_sliding_layers``); eager masks are never skipped
    (masking_utils.py eager_mask: ``allow_is_causal_skip=False``), so a window longer than the sequence still makes
    its mask. The simulator's trace of a tiny Gemma 2 (one sliding and one full layer): two ``where.self`` (B, 1, S, S)
    tensors. Else one: the model's ``_update_causal_mask`` (v4.44.2-v4.52.4)."""
    if profile.runs_transformers_modeling and profile.masks_per_layer_type and spec.layer_types:
        return len(set(spec.layer_types))
    return 1


def _expands_kv(blk: Block, eager: bool) -> bool:
    """Whether k and v are repeated to every query head before the kernel.

    Eager attention repeats them (repeat_kv). transformers' flash-attn path takes grouped k and v (v4.44.2
    models/llama/modeling_llama.py LlamaFlashAttention2, v5.24.0 integrations/flash_attention.py: no repeat_kv).
    Its SDPA path repeats them where the profile says so (``expands_kv_for_sdpa``: transformers before v4.54) and,
    from v4.54 on, where a mask is passed (use_gqa_in_sdpa: enable_gqa only without one): a sliding window no longer
    than the sequence makes one (:func:`window_masked`)."""
    spec, sc, profile = blk.spec, blk.sc, blk.profile
    if spec.num_key_value_heads >= spec.num_attention_heads:
        return False
    if eager or falls_back_repeating_kv(sc, profile, spec=spec):
        return True
    if profile.runs_transformers_modeling and sc.attention is Attention.FLASH:
        return False
    windowed = profile.runs_transformers_modeling and not spec.layer_types and window_masked(spec, sc)
    return profile.expands_kv_for_sdpa or windowed


def falls_back_repeating_kv(sc: Scenario, profile: FrameworkProfile, card: GPU | None = None,
                            spec: ModelSpec | None = None) -> bool:
    """Whether ``attention: flash`` runs, on ``card`` (else the scenario's ``gpu``), as the framework's fallback
    kernel with k and v copied out to every query head and saved so (``profile.flash_fallback_repeats_kv``: Unsloth's
    xformers path on a card without FlashAttention-2, the catalog's ``supports_flash_attn2`` column), for ``spec``'s
    model type where the profile names the types that attention runs for (``fallback_attention_model_types``). No
    card named, or one the catalog does not mark: the flash kernel."""
    typed = spec is None or not profile.fallback_attention_model_types or \
        spec.model_type in profile.fallback_attention_model_types
    return profile.flash_fallback_repeats_kv and sc.attention is Attention.FLASH and typed and lacks_flash_attention(sc, card)


def image_mask_applies(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> bool:
    """Whether the batch's ``token_type_ids`` mask every layer's attention (``VisionTower.bidirectional_image_mask``,
    Gemma 3 with images, transformers' masking_utils: ``profile.masks_per_layer_type``). transformers v5.24.0
    models/gemma3/modeling_gemma3.py l. 876-880 builds ``create_masks_for_vision_model`` from them: the full-attention
    layers' ``create_causal_mask(..., block_sequence_ids=...)`` (l. 704) and the sliding layers' with an
    ``or_mask_function`` (l. 729-733); masking_utils.py l. 997-1000 then sets ``allow_is_causal_skip = False``, so
    neither mask is skipped, whatever the sequence's length against the window. Each is (B, 1, S, S): the image
    blocks differ per sequence. The simulator's trace of Gemma 3 with an image: every layer converts its mask to a
    16-bit bias (``zeros_like``) and repeats k and v to every query head (``clone``), as a masked sliding layer does."""
    return bool(profile.runs_transformers_modeling and profile.masks_per_layer_type and spec.vision is not None
                and spec.vision.bidirectional_image_mask and sc.sees_pixels)


def masked_layers(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """Layers whose SDPA call gets a mask: every layer where the image tokens' mask applies
    (:func:`image_mask_applies`), else the sliding layers where the window makes one (:func:`window_masked`)."""
    if image_mask_applies(spec, sc, profile):
        return spec.num_hidden_layers
    return sliding_layers(spec) if window_masked(spec, sc) else 0


def sliding_layers_kv_repeat(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """Models that mix sliding-window and full-attention layers (``layer_types``: Gemma 2/3, gpt-oss): on a
    sliding layer whose window is no longer than the sequence transformers builds a mask, so SDPA gets no
    ``enable_gqa`` and ``repeat_kv`` expands k and v to every query head first (transformers v5.24.0
    integrations/sdpa_attention.py ``use_gqa_in_sdpa``: only without a mask); the kernel saves the expanded
    copies. The walk keeps the full layers' un-expanded k and v; this adds the difference on each such sliding
    layer (the simulator's trace of Gemma 3: three [B, heads, S, D] q/k/v tensors on its sliding layers). Under
    checkpointing only the recomputed layer has them (forward_extras.sliding_window_recompute)."""
    if sc.gradient_checkpointing is not Checkpointing.NONE:
        return 0
    return masked_layers(spec, sc, profile) * masked_layer_kv_repeat(spec, sc, profile)


def sliding_layers(spec: ModelSpec) -> int:
    """Layers that attend through the sliding window: those ``layer_types`` names so, else every layer."""
    if spec.layer_types:
        return spec.layer_types.count("sliding_attention")
    return spec.num_hidden_layers


def masked_layer_kv_repeat(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """What one masked layer of a ``layer_types`` model (:func:`masked_layers`) adds by repeating k and v to every
    query head (:func:`sliding_layers_kv_repeat`); 0 where the block walk repeats them on every layer already (eager attention,
    ``profile.expands_kv_for_sdpa``: :func:`_expands_kv`)."""
    if (not profile.runs_transformers_modeling or not spec.layer_types or not masked_layers(spec, sc, profile)
            or sc.attention is not Attention.SDPA or profile.expands_kv_for_sdpa
            or spec.num_key_value_heads >= spec.num_attention_heads or runs_eager_attention(spec, sc, profile)):
        return 0
    from vramfit.estimate.allocator import round_allocation

    c, T, d = sc.precision.compute_bytes, sc.micro_batch_size * sc.seq_len, spec.head_dim
    expanded = round_allocation(c * T * spec.num_attention_heads * d)
    own = round_allocation(c * T * spec.num_key_value_heads * d)
    return 2 * (expanded - own)


def _qkv_out_fp32(blk: Block) -> bool:
    """Whether the q/k/v projections return fp32 under autocast: bitsandbytes ``Linear4bit`` returns its
    input's dtype (bitsandbytes 0.50.2 nn/modules.py ``Linear4bit.forward``: ``.to(inp_dtype)``) and PEFT's
    fp32 norms feed it fp32 (peft v0.21.2 utils/other.py ``prepare_model_for_kbit_training``). The
    attention kernel then takes autocast's 16-bit copies of q, k and v and saves those; a fused qkv
    output is not kept (the simulator's trace: three ``_to_copy`` tensors of the kernel's inputs). Linears
    the quantizer leaves alone (``linear_subclass``: FalconLinear) return autocast's 16-bit output."""
    unquantized = blk.spec.linear_subclass and blk.profile.quantizes_exact_linear_only
    return (blk.quantized and blk.profile.qlora_unquantized_fp32 and blk.dt.autocast and blk.dt.norm_out == 4
            and not unquantized)


def _qkv_saved(blk: Block, out: Saved, fused_qkv: bool, eager: bool) -> None:
    """q/k norms and the q, k, v tensors the kernel keeps."""
    spec, c, a = blk.spec, blk.dt.compute, blk.dt.attn  # a: the q, k, v the kernel keeps (Dtypes.attn)
    q_el = blk.T * spec.num_attention_heads * spec.head_dim
    kv_el = blk.T * spec.num_key_value_heads * spec.head_dim
    if spec.qk_norm:  # q/k RMSNorm: fp32 copies of q and k saved (model-dtype input when compiled)
        qk_b = c if blk.sc.compile else 4
        out.add("q_norm.fp32_in", qk_b * q_el)
        out.add("k_norm.fp32_in", qk_b * kv_el)
        if blk.full:
            out.add("q_norm.normed", c * q_el)
            out.add("k_norm.normed", c * kv_el)
    if not eager and not spec.kv_broadcast_view and sdpa_math_fallback(spec, blk.sc, blk.profile):
        # the math kernel with enable_gqa: q, k and v made fp32 (unless reduced-precision math is allowed), scaled,
        # k and v repeat_interleave'd to every head; its matmuls save those (pytorch/pytorch aten/src/ATen/native/
        # transformers/attention.cpp _scaled_dot_product_attention_math, "Keep query, key, value in high precision";
        # traced on torch 2.13: fp32 q, k and v of every head and the fp32 probabilities)
        for name in ("q", "k", "v"):
            out.add(name, 4 * q_el)
        return
    expand = _expands_kv(blk, eager)
    k_saved = a * (q_el if expand else kv_el)
    if spec.kv_lora_rank:
        # MLA: q = cat(q_pass, q_rot) and k (new_empty + copy_) are new tensors; v is a view of
        # kv_b_proj's (T, kv, qk_nope + v_head_dim) output, which stays alive whole
        nope = spec.head_dim - spec.qk_rope_head_dim
        out.add("q", a * q_el)
        out.add("k", k_saved)
        out.add("kv_b_out", a * blk.T * spec.num_key_value_heads * (nope + spec.v_dim))
        return
    if fused_qkv and not expand and not _qkv_out_fp32(blk):
        # v (and q, k without rotary) are views of the fused projection output: the whole
        # (T, (a + 2 kv) d) storage stays alive; rotary makes q and k new tensors
        out.add("qkv_fused", a * (q_el + 2 * kv_el))
        if spec.position_encoding is PositionEncoding.ROPE:
            out.add("q", a * q_el)
            out.add("k", a * kv_el)
    else:
        out.add("q", a * q_el)
        out.add("k", k_saved)
        out.add("v", k_saved)


def sinks_fp32(blk: Block) -> bool:
    """gpt-oss's learned sink logits are an fp32 parameter wherever the step keeps its 16-bit parameters in
    fp32 (the fp32 residual stream: ``-mixed`` weights, PEFT's upcast for QLoRA): transformers v5.24.0
    models/gpt_oss/modeling_gpt_oss.py eager_attention_forward concatenates them to the 16-bit scores
    (``torch.cat`` promotes to fp32) and softmaxes in that dtype, and under autocast ``probs @ v`` saves a
    16-bit copy of the probabilities."""
    return blk.spec.attention_sinks and blk.dt.residual == 4


def softmax_fp32(spec: ModelSpec, autocast: bool) -> bool:
    """The eager softmax runs in fp32: asked for (``spec.eager_softmax_fp32``), or called with no dtype under autocast
    (``spec.eager_softmax_autocast``: autocast's fp32_set_opt_dtype policy). The simulator's tiny InternVL with QLoRA
    (the HF recipe's autocast) traces InternViT's (tiles, H, P, P) softmax output in fp32, its LoRA in bf16-true in
    bf16."""
    return spec.eager_softmax_fp32 or (spec.eager_softmax_autocast and autocast)


def _eager_scores_saved(blk: Block, out: Saved) -> None:
    """Eager attention keeps [B, H, S, S] score tensors."""
    spec, c = blk.spec, blk.dt.compute
    # attention sinks: one more logit column per row, softmaxed with the scores and sliced off
    # after (gpt-oss eager_attention_forward); the slice is a view that keeps the (S, S + 1) output
    cols = blk.sc.seq_len + (1 if spec.attention_sinks else 0)
    scores = blk.sc.micro_batch_size * spec.num_attention_heads * blk.sc.seq_len * cols
    upcast = softmax_fp32(spec, blk.dt.autocast) or sinks_fp32(blk)
    out.add("attn.softmax_out", (4 if upcast else c) * scores)  # softmax saves its output
    if spec.attention_dropout > 0:
        out.add("attn.dropout_mask", scores)  # bool mask
        out.add("attn.dropout_out", c * scores)  # saved by probs @ v
    elif upcast and c != 4:
        # the 16-bit cast saved by probs @ v (of the (S, S) slice, with sinks)
        out.add("attn.probs", c * score_elements(spec, blk.sc))
    if spec.attn_logit_softcapping:
        out.add("attn.softcap_tanh", c * scores)


def attention_core_saved(blk: Block, out: Saved, fused_qkv: bool, eager: bool) -> None:
    """Saved tensors between the q/k/v projections and o_proj, plus the residual dropout masks."""
    spec, sc = blk.spec, blk.sc
    _qkv_saved(blk, out, fused_qkv, eager)
    if eager:
        _eager_scores_saved(blk, out)
    elif sdpa_math_fallback(spec, sc, blk.profile):
        # SDPA's math kernel keeps the fp32 softmax probabilities [B, H, S, S] for backward
        out.add("attn.softmax_out", 4 * score_elements(spec, sc))
    else:
        out.add("attn.out", blk.dt.attn * blk.T * spec.num_attention_heads * spec.v_dim)
        out.add("attn.lse", 4 * sc.micro_batch_size * spec.num_attention_heads * sc.seq_len)
    if spec.hidden_dropout > 0:  # residual dropout after the attention and the MLP output projections
        out.add("resid_dropout_masks", 2 * blk.T * spec.hidden_size)


def qk_l2_norm_saved(spec: ModelSpec, tokens: int) -> int:
    """Bytes one layer with a weightless q/k L2 norm keeps (``spec.qk_l2_norm_layers``): transformers v5.24.0
    models/llama4/modeling_llama4.py Llama4TextL2Norm ``self._norm(x.float()).type_as(x)``, ``x * rsqrt(x.pow(2)
    .mean(-1, keepdim=True) + eps)``: pow and mul keep the fp32 copy of q (and of k), mul the fp32 rsqrt per head;
    the 16-bit result is the q / k the attention kernel keeps anyway. The simulator's trace of a Llama 4 RoPE
    layer: (T, heads, d) and (T, kv heads, d) fp32, (T, heads, 1) and (T, kv heads, 1) fp32."""
    from vramfit.estimate.allocator import round_allocation

    heads = (spec.num_attention_heads, spec.num_key_value_heads)
    return sum(round_allocation(4 * tokens * h * spec.head_dim) + round_allocation(4 * tokens * h) for h in heads)
