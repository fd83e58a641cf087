"""Scenario key quantize_vision: QLoRA's 4-bit base with or without a vision-language model's tower and projector
(profile field qlora_quantizes_vision; estimate/vision.py vision_quantized). transformers + bitsandbytes quantize
every linear but the head; Unsloth's dynamic '-unsloth-bnb-4bit' checkpoints keep the vision layers 16-bit
(vllm-project/vllm#30921, unslothai/unsloth-zoo@17593492); a plain '-bnb-4bit' checkpoint quantizes them."""

from __future__ import annotations

import json
from pathlib import Path

from vramfit import estimate
from vramfit.estimate.framework import profile_for
from vramfit.estimate.vision import vision_quantized
from vramfit.scenario import Framework, parse_scenario

GEMMA = {"model": "google/gemma-3-4b-it", "method": "qlora", "quantize": "nf4-dq", "seq_len": 128,
         "images_per_sample": 1, "image_height": 896, "image_width": 896, "precision": "fp16-true"}
VLM = Path(__file__).resolve().parents[2] / "benchmarks/data/measured/vlm.jsonl"


def _parts(keys: dict) -> dict[str, int]:
    return {c.name: c.bytes for c in estimate(dict(keys)).components}


def test_auto_follows_the_framework_and_its_release():
    def auto(framework: str, version: str | None = None) -> bool:
        keys = {**GEMMA, "framework": framework, **({"framework_version": version} if version else {})}
        return vision_quantized(parse_scenario(keys), profile_for(Framework(framework), version))

    assert auto("hf") is True
    assert auto("unsloth") is False
    assert auto("unsloth", "unsloth-2024.11") is True  # the plain Llama-3.2-11B-Vision-Instruct-bnb-4bit
    unquantized = parse_scenario({**GEMMA, "method": "lora", "quantize": "none", "quantize_vision": "yes"})
    assert vision_quantized(unquantized, profile_for(Framework.HF)) is False


def test_gemma3_tower_and_projector_kept_16_bit_under_unsloth():
    auto, yes = _parts({**GEMMA, "framework": "unsloth"}), _parts({**GEMMA, "framework": "unsloth",
                                                                  "quantize_vision": "yes"})
    # the SigLIP tower's linears in 16 bits: 27 blocks x (4 x 1152^2 + 2 x 1152 x 4304) = 411,070,464 weights
    assert auto["weights"] - yes["weights"] == 822_140_928
    assert yes["quantized_base"] - auto["quantized_base"] == 212_281_344  # their nf4-dq storage
    assert _parts({**GEMMA, "framework": "unsloth", "quantize_vision": "no"}) == auto


def test_hf_unquantized_tower_is_upcast_to_fp32_by_prepare_model_for_kbit_training():
    yes, no = _parts({**GEMMA, "framework": "hf"}), _parts({**GEMMA, "framework": "hf", "quantize_vision": "no"})
    assert no["weights"] - yes["weights"] == 2 * 822_140_928  # peft other.py: every 16-bit parameter to fp32


def test_the_plain_qwen25_vl_checkpoint_size_says_its_tower_is_quantized():
    """UNSLOTH_VLM_NB-1 loads unsloth/Qwen2.5-VL-7B-Instruct-bnb-4bit; its notebook downloads 'model.safetensors
    5.97G': the base with the tower in 4 bits is that size, with the tower in 16 bits 1 GB larger."""
    row = next(r for r in map(json.loads, VLM.read_text().splitlines()) if r["id"] == "UNSLOTH_VLM_NB-1")
    assert row["scenario"]["quantize_vision"] == "yes"
    base = {k: v for k, v in row["scenario"].items() if k != "quantize_vision"}
    four = sum(_parts(row["scenario"])[k] for k in ("weights", "quantized_base"))
    sixteen = sum(_parts(base)[k] for k in ("weights", "quantized_base"))
    assert abs(four / 5.97e9 - 1) < 0.015
    assert sixteen - four > 0.95e9


def test_unsloth_dynamic_checkpoint_rows():
    """UNSLOTH_VLM_NB-2 (Qwen3-VL-8B, 8.213 GiB reserved) within 1 % with the tower 16-bit (was -10.5 % with it
    quantized); UNSLOTH_VLM_NB-3 (Gemma 3 4B, 6.061 GiB) -11 %, the rest being its checkpoint's unlisted 16-bit
    language layers (4.38 GB downloaded, 3.84 GB modelled)."""
    rows = {r["id"]: r for r in map(json.loads, VLM.read_text().splitlines())}
    err = {i: estimate(dict(rows[i]["scenario"])).peak.reserved_bytes / rows[i]["measured"]["bytes"] - 1
           for i in ("UNSLOTH_VLM_NB-2", "UNSLOTH_VLM_NB-3")}
    assert abs(err["UNSLOTH_VLM_NB-2"]) < 0.01
    assert -0.12 < err["UNSLOTH_VLM_NB-3"] < -0.10
    gemma = _parts(rows["UNSLOTH_VLM_NB-3"]["scenario"])
    assert 3.83e9 < gemma["weights"] + gemma["quantized_base"] < 3.85e9


def test_the_assumptions_say_where_the_tower_is_and_why():
    from vramfit.web.translate import untranslated

    def note(keys: dict) -> str:
        return next(a for a in estimate({**GEMMA, **keys}).assumptions if a.startswith("Vision tower"))

    unsloth, hf, forced = note({"framework": "unsloth"}), note({"framework": "hf"}), note({"quantize_vision": "no"})
    assert unsloth.startswith("Vision tower and projector kept 16-bit (quantize_vision=auto: unsloth's dynamic")
    assert "quantized like the language model's linears (quantize_vision=auto: bitsandbytes" in hf
    assert "kept 16-bit (quantize_vision=no)" in forced
    assert untranslated([unsloth, hf, forced]) == []
    text_only = estimate({"model": "meta-llama/Llama-3.2-1B", "method": "qlora"}).assumptions
    assert not any(a.startswith("Vision tower") for a in text_only)
