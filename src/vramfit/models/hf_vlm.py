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
from vramfit.models.spec import ModelSpec

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


def _qwen2_5_vl(c: _Cfg) -> ModelSpec:
    """Qwen2.5-VL: a Qwen2 language model (fields at the top level of config.json, or in
    ``text_config``) plus the vision tower in ``vision_config``."""
    vision = c.data.get("vision_config")
    if not isinstance(vision, Mapping):
        raise ModelError("config.json of model_type 'qwen2_5_vl' is missing 'vision_config'")
    text = c.data.get("text_config")
    merged = {**c.data, **(text if isinstance(text, Mapping) else {}), "model_type": "qwen2"}
    spec = _llama_like(_Cfg(merged, "qwen2"))
    return replace(spec, model_type="qwen2_5_vl", vision_params=qwen2_5_vision_params(vision))


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


BUILDERS = {"qwen2_5_vl": _qwen2_5_vl}
