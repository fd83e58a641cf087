"""The tower's backward as the simulator traces it (transformers' own Qwen2-VL / Qwen2.5-VL on fake tensors, 8 video
frames of 448 x 448 = 4,096 patches, full fine-tuning, full checkpointing): its high point sits in the lowest tower
block, after the merger's backward has freed what the merger kept, with every tower block's gradients above made and
the untied input embedding's not yet (the text was embedded before the tower ran)."""

from __future__ import annotations

import dataclasses
import importlib

from vramfit.estimate.allocator import round_allocation

QWEN25_TEXT = dict(model_type="qwen2_5_vl_text", hidden_size=1024, intermediate_size=2816, num_hidden_layers=3,
                   num_attention_heads=16, num_key_value_heads=4, vocab_size=8192,
                   rope_parameters={"rope_type": "default", "mrope_section": [8, 12, 12], "rope_theta": 1e6})
QWEN25 = dict(model_type="qwen2_5_vl", image_token_id=8190, video_token_id=8191, vision_start_token_id=8188,
              vision_end_token_id=8189, text_config=QWEN25_TEXT,
              vision_config=dict(depth=4, hidden_size=512, intermediate_size=1024, num_heads=8, out_hidden_size=1024,
                                 fullatt_block_indexes=[3], window_size=112))
VIDEO = {"method": "full", "seq_len": 512, "precision": "bf16-true", "frames_per_sample": 8, "image_height": 448,
         "image_width": 448, "gradient_checkpointing": "full"}


def _step(config: dict, tmp_path, **keys):
    import json

    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    est = importlib.import_module("vramfit.estimate")
    seen = {}
    compute = est.compute

    def keep(*a, **k):
        seen["step"] = compute(*a, **k)
        return seen["step"]

    est.compute = keep
    try:
        result = est.estimate({"model": str(path), **VIDEO, **keys})
    finally:
        est.compute = compute
    return seen["step"], dict(next(p for p in result.phases if p.phase == "backward-vision").breakdown)


def test_the_lowest_tower_block_holds_the_gradients_the_trace_shows(tmp_path):
    step, bv = _step(QWEN25, tmp_path)
    # the simulator's gradients at that moment: 113,836,032 B (every tower block's above the lowest, its
    # down_proj's, the language model's and the output layer's; not the 8192 x 1024 input embedding's)
    block = step.spec.vision.block
    down = next(x for x in block.block_linears if x.name == "down_proj")
    stem = step.spec.vision_params - sum(x.params for x in step.spec.vision.projector) - 4 * block.block_params
    pending = 8192 * 1024 + stem + block.block_params - down.params
    assert bv["gradients"] == step.parts.gradients - 2 * pending == 113_835_008
    t = step.acts.tower_parts
    # the lowest block's input and the stem's cos/sin stay, the merger's 25 MB are freed, and of the recomputed
    # block down_proj's input (4,096 x 1,024 bf16) is freed as well
    assert t.consumed == round_allocation(2 * 4096 * 1024)
    assert bv["activations"] == t.block_in + t.head - t.projector + t.per_layer - t.consumed == 94_535_680
    # the merged embeddings' gradient (1 x 1,536 x 1,024 bf16) waits in the embedding's node through the tower
    assert bv["temporaries"] == 25_165_824 + 2 * 1536 * 1024


def test_a_lora_tower_keeps_the_single_top_position(tmp_path):
    step, bv = _step(QWEN25, tmp_path, method="lora", lora_targets="all-linear", freeze_vision="no")
    a = step.acts
    assert bv["activations"] == a.tower + a.tower_recompute


def test_qwen2_vl_merger_ln_q_keeps_its_input_and_statistics(tmp_path):
    from vramfit.estimate import vision
    from vramfit.estimate.framework import PROFILES, Framework
    from vramfit.models.hf_config import spec_from_hf_config
    from vramfit.scenario import parse_scenario

    cfg = dict(model_type="qwen2_vl", image_token_id=8190, video_token_id=8191, vision_start_token_id=8188,
               vision_end_token_id=8189, text_config={**QWEN25_TEXT, "model_type": "qwen2_vl_text"},
               vision_config=dict(depth=4, embed_dim=512, hidden_size=1024, mlp_ratio=2, num_heads=8))
    spec = spec_from_hf_config(cfg)
    assert spec.vision.projector_layernorm
    sc = parse_scenario({"model": "x", **VIDEO, "frames_per_sample": 0, "images_per_sample": 1})
    with_ln = vision.projector_kept(spec, sc, PROFILES[Framework.HF], [])
    without = vision.projector_kept(dataclasses.replace(spec, vision=dataclasses.replace(
        spec.vision, projector_layernorm=False)), sc, PROFILES[Framework.HF], [])
    # 1,024 patches of 512: the bf16 input and an fp32 mean and rstd per patch (native_layer_norm)
    assert with_ln - without == 2 * 1024 * 512 + 2 * 4 * 1024
