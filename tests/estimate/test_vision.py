"""The vision tower in the estimate: image tokens lengthen the language model's sequence, a frozen
tower keeps nothing, the layers past LLaVA's feature layer get no gradient, PEFT's all-linear
adapters on the tower and projector counted exactly (PEFT on the meta device)."""

from __future__ import annotations

import warnings

import pytest

from vramfit.estimate import estimate, vision
from vramfit.estimate.framework import PROFILES
from vramfit.models import resolve_model
from vramfit.models.hf_config import spec_from_hf_config
from vramfit.scenario import Framework, parse_scenario

LLAVA = dict(
    model_type="llava", image_token_id=4000,
    text_config=dict(model_type="llama", hidden_size=1024, intermediate_size=2816, num_hidden_layers=3,
                     num_attention_heads=16, num_key_value_heads=4, vocab_size=8192),
    vision_config=dict(model_type="clip_vision_model", hidden_size=1024, intermediate_size=4096,
                       num_hidden_layers=4, num_attention_heads=16, image_size=336, patch_size=14),
)
CLIP_LAYER = 2 * 2 * 1024 + 4 * (1024 * 1024 + 1024) + 2 * 1024 * 4096 + 4096 + 1024


def test_image_tokens_join_the_language_model_sequence():
    spec = resolve_model("Qwen/Qwen2.5-VL-7B-Instruct").spec
    sc = parse_scenario({"model": "Qwen/Qwen2.5-VL-7B-Instruct", "seq_len": 1024, "images_per_sample": 2,
                         "image_height": 448, "image_width": 448})
    assert vision.lm_scenario(spec, sc).seq_len == 1024 + 2 * 256  # 32 x 32 patches, merged 2 x 2


def test_a_frozen_tower_keeps_nothing_and_trains_nothing():
    base = {"model": "Qwen/Qwen2.5-VL-3B-Instruct", "method": "lora", "images_per_sample": 1, "seq_len": 512}
    trained, frozen = estimate(base), estimate({**base, "freeze_vision": "yes"})
    text_only = estimate({**base, "images_per_sample": 0, "seq_len": 512 + 256})
    assert frozen.peak.allocated_bytes < trained.peak.allocated_bytes
    assert frozen.model.num_trainable_params == text_only.model.num_trainable_params
    spec = resolve_model("Qwen/Qwen2.5-VL-3B-Instruct").spec
    sc = parse_scenario({**base, "freeze_vision": "yes"})
    assert vision.vision_activations(spec, sc, PROFILES[Framework.HF], []) == (0, 0)


def test_layers_past_the_feature_layer_get_no_gradient(tmp_path):
    spec = spec_from_hf_config(LLAVA)
    assert spec.vision.unused_layers == 1  # vision_feature_layer = -2
    assert spec.vision.unused_params == CLIP_LAYER + 2 * 1024  # and CLIP's post_layernorm
    path = tmp_path / "config.json"
    path.write_text(__import__("json").dumps(LLAVA))
    full = estimate({"model": str(path), "method": "full", "images_per_sample": 1})
    assert full.model.num_trainable_params == spec.num_params - spec.vision.unused_params


def test_llava_counts_and_adapters_are_transformers_and_peft_s(tmp_path):
    torch = pytest.importorskip("torch")
    from peft import LoraConfig, get_peft_model
    from transformers import CONFIG_MAPPING, AutoModelForImageTextToText

    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        model = AutoModelForImageTextToText.from_config(CONFIG_MAPPING["llava"].from_dict(LLAVA))
        total = sum(p.numel() for p in model.parameters())
        model = get_peft_model(model, LoraConfig(r=16, target_modules="all-linear"))
    adapters = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert spec_from_hf_config(LLAVA).num_params == total
    path = tmp_path / "config.json"
    path.write_text(__import__("json").dumps(LLAVA))
    est = estimate({"model": str(path), "method": "lora", "lora_rank": 16, "images_per_sample": 1})
    assert est.model.num_trainable_params == adapters


