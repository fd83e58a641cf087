"""Image tokens of a vision-language model, from each processor's own rules. Pure python, no torch.

For one image of ``height`` x ``width`` pixels: how many patches the vision tower sees and how many
placeholder tokens the language model's sequence gains. Rules as transformers v5.24.0 computes them:

- Qwen2-VL / Qwen2.5-VL / Qwen3-VL: ``smart_resize`` to multiples of patch x merge within
  [min_pixels, max_pixels], a (h/patch) x (w/patch) patch grid for the tower, one LM token per
  merge x merge patches (models/qwen2_vl/image_processing_qwen2_vl.py smart_resize,
  Qwen2VLImageProcessor.get_number_of_image_patches; processing_qwen2_vl.py divides by merge_size**2).
  A still image is repeated to ``temporal_patch_size`` frames, giving one temporal patch.
- LLaVA (1.5): the image is resized and centre-cropped to the tower's ``image_size``;
  (image_size/patch)**2 tokens, the CLS token dropped by vision_feature_select_strategy="default"
  (models/llava/processing_llava.py _get_num_multimodal_tokens).
- LLaVA-NeXT: "anyres": the best of ``image_grid_pinpoints`` for the image (``select_best_resolution``,
  transformers v5.24.0 image_processing_utils.py), the tower runs on the base crop plus one crop per
  pinpoint tile; the LM gets the base grid, the unpadded tile grid and one newline token per tile row
  (models/llava_next/processing_llava_next.py _get_number_of_features, _get_unpadded_features).
- Gemma 3: a fixed ``mm_tokens_per_image`` (256) per image, pan & scan off (the default)
  (models/gemma3/processing_gemma3.py _get_num_multimodal_tokens: image_seq_length per image).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from vramfit.errors import ModelError

# Qwen2VLImageProcessor defaults (transformers v5.24.0 image_processing_qwen2_vl.py: min_pixels
# 56 * 56, max_pixels 28 * 28 * 1280); a checkpoint's preprocessor_config.json may override them
QWEN_MIN_PIXELS = 56 * 56
QWEN_MAX_PIXELS = 28 * 28 * 1280


@dataclass(frozen=True)
class ImageTokens:
    """One image as the model sees it."""

    vision_patches: int  # sequence length of the vision tower for this image
    lm_tokens: int  # placeholder tokens the image adds to the language model's sequence


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """transformers v5.24.0 models/qwen2_vl/image_processing_qwen2_vl.py ``smart_resize``."""
    if max(height, width) / min(height, width) > 200:
        raise ModelError(f"image aspect ratio must be below 200, got {height}x{width}")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def _qwen_vl(config: Mapping, height: int, width: int, min_pixels: int | None, max_pixels: int | None) -> ImageTokens:
    vision = config.get("vision_config") or {}
    patch = int(vision.get("patch_size", 14))
    merge = int(vision.get("spatial_merge_size", 2))
    h, w = smart_resize(height, width, patch * merge, min_pixels or QWEN_MIN_PIXELS, max_pixels or QWEN_MAX_PIXELS)
    patches = (h // patch) * (w // patch)
    return ImageTokens(patches, patches // (merge * merge))


def _llava(config: Mapping, height: int, width: int, min_pixels: int | None, max_pixels: int | None) -> ImageTokens:
    vision = config.get("vision_config") or {}
    side = int(vision.get("image_size", 336)) // int(vision.get("patch_size", 14))
    grid = side * side
    keeps_cls = config.get("vision_feature_select_strategy", "default") == "full"
    return ImageTokens(grid + 1, grid + (1 if keeps_cls else 0))  # the CLIP tower also runs its CLS token


# LlavaNextConfig default image_grid_pinpoints (transformers v5.24.0 configuration_llava_next.py)
_PINPOINTS = [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]]


def select_best_resolution(height: int, width: int, pinpoints: list) -> tuple[int, int]:
    """transformers v5.24.0 image_processing_utils.py ``select_best_resolution``."""
    best, best_effective, best_wasted = (0, 0), 0, float("inf")
    for h, w in pinpoints:
        scale = min(w / width, h / height)
        effective = min(int(width * scale) * int(height * scale), width * height)
        wasted = w * h - effective
        if effective > best_effective or (effective == best_effective and wasted < best_wasted):
            best, best_effective, best_wasted = (h, w), effective, wasted
    return best


def _llava_next(config: Mapping, height: int, width: int, min_pixels: int | None, max_pixels: int | None) -> ImageTokens:
    vision = config.get("vision_config") or {}
    size, patch = int(vision.get("image_size", 336)), int(vision.get("patch_size", 14))
    best_h, best_w = select_best_resolution(height, width, config.get("image_grid_pinpoints") or _PINPOINTS)
    side = size // patch
    cur_h, cur_w = side * (best_h // size), side * (best_w // size)
    if width / height > cur_w / cur_h:  # _get_unpadded_features: remove the padding's rows / columns
        cur_h -= (cur_h - int(round(height * (cur_w / width), 7))) // 2 * 2
    else:
        cur_w -= (cur_w - int(round(width * (cur_h / height), 7))) // 2 * 2
    keeps_cls = config.get("vision_feature_select_strategy", "default") == "full"
    tokens = cur_h * cur_w + cur_h + side * side + (1 if keeps_cls else 0)
    crops = 1 + (best_h // size) * (best_w // size)
    return ImageTokens(crops * (side * side + 1), tokens)


def _gemma3(config: Mapping, height: int, width: int, min_pixels: int | None, max_pixels: int | None) -> ImageTokens:
    vision = config.get("vision_config") or {}
    side = int(vision.get("image_size", 896)) // int(vision.get("patch_size", 14))
    return ImageTokens(side * side, int(config.get("mm_tokens_per_image", 256)))


_RULES = {"qwen2_vl": _qwen_vl, "qwen2_5_vl": _qwen_vl, "qwen3_vl": _qwen_vl, "qwen3_vl_moe": _qwen_vl,
          "llava": _llava, "llava_next": _llava_next, "gemma3": _gemma3}
SUPPORTED = tuple(sorted(_RULES))


def image_tokens(config: Mapping, height: int, width: int, *, min_pixels: int | None = None,
                 max_pixels: int | None = None) -> ImageTokens:
    """Vision-tower patches and language-model tokens of one ``height`` x ``width`` image."""
    if height < 1 or width < 1:
        raise ModelError(f"image size must be positive, got {height}x{width}")
    rule = _RULES.get(str(config.get("model_type")))
    if rule is None:
        raise ModelError(f"image tokens of model_type {config.get('model_type')!r} are not modelled; "
                         f"modelled: {', '.join(SUPPORTED)}")
    return rule(config, height, width, min_pixels, max_pixels)
