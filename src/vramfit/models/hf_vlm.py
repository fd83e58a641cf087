"""Config readers for vision-language checkpoints: the language model is read by the family's text
builder, the vision tower and projector are counted into ``ModelSpec.vision_params``. Pure python.

Qwen2.5-VL layout as transformers v5.24.0 builds it
(``models/qwen2_5_vl/modeling_qwen2_5_vl.py``: Qwen2_5_VisionTransformerPretrainedModel,
Qwen2_5_VLPatchMerger).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from vramfit.errors import ModelError
from vramfit.models.hf_config import _Cfg, _llama_like
from vramfit.models.spec import Linear, ModelSpec, NormType, PositionEncoding, VisionTower

# Qwen2_5_VLVisionConfig defaults (transformers v5.24.0 configuration_qwen2_5_vl.py)
_QWEN25_VISION_DEFAULTS = {
    "depth": 32, "hidden_size": 3584, "intermediate_size": 3420, "in_channels": 3, "patch_size": 14,
    "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 3584,
}


def qwen2_5_vision_params(vision: Mapping) -> int:
    """Parameters of the Qwen2.5-VL vision tower and its patch merger."""
    v = {**_QWEN25_VISION_DEFAULTS, **vision}
    c = _Cfg(v, "qwen2_5_vl vision_config")
    h, inter, depth = c.int("hidden_size"), c.int("intermediate_size"), c.int("depth")
    p, t, ch = c.int("patch_size"), c.int("temporal_patch_size"), c.int("in_channels", "in_chans")
    merged = h * c.int("spatial_merge_size") ** 2
    out = c.int("out_hidden_size")
    patch_embed = ch * t * p * p * h  # Conv3d, bias=False
    block = (
        2 * h  # norm1, norm2 (RMSNorm)
        + h * 3 * h + 3 * h  # attn.qkv, biased
        + h * h + h  # attn.proj, biased
        + 2 * (h * inter + inter)  # mlp.gate_proj, mlp.up_proj, biased
        + inter * h + h  # mlp.down_proj, biased
    )
    merger = h + merged * merged + merged + merged * out + out  # ln_q, mlp.0, mlp.2
    return patch_embed + depth * block + merger


# the image processor's pixel bounds of the Qwen2-VL and Qwen2.5-VL checkpoints (Qwen/Qwen2-VL-*-Instruct and
# Qwen/Qwen2.5-VL-*-Instruct preprocessor_config.json: min_pixels 3136, max_pixels 12845056, i.e. 4 to 16,384 merged
# tokens, "4-16384 visual tokens per image" on their model cards), read by Qwen2VLImageProcessor in place of its class
# defaults (56 * 56, 28 * 28 * 1280: models/vlm_tokens.py QWEN_MAX_PIXELS)
QWEN2_IMAGE_PIXELS = {"min_pixels": 3136, "max_pixels": 12845056}


def _qwen2_5_vl(c: _Cfg) -> ModelSpec:
    """Qwen2.5-VL: a Qwen2 language model (fields at the top level of config.json, or in
    ``text_config``) plus the vision tower in ``vision_config``."""
    vision = c.data.get("vision_config")
    if not isinstance(vision, Mapping):
        raise ModelError("config.json of model_type 'qwen2_5_vl' is missing 'vision_config'")
    text = c.data.get("text_config")
    merged = {**c.data, **(text if isinstance(text, Mapping) else {}), "model_type": "qwen2"}
    spec = _llama_like(_Cfg(merged, "qwen2"))
    v = {**_QWEN25_VISION_DEFAULTS, "num_heads": 16, **vision}
    h, inter = int(v["hidden_size"]), int(v["intermediate_size"])
    block = _encoder_block("qwen2_5_vl_vision", h, int(v["depth"]), int(v["num_heads"]), (
        Linear("qkv", h, 3 * h, True, "attn"), Linear("proj", h, h, True, "attn"),
        Linear("gate_proj", h, inter, True, "mlp"), Linear("up_proj", h, inter, True, "mlp"),
        Linear("down_proj", inter, h, True, "mlp")), NormType.RMSNORM, PositionEncoding.ROPE, fused_qkv="qkv")
    merged = h * int(v["spatial_merge_size"]) ** 2
    projector = (Linear("mlp.0", merged, merged, True, "projector"),
                 Linear("mlp.2", merged, int(v["out_hidden_size"]), True, "projector"))
    tower = VisionTower(block, {"model_type": "qwen2_5_vl", "vision_config": dict(v), **QWEN2_IMAGE_PIXELS},
                        projector=projector, segmented_attention=True, projector_rmsnorm=True)
    return replace(spec, model_type="qwen2_5_vl", vision_params=qwen2_5_vision_params(vision), vision=tower)


def _encoder_block(name: str, h: int, depth: int, heads: int, linears: tuple[Linear, ...], norm: NormType,
                   positions: PositionEncoding, act_saves: int = 1, fused_qkv: str = "") -> ModelSpec:
    """One block of a vision encoder as a :class:`ModelSpec` the activation walk reads (no embeddings,
    no head; ``num_hidden_layers`` = the encoder's depth; every block attends over its whole image)."""
    gated = any(lin.name == "up_proj" for lin in linears)
    norms = 2 * h * (2 if norm is NormType.LAYERNORM else 1)
    return ModelSpec(
        model_type=name, hidden_size=h, num_hidden_layers=depth, num_attention_heads=heads,
        num_key_value_heads=heads, head_dim=h // heads, intermediate_size=linears[-1].in_features,
        vocab_size=0, tie_word_embeddings=False, hidden_act="", gated_mlp=gated, block_linears=linears,
        block_norm_params=norms, final_norm_params=0, embedding_params=0, lm_head_params=0, norm_type=norm,
        position_encoding=positions, act_saved_tensors=act_saves, fused_qkv=fused_qkv)


def _vit_block(name: str, vision: Mapping, act_saves: int) -> ModelSpec:
    """A CLIP / SigLIP encoder layer: LayerNorms, biased q/k/v/out_proj, fc1 -> activation -> fc2."""
    h, inter = int(vision["hidden_size"]), int(vision["intermediate_size"])
    return _encoder_block(name, h, int(vision["num_hidden_layers"]), int(vision["num_attention_heads"]), (
        *(Linear(n, h, h, True, "attn") for n in ("q_proj", "k_proj", "v_proj")),
        Linear("out_proj", h, h, True, "attn"), Linear("fc1", h, inter, True, "mlp"),
        Linear("fc2", inter, h, True, "mlp")), NormType.LAYERNORM, PositionEncoding.LEARNED, act_saves)


# CLIPVisionConfig defaults (transformers v5.24.0 models/clip/configuration_clip.py), LLaVA-1.5's
# tower (openai/clip-vit-large-patch14-336) where LlavaConfig fills them in
_CLIP_LLAVA_DEFAULTS = {
    "hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "num_attention_heads": 16,
    "image_size": 336, "patch_size": 14, "num_channels": 3, "hidden_act": "quick_gelu",
}
# QuickGELUActivation: input * sigmoid(1.702 * input): the product saves the input and sigmoid's
# output (transformers v5.24.0 activations.py); native GELU saves its input only
_ACT_SAVES = {"quick_gelu": 2}


def clip_vision_params(vision: Mapping) -> int:
    """CLIPVisionModel: class embedding, Conv2d patch embedding (no bias), positions, pre/post LayerNorm,
    encoder layers (transformers v5.24.0 models/clip/modeling_clip.py)."""
    h, inter, layers = int(vision["hidden_size"]), int(vision["intermediate_size"]), int(vision["num_hidden_layers"])
    p = int(vision["patch_size"])
    positions = (int(vision["image_size"]) // p) ** 2 + 1
    embeddings = h + int(vision["num_channels"]) * p * p * h + positions * h
    layer = 2 * 2 * h + 4 * (h * h + h) + h * inter + inter + inter * h + h
    return embeddings + 2 * 2 * h + layers * layer


def _llava(c: _Cfg) -> ModelSpec:
    """LLaVA (1.5): the language model of ``text_config`` (Llama by default), a CLIP tower and the
    two-layer projector (LlavaMultiModalProjector: linear_1, GELU, linear_2, biased by
    ``multimodal_projector_bias``; transformers v5.24.0 models/llava/modeling_llava.py)."""
    text = c.data.get("text_config")
    if not isinstance(text, Mapping):
        raise ModelError(f"config.json of model_type {c.model_type!r} is missing 'text_config'")
    mt = str(text.get("model_type", "llama"))
    spec = _llama_like(_Cfg({**text, "model_type": mt}, mt))
    vision = {**_CLIP_LLAVA_DEFAULTS, **(c.data.get("vision_config") or {})}
    layers = c.data.get("vision_feature_layer", -2)
    feature = int(vision["hidden_size"]) * (len(layers) if isinstance(layers, list) else 1)
    t = spec.hidden_size
    bias = c.bool("multimodal_projector_bias", default=True)
    projector = feature * t + t * t + (2 * t if bias else 0)
    block = _vit_block("clip_vision_model", vision, _ACT_SAVES.get(str(vision["hidden_act"]), 1))
    # LlavaModel.get_image_features reads hidden_states[vision_feature_layer]: the layers after it and
    # CLIP's post_layernorm take no part in the loss
    deepest = max(layers) if isinstance(layers, list) else layers
    unused = -deepest - 1 if isinstance(deepest, int) and deepest < 0 else 0
    h = block.hidden_size
    unused_params = unused * block.block_params + 2 * h
    image_config = {"model_type": "llava", "vision_config": vision,
                    "vision_feature_select_strategy": c.data.get("vision_feature_select_strategy", "default")}
    return replace(spec, model_type="llava", vision_params=clip_vision_params(vision) + projector,
                   vision=VisionTower(block, image_config, unused, unused_params, projector=(
                       Linear("linear_1", feature, t, bias, "projector"), Linear("linear_2", t, t, bias, "projector"))))


# SiglipVisionConfig defaults (transformers v5.24.0 models/siglip/configuration_siglip.py)
_SIGLIP_DEFAULTS = {
    "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "num_channels": 3,
    "image_size": 224, "patch_size": 16, "vision_use_head": True,
}


def siglip_vision_params(vision: Mapping) -> int:
    """Parameters of a SigLIP vision tower (SiglipVisionModel: patch and position embeddings,
    pre-norm encoder layers with biased LayerNorms and linears, post_layernorm, optional pooling
    head)."""
    c = _Cfg({**_SIGLIP_DEFAULTS, **vision}, "siglip_vision_model")
    h, inter, layers = c.int("hidden_size"), c.int("intermediate_size"), c.int("num_hidden_layers")
    p = c.int("patch_size")
    patches = (c.int("image_size") // p) ** 2
    embeddings = c.int("num_channels") * p * p * h + h + patches * h  # Conv2d with bias, positions
    mlp = h * inter + inter + inter * h + h  # fc1, fc2
    layer = 2 * 2 * h + 4 * (h * h + h) + mlp  # layer_norm1/2, q/k/v/out_proj
    head = 0
    if c.bool("vision_use_head"):  # SiglipMultiheadAttentionPoolingHead: probe, MHA, LayerNorm, MLP
        head = h + (3 * h * h + 3 * h) + (h * h + h) + 2 * h + mlp
    return embeddings + layers * layer + 2 * h + head


def gemma3_vision_params(vision: Mapping, text_hidden: int) -> int:
    """Gemma 3's SigLIP tower and Gemma3MultiModalProjector (mm_input_projection_weight (v, h) and
    mm_soft_emb_norm over v; transformers v5.24.0 models/gemma3/modeling_gemma3.py)."""
    v = int({**_SIGLIP_DEFAULTS, **vision}["hidden_size"])
    return siglip_vision_params(vision) + v * text_hidden + v


def _llava_next(c: _Cfg) -> ModelSpec:
    """LLaVA-NeXT: LLaVA's layout plus the learned ``image_newline`` row separator (text hidden size)
    (transformers v5.24.0 models/llava_next/modeling_llava_next.py LlavaNextModel); the anyres crops
    change the image tokens (vlm_tokens), not the parameters."""
    spec = _llava(c)
    pinpoints = c.data.get("image_grid_pinpoints")
    image_config = {**spec.vision.image_config, "model_type": "llava_next",
                    **({"image_grid_pinpoints": pinpoints} if pinpoints else {})}
    return replace(spec, model_type="llava_next", vision_params=spec.vision_params + spec.hidden_size,
                   vision=replace(spec.vision, image_config=image_config))


def gemma3_vision_tower(config: Mapping) -> VisionTower:
    """Gemma 3's SigLIP encoder block (gelu_pytorch_tanh: native GELU), its fixed-token rule, and the image tokens'
    bidirectional mask its processor's ``token_type_ids`` make (``VisionTower.bidirectional_image_mask``)."""
    vision = {**_SIGLIP_DEFAULTS, "num_attention_heads": 12, **(config.get("vision_config") or {})}
    block = _vit_block("siglip_vision_model", vision, 1)
    return VisionTower(block, {"model_type": "gemma3", "vision_config": vision,
                               "mm_tokens_per_image": config.get("mm_tokens_per_image", 256)},
                       bidirectional_image_mask=True)


def _llava_next_video(c: _Cfg) -> ModelSpec:
    """LLaVA-NeXT-Video: LLaVA-NeXT's layout (images: anyres tiles) plus ``vision_resampler``, the video frames'
    LlavaNextVideoPooler over each frame's patch grid: average or max pooling (no parameters) or a Conv2d of
    ``spatial_pool_stride`` (transformers v5.24.0 models/llava_next_video/modeling_llava_next_video.py)."""
    spec = _llava_next(c)
    vision = spec.vision.image_config["vision_config"]
    stride, mode = c.data.get("spatial_pool_stride", 2), c.data.get("spatial_pool_mode", "average")
    h = int(vision["hidden_size"])
    out = int(c.data.get("spatial_pool_out_channels") or h)
    pool = h * out * stride * stride + out if mode == "conv" else 0
    image_config = {**spec.vision.image_config, "model_type": "llava_next_video", "spatial_pool_stride": stride}
    return replace(spec, model_type="llava_next_video", vision_params=spec.vision_params + pool,
                   vision=replace(spec.vision, image_config=image_config))


BUILDERS = {"qwen2_5_vl": _qwen2_5_vl, "llava": _llava, "llava_next": _llava_next, "llava_next_video": _llava_next_video}


# Idefics3VisionConfig / SmolVLMVisionConfig defaults (transformers v5.24.0 configuration_idefics3.py)
_IDEFICS3_VISION_DEFAULTS = {"hidden_size": 1152, "intermediate_size": 3072, "num_hidden_layers": 12,
                             "num_attention_heads": 16, "image_size": 224, "patch_size": 32}


def _idefics3_tower(config: Mapping, text_hidden: int) -> VisionTower:
    """Idefics3 / SmolVLM: a SigLIP-style encoder (Idefics3EncoderLayer: LayerNorms, biased
    q/k/v/out_proj, fc1 -> gelu_pytorch_tanh -> fc2) read at its last layer, then the connector's
    pixel shuffle and one bias-free ``modality_projection.proj`` (vision hidden x scale**2 -> text
    hidden) (transformers v5.24.0 models/idefics3/modeling_idefics3.py Idefics3Connector)."""
    vision = {**_IDEFICS3_VISION_DEFAULTS, **(config.get("vision_config") or {})}
    scale = int(config.get("scale_factor", 2))
    block = _vit_block(f"{config['model_type']}_vision", vision, 1)
    image_config = {"model_type": config["model_type"], "vision_config": vision, "scale_factor": scale}
    proj = Linear("proj", block.hidden_size * scale * scale, text_hidden, False, "projector")
    return VisionTower(block, image_config, projector=(proj,), post_norm_held=True, pixels_copied=True)


# InternVLVisionConfig defaults (transformers v5.24.0 models/internvl/configuration_internvl.py)
_INTERNVL_VISION_DEFAULTS = {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24,
                             "num_attention_heads": 16, "image_size": [448, 448], "patch_size": [14, 14],
                             "attention_bias": False, "use_qk_norm": False, "norm_type": "layer_norm"}


def _internvl_tower(config: Mapping, text_hidden: int) -> VisionTower:
    """InternVL: InternViT layers (q/k/v_proj biased by ``attention_bias``, biased projection_layer,
    optional q/k RMSNorms, layernorm_before/after, layer-scale lambda_1/2, fc1 -> GELU -> fc2) with
    the CLS token, then pixel shuffle (``downsample_ratio`` 0.5) and InternVLMultiModalProjector
    (LayerNorm, linear_1, GELU, linear_2) (transformers v5.24.0 models/internvl/modeling_internvl.py)."""
    v = {**_INTERNVL_VISION_DEFAULTS, **(config.get("vision_config") or {})}
    h, inter, bias = int(v["hidden_size"]), int(v["intermediate_size"]), bool(v["attention_bias"])
    norm = NormType.RMSNORM if v["norm_type"] == "rms_norm" else NormType.LAYERNORM
    block = _encoder_block("internvl_vision", h, int(v["num_hidden_layers"]), int(v["num_attention_heads"]), (
        *(Linear(n, h, h, bias, "attn") for n in ("q_proj", "k_proj", "v_proj")),
        Linear("projection_layer", h, h, True, "attn"), Linear("fc1", h, inter, True, "mlp"),
        Linear("fc2", inter, h, True, "mlp")), norm, PositionEncoding.LEARNED)
    extra = 2 * h + (2 * h if v["use_qk_norm"] else 0)  # lambda_1, lambda_2; q_norm, k_norm
    # eager_attention_forward (l. 92-93): "No upcasting of the attention weights to float32", softmax in the
    # compute dtype (SigLIP, CLIP, Idefics3, Mllama and the Qwen towers pass dtype=torch.float32)
    block = replace(block, block_norm_params=block.block_norm_params + extra, qk_norm=bool(v["use_qk_norm"]),
                    eager_softmax_fp32=False, eager_softmax_autocast=True)
    ratio = float(config.get("downsample_ratio", 0.5))
    layer = config.get("vision_feature_layer", -1)
    unused = -layer - 1 if isinstance(layer, int) and layer < 0 else 0
    shuffled = h * int(1 / ratio) ** 2
    image_config = {"model_type": "internvl", "vision_config": v, "downsample_ratio": ratio,
                    **{k: config[k] for k in ("min_patches", "max_patches") if k in config}}
    return VisionTower(block, image_config, unused, unused * block.block_params, projector=(
        Linear("linear_1", shuffled, text_hidden, True, "projector"),
        Linear("linear_2", text_hidden, text_hidden, True, "projector")), layer_scale=True)


# MllamaVisionConfig defaults (transformers v5.24.0 models/mllama/configuration_mllama.py)
_MLLAMA_VISION_DEFAULTS = {"hidden_size": 1280, "intermediate_size": 5120, "num_hidden_layers": 32,
                           "num_global_layers": 8, "attention_heads": 16, "image_size": 448, "patch_size": 14,
                           "max_num_tiles": 4, "vision_output_dim": 7680}
# MllamaTextConfig default cross_attention_layers (transformers v5.24.0 configuration_mllama.py)
_MLLAMA_CROSS_LAYERS = [3, 8, 13, 18, 23, 28, 33, 38]


def _mllama_tower(config: Mapping, text_hidden: int) -> VisionTower:
    """Llama 3.2 Vision: ``num_hidden_layers`` local and ``num_global_layers`` gated global encoder
    layers (MllamaVisionEncoderLayer: LayerNorms, bias-free q/k/v/o_proj, fc1 -> GELU -> fc2 biased;
    a global layer adds the scalar gate_attn and gate_ffn), read as one block of their summed depth;
    the projector is one biased Linear(vision_output_dim, text hidden) over every tile's patches
    (transformers v5.24.0 models/mllama/modeling_mllama.py). Its output feeds the language model's
    ``cross_attention_layers`` (MllamaCrossAttentionDecoderLayer), not placeholder tokens. The encoder
    layers are plain nn.Modules: never checkpointed in v5.24.0, checkpointed in v4.46.2 (``checkpointed_v4``)."""
    v = {**_MLLAMA_VISION_DEFAULTS, **(config.get("vision_config") or {})}
    h, inter = int(v["hidden_size"]), int(v["intermediate_size"])
    depth = int(v["num_hidden_layers"]) + int(v["num_global_layers"])
    block = _encoder_block("mllama_vision_model", h, depth, int(v["attention_heads"]), (
        *(Linear(n, h, h, False, "attn") for n in ("q_proj", "k_proj", "v_proj", "o_proj")),
        Linear("fc1", h, inter, True, "mlp"), Linear("fc2", inter, h, True, "mlp")),
        NormType.LAYERNORM, PositionEncoding.LEARNED)
    projector = Linear("multi_modal_projector", int(v["vision_output_dim"]), text_hidden, True, "projector")
    text = config.get("text_config") or {}
    cross = len(text.get("cross_attention_layers", _MLLAMA_CROSS_LAYERS))
    return VisionTower(block, {"model_type": "mllama", "vision_config": v}, projector=(projector,),
                       cross_attention_layers=cross, checkpointed=False, checkpointed_v4=True, gated_layers=int(v["num_global_layers"]),
                       attention_mask=True, output_held=True, stacks=2)


# Qwen2VLVisionConfig defaults (transformers v5.24.0 models/qwen2_vl/configuration_qwen2_vl.py)
_QWEN2_VISION_DEFAULTS = {"depth": 32, "embed_dim": 1280, "hidden_size": 3584, "hidden_act": "quick_gelu",
                          "mlp_ratio": 4, "num_heads": 16, "patch_size": 14, "spatial_merge_size": 2}


def _qwen_vision_parts(model_type: str, v: Mapping, h: int, inter: int, mlp: tuple[str, str],
                       merger: tuple[str, str], out: int) -> tuple:
    """The block and PatchMerger projector Qwen2-VL and Qwen3-VL share: ``depth`` blocks of ``h`` (LayerNorm
    norm1/norm2, fused biased qkv and proj, 2-D rotary positions, biased MLP ``mlp`` of width ``inter``), then
    merge x merge patches joined to ``h * merge**2`` and two biased ``merger`` linears to ``out`` (transformers
    v5.24.0 models/qwen2_vl/modeling_qwen2_vl.py and models/qwen3_vl/modeling_qwen3_vl.py)."""
    block = _encoder_block(model_type, h, int(v["depth"]), int(v["num_heads"]), (
        Linear("qkv", h, 3 * h, True, "attn"), Linear("proj", h, h, True, "attn"),
        Linear(mlp[0], h, inter, True, "mlp"), Linear(mlp[1], inter, h, True, "mlp")),
        NormType.LAYERNORM, PositionEncoding.ROPE, _ACT_SAVES.get(str(v["hidden_act"]), 1), fused_qkv="qkv")
    merged = h * int(v["spatial_merge_size"]) ** 2
    return block, (Linear(merger[0], merged, merged, True, "projector"),
                   Linear(merger[1], merged, out, True, "projector"))


def _qwen2_vl_tower(config: Mapping, text_hidden: int) -> VisionTower:
    """Qwen2-VL: ``depth`` Qwen2VLVisionBlocks of ``embed_dim`` (LayerNorm norm1/norm2, fused biased qkv and
    proj, full attention over each image, 2-D rotary positions, VisionMlp fc1 -> quick_gelu -> fc2 of width
    ``int(embed_dim * mlp_ratio)``), then PatchMerger: LayerNorm ``ln_q`` over ``embed_dim``, merge x merge
    patches joined, mlp.0 -> GELU -> mlp.2 to ``hidden_size`` (transformers v5.24.0
    models/qwen2_vl/modeling_qwen2_vl.py Qwen2VisionTransformerPretrainedModel). The parameters are counted
    from the real modules (models/from_modules.py)."""
    v = {**_QWEN2_VISION_DEFAULTS, **(config.get("vision_config") or {})}
    h = int(v["embed_dim"])
    block, projector = _qwen_vision_parts("qwen2_vl_vision", v, h, int(h * float(v["mlp_ratio"])), ("fc1", "fc2"),
                                          ("mlp.0", "mlp.2"), int(v["hidden_size"]))
    # VisionAttention.forward l. 401-418: other than flash, one attention call per cu_seqlens segment, torch.cat
    return VisionTower(block, {"model_type": "qwen2_vl", "vision_config": v, **QWEN2_IMAGE_PIXELS}, projector=projector,
                       projector_layernorm=True, segmented_attention=True)


# Qwen3VLVisionConfig defaults (transformers v5.24.0 models/qwen3_vl/configuration_qwen3_vl.py)
_QWEN3_VISION_DEFAULTS = {"depth": 27, "hidden_size": 1152, "hidden_act": "gelu_pytorch_tanh", "intermediate_size": 4304,
                          "num_heads": 16, "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
                          "out_hidden_size": 3584, "deepstack_visual_indexes": [8, 16, 24]}
# the image processor's pixel bounds of the Qwen3-VL checkpoints (Qwen/Qwen3-VL-*-Instruct preprocessor_config.json:
# size shortest_edge 65536, longest_edge 16777216, read by Qwen2VLImageProcessor in place of its class defaults)
QWEN3_IMAGE_PIXELS = {"min_pixels": 65536, "max_pixels": 16777216}
# Qwen3VLVideoProcessor (transformers v5.24.0 models/qwen3_vl/video_processing_qwen3_vl.py): ``size`` shortest_edge
# 128 * 32 * 32 / longest_edge 32 * 32 * 768 bound all the sampled frames together (its ``smart_resize`` takes the
# frame count); processing_qwen3_vl.py ``replace_video_token`` puts vision start / end around each temporal patch
QWEN3_VIDEO = {"video_pixels": [128 * 32 * 32, 32 * 32 * 768], "video_pixels_per_clip": True, "video_frame_markers": 2}


def _qwen3_vl_tower(config: Mapping, text_hidden: int) -> VisionTower:
    """Qwen3-VL: ``depth`` Qwen3VLVisionBlocks (LayerNorm norm1/norm2, fused biased qkv and proj, full attention
    over each image, 2-D rotary positions, linear_fc1 -> gelu_pytorch_tanh -> linear_fc2), a biased Conv3d patch
    embedding plus learned positions interpolated to the grid, then Qwen3VLVisionPatchMerger (LayerNorm over each
    patch, merge x merge patches joined, linear_fc1 -> GELU -> linear_fc2) and one more merger per
    ``deepstack_visual_indexes`` entry (its LayerNorm over the joined width) (transformers v5.24.0
    models/qwen3_vl/modeling_qwen3_vl.py Qwen3VLVisionModel). Parameters are counted from the real modules."""
    v = {**_QWEN3_VISION_DEFAULTS, **(config.get("vision_config") or {})}
    fc = ("linear_fc1", "linear_fc2")  # the blocks' MLP and the merger's use the same names
    block, projector = _qwen_vision_parts(f"{config['model_type']}_vision", v, int(v["hidden_size"]),
                                          int(v["intermediate_size"]), fc, fc, int(v["out_hidden_size"]))
    image_config = {"model_type": config["model_type"], "vision_config": v, **QWEN3_IMAGE_PIXELS, **QWEN3_VIDEO}
    return VisionTower(block, image_config, projector=projector, segmented_attention=True,
                       deepstack_mergers=len(v["deepstack_visual_indexes"]), patch_embedding_exposed=False)


# towers attached to a spec read from transformers' modules (models/from_modules.py)
TOWERS = {"idefics3": _idefics3_tower, "smolvlm": _idefics3_tower, "internvl": _internvl_tower,
          "mllama": _mllama_tower, "qwen2_vl": _qwen2_vl_tower, "qwen3_vl": _qwen3_vl_tower,
          "qwen3_vl_moe": _qwen3_vl_tower}


def attach_tower(spec: ModelSpec, config: Mapping) -> ModelSpec:
    """``spec`` with the vision tower of ``config``'s family, where one is described here."""
    build = TOWERS.get(str(config.get("model_type")))
    if build is None or not isinstance(config.get("vision_config"), Mapping):
        return spec
    return replace(spec, vision=build(config, spec.hidden_size))
