"""Qwen2-VL's merger starts with a LayerNorm over every patch (``PatchMerger.ln_q``, transformers v5.24.0
models/qwen2_vl/modeling_qwen2_vl.py): a trained merger keeps its input and the per-patch mean and rstd."""

from __future__ import annotations

import dataclasses

QWEN2_TEXT = dict(model_type="qwen2_vl_text", hidden_size=1024, intermediate_size=2816, num_hidden_layers=3,
                  num_attention_heads=16, num_key_value_heads=4, vocab_size=8192,
                  rope_parameters={"rope_type": "default", "mrope_section": [8, 12, 12], "rope_theta": 1e6})
QWEN2 = dict(model_type="qwen2_vl", image_token_id=8190, video_token_id=8191, vision_start_token_id=8188,
             vision_end_token_id=8189, text_config=QWEN2_TEXT,
             vision_config=dict(depth=4, embed_dim=512, hidden_size=1024, mlp_ratio=2, num_heads=8))
IMAGE = {"model": "x", "method": "full", "seq_len": 512, "precision": "bf16-true", "images_per_sample": 1,
         "image_height": 448, "image_width": 448}


def test_qwen2_vl_merger_ln_q_keeps_its_input_and_statistics():
    from vramfit.estimate import vision
    from vramfit.estimate.framework import PROFILES, Framework
    from vramfit.models.hf_config import spec_from_hf_config
    from vramfit.scenario import parse_scenario

    spec = spec_from_hf_config(QWEN2)
    assert spec.vision.projector_layernorm
    sc = parse_scenario(IMAGE)
    with_ln = vision.projector_kept(spec, sc, PROFILES[Framework.HF], [])
    without = vision.projector_kept(dataclasses.replace(spec, vision=dataclasses.replace(
        spec.vision, projector_layernorm=False)), sc, PROFILES[Framework.HF], [])
    # 1,024 patches of 512: the bf16 input and an fp32 mean and rstd per patch (native_layer_norm)
    assert with_ln - without == 2 * 1024 * 512 + 2 * 4 * 1024


def test_the_qwen2_5_vl_merger_has_no_layernorm():
    """Qwen2.5-VL's ln_q is an RMSNorm (``projector_rmsnorm``), counted apart."""
    from vramfit.models.hf_config import spec_from_hf_config

    cfg = dict(QWEN2, model_type="qwen2_5_vl", text_config={**QWEN2_TEXT, "model_type": "qwen2_5_vl_text"},
               vision_config=dict(depth=4, hidden_size=512, intermediate_size=1024, num_heads=8, out_hidden_size=1024))
    tower = spec_from_hf_config(cfg).vision
    assert tower.projector_rmsnorm and not tower.projector_layernorm


def test_full_finetuning_keeps_the_merged_embeddings_gradient_through_the_tower_backward():
    """The simulator's trace of Qwen2.5-VL (8 frames of 448 x 448, full fine-tuning, full checkpointing) holds a
    1 x 1,536 x 1,024 bf16 ``masked_fill`` output at its lowest tower block's peak: the gradient of the merged input
    embeddings (512 text + 1,024 video tokens), waiting in the token embedding's node, which runs last."""
    from vramfit.estimate.framework import PROFILES, Framework
    from vramfit.estimate.vision_backward import embeds_grad_pending
    from vramfit.models.hf_config import spec_from_hf_config
    from vramfit.scenario import parse_scenario

    cfg = dict(QWEN2, model_type="qwen2_5_vl", text_config={**QWEN2_TEXT, "model_type": "qwen2_5_vl_text"},
               vision_config=dict(depth=4, hidden_size=512, intermediate_size=1024, num_heads=8, out_hidden_size=1024))
    spec = spec_from_hf_config(cfg)
    video = {**IMAGE, "images_per_sample": 0, "frames_per_sample": 8, "gradient_checkpointing": "full"}
    hf = PROFILES[Framework.HF]
    assert embeds_grad_pending(spec, parse_scenario(video), hf) == 2 * 1536 * 1024 == 3_145_728
    # adapters: no embedding gradient (the LoRA leaf's is counted where the tower's output gradient arrives)
    assert embeds_grad_pending(spec, parse_scenario({**video, "method": "lora"}), hf) == 0
