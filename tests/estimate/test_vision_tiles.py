"""Idefics3 / SmolVLM and InternVL towers: the described encoder block and projector hold exactly the
parameters transformers builds on the meta device, and the estimate moves with the image's tiles."""

from __future__ import annotations

import json

import pytest

from vramfit.estimate import estimate
from vramfit.models.hf_config import spec_from_hf_config

TEXT = dict(model_type="llama", hidden_size=512, intermediate_size=1408, num_hidden_layers=2,
            num_attention_heads=8, num_key_value_heads=4, vocab_size=4096)
SMOLVLM = dict(model_type="smolvlm", scale_factor=4, image_token_id=4000, text_config=TEXT,
               vision_config=dict(hidden_size=384, intermediate_size=1536, num_hidden_layers=3,
                                  num_attention_heads=6, image_size=512, patch_size=16))
INTERNVL = dict(model_type="internvl", image_token_id=4000, downsample_ratio=0.5,
                text_config={**TEXT, "model_type": "qwen2"},
                vision_config=dict(hidden_size=384, intermediate_size=1536, num_hidden_layers=3,
                                   num_attention_heads=6, image_size=[448, 448], patch_size=[14, 14],
                                   use_qk_norm=True, norm_type="rms_norm"))


def _meta(config):
    torch = pytest.importorskip("torch")
    from transformers import CONFIG_MAPPING, AutoModelForImageTextToText

    with torch.device("meta"):
        return AutoModelForImageTextToText.from_config(CONFIG_MAPPING[config["model_type"]].from_dict(config))


@pytest.mark.parametrize("config", [SMOLVLM, {**SMOLVLM, "model_type": "idefics3", "scale_factor": 2}, INTERNVL],
                         ids=["smolvlm", "idefics3", "internvl"])
def test_tower_block_and_projector_are_transformers_parameters(config):
    model = _meta(config)
    spec = spec_from_hf_config(config)
    tower = spec.vision
    layers = next(m for n, m in model.named_modules() if n.endswith("encoder.layers") or n.endswith("encoder.layer"))
    assert tower.block.num_hidden_layers == len(layers) == 3
    assert tower.block.block_params == sum(p.numel() for p in layers[0].parameters())
    linears = {n.rsplit(".", 1)[-1]: m for n, m in model.named_modules()
               if ("connector" in n or "multi_modal_projector" in n) and type(m).__name__ == "Linear"}
    assert [x.name for x in tower.projector] == list(linears)
    assert sum(x.params for x in tower.projector) == sum(p.numel() for m in linears.values() for p in m.parameters())
    # the whole tower, connector and projector are vision parameters; the total is transformers'
    vision = sum(p.numel() for n, p in model.named_parameters() if "text_model" not in n and "language_model" not in n
                 and "lm_head" not in n)
    assert spec.vision_params == vision
    assert spec.num_params == sum(p.numel() for p in model.parameters())


# (small image, large image, tower images of each): SmolVLM rescales the longest edge to 4 x 512 px
# and splits it into 512-px sub-images plus the global one (1024 x 512 -> 4 x 2 + 1, 1024 x 1024 ->
# 4 x 4 + 1); InternVL picks 448-px tiles by aspect ratio (400 x 400 -> 1, 1024 x 2048 -> 4 x 2 +
# thumbnail: at equal aspect, more tiles while the image covers half their area)
SIZES = {"smolvlm": ((512, 1024), (1024, 1024), 9, 17), "internvl": ((400, 400), (1024, 2048), 1, 9)}


