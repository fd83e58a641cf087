"""Estimator vs simulator for InternVL fed one or two 448 x 896 images (2 x 1 tiles of 448 px plus the
thumbnail: 3 tower images of 1,025 patches each): transformers' own InternVLForConditionalGeneration
(InternViT with q/k RMSNorm and layer scale, pixel-shuffle projector, Qwen2) on fake tensors."""

from __future__ import annotations

import pytest

from vramfit.estimate import estimate
from vramfit.sim import simulate

INTERNVL = dict(
    model_type="internvl", image_token_id=4000, downsample_ratio=0.5,
    text_config=dict(model_type="qwen2", hidden_size=1024, intermediate_size=2816, num_hidden_layers=3,
                     num_attention_heads=16, num_key_value_heads=4, vocab_size=8192),
    vision_config=dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=4, num_attention_heads=16,
                       image_size=[448, 448], patch_size=[14, 14], use_qk_norm=True, norm_type="rms_norm"),
)
CASES = [pytest.param(m, 1, gc, id=f"{m}-1img-gc_{gc}") for m in ("full", "lora", "qlora") for gc in ("none", "full")]
CASES += [pytest.param(m, 2, gc, id=f"{m}-2img-gc_{gc}") for m, gc in (("full", "full"), ("lora", "none"), ("qlora", "full"))]


@pytest.mark.parametrize(("method", "images", "gc"), CASES)
def test_internvl_with_images_agrees(config_file, method, images, gc):
    sc = {"model": config_file(INTERNVL), "method": method, "seq_len": 512, "precision": "bf16-true",
          "images_per_sample": images, "image_height": 448, "image_width": 896, "gradient_checkpointing": gc}
    sim = simulate(sc, layers=3).result.peak.allocated_bytes
    est = estimate(sc).peak.allocated_bytes
    assert abs(est - sim) / sim <= 0.03, (est, sim)
