"""Estimator vs simulator for Qwen3-VL fed 512 x 512 images (32 x 32 patches of 16 px, full attention over each
image in every tower block, 256 image tokens; the checkpoints' 65,536 .. 16,777,216 pixel bounds) and 8 video
frames: transformers' own Qwen3VLForConditionalGeneration on fake tensors, its grid and token ids kept as
fake-tensor constants (sim/image_grid.py), DeepStack mergers on three tower blocks whose features the first three
decoder layers add at the image positions; and the tower description against the real modules' parameters."""

from __future__ import annotations

import pytest

from vramfit.estimate import estimate
from vramfit.models.hf_config import spec_from_hf_config
from vramfit.sim import simulate

QWEN3 = dict(
    model_type="qwen3_vl", image_token_id=8190, video_token_id=8191, vision_start_token_id=8188,
    vision_end_token_id=8189, tie_word_embeddings=False,
    text_config=dict(model_type="qwen3_vl_text", hidden_size=1024, intermediate_size=2816, num_hidden_layers=3,
                     num_attention_heads=16, num_key_value_heads=4, head_dim=64, vocab_size=8192,
                     rope_parameters={"rope_type": "default", "mrope_section": [8, 12, 12], "mrope_interleaved": True,
                                      "rope_theta": 5e6}),
    vision_config=dict(depth=4, hidden_size=512, intermediate_size=1024, num_heads=8, out_hidden_size=1024,
                       deepstack_visual_indexes=[0, 1, 2], num_position_embeddings=256, patch_size=16),
)
# (method, checkpointing, images per sample, video frames): the grid of the issue. Full fine-tuning with checkpointing
# and 2 images was +4.2 % on an earlier tree and is -1.4 % now (the tower-backward phase the estimate peaks in
# holds the gradients the simulator's lowest tower block has); it stays in the grid
GRID = [(m, gc, 1, 0) for m in ("full", "lora", "qlora") for gc in ("none", "full")] + [
    ("lora", "none", 2, 0), ("full", "none", 2, 0), ("qlora", "none", 2, 0), ("lora", "full", 2, 0), ("qlora", "full", 2, 0),
    ("full", "full", 2, 0),
    ("lora", "none", 0, 8), ("full", "none", 0, 8), ("qlora", "full", 0, 8), ("lora", "full", 1, 8)]
CASES = [pytest.param(*c, id=f"{c[0]}-gc_{c[1]}-{c[2]}img-{c[3]}fr") for c in GRID]


@pytest.mark.parametrize(("method", "gc", "images", "frames"), CASES)
def test_qwen3_vl_with_images_and_video_agrees(config_file, method, gc, images, frames):
    _assert_agrees(config_file(QWEN3), method, gc, images, frames)


QWEN3_MOE = {**QWEN3, "model_type": "qwen3_vl_moe",
             "text_config": {**QWEN3["text_config"], "model_type": "qwen3_vl_moe_text", "num_experts": 8,
                             "num_experts_per_tok": 2, "moe_intermediate_size": 512},
             "vision_config": {**QWEN3["vision_config"], "model_type": "qwen3_vl_moe_vision"}}
# the Qwen3-VL-30B-A3B layout, tiny: the same tower, routed experts in every decoder layer. QLoRA without checkpointing
# was -3.0 %: the module reader took the (experts, out, in) banks as (in, out) and the fused gate/up experts as an
# ungated MLP (no act(gate) kept), and the simulator built a KV cache (text_config.use_cache) the forward peak held
MOE = [("lora", "none", 1, 0), ("full", "none", 1, 0), ("lora", "full", 1, 0), ("full", "full", 1, 0),
       ("qlora", "full", 1, 0), ("lora", "none", 0, 8), ("qlora", "none", 1, 0)]


@pytest.mark.parametrize(("method", "gc", "images", "frames"),
                         [pytest.param(*c, id=f"{c[0]}-gc_{c[1]}-{c[2]}img-{c[3]}fr") for c in MOE])
def test_qwen3_vl_moe_with_images_and_video_agrees(config_file, method, gc, images, frames):
    _assert_agrees(config_file(QWEN3_MOE), method, gc, images, frames)


