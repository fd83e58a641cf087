"""Estimator vs simulator for SmolVLM and Idefics3 fed images: transformers' own SmolVLMForConditionalGeneration /
Idefics3ForConditionalGeneration (SigLIP-style tower over the sub-images and the global image, pixel-shuffle
connector, Llama) on fake tensors, the pixel values and pixel mask as fake-tensor constants (sim/images.py).

SmolVLM: 512-px sub-images of 16-px patches, scale factor 4 (64 tokens each); a 512 x 1024 image is rescaled to
1024 x 2048 and split 2 x 4, plus the global image: 9 tower images of 1,024 patches. Idefics3: 364-px tiles of
14-px patches, scale factor 2 (169 tokens each); a 364 x 728 image: 1 x 2 + 1 = 3 tower images of 676 patches.
"""

from __future__ import annotations

import pytest

from vramfit.estimate import estimate
from vramfit.sim import simulate

TEXT = dict(model_type="llama", hidden_size=1024, intermediate_size=2816, num_hidden_layers=3, num_attention_heads=16,
            num_key_value_heads=4, vocab_size=8192)
SMOLVLM = dict(model_type="smolvlm", scale_factor=4, image_token_id=4000, text_config=TEXT,
               vision_config=dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=4,
                                  num_attention_heads=12, image_size=512, patch_size=16))
IDEFICS3 = dict(model_type="idefics3", scale_factor=2, image_token_id=4000, text_config=TEXT,
                vision_config=dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=3,
                                   num_attention_heads=12, image_size=364, patch_size=14))
CASES = [pytest.param(m, n, gc, id=f"{m}-{n}img-gc_{gc}")
         for m in ("full", "lora", "qlora") for n in (1, 2) for gc in ("none", "full")]


def _agreement(config_file, config: dict, method: str, images: int, gc: str, size: tuple[int, int]) -> float:
    sc = {"model": config_file(config), "method": method, "seq_len": 512, "precision": "bf16-true",
          "images_per_sample": images, "image_height": size[0], "image_width": size[1], "gradient_checkpointing": gc}
    sim = simulate(sc, layers=3).result.peak.allocated_bytes
    return (estimate(sc).peak.allocated_bytes - sim) / sim


@pytest.mark.parametrize(("method", "images", "gc"), CASES)
def test_smolvlm_with_images_agrees(config_file, method, images, gc):
    assert abs(_agreement(config_file, SMOLVLM, method, images, gc, (512, 1024))) <= 0.03


@pytest.mark.parametrize(("method", "gc"), [("full", "none"), ("lora", "full"), ("qlora", "none")])
def test_idefics3_with_an_image_agrees(config_file, method, gc):
    assert abs(_agreement(config_file, IDEFICS3, method, 1, gc, (364, 728))) <= 0.03


def test_the_simulated_batch_is_the_processors_layout(config_file):
    """9 sub-images + global of 512 px per image, 2 images: (1, 18, 3, 512, 512) pixel values and a
    (1, 18, 512, 512) mask, 2 x (9 x 64 features + framing) placeholder positions."""
    from vramfit.scenario import parse_scenario
    from vramfit.sim.images import batch, image_inputs

    sc = parse_scenario({"model": config_file(SMOLVLM), "images_per_sample": 2, "image_height": 512,
                         "image_width": 1024})
    images = image_inputs(SMOLVLM, sc)
    assert (images.tiles_per_image, images.features_per_image) == (9, 9 * 64)
    # 64 per tile, each row of 4 tiles framed by 2 tokens per tile and a newline, the global image + 3
    assert images.tokens_per_image == 64 + 3 + 2 * ((64 + 2) * 4 + 1)
    import torch

    ids, labels, kwargs = batch(images, 8192, 1, 16, torch.bfloat16, "cpu")
    assert tuple(kwargs["pixel_values"].shape) == (1, 18, 3, 512, 512)
    assert tuple(kwargs["pixel_attention_mask"].shape) == (1, 18, 512, 512)
    assert ids.shape[1] == 16 + 2 * images.tokens_per_image
    assert bool((ids[:, :2 * 9 * 64] == 4000).all())  # the features' positions, then the framing and text
    assert int((labels == -100).sum()) == 2 * images.tokens_per_image
