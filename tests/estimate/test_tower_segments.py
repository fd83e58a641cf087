"""A vision tower's patches attend within segments (models/vlm_tokens.py ``ImageTokens.segment``): a tile or
sub-image where the tower takes an image's tiles as a batch, a video's temporal patch, else the whole image. Eager
attention's score tensors and the tower's attention FLOPs are each segment's, so they grow linearly with the
micro-batch and the images (fuzzing, 2026-12-05: Gemma 3 4B LoRA under eager at 65.6 / 202.2 / 718.4 GiB for
micro-batch 1 / 2 / 4, the scores sized as one sequence over every patch of the micro-batch)."""

from __future__ import annotations

import pytest

from vramfit.estimate import estimate, resolve_spec
from vramfit.estimate.framework import scenario_profile
from vramfit.estimate.vision import tower_block_saved, vision_adapters
from vramfit.estimate.vision_inputs import attended_patches, tower_segments
from vramfit.plan.stage_work import scenario_flops
from vramfit.scenario import parse_scenario

GiB = 2**30


def _spec(**kw):
    sc = parse_scenario(kw)
    return sc, resolve_spec(sc)[1]


@pytest.mark.parametrize(("model", "size", "segments"), [
    # InternVL: a 448 x 896 image is 2 x 1 tiles plus the thumbnail, each (448/14)^2 + 1 CLS = 1,025 patches
    ("OpenGVLab/InternVL3-1B-hf", (448, 896), ((1025, 6),)),
    # SmolVLM-256M: a 224-px image is upscaled and split into 4 x 4 sub-images of 512 px plus the global one
    ("HuggingFaceTB/SmolVLM-256M-Instruct", (224, 224), ((1024, 34),)),
    # LLaVA-NeXT: the 336-px base image plus 2 x 2 crops of a 672-px canvas, 577 patches each
    ("llava-hf/llava-v1.6-mistral-7b-hf", (672, 672), ((577, 10),)),
    # Gemma 3 and a Qwen image: one segment per image
    ("google/gemma-3-4b-it", (896, 896), ((4096, 2),)),
    ("Qwen/Qwen2.5-VL-7B-Instruct", (448, 448), ((1024, 2),)),
])
def test_segments_per_sequence(model, size, segments):
    sc, spec = _spec(model=model, images_per_sample=2, image_height=size[0], image_width=size[1])
    assert tower_segments(spec, sc) == segments


def test_a_video_attends_within_each_temporal_patch():
    # 4 frames of 448 x 448: 2 temporal patches of 32 x 32 patches (cu_seqlens: grid_h x grid_w per temporal patch)
    sc, spec = _spec(model="Qwen/Qwen2-VL-7B-Instruct", frames_per_sample=4, image_height=448, image_width=448)
    assert tower_segments(spec, sc) == ((1024, 2),)
    assert attended_patches(spec, sc) == 2 * 1024 * 1024 * 32


def test_qwen25_windowed_layers_attend_within_their_windows():
    # 4 full-attention layers over the image's 1,024 patches, 28 within windows of (112 / 14)^2 = 64
    sc, spec = _spec(model="Qwen/Qwen2.5-VL-7B-Instruct", images_per_sample=1, image_height=448, image_width=448)
    assert attended_patches(spec, sc) == 1024 * (4 * 1024 + 28 * 64)


def test_eager_scores_are_each_segments():
    # Gemma 3's SigLIP: 16 heads over each image's 4,096 patches, fp32 softmax output kept, its bf16 cast too
    kw = {"model": "google/gemma-3-4b-it", "method": "lora", "attention": "eager", "images_per_sample": 2,
          "micro_batch_size": 2}
    sc, spec = _spec(**kw)
    profile = scenario_profile(sc)
    saved = tower_block_saved(spec, sc, profile, vision_adapters(spec, sc, profile))
    scores = 2 * 2 * 16 * 4096 * 4096  # micro-batch x images x heads x P x P
    assert saved.items["attn.softmax_out"] == 4 * scores and saved.items["attn.probs"] == 2 * scores
    # linear in the micro-batch: each added sequence adds the same bytes (was 65.6 / 202.2 / 718.4 GiB)
    peaks = [estimate({**kw, "images_per_sample": 1, "seq_len": 512, "micro_batch_size": b}).peak.device_bytes
             for b in (1, 2, 4)]
    assert peaks[2] - peaks[1] == pytest.approx(2 * (peaks[1] - peaks[0]), rel=0.02)
    assert peaks[2] < 240 * GiB


def test_internvit_softmax_stays_in_the_compute_dtype():
    sc, spec = _spec(model="OpenGVLab/InternVL3-1B-hf", method="lora", attention="eager", images_per_sample=1,
                     image_height=448, image_width=448)
    assert not spec.vision.block.eager_softmax_fp32  # modeling_internvl.py: "No upcasting of the attention weights"
    profile = scenario_profile(sc)
    saved = tower_block_saved(spec, sc, profile, vision_adapters(spec, sc, profile))
    assert saved.items["attn.softmax_out"] == 2 * 16 * 1025 * 1025 and "attn.probs" not in saved.items


def test_tower_attention_flops_are_each_tiles():
    # InternVL3-1B, a 448 x 896 image: 3 tiles of 1,025 patches, each attending to its own tile in all 24 layers
    sc, spec = _spec(model="OpenGVLab/InternVL3-1B-hf", method="lora", images_per_sample=1, image_height=448,
                     image_width=896)
    mf = scenario_flops(spec, sc)
    assert mf.tower_patches == 3 * 1025
    assert mf.tower_attn_per_patch == 4 * 16 * 64 * 1025 * 24  # was 3 x that: the image's 3,075 patches


def test_an_estimate_with_images_states_the_band_of_runs_with_images():
    """Fuzzing, 2026-12-05: Unsloth's Qwen2-VL QLoRA with an image stated the band of 8 text notebooks (-4.8 % to
    +3.2 %) as measured on its path, while the vision notebooks on that path are off by up to -11.0 %."""
    sc = {"model": "Qwen/Qwen2-VL-7B-Instruct", "method": "qlora", "framework": "unsloth",
          "framework_version": "unsloth-2024.11", "images_per_sample": 1}
    acc = estimate(sc).accuracy
    assert acc["path"]["method"] == "qlora+images" and acc["measured_path"]
    assert acc["cases"] == [f"UNSLOTH_VLM_NB-{i}" for i in range(1, 6)]
    assert acc["error_band"] == [-0.1097, 0.0594]
    text = estimate({**sc, "images_per_sample": 0}).accuracy
    assert text["path"]["method"] == "qlora" and "UNSLOTH_VLM_NB-1" not in text["cases"]


def test_a_text_model_ignores_images_whatever_the_framework_and_keeps_its_band():
    # review, 2026-12-05: Llama-3.2-1B with an image stated ms-swift's one Qwen2-VL row (-16.3 %) as its band, and
    # torchtitan refused it as a vision-language run while hf ignored the images
    for fw in ("hf", "torchtitan"):
        r = estimate({"model": "meta-llama/Llama-3.2-1B", "images_per_sample": 1, "framework": fw})
        assert "+images" not in r.accuracy["path"]["method"]


def test_hybrid_sharding_on_one_node_keeps_the_full_shard_band():
    from vramfit.estimate.accuracy import path_of

    one = parse_scenario({"model": "meta-llama/Llama-3.1-8B", "num_gpus": 4, "parallelism": "fsdp", "shard_scope": "node"})
    assert path_of(one)["sharding"] == "fsdp"
    assert path_of(one.replace(num_gpus=8, num_nodes=2))["sharding"] == "fsdp+node"