def test_the_tower_description_holds_every_real_parameter():
    """Blocks x depth, the biased Conv3d patch embedding, the learned positions, the merger and the three DeepStack
    mergers (LayerNorm over the joined width) add up to the tower transformers builds (meta device)."""
    spec = spec_from_hf_config(QWEN3)
    tower, h, merged = spec.vision, 512, 4 * 512
    assert spec.qk_norm  # Qwen3VLTextAttention's q_norm / k_norm, read from the modules
    assert [x.name for x in tower.block.block_linears] == ["qkv", "proj", "linear_fc1", "linear_fc2"]
    assert (tower.mergers, tower.block.act_saved_tensors) == (4, 1)  # gelu_pytorch_tanh: native GELU
    patch_embed = 3 * 2 * 16 * 16 * h + h
    positions = 256 * h
    projector = sum(x.params for x in tower.projector)
    merger = 2 * h + projector  # LayerNorm over each patch
    deepstack = 3 * (2 * merged + projector)  # LayerNorm over the joined patches
    # by hand: 4 x 2,102,784 (blocks) + 786,944 (Conv3d) + 131,072 (positions) + 6,295,552 (merger) + 3 x 6,298,624
    assert 4 * tower.block.block_params + patch_embed + positions + merger + deepstack == spec.vision_params
    import torch
    import transformers

    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(transformers.AutoConfig.for_model(**QWEN3))
    assert sum(p.numel() for p in model.model.visual.parameters()) == spec.vision_params == 34_520_576


def test_qwen3_vl_image_and_video_tokens_follow_its_processors():
    """512 x 512 within the checkpoints' image bounds: 32 x 32 patches, 256 tokens; 8 frames of 512 x 512 within the
    video processor's 786,432 pixels for all frames: each frame 288 x 288 (9 x 9 tokens of 2 x 2 patches of 16 px),
    4 temporal patches, each framed by vision start / end."""
    from vramfit.models.vlm_tokens import image_tokens, video_tokens

    config = spec_from_hf_config(QWEN3).vision.image_config
    assert (image_tokens(config, 512, 512).vision_patches, image_tokens(config, 512, 512).lm_tokens) == (1024, 256)
    video = video_tokens(config, 8, 512, 512)
    assert (video.vision_patches, video.features, video.lm_tokens) == (4 * 18 * 18, 4 * 81, 4 * 81 + 8)


def test_the_expert_banks_are_read_in_their_linear_layout():
    """Qwen3VLMoeTextExperts stores its banks as ``nn.functional.linear`` takes them, (experts, out, in)
    (use_experts_implementation's is_transposed=False), and gates act(gate) * up over the fused gate/up bank: the
    module reader took them as (in, out) and ungated before (-3.0 % for QLoRA without checkpointing)."""
    spec = spec_from_hf_config(QWEN3_MOE)
    banks = {x.name: (x.in_features, x.out_features, x.count) for x in spec.block_linears if x.group == "expert"}
    assert banks == {"gate_up_proj": (1024, 2 * 512, 8), "down_proj": (512, 1024, 8)}
    assert spec.gated_mlp


def _assert_agrees(model: str, method: str, gc: str, images: int, frames: int) -> None:
    """Estimator within 3 % of the simulator's allocated peak (3 decoder layers, 512 tokens, 512 x 512 images)."""
    sc = {"model": model, "method": method, "seq_len": 512, "precision": "bf16-true",
          "images_per_sample": images, "frames_per_sample": frames, "image_height": 512, "image_width": 512,
          "gradient_checkpointing": gc}
    sim = simulate(sc, layers=3).result.peak.allocated_bytes
    est = estimate(sc).peak.allocated_bytes
    assert abs(est - sim) / sim <= 0.03, (est, sim)


def test_qwen3_vl_frozen_tower_stays_out_of_the_graph(config_file):
    """freeze_vision yes under checkpointing with LoRA: Qwen3VLVisionModel exposes no input embeddings
    (VisionTower.patch_embedding_exposed False), so transformers v5.24.0's enable_input_require_grads hooks nothing in
    it and the frozen tower keeps nothing (-0.26 % when written; +1.76 % counting its layer inputs as Qwen2.5-VL's)."""
    sc = {"model": config_file(QWEN3), "method": "lora", "seq_len": 512, "precision": "bf16-true",
          "images_per_sample": 1, "image_height": 512, "image_width": 512, "gradient_checkpointing": "full",
          "freeze_vision": "yes"}
    assert not spec_from_hf_config(QWEN3).vision.patch_embedding_exposed
    sim = simulate(sc, layers=3).result.peak.allocated_bytes
    est = estimate(sc).peak.allocated_bytes
    assert abs(est - sim) / sim <= 0.01, (est, sim)