def test_qwen2_5_vl_adapters_are_peft_s():
    """all-linear on Qwen2.5-VL: the language model, the 32 tower blocks' qkv/proj/gate/up/down and
    the merger's mlp.0 / mlp.2 (41,363,456 at r=16, PEFT on the meta device)."""
    torch = pytest.importorskip("torch")
    from peft import LoraConfig, get_peft_model
    from transformers import CONFIG_MAPPING, AutoModelForImageTextToText

    cfg = dict(resolve_model("Qwen/Qwen2.5-VL-3B-Instruct").config)
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        model = AutoModelForImageTextToText.from_config(CONFIG_MAPPING["qwen2_5_vl"].from_dict(cfg))
        model = get_peft_model(model, LoraConfig(r=16, target_modules="all-linear"))
    peft_count = sum(p.numel() for p in model.parameters() if p.requires_grad)
    est = estimate({"model": "Qwen/Qwen2.5-VL-3B-Instruct", "method": "lora", "images_per_sample": 1})
    assert est.model.num_trainable_params == peft_count == 41_363_456


def test_published_vlm_rows_lie_between_allocated_and_device():
    """benchmarks/data/measured/vlm.jsonl: ms-swift's Qwen2.5-VL-7B LoRA examples (counter not
    stated): each figure lies between the estimate's allocated and device peaks (19.65 <= 20.00 <=
    21.46 GiB; 31.17 <= 33.53 <= 34.87 GiB)."""
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks/data/measured/vlm.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    rows = [r for r in rows if r["source_id"] == "MSSWIFT_VLM"]  # the Unsloth notebook rows are reserved peaks
    assert len(rows) == 3
    for row in rows:
        peak = estimate(row["scenario"]).peak
        assert row["measured"]["metric"] == "unknown" and row["source"]
        if row["id"] == "MSSWIFT_VLM-3":  # ms-swift 3.0 Qwen2-VL on OK-VQA: 22 GiB against 18.1 GiB device (README: still off)
            assert peak.device_bytes < 0.85 * row["measured"]["bytes"]
            continue
        assert peak.allocated_bytes <= row["measured"]["bytes"] <= peak.device_bytes, row["id"]


def test_llava_next_counts_exactly_and_its_anyres_tokens_join_the_sequence():
    torch = pytest.importorskip("torch")
    from transformers import CONFIG_MAPPING, AutoModelForImageTextToText

    cfg = {**LLAVA, "model_type": "llava_next"}
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        model = AutoModelForImageTextToText.from_config(CONFIG_MAPPING["llava_next"].from_dict(cfg))
    spec = spec_from_hf_config(cfg)
    assert spec.num_params == sum(p.numel() for p in model.parameters())  # + image_newline
    sc = parse_scenario({"params": "1B", "seq_len": 512, "images_per_sample": 1, "image_height": 1080,
                         "image_width": 1920})
    # best pinpoint 672 x 672: 24 x 24 base + 48 x 48 tiles less 10 padded rows on each side + 28 newlines
    assert vision.lm_scenario(spec, sc).seq_len == 512 + 24 * 24 + 28 * 48 + 28


def test_unsloth_llama_vision_notebook_row_needs_its_release():
    """UNSLOTH_VLM_NB-4 (Llama-3.2-11B-Vision QLoRA, Unsloth 2024.11.9 on transformers 4.46.2, 10.287 GiB reserved):
    with that release's checkpointed vision encoder the estimate is within 6 % (10.84 GiB); read as today's
    un-checkpointed encoder it is more than twice the measurement."""
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks/data/measured/vlm.jsonl"
    row = next(r for r in map(json.loads, path.read_text().splitlines()) if r["id"] == "UNSLOTH_VLM_NB-4")
    assert row["scenario"]["framework_version"] == "unsloth-2024.11"
    measured = row["measured"]["bytes"]
    assert abs(estimate(row["scenario"]).peak.reserved_bytes / measured - 1) < 0.06
    today = {k: v for k, v in row["scenario"].items() if k != "framework_version"}
    assert estimate(today).peak.reserved_bytes > 2 * measured
