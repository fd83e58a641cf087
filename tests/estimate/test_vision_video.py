"""Video frames (``frames_per_sample``) on Qwen2.5-VL: tokens from the video processor's rule, the tower
over every temporal patch, clear refusals elsewhere (CLI exit 2, HTTP 422)."""

from __future__ import annotations

import pytest

from vramfit.errors import ScenarioError
from vramfit.estimate import estimate, vision
from vramfit.models import resolve_model
from vramfit.models.hf_config import spec_from_hf_config
from vramfit.scenario import parse_scenario

QWEN = "Qwen/Qwen2.5-VL-3B-Instruct"
BASE = {"model": QWEN, "method": "lora", "seq_len": 512, "gradient_checkpointing": "full"}


def _peak(**kw) -> int:
    return estimate({**BASE, **kw}).peak.allocated_bytes


def test_sixteen_720p_frames_join_the_sequence_and_the_tower():
    spec = spec_from_hf_config(resolve_model(QWEN).config)
    sc = parse_scenario({**BASE, "frames_per_sample": 16, "image_height": 720, "image_width": 1280})
    video = vision.per_video(spec, sc)
    # 560 x 1008 per frame (video max_pixels 28 * 28 * 768), 8 temporal patches of 40 x 72 patches
    assert (video.vision_patches, video.lm_tokens) == (8 * 40 * 72, 8 * 40 * 72 // 4)
    assert vision.lm_scenario(spec, sc).seq_len == 512 + 5760
    both = parse_scenario({**BASE, "frames_per_sample": 16, "images_per_sample": 2, "image_height": 448,
                           "image_width": 448})
    # two 448-px images (32 x 32 patches, 256 tokens each) and 8 temporal patches of 448 px
    assert vision.per_sample(spec, both).lm_tokens == 2 * 256 + 8 * 256


def test_two_frames_are_one_still_image_and_frames_pad_to_temporal_patches():
    # a still image is repeated to temporal_patch_size = 2 frames: at 448 x 448 both processors keep the size
    assert _peak(frames_per_sample=2) == _peak(images_per_sample=1)
    assert _peak(frames_per_sample=3) == _peak(frames_per_sample=4) > _peak(frames_per_sample=2)
    assert _peak(frames_per_sample=8, freeze_vision="yes") < _peak(frames_per_sample=8)


# a vision-language model without a video rule (a text model's frames are ignored and said so, as its images are)
@pytest.mark.parametrize(("model", "family"), [("llava-hf/llava-1.5-7b-hf", "llava"),
                                               ("meta-llama/Llama-3.2-11B-Vision-Instruct", "mllama")])
def test_families_without_a_video_rule_are_refused_naming_the_field(model, family):
    with pytest.raises(ScenarioError, match=f"^frames_per_sample: video frames of model_type '{family}' are not "
                                            "modelled; modelled: llava_next_video, qwen2_5_vl"):
        estimate({"model": model, "frames_per_sample": 4})


def test_cli_and_api_answer_bad_frames_in_one_line():
    from fastapi.testclient import TestClient
    from typer.testing import CliRunner

    from vramfit.cli.main import app
    from vramfit.web import create_app

    out = CliRunner().invoke(app, ["estimate", "--model", QWEN, "--frames-per-sample", "1000"])
    assert out.exit_code == 2 and "frames_per_sample: must be from 0 to 768, got 1000" in out.output
    with TestClient(create_app(), base_url="http://localhost") as client:
        r = client.post("/api/estimate", json={"model": "meta-llama/Llama-3.1-8B", "frames_per_sample": 4})
        bad = client.post("/api/estimate", json={"model": QWEN, "frames_per_sample": 1000})
    # on a text model the frames are ignored and said so, as its images are (property sweep, 2026-12-07)
    assert r.status_code == 200 and "frames_per_sample is ignored: the model has no vision tower, so its sequences " \
        "hold text tokens only." in r.json()["assumptions"]
    assert bad.status_code == 422 and bad.json()["key"] == "frames_per_sample"
