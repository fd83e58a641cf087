"""The config.json fields the image and video token rules (:mod:`vramfit.models.vlm_tokens`) read, checked before
they are used: each is a number of the right kind within bounds no real processor comes near, so a pasted config
(``config_json`` on the web page, ``--model config.json``) cannot make the rules loop or divide by zero, nor hand
the estimator a sequence of 10^18 tokens to replay. Absent fields keep the rules' defaults."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from vramfit.errors import ModelError

#: Upper bounds, far above every processor default and checkpoint (Qwen2-VL max_pixels 28*28*16384 at most, InternVL
#: max_patches 12, mllama max_num_tiles 4, Gemma 3 mm_tokens_per_image 256, LLaVA-NeXT pinpoints up to 1008 px)
_PIXELS = 1 << 16  # one image side in pixels
_AREA = 1 << 28  # an image area in pixels (min_pixels, max_pixels, video_pixels)
_FACTOR = 1 << 12  # a patch side, a merge or shuffle factor, channels
_TILES = 1 << 8  # tiles or patches per image (internvl_grid walks max_patches^2 grids)
_TOKENS = 1 << 20  # tokens per image or frame markers
_PINPOINTS = 1 << 10  # LLaVA-NeXT candidate resolutions

#: field -> (upper bound, least value); the top level and vision_config are read alike
_INTS: dict[str, tuple[int, int]] = {
    "image_size": (_PIXELS, 1), "max_image_size": (_PIXELS, 1), "longest_edge": (_PIXELS, 1),
    "patch_size": (_FACTOR, 1), "spatial_merge_size": (_FACTOR, 1), "temporal_patch_size": (_FACTOR, 1),
    "in_channels": (_FACTOR, 1), "scale_factor": (_FACTOR, 1), "max_num_tiles": (_TILES, 1),
    "min_patches": (_TILES, 1), "max_patches": (_TILES, 1), "mm_tokens_per_image": (_TOKENS, 1),
    "video_frame_markers": (_TOKENS, 0), "min_pixels": (_AREA, 1), "max_pixels": (_AREA, 1),
}


def check_vision_fields(config: Mapping) -> None:
    """Refuse (:class:`ModelError`, naming the field) any token-rule field of ``config`` or its ``vision_config`` that
    is not a number of the right kind within bounds."""
    vision = config.get("vision_config")
    if vision is not None and not isinstance(vision, Mapping):
        raise ModelError(f"config.json field 'vision_config' must be a mapping, got {_shown(vision)}")
    for where in (config, vision or {}):
        for name, (top, least) in _INTS.items():
            if name in where:
                value = where[name]
                values = value if isinstance(value, list) and name in ("image_size", "patch_size") and value else [value]
                for v in values:
                    _int(name, v, least, top)
    ratio = config.get("downsample_ratio")
    if ratio is not None and (isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not math.isfinite(ratio)
                              or not 0 < ratio <= 1):
        raise ModelError(f"config.json field 'downsample_ratio' must be a number above 0 and at most 1, got {_shown(ratio)}")
    _pairs("image_grid_pinpoints", config.get("image_grid_pinpoints"), _PINPOINTS, _PIXELS)
    if config.get("video_pixels") is not None:
        _pairs("video_pixels", [config["video_pixels"]], 1, _AREA)


def check_tokens(tokens, what: str):
    """``tokens`` (an :class:`~vramfit.models.vlm_tokens.ImageTokens`) unless one image or video would need more
    tower patches or language-model tokens than a whole sequence may hold (vramfit.limits.MAX_SEQ_LEN)."""
    from vramfit.limits import MAX_SEQ_LEN

    if max(tokens.vision_patches, tokens.lm_tokens) > MAX_SEQ_LEN:
        raise ModelError(f"one {what} comes to {max(tokens.vision_patches, tokens.lm_tokens):,} tokens by its config.json "
                         f"fields, more than a sequence may hold ({MAX_SEQ_LEN:,}); check the vision fields")
    return tokens


def _int(name: str, value: Any, least: int, top: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= top:
        raise ModelError(f"config.json field {name!r} must be an integer from {least} to {top:,}, got {_shown(value)}")


def _pairs(name: str, value: Any, most: int, top: int) -> None:
    """A list of at most ``most`` [a, b] pairs of integers from 1 to ``top`` (None: absent)."""
    if value is None:
        return
    ok = isinstance(value, list) and 0 < len(value) <= most and all(
        isinstance(p, (list, tuple)) and len(p) == 2
        and all(not isinstance(x, bool) and isinstance(x, int) and 1 <= x <= top for x in p) for p in value)
    if not ok:
        raise ModelError(f"config.json field {name!r} must be a list of at most {most:,} [height, width] pairs of "
                         f"integers from 1 to {top:,}, got {_shown(value)}")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
