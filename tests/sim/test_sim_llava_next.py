"""LLaVA-NeXT ("anyres") against transformers: the simulator runs the real LlavaNextForConditionalGeneration on fake
tensors, fed as LlavaNextImageProcessor feeds it (``pixel_values`` (images, base + anyres crops, 3, 336, 336) in float32,
``image_sizes`` read by value), and the estimator agrees within 3 % × full/LoRA/QLoRA × checkpointing.

Fixed in the estimator after this grid found it (kept as the record): two 600 x 1000 images under QLoRA with
checkpointing were -3.7 %: at the tower's backward peak the language model's input-embeddings leaf
(``enable_input_require_grads``) and its gradient were missing or counted over the text tokens only; the merged
sequence is text and image tokens (estimate/vision.py ``embeds_leaf_bytes``, vision_backward.py ``_arriving``).
"""

from __future__ import annotations

import pytest

from vramfit.estimate import estimate
from vramfit.sim import simulate

TEXT = dict(model_type="llama", hidden_size=1024, intermediate_size=2816, num_hidden_layers=3, num_attention_heads=16,
            num_key_value_heads=4, vocab_size=8192)
LLAVA_NEXT = dict(model_type="llava_next", image_token_index=4000, text_config=TEXT,
                  vision_config=dict(model_type="clip_vision_model", hidden_size=1024, intermediate_size=4096,
                                     num_hidden_layers=4, num_attention_heads=16, image_size=336, patch_size=14,
                                     projection_dim=768))
# (images, height, width): two landscape images unpadded (672 x 672 grid, 28 of 48 rows kept), one 1 x 3 strip
CASES = [(m, g, 2, 600, 1000) for m in ("full", "lora", "qlora") for g in ("none", "full")]
CASES += [(m, "none", 1, 336, 1008) for m in ("full", "lora", "qlora")]


@pytest.mark.parametrize(("method", "gc", "images", "height", "width"), CASES,
                         ids=[f"{m}-gc_{g}-{n}x{h}x{w}" for m, g, n, h, w in CASES])
def test_llava_next_anyres_agrees(config_file, method, gc, images, height, width):
    sc = {"model": config_file(LLAVA_NEXT), "method": method, "seq_len": 512, "precision": "bf16-true",
          "images_per_sample": images, "image_height": height, "image_width": width, "gradient_checkpointing": gc}
    sim = simulate(sc, layers=3).result.peak.allocated_bytes
    est = estimate(sc).peak.allocated_bytes
    assert abs(est - sim) / sim <= 0.03, (est, sim)


@pytest.mark.parametrize(("height", "width"), [(600, 1000), (1000, 400), (336, 1008), (448, 448)])
def test_image_tokens_and_pixels_are_the_real_models(height, width):
    """A tiny real LLaVA-NeXT on the CPU, real tensors: the processor's float32 pixel values and the model's own
    packed features (base grid, unpadded crops, one ``image_newline`` per row) match vlm_tokens' count."""
    torch = pytest.importorskip("torch")
    import numpy as np
    from PIL import Image
    from transformers import LlavaNextConfig, LlavaNextForConditionalGeneration
    from transformers.models.llava_next.image_processing_pil_llava_next import LlavaNextImageProcessorPil

    from vramfit.models.vlm_tokens import image_tokens

    vision = dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=2, image_size=336, patch_size=14, projection_dim=32)
    text = {**TEXT, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
            "num_key_value_heads": 1, "vocab_size": 64}
    cfg = LlavaNextConfig(text_config=text, vision_config=vision, image_token_index=63, vision_feature_layer=-1)
    # the llava-hf/llava-v1.6-* preprocessor_config.json: 336-px crops (the class defaults are 224)
    proc = LlavaNextImageProcessorPil(image_grid_pinpoints=cfg.image_grid_pinpoints, size={"shortest_edge": 336},
                                      crop_size={"height": 336, "width": 336})
    batch = proc(images=[Image.fromarray(np.zeros((height, width, 3), np.uint8))], return_tensors="pt")
    ours = image_tokens({"model_type": "llava_next", "vision_config": vision,
                         "image_grid_pinpoints": cfg.image_grid_pinpoints}, height, width)
    assert batch["pixel_values"].dtype == torch.float32  # what the trainer feeds (sim/images.py FED_DTYPE)
    assert batch["pixel_values"].numel() == ours.pixels
    assert batch["pixel_values"].shape[1] * (24 * 24 + 1) == ours.vision_patches
    model = LlavaNextForConditionalGeneration(cfg).eval()
    with torch.no_grad():
        feats = model.model.get_image_features(batch["pixel_values"], batch["image_sizes"]).pooler_output
    assert [f.shape[0] for f in feats] == [ours.lm_tokens]


@pytest.mark.parametrize(("keys", "fed"), [
    ({}, 4),  # the HF Trainer feeds the processor's float32
    ({"parallelism": "zero2", "num_gpus": 2}, 2),  # Trainer._prepare_input casts to the DeepSpeed engine's dtype
    ({"framework": "unsloth"}, 2),  # UnslothVisionDataCollator casts to the model's dtype
])
def test_pixel_values_are_float32_unless_something_casts_them(keys, fed):
    from vramfit.estimate.framework import scenario_profile
    from vramfit.estimate.vision import pixel_input_bytes
    from vramfit.scenario import parse_scenario
    from vramfit.sim.images import FED_DTYPE

    assert FED_DTYPE.itemsize == 4
    sc = parse_scenario({"model": "generic:1B", "precision": "bf16-true", **keys})
    assert pixel_input_bytes(sc, scenario_profile(sc)) == fed
