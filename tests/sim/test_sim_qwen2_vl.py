"""Estimator vs simulator for Qwen2-VL fed one 448 x 448 image (32 x 32 patches, full attention over the
image in every tower block, 256 image tokens): transformers' own Qwen2VLForConditionalGeneration on fake
tensors, its grid fed by value (sim/image_grid.py, no window index); and the tower description against
the real modules' parameters."""

from __future__ import annotations

import pytest

from vramfit.estimate import estimate
from vramfit.models.hf_config import spec_from_hf_config
from vramfit.sim import simulate

QWEN2 = dict(
    model_type="qwen2_vl", image_token_id=8190, video_token_id=8191, vision_start_token_id=8188,
    vision_end_token_id=8189,
    text_config=dict(model_type="qwen2_vl_text", hidden_size=1024, intermediate_size=2816, num_hidden_layers=3,
                     num_attention_heads=16, num_key_value_heads=4, vocab_size=8192,
                     rope_parameters={"rope_type": "default", "mrope_section": [8, 12, 12], "rope_theta": 1e6}),
    vision_config=dict(depth=4, embed_dim=512, hidden_size=1024, mlp_ratio=2, num_heads=8),
)
CASES = [pytest.param(m, gc, id=f"{m}-gc_{gc}") for m in ("full", "lora", "qlora") for gc in ("none", "full")]


@pytest.mark.parametrize(("method", "gc"), CASES)
def test_qwen2_vl_with_an_image_agrees(config_file, method, gc):
    sc = {"model": config_file(QWEN2), "method": method, "seq_len": 512, "precision": "bf16-true",
          "images_per_sample": 1, "image_height": 448, "image_width": 448, "gradient_checkpointing": gc}
    sim = simulate(sc, layers=3).result.peak.allocated_bytes
    est = estimate(sc).peak.allocated_bytes
    assert abs(est - sim) / sim <= 0.03, (est, sim)


def test_the_tower_description_holds_every_real_parameter():
    """Blocks (LayerNorms, qkv, proj, fc1, fc2) x depth, the bias-free Conv3d patch embedding, the merger's
    ln_q and its two linears add up to the tower transformers builds (counted on the meta device)."""
    spec = spec_from_hf_config(QWEN2)
    tower = spec.vision
    block, h = tower.block, 512
    assert (block.num_hidden_layers, block.hidden_size, block.intermediate_size) == (4, 512, 1024)
    assert [x.name for x in block.block_linears] == ["qkv", "proj", "fc1", "fc2"]
    assert block.act_saved_tensors == 2  # quick_gelu
    patch_embed = 3 * 2 * 14 * 14 * h
    merger = 2 * h + sum(x.params for x in tower.projector)
    # by hand: 4 x 2,102,784 (blocks) + 602,112 (Conv3d) + 6,295,552 (ln_q, mlp.0, mlp.2)
    assert 4 * block.block_params + patch_embed + merger == spec.vision_params == 15_308_800
    import torch
    import transformers

    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(transformers.AutoConfig.for_model(**QWEN2))
    assert sum(p.numel() for p in model.model.visual.parameters()) == 15_308_800


@pytest.mark.parametrize(("method", "gc"), [("lora", "none"), ("full", "full")])
def test_qwen2_vl_with_video_frames_agrees(config_file, method, gc):
    """8 frames of 448 x 448: 4 temporal patches of 32 x 32 patches fed as one ``video_grid_thw`` row. Full
    fine-tuning with checkpointing peaks in the tower's backward: +3.5 % before the tower's top/lowest block positions
    (estimate/vision_backward.py tower_position), -2.4 % with them, the merger's ln_q and the merged embeddings'
    pending gradient (627,220,480 vs 642,663,936 B)."""
    sc = {"model": config_file(QWEN2), "method": method, "seq_len": 512, "precision": "bf16-true",
          "frames_per_sample": 8, "image_height": 448, "image_width": 448, "gradient_checkpointing": gc}
    sim = simulate(sc, layers=3).result.peak.allocated_bytes
    est = estimate(sc).peak.allocated_bytes
    assert abs(est - sim) / sim <= 0.03, (est, sim)
