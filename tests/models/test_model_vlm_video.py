"""Video frames of Qwen2/2.5/3-VL: the resize rules and defaults are transformers' own (read from its video
processor files, which import torchvision at the top, so the functions are taken from the source text)."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest

from vramfit.errors import ModelError
from vramfit.models.hf_vlm import QWEN3_VIDEO
from vramfit.models.vlm_tokens import QWEN2_VIDEO_PIXELS, qwen3_video_resize, smart_resize, video_tokens


def _source(module: str) -> ast.Module:
    transformers = pytest.importorskip("transformers")
    return ast.parse((Path(transformers.__file__).parent / "models" / module).read_text())


def _function(tree: ast.Module, name: str):
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    scope: dict = {"math": math}
    exec(compile(ast.Module([node], []), name, "exec"), scope)  # noqa: S102 - transformers' own function
    return scope[name]


def _defaults(tree: ast.Module) -> dict:
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name.endswith("VideoProcessor"))
    out = {}
    for stmt in cls.body:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
            try:
                out[stmt.targets[0].id] = eval(compile(ast.Expression(stmt.value), "d", "eval"))  # noqa: S307
            except Exception:  # noqa: BLE001 - names of other modules
                continue
    return out


SIZES = [(f, h, w) for f in (2, 3, 4, 7, 16, 33, 64) for h, w in ((448, 448), (360, 640), (1080, 1920),
                                                                    (100, 3000), (28, 28))]


def test_qwen2_video_rule_is_the_processor_s():
    tree = _source("qwen2_vl/video_processing_qwen2_vl.py")
    d = _defaults(tree)
    assert (d["size"]["shortest_edge"], d["size"]["longest_edge"]) == QWEN2_VIDEO_PIXELS
    assert (d["patch_size"], d["temporal_patch_size"], d["merge_size"]) == (14, 2, 2)
    theirs = _function(tree, "smart_resize")
    for f, h, w in SIZES:
        rh, rw = theirs(h, w, factor=28, min_pixels=d["size"]["shortest_edge"], max_pixels=d["size"]["longest_edge"])
        assert smart_resize(h, w, 28, *QWEN2_VIDEO_PIXELS) == (rh, rw)
        tokens = video_tokens({"model_type": "qwen2_5_vl", "vision_config": {"patch_size": 14}}, f, h, w)
        # patchify: frames padded to a multiple of 2, (rh/14) x (rw/14) patches per temporal patch
        assert tokens.vision_patches == math.ceil(f / 2) * (rh // 14) * (rw // 14)
        assert tokens.lm_tokens == tokens.vision_patches // 4


def test_qwen3_video_rule_is_the_processor_s():
    tree = _source("qwen3_vl/video_processing_qwen3_vl.py")
    d = _defaults(tree)
    assert (d["size"]["shortest_edge"], d["size"]["longest_edge"]) == tuple(QWEN3_VIDEO["video_pixels"])
    assert (d["patch_size"], d["temporal_patch_size"], d["merge_size"]) == (16, 2, 2)
    theirs = _function(tree, "smart_resize")
    for f, h, w in SIZES:
        lo, hi = QWEN3_VIDEO["video_pixels"]
        rh, rw = theirs(f, h, w, temporal_factor=2, factor=32, min_pixels=lo, max_pixels=hi)
        assert qwen3_video_resize(f, h, w, 32, 2, lo, hi) == (rh, rw)
        tokens = video_tokens({"model_type": "qwen3_vl", "vision_config": {"patch_size": 16}, **QWEN3_VIDEO}, f, h, w)
        grid_t = math.ceil(f / 2)
        assert tokens.vision_patches == grid_t * (rh // 16) * (rw // 16)
        # each temporal patch's tokens between a vision start and end token (processing_qwen3_vl.py)
        assert tokens.lm_tokens == tokens.vision_patches // 4 + 2 * grid_t


def test_sixteen_frames_of_a_720p_video_on_qwen2_5_vl():
    # 720 x 1280 has more than 28 * 28 * 768 pixels: scaled by sqrt(921,600 / 602,112) and floored to
    # multiples of 28, 560 x 1008 per frame; 8 temporal patches of 40 x 72 patches, 4 patches per LM token
    tokens = video_tokens({"model_type": "qwen2_5_vl", "vision_config": {}}, 16, 720, 1280)
    assert (tokens.vision_patches, tokens.lm_tokens) == (8 * 40 * 72, 8 * 40 * 72 // 4)


def test_families_without_a_video_rule_are_named():
    with pytest.raises(ModelError, match="video frames of model_type 'llava' are not modelled; modelled: llava_next_video, "
                                         "qwen2_5_vl, qwen2_vl, qwen3_vl, qwen3_vl_moe"):
        video_tokens({"model_type": "llava"}, 8, 448, 448)


def test_llava_next_video_frames_are_pooled_as_transformers_pools_them():
    """Each 336-px frame: 24 x 24 patches + CLS in the tower, LlavaNextVideoPooler's 2 x 2 average pool to
    12 x 12 = 144 tokens (the processor's ``num_image_tokens // 4 * num_frames``): shapes from transformers' own
    pooler on the meta device."""
    torch = pytest.importorskip("torch")
    from transformers import LlavaNextVideoConfig
    from transformers.models.llava_next_video.modeling_llava_next_video import LlavaNextVideoPooler

    config = LlavaNextVideoConfig()
    pooled = LlavaNextVideoPooler(config).to("meta")(torch.empty(8, 576, 1024, device="meta"))
    tokens = video_tokens(config.to_dict(), 8, 720, 1280)
    assert tuple(pooled.shape) == (8, 144, 1024)
    assert (tokens.vision_patches, tokens.lm_tokens, tokens.features) == (8 * 577, 8 * 144, 8 * 144)
    assert tokens.pixels == 8 * 3 * 336 * 336
