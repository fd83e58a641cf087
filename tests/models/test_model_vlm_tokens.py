"""Image tokens per processor rule, checked against transformers' own image processors and
processors' counting helpers (no weights, no tokenizer: the processors' defaults)."""

from __future__ import annotations

import pytest

from vramfit.errors import ModelError
from vramfit.models import resolve_model
from vramfit.models.vlm_tokens import image_tokens

SIZES = [(224, 224), (448, 448), (1080, 1920), (2048, 1536), (100, 3000), (28, 28)]


@pytest.mark.parametrize(("height", "width"), SIZES)
def test_qwen2_5_vl_matches_the_image_processor(height, width):
    pytest.importorskip("transformers")
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    cfg = resolve_model("Qwen/Qwen2.5-VL-7B-Instruct").config
    got = image_tokens(cfg, height, width)
    patches = Qwen2VLImageProcessorPil().get_number_of_image_patches(height, width, {})
    assert got.vision_patches == patches
    assert got.lm_tokens == patches // 4


def test_qwen_vl_max_pixels_caps_the_tokens():
    cfg = resolve_model("Qwen/Qwen2.5-VL-7B-Instruct").config
    # 1080p: 1092 x 1932 exceeds 28*28*1280 px, scaled by sqrt(2073600/1003520) to 728 x 1316 -> 52 x 94 patches
    assert image_tokens(cfg, 1080, 1920).lm_tokens == 52 * 94 // 4
    # max_pixels = 512*28*28: 448 x 840 -> 32 x 60 patches, 480 tokens
    assert image_tokens(cfg, 1080, 1920, max_pixels=512 * 28 * 28).lm_tokens == 480
    assert image_tokens(cfg, 448, 448).lm_tokens == 256  # 32 x 32 patches, merged 2 x 2


def test_qwen3_vl_reads_patch_16_from_its_config():
    cfg = {"model_type": "qwen3_vl", "vision_config": {"patch_size": 16, "spatial_merge_size": 2}}
    assert image_tokens(cfg, 512, 512).vision_patches == 32 * 32
    assert image_tokens(cfg, 512, 512).lm_tokens == 256


def test_llava_1_5_is_576_tokens_whatever_the_image():
    cfg = {"model_type": "llava", "vision_config": {"image_size": 336, "patch_size": 14}}
    assert image_tokens(cfg, 1080, 1920).lm_tokens == 576
    assert image_tokens(cfg, 100, 100).vision_patches == 577  # CLS runs through the tower


def test_gemma3_is_256_tokens_per_image():
    cfg = {"model_type": "gemma3", "mm_tokens_per_image": 256, "vision_config": {"image_size": 896, "patch_size": 14}}
    got = image_tokens(cfg, 1024, 768)
    assert (got.lm_tokens, got.vision_patches) == (256, 4096)


@pytest.mark.parametrize(("height", "width"), SIZES)
def test_llava_next_anyres_matches_the_processor(height, width):
    pytest.importorskip("transformers")
    from transformers.models.llava_next.image_processing_pil_llava_next import LlavaNextImageProcessorPil
    from transformers.models.llava_next.processing_llava_next import LlavaNextProcessor

    proc = LlavaNextProcessor.__new__(LlavaNextProcessor)  # no tokenizer needed for the count
    proc.image_processor, proc.patch_size, proc.num_additional_image_tokens = LlavaNextImageProcessorPil(), 14, 1
    expected = proc._get_number_of_features(height, width, 336, 336) - 1  # "default": the CLS dropped
    cfg = {"model_type": "llava_next", "vision_config": {"image_size": 336, "patch_size": 14},
           "image_grid_pinpoints": proc.image_processor.image_grid_pinpoints}
    assert image_tokens(cfg, height, width).lm_tokens == expected


def test_llava_next_runs_the_tower_on_every_crop():
    cfg = {"model_type": "llava_next", "vision_config": {"image_size": 336, "patch_size": 14}}
    assert image_tokens(cfg, 1080, 1920).vision_patches == (1 + 2 * 2) * 577  # best fit 672 x 672


def test_unmodelled_family_is_one_clear_line():
    with pytest.raises(ModelError, match="paligemma.*not modelled; modelled: gemma3, idefics3, internvl, llava"):
        image_tokens({"model_type": "paligemma"}, 336, 336)


@pytest.mark.parametrize("model", ["Qwen/Qwen2.5-VL-7B-Instruct", "Qwen/Qwen2-VL-7B-Instruct"])
@pytest.mark.parametrize(("height", "width"), [(1080, 1920), (2048, 2048), (448, 448), (28, 28)])
def test_qwen2_checkpoints_count_with_their_preprocessor_bounds(model, height, width):
    """The Qwen2-VL and Qwen2.5-VL checkpoints' preprocessor_config.json sets min_pixels 3136 and max_pixels
    12845056 (4 to 16,384 merged tokens), not the image processor's class default of 28*28*1280: a 1080p image is
    2,691 tokens (it read 1,222)."""
    pytest.importorskip("transformers")
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from vramfit.estimate.vision_inputs import per_image
    from vramfit.scenario import Scenario

    spec = resolve_model(model).spec
    got = per_image(spec, Scenario(model=model, images_per_sample=1, image_height=height, image_width=width))
    patches = Qwen2VLImageProcessorPil(min_pixels=3136, max_pixels=12845056).get_number_of_image_patches(
        height, width, {})
    assert (got.vision_patches, got.lm_tokens) == (patches, patches // 4)
    if (height, width) == (1080, 1920):
        assert got.lm_tokens == 2691


def test_an_image_past_the_processors_aspect_ratio_names_the_longer_side():
    from typer.testing import CliRunner

    from vramfit.cli.main import app

    for h, w, key in ((10, 2500, "image_width"), (2500, 10, "image_height")):
        out = CliRunner().invoke(app, ["estimate", "--model", "Qwen/Qwen2.5-VL-7B-Instruct", "--images-per-sample", "1",
                                       "--image-height", str(h), "--image-width", str(w)])
        assert out.exit_code == 2 and f"{key}: the image's aspect ratio must be at most 200" in out.output
        assert "Traceback" not in out.output and "model:" not in out.output
