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


BUILDERS = {"qwen2_5_vl": _qwen2_5_vl}