@pytest.mark.parametrize("config", [SMOLVLM, INTERNVL], ids=["smolvlm", "internvl"])
def test_estimate_moves_with_the_image_tiles(config, tmp_path):
    pytest.importorskip("torch")
    from vramfit.estimate import vision
    from vramfit.scenario import parse_scenario

    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    (sh, sw), (lh, lw), n_small, n_large = SIZES[config["model_type"]]
    base = {"model": str(path), "method": "full", "images_per_sample": 1, "seq_len": 256, "freeze_vision": "no"}
    spec = spec_from_hf_config(config)
    side = (512 // 16) ** 2 if config is SMOLVLM else (448 // 14) ** 2 + 1
    for (h, w), n in (((sh, sw), n_small), ((lh, lw), n_large)):
        img = vision.per_image(spec, parse_scenario({**base, "image_height": h, "image_width": w}))
        assert img.vision_patches == n * side
    small = estimate({**base, "image_height": sh, "image_width": sw})
    large = estimate({**base, "image_height": lh, "image_width": lw})
    frozen = estimate({**base, "image_height": lh, "image_width": lw, "freeze_vision": "yes"})
    assert small.peak.allocated_bytes < large.peak.allocated_bytes
    assert frozen.peak.allocated_bytes < large.peak.allocated_bytes
    assert large.model.num_trainable_params == spec.num_params


MLLAMA_TEXT = dict(num_hidden_layers=4, cross_attention_layers=[1], hidden_size=512, intermediate_size=1024,
                   num_attention_heads=8, num_key_value_heads=2)
MLLAMA_VISION = dict(num_hidden_layers=2, num_global_layers=1, hidden_size=256, intermediate_size=512,
                     attention_heads=4, image_size=560)


def _mllama_config():
    pytest.importorskip("torch")
    from transformers import MllamaConfig

    cfg = MllamaConfig().to_dict()
    cfg["text_config"].update(MLLAMA_TEXT)
    cfg["vision_config"].update(MLLAMA_VISION)
    return cfg


def test_mllama_tower_and_cross_attention_layers_are_transformers(tmp_path):
    """Llama 3.2 Vision: the local and gated global encoder layers, the projector and the language model's
    cross-attention layers are described exactly; an image adds one token to the sequence and the tiles'
    features to every cross-attention layer, so the estimate with images exceeds the text-only one."""
    from transformers.models.mllama.modeling_mllama import MllamaCrossAttentionDecoderLayer

    from vramfit.estimate import vision
    from vramfit.scenario import parse_scenario

    cfg = _mllama_config()
    model = _meta({**cfg, "text_config": {**cfg["text_config"], "model_type": "mllama_text_model"}})
    spec = spec_from_hf_config(cfg)
    vm = model.model.vision_model
    assert spec.vision.block.num_hidden_layers == 3  # 2 local + 1 global
    assert spec.vision.block.block_params == sum(p.numel() for p in vm.transformer.layers[0].parameters())
    assert sum(p.numel() for p in vm.global_transformer.layers[0].parameters()) == spec.vision.block.block_params + 2
    assert spec.vision.gated_layers == len(vm.global_transformer.layers) == 1
    assert spec.vision.projector[0].params == sum(p.numel() for p in model.model.multi_modal_projector.parameters())
    assert spec.vision_params == sum(p.numel() for p in vm.parameters()) + spec.vision.projector[0].params
    assert spec.num_params == sum(p.numel() for p in model.parameters())
    cross = [m for m in model.model.language_model.layers if isinstance(m, MllamaCrossAttentionDecoderLayer)]
    assert spec.vision.cross_attention_layers == len(cross) == 1
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    sc = parse_scenario({"model": str(path), "method": "full", "images_per_sample": 2, "seq_len": 256})
    # 4 tiles of (560 / 14)^2 + CLS = 1,601 patches, padded to 1,608 in the tower; one <|image|> token each
    img = vision.per_image(spec, sc)
    assert (img.vision_patches, img.lm_tokens, img.features) == (4 * 1608, 1, 4 * 1601)
    assert vision.lm_scenario(spec, sc).seq_len == 258
    text = estimate({"model": str(path), "method": "full", "seq_len": 256}).peak.allocated_bytes
    assert estimate({"model": str(path), "method": "full", "seq_len": 256, "images_per_sample": 2}).peak.allocated_bytes > text


def test_a_vlm_without_a_tower_description_refuses_images(tmp_path):
    from vramfit.errors import ScenarioError

    cfg = {**_mllama_config(), "model_type": "mllama"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    import dataclasses

    from vramfit.estimate import vision
    from vramfit.scenario import parse_scenario

    spec = dataclasses.replace(spec_from_hf_config(cfg), vision=None)
    with pytest.raises(ScenarioError, match="^images_per_sample: .*'mllama' are not modelled \\(no vision-tower "
                                            "description\\); modelled: gemma3, idefics3, internvl, llava"):
        vision.per_image(spec, parse_scenario({"model": str(path), "images_per_sample": 1}))


def test_internvl_layer_scale_saves_both_branch_outputs_under_full_training():
    pytest.importorskip("torch")
    import dataclasses

    from vramfit.estimate import vision
    from vramfit.estimate.framework import PROFILES
    from vramfit.scenario import Framework, parse_scenario

    spec = spec_from_hf_config(INTERNVL)
    plain = dataclasses.replace(spec, vision=dataclasses.replace(spec.vision, layer_scale=False))
    sc = parse_scenario({"model": "x", "method": "full", "images_per_sample": 1, "image_height": 448,
                         "image_width": 448, "freeze_vision": "no", "gradient_checkpointing": "none"})
    hf = PROFILES[Framework.HF]
    scaled, base = vision.vision_activations(spec, sc, hf, [])[0], vision.vision_activations(plain, sc, hf, [])[0]
    # 3 layers x (lambda_1, lambda_2) x 1025 patches (1 tile: 32 x 32 + CLS) x 384 x bf16, rounded to 512 B
    assert scaled - base == 3 * 2 * (-(-(2 * 1025 * 384) // 512) * 512)
