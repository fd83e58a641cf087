"""Tiled image-token rules (Llama 3.2 Vision, Idefics3 / SmolVLM, InternVL) against transformers'
own image processors and processors' counting functions, called on sizes (no image, no download)."""

from __future__ import annotations

import pytest

from vramfit.models.vlm_tokens import idefics3_grid, image_tokens, internvl_grid, mllama_canvas

SIZES = [(224, 224), (448, 448), (560, 1120), (1080, 1920), (2048, 1536), (100, 3000), (3000, 100), (28, 28),
         (767, 1025), (5000, 4000)]


@pytest.mark.parametrize(("height", "width"), SIZES)
def test_mllama_canvas_matches_the_image_processor(height, width):
    pytest.importorskip("transformers")
    from transformers.models.mllama.image_processing_pil_mllama import get_optimal_tiled_canvas

    assert mllama_canvas(height, width, 4, 560) == tuple(int(x) for x in get_optimal_tiled_canvas(height, width, 4, 560))


def test_mllama_tower_runs_four_padded_tiles_whatever_the_image():
    cfg = {"model_type": "mllama", "vision_config": {"image_size": 560, "patch_size": 14, "max_num_tiles": 4}}
    # 40 x 40 patches + CLS = 1601, padded to 1608; pack_images always stacks max_image_tiles tiles
    assert image_tokens(cfg, 224, 224) == image_tokens(cfg, 1080, 1920)
    assert image_tokens(cfg, 224, 224).vision_patches == 4 * 1608
    assert image_tokens(cfg, 224, 224).lm_tokens == 1


@pytest.mark.parametrize(("height", "width"), SIZES)
@pytest.mark.parametrize(("tile", "family"), [(364, "idefics3"), (384, "smolvlm"), (512, "smolvlm")])
def test_idefics3_smolvlm_tokens_match_the_processor(height, width, tile, family):
    pytest.importorskip("transformers")
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil
    from transformers.models.idefics3.processing_idefics3 import Idefics3Processor

    proc = Idefics3ImageProcessorPil(max_image_size={"longest_edge": tile}, size={"longest_edge": 4 * tile})
    patches, rows, cols = proc.get_number_of_image_patches(height, width, {})
    assert idefics3_grid(height, width, 4 * tile, tile) == (rows, cols)
    scale = 2 if tile == 364 else (3 if tile == 384 else 4)
    seq = (tile // 14 if tile == 364 else tile // 16) ** 2 // scale**2

    class Tok:  # a tokenizer that merges "\n\n" into one token, as the checkpoints' do
        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [0]}

    pr = Idefics3Processor.__new__(Idefics3Processor)
    pr.image_processor, pr.image_seq_len, pr.tokenizer = proc, seq, Tok()
    pr._merge_kwargs = lambda **kw: {"images_kwargs": {}}
    expected = pr._get_num_multimodal_tokens([[height, width]]).num_image_tokens[0]
    cfg = {"model_type": family, "scale_factor": scale,
           "vision_config": {"image_size": tile, "patch_size": 14 if tile == 364 else 16}}
    got = image_tokens(cfg, height, width)
    assert got.lm_tokens == expected
    assert got.vision_patches == max(patches, 1) * (seq * scale**2)
    assert got.features == max(patches, 1) * seq  # the connector's rows: no framing tokens


@pytest.mark.parametrize(("height", "width"), SIZES)
def test_internvl_tiles_match_the_processor(height, width):
    pytest.importorskip("transformers")
    from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import (
        GotOcr2ImageProcessorPil,
        get_optimal_tiled_canvas,
    )

    assert internvl_grid(height, width, 448, 1, 12) == get_optimal_tiled_canvas((height, width), (448, 448), 1, 12)
    proc = GotOcr2ImageProcessorPil(size={"height": 448, "width": 448})
    tiles = proc.get_number_of_image_patches(height, width, {"crop_to_patches": True, "max_patches": 12})
    got = image_tokens({"model_type": "internvl", "vision_config": {"image_size": [448, 448], "patch_size": [14, 14]}},
                       height, width)
    assert got.lm_tokens == 2 + 256 * tiles  # processing_internvl.py: BOI + EOI + image_seq_length per tile
    assert got.vision_patches == tiles * (32 * 32 + 1)
    assert got.features == 256 * tiles  # the projector's rows: the CLS dropped, 2 x 2 patches shuffled into one


def test_idefics3_small_image_is_one_global_image():
    cfg = {"model_type": "idefics3", "vision_config": {"image_size": 364, "patch_size": 14}}
    # 300 x 300 -> rescaled to the 1456 longest edge -> 4 x 4 sub-images + the global image
    assert image_tokens(cfg, 300, 300).vision_patches == 17 * 676
    assert image_tokens({**cfg, "longest_edge": 364}, 300, 300).vision_patches == 676
    assert image_tokens({**cfg, "longest_edge": 364}, 300, 300).lm_tokens == 169 + 3
