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
- Llama 3.2 Vision (mllama): the image is fitted to the best canvas of 560-px tiles (at most
  ``max_num_tiles`` = 4; image_processing_pil_mllama.py get_optimal_tiled_canvas); the processor
  packs every image to ``max_num_tiles`` tiles (pack_images), so the tower runs 4 tiles of
  (560/14)**2 patches + CLS, padded to a multiple of 8 (modeling_mllama.py MllamaVisionModel.forward:
  1601 -> 1608) whatever the image; the language model gets one ``<|image|>`` token and reads the
  tiles through its cross-attention layers.
- Idefics3 / SmolVLM: the image is split into ``max_image_size``-px sub-images plus a global image
  (image_processing_pil_idefics3.py get_number_of_image_patches); each is one tower image of
  (image_size/patch)**2 patches, pixel-shuffled to ``image_seq_len`` = patches / scale_factor**2
  tokens, framed by fake-image, row/column and newline tokens (processing_idefics3.py
  _get_num_multimodal_tokens; a tokenizer that merges "\n\n", as the checkpoints' do, adds none).
- InternVL: dynamic 448-px tiles, the grid whose aspect ratio is nearest the image's among
  ``min_patches``..``max_patches`` tiles plus a thumbnail when the grid is not 1 x 1
  (got_ocr2/image_processing_pil_got_ocr2.py get_optimal_tiled_canvas, get_number_of_image_patches);
  each tile is (448/14)**2 patches + CLS in the tower and ``image_seq_length`` (256, after the 0.5
  pixel shuffle) LM tokens, plus the start/end image tokens (processing_internvl.py
  _get_num_multimodal_tokens).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from vramfit.errors import ModelError, ScenarioError
from vramfit.models.vlm_fields import check_tokens, check_vision_fields

# Qwen2VLImageProcessor defaults (transformers v5.24.0 image_processing_qwen2_vl.py: min_pixels
# 56 * 56, max_pixels 28 * 28 * 1280); a checkpoint's preprocessor_config.json may override them
QWEN_MIN_PIXELS = 56 * 56
QWEN_MAX_PIXELS = 28 * 28 * 1280


@dataclass(frozen=True)
class ImageTokens:
    """One image as the model sees it."""

    vision_patches: int  # sequence length of the vision tower for this image
    lm_tokens: int  # placeholder tokens the image adds to the language model's sequence
    # rows the projector reads (the image features without the text framing tokens); None: lm_tokens
    projector_rows: int | None = None
    # pixel values the processor gives for the image (elements, padding tiles included; 0: none)
    pixels: int = 0
    # patches of one attention segment, the sequence each tower patch attends within (0: all ``vision_patches``): a
    # tower that takes an image's tiles as a batch attends within each tile (LLaVA-NeXT's crops, Idefics3's
    # sub-images, InternVL's tiles: (tiles, patches, hidden) into CLIP / SigLIP / InternViT), Qwen2/2.5/3-VL within each
    # temporal patch of a video (``cu_seqlens``: grid_h x grid_w per temporal patch, transformers v5.24.0
    # models/qwen2_vl/modeling_qwen2_vl.py ``Qwen2VisionTransformerPretrainedModel.forward``); Mllama's tiles attend
    # across one another (one (tiles x patches) sequence per image), as do a Qwen image's patches
    segment: int = 0

    @property
    def segment_len(self) -> int:
        return self.segment or self.vision_patches

    @property
    def features(self) -> int:
        return self.lm_tokens if self.projector_rows is None else self.projector_rows


def _check_aspect(height: int, width: int) -> None:
    """The processors' limit (image_processing_qwen2_vl.py ``smart_resize``: ValueError above 200), named by the
    scenario key the user sets: the longer side's."""
    if max(height, width) / min(height, width) > 200:
        raise ScenarioError("image_width" if width > height else "image_height",
                            f"the image's aspect ratio must be at most 200 (the model's image processor refuses it), "
                            f"got image_height {height} x image_width {width}")


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """transformers v5.24.0 models/qwen2_vl/image_processing_qwen2_vl.py ``smart_resize``."""
    _check_aspect(height, width)
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


def qwen_grid(config: Mapping, height: int, width: int, min_pixels: int | None = None,
              max_pixels: int | None = None) -> tuple[int, int]:
    """(rows, columns) of patches of one image for Qwen2/2.5/3-VL (``image_grid_thw``'s h and w)."""
    vision = config.get("vision_config") or {}
    patch = int(vision.get("patch_size", 14))
    merge = int(vision.get("spatial_merge_size", 2))
    lo = min_pixels or int(config.get("min_pixels", QWEN_MIN_PIXELS))  # a checkpoint's bounds (models/hf_vlm.py)
    hi = max_pixels or int(config.get("max_pixels", QWEN_MAX_PIXELS))
    h, w = smart_resize(height, width, patch * merge, lo, hi)
    return h // patch, w // patch


def _qwen_vl(config: Mapping, height: int, width: int, min_pixels: int | None, max_pixels: int | None) -> ImageTokens:
    merge = int((config.get("vision_config") or {}).get("spatial_merge_size", 2))
    gh, gw = qwen_grid(config, height, width, min_pixels, max_pixels)
    return ImageTokens(gh * gw, gh * gw // (merge * merge), pixels=gh * gw * qwen_patch_pixels(config))


def qwen_patch_pixels(config: Mapping) -> int:
    """Pixel values of one Qwen2/2.5/3-VL patch row: channels x temporal_patch_size x patch x patch (the processor's
    flattened ``pixel_values`` are (patches, that); image_processing_qwen2_vl.py)."""
    vision = config.get("vision_config") or {}
    patch = int(vision.get("patch_size", 14))
    return int(vision.get("in_channels", 3)) * int(vision.get("temporal_patch_size", 2)) * patch * patch


def _llava(config: Mapping, height: int, width: int, min_pixels: int | None, max_pixels: int | None) -> ImageTokens:
    vision = config.get("vision_config") or {}
    side = int(vision.get("image_size", 336)) // int(vision.get("patch_size", 14))
    grid = side * side
    keeps_cls = config.get("vision_feature_select_strategy", "default") == "full"
    size = int(vision.get("image_size", 336))  # the CLIP tower also runs its CLS token
    return ImageTokens(grid + 1, grid + (1 if keeps_cls else 0), pixels=3 * size * size)


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
    return ImageTokens(crops * (side * side + 1), tokens, pixels=crops * 3 * size * size, segment=side * side + 1)


def _gemma3(config: Mapping, height: int, width: int, min_pixels: int | None, max_pixels: int | None) -> ImageTokens:
    vision = config.get("vision_config") or {}
    size = int(vision.get("image_size", 896))
    side = size // int(vision.get("patch_size", 14))
    return ImageTokens(side * side, int(config.get("mm_tokens_per_image", 256)), pixels=3 * size * size)


def mllama_canvas(height: int, width: int, max_tiles: int, tile: int) -> tuple[int, int]:
    """(canvas height, width) in pixels: transformers v5.24.0 image_processing_pil_mllama.py
    ``get_optimal_tiled_canvas`` (its arrangements are (w, h) pairs read back as (h, w), kept here)."""
    canvases = [(a * tile, b * tile) for a in range(1, max_tiles + 1) for b in range(1, max_tiles + 1)
                if a * b <= max_tiles]
    scales = [min(ch / height, cw / width) for ch, cw in canvases]
    up = [s for s in scales if s >= 1]
    chosen = min(up) if up else max(scales)
    return min((c for c, s in zip(canvases, scales, strict=True) if s == chosen), key=lambda c: c[0] * c[1])


def _mllama(config: Mapping, height: int, width: int, min_pixels: int | None, max_pixels: int | None) -> ImageTokens:
    vision = config.get("vision_config") or {}
    size = int(vision.get("image_size", 560))
    side = size // int(vision.get("patch_size", 14))
    tiles, per_tile = int(vision.get("max_num_tiles", 4)), side * side + 1
    padded = per_tile + (8 - per_tile % 8) % 8  # MllamaVisionModel.forward pads the patches to a multiple of 8
    # the projector reads every tile's unpadded patches (the padding is sliced off before it)
    return ImageTokens(tiles * padded, 1, tiles * per_tile, tiles * 3 * size * size)


def idefics3_grid(height: int, width: int, longest_edge: int, tile: int) -> tuple[int, int]:
    """(rows, columns) of sub-images, (0, 0) when the image is not split: transformers v5.24.0
    image_processing_pil_idefics3.py ``get_number_of_image_patches`` (with its two resize helpers)."""
    if width >= height:  # _resize_output_size_rescale_to_max_len
        h, w = int(longest_edge / (width / height)), longest_edge
        h += h % 2
    else:
        h, w = longest_edge, int(longest_edge * (width / height))
        w += w % 2
    h, w = max(h, 1), max(w, 1)
    ratio = w / h  # _resize_output_size_scale_below_upper_bound, MAX_IMAGE_SIZE = 4096
    if w >= h and w > 4096:
        h, w = int(4096 / ratio), 4096
    elif h > w and h > 4096:
        h, w = 4096, int(4096 * ratio)
    h, w = max(h, 1), max(w, 1)
    rh, rw = math.ceil(h / tile) * tile, math.ceil(w / tile) * tile
    if rh > tile or rw > tile:
        return math.ceil(rh / tile), math.ceil(rw / tile)
    return 0, 0


def _idefics3(config: Mapping, height: int, width: int, min_pixels: int | None, max_pixels: int | None) -> ImageTokens:
    vision = config.get("vision_config") or {}
    size, patch = int(vision.get("image_size", 364)), int(vision.get("patch_size", 14))
    # the checkpoints' preprocessor_config.json: max_image_size = the tower's image_size, size
    # longest_edge = 4 x that (the processor class defaults, 364 and 4 x 364, for Idefics3)
    tile = int(config.get("max_image_size", size))
    rows, cols = idefics3_grid(height, width, int(config.get("longest_edge", 4 * tile)), tile)
    seq = (size // patch) ** 2 // int(config.get("scale_factor", 2)) ** 2
    tokens = seq + 3 + rows * ((seq + 2) * cols + 1)
    tiles = rows * cols + 1
    return ImageTokens(tiles * (size // patch) ** 2, tokens, tiles * seq, tiles * 3 * size * size, (size // patch) ** 2)


def internvl_grid(height: int, width: int, tile: int, min_tiles: int, max_tiles: int) -> tuple[int, int]:
    """(columns, rows): transformers v5.24.0 got_ocr2/image_processing_pil_got_ocr2.py
    ``get_optimal_tiled_canvas`` (InternVL's processor uses GOT-OCR2's image processor)."""
    grids = sorted(((a, b) for a in range(1, max_tiles + 1) for b in range(1, max_tiles + 1)
                    if min_tiles <= a * b <= max_tiles), key=lambda g: g[0] * g[1])
    aspect, area = width / height, width * height
    best, best_diff = (1, 1), float("inf")
    for g in grids:
        diff = abs(aspect - g[0] / g[1])
        if diff < best_diff:
            best, best_diff = g, diff
        elif diff == best_diff and area > 0.5 * tile * tile * g[0] * g[1]:
            best = g
    return best


def _internvl(config: Mapping, height: int, width: int, min_pixels: int | None, max_pixels: int | None) -> ImageTokens:
    vision = config.get("vision_config") or {}
    size = vision.get("image_size", 448)
    size = int(size[0] if isinstance(size, list) else size)
    patch = vision.get("patch_size", 14)
    patch = int(patch[0] if isinstance(patch, list) else patch)
    # processing_internvl.py: crop_to_patches=True; GotOcr2 defaults min_patches 1, max_patches 12
    cols, rows = internvl_grid(height, width, size, int(config.get("min_patches", 1)), int(config.get("max_patches", 12)))
    tiles = 1 + (cols * rows if cols * rows > 1 else 0)
    seq = int((size // patch) ** 2 * float(config.get("downsample_ratio", 0.5)) ** 2)
    return ImageTokens(tiles * ((size // patch) ** 2 + 1), 2 + seq * tiles, seq * tiles, tiles * 3 * size * size,
                       (size // patch) ** 2 + 1)


# Qwen2VLVideoProcessor defaults (Qwen2-VL and Qwen2.5-VL), transformers v5.24.0
# models/qwen2_vl/video_processing_qwen2_vl.py ``size`` shortest_edge / longest_edge: the min / max pixels of each
# frame. A tower's image_config overrides them with typed data (models/hf_vlm.py QWEN3_VIDEO: Qwen3-VL's bounds
# hold for all the frames together, and it frames each temporal patch's tokens)
QWEN2_VIDEO_PIXELS = (128 * 28 * 28, 28 * 28 * 768)


def qwen3_video_resize(frames: int, height: int, width: int, factor: int, temporal: int, min_pixels: int,
                       max_pixels: int) -> tuple[int, int]:
    """transformers v5.24.0 models/qwen3_vl/video_processing_qwen3_vl.py ``smart_resize``: the pixel bounds
    hold for the frame count rounded to the temporal patch times each frame's area."""
    if frames < temporal:
        raise ModelError(f"frames_per_sample must be at least the temporal patch size {temporal}, got {frames}")
    _check_aspect(height, width)  # the sizes the user gave, before the small side is scaled up
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height, width = int(height * scale), int(width * scale)
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    t_bar = round(frames / temporal) * temporal
    if t_bar * h_bar * w_bar > max_pixels:
        beta = math.sqrt((frames * height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif t_bar * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (frames * height * width))
        h_bar, w_bar = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def _llava_next_video_frames(config: Mapping, frames: int) -> ImageTokens:
    """LLaVA-NeXT-Video: every frame is cropped to the tower's ``image_size`` (the checkpoints' video processor
    crop; the tower has positions for that size only), runs as one tower image with its CLS token, and is pooled
    by ``spatial_pool_stride`` to (side / stride)**2 tokens (processing_llava_next_video.py replace_video_token:
    ``num_image_tokens // 4 * num_frames`` for the stride of 2; modeling_llava_next_video.py LlavaNextVideoPooler)."""
    vision = config.get("vision_config") or {}
    size = int(vision.get("image_size", 336))
    side, stride = size // int(vision.get("patch_size", 14)), int(config.get("spatial_pool_stride", 2))
    pooled = (side // stride) ** 2
    return ImageTokens(frames * (side * side + 1), frames * pooled, frames * pooled, frames * 3 * size * size,
                       side * side + 1)


def video_tokens(config: Mapping, frames: int, height: int, width: int) -> ImageTokens:
    """Vision-tower patches and language-model tokens of one video of ``frames`` sampled frames of
    ``height`` x ``width``. Qwen2/2.5/3-VL: the frames are padded to a multiple of ``temporal_patch_size``
    (the last frame repeated, ``patchify``); each temporal patch is one (h/patch) x (w/patch) grid;
    one LM token per merge x merge patches (``get_number_of_video_patches``, processing_qwen2_vl.py).
    ``video_frame_markers``: tokens framing every temporal patch's (Qwen3-VL: vision start / end,
    processing_qwen3_vl.py ``replace_video_token``; its "<t seconds>" timestamps are text, in ``seq_len``).
    LLaVA-NeXT-Video: pooled frames (:func:`_llava_next_video_frames`)."""
    check_vision_fields(config)
    if config.get("model_type") == "llava_next_video":
        if frames < 1:
            raise ModelError(f"frames_per_sample must be positive, got {frames}")
        return check_tokens(_llava_next_video_frames(config, frames), "video")
    grid_t, gh, gw = video_grid(config, frames, height, width)
    merge = int((config.get("vision_config") or {}).get("spatial_merge_size", 2))
    pads = grid_t * gh * gw // (merge * merge)
    return check_tokens(ImageTokens(grid_t * gh * gw, pads + int(config.get("video_frame_markers", 0)) * grid_t, pads,
                                    grid_t * gh * gw * qwen_patch_pixels(config), gh * gw), "video")


def has_video_rule(config: Mapping) -> bool:
    """Whether the family of ``config`` (a tower's image config) has a video rule here."""
    return str(config.get("model_type")) in VIDEO_SUPPORTED


def video_grid(config: Mapping, frames: int, height: int, width: int) -> tuple[int, int, int]:
    """(temporal patches, rows, columns) of one video: ``video_grid_thw`` as the video processor makes it."""
    model_type = str(config.get("model_type"))
    if model_type not in VIDEO_SUPPORTED:
        raise ModelError(f"video frames of model_type {model_type!r} are not modelled; modelled: "
                         f"{', '.join(VIDEO_SUPPORTED)}")
    if frames < 1 or height < 1 or width < 1:
        raise ModelError(f"video size must be positive, got {frames} frames of {height}x{width}")
    vision = config.get("vision_config") or {}
    patch = int(vision.get("patch_size", 14))
    merge = int(vision.get("spatial_merge_size", 2))
    temporal = int(vision.get("temporal_patch_size", 2))
    lo, hi = config.get("video_pixels", QWEN2_VIDEO_PIXELS)
    if config.get("video_pixels_per_clip"):
        h, w = qwen3_video_resize(frames, height, width, patch * merge, temporal, lo, hi)
    else:
        h, w = smart_resize(height, width, patch * merge, lo, hi)
    return -(-frames // temporal), h // patch, w // patch


_RULES = {"qwen2_vl": _qwen_vl, "qwen2_5_vl": _qwen_vl, "qwen3_vl": _qwen_vl, "qwen3_vl_moe": _qwen_vl,
          "llava": _llava, "llava_next": _llava_next, "llava_next_video": _llava_next, "gemma3": _gemma3,
          "mllama": _mllama, "idefics3": _idefics3, "smolvlm": _idefics3, "internvl": _internvl}
SUPPORTED = tuple(sorted(_RULES))
VIDEO_SUPPORTED = ("llava_next_video", "qwen2_5_vl", "qwen2_vl", "qwen3_vl", "qwen3_vl_moe")


def image_tokens(config: Mapping, height: int, width: int, *, min_pixels: int | None = None,
                 max_pixels: int | None = None) -> ImageTokens:
    """Vision-tower patches and language-model tokens of one ``height`` x ``width`` image."""
    if height < 1 or width < 1:
        raise ModelError(f"image size must be positive, got {height}x{width}")
    rule = _RULES.get(str(config.get("model_type")))
    if rule is None:
        raise ModelError(f"image tokens of model_type {config.get('model_type')!r} are not modelled; "
                         f"modelled: {', '.join(SUPPORTED)}")
    check_vision_fields(config)
    return check_tokens(rule(config, height, width, min_pixels, max_pixels), "image")
