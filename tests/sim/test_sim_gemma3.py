"""Gemma 3 against the simulator: the text model (gemma3_text) and the multimodal gemma3 config with a
text-only batch (its SigLIP tower built and frozen), each × full/LoRA/QLoRA, within 3 %.

Real shapes (262k vocabulary, 4 norms per block, q/k norms, query_pre_attn_scalar) cut to 6 decoder layers:
five sliding-window layers and one full-attention layer (sliding_window_pattern 6), with sequences longer
than the window so the sliding layers build their mask. Fixed in the estimator after this grid found it
(kept as the record): a masked sliding layer makes transformers repeat k/v to every query head before SDPA
(no enable_gqa with a mask), and the kernel saves the expanded copies (gemma-3-1b QLoRA at seq 1024:
-0.9 % at 6 layers, -2.3 % at full depth before). What remains is allocator slack (the trace's
``allocator_slack``: blocks not split), not a tensor.

With images the batch carries the processor's ``token_type_ids`` (as TRL's and Unsloth's collators pass them on), and
transformers v5.24.0 masks every layer with the image tokens' bidirectional mask (estimate/attention.py
image_mask_applies): each layer's 16-bit bias and k/v repeated to every head, modelled and checked here.
"""

from __future__ import annotations

import pytest
from simconfigs import catalog_config

from vramfit.estimate import estimate
from vramfit.sim import simulate

LAYERS = 6


def _text(model: str) -> dict:
    return {**catalog_config(model), "num_hidden_layers": LAYERS}


def _multimodal(model: str) -> dict:
    """The catalog's gemma3 config (its SigLIP vision_config included), the language model cut."""
    cfg = catalog_config(model)
    return {**cfg, "text_config": {**cfg["text_config"], "num_hidden_layers": LAYERS}}


CONFIGS = {
    "gemma3_text": (lambda: _text("google/gemma-3-1b-pt"), 1024),  # window 512
    "gemma3": (lambda: _multimodal("google/gemma-3-4b-it"), 2048),  # window 1024
}


@pytest.mark.parametrize("method", ["full", "lora", "qlora"])
@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_gemma3_estimator_agrees_with_simulator(config_file, family, method):
    make, seq = CONFIGS[family]
    sc = {"model": config_file(make()), "method": method, "seq_len": seq, "precision": "bf16-true"}
    sim = simulate(sc, layers=LAYERS).result.peak.allocated_bytes
    est = estimate(sc).peak.allocated_bytes
    assert abs(est - sim) / sim <= 0.03, (est, sim)


def test_masked_sliding_layers_keep_k_and_v_repeated_to_every_head(config_file):
    """gemma-3-1b (4 query heads, 1 k/v head, head_dim 256): 5 of 6 layers are sliding; past the window each
    keeps k and v at 4 heads, 3 more heads each, in bf16; a sequence as long as the window is masked too
    (attention.window_masked: transformers skips the mask only below it); a shorter one is not."""
    from vramfit.estimate.attention import sliding_layers_kv_repeat
    from vramfit.estimate.framework import PROFILES
    from vramfit.models import spec_from_hf_config
    from vramfit.scenario import parse_scenario

    hf = next(p for p in (PROFILES.values() if isinstance(PROFILES, dict) else PROFILES)
              if p.runs_transformers_modeling)
    spec = spec_from_hf_config(_text("google/gemma-3-1b-pt"))

    def repeat(seq: int) -> int:
        return sliding_layers_kv_repeat(spec, parse_scenario({"model": "generic:1B", "seq_len": seq}), hf)

    assert repeat(1024) == 5 * 2 * 2 * 1024 * 3 * 256
    assert repeat(512) == 5 * 2 * 2 * 512 * 3 * 256
    assert repeat(511) == 0


def _with_tower(layers: int = 3) -> dict:
    """Gemma 3 4B cut to 2 decoder layers and ``layers`` SigLIP layers (the tower's real width and 4096 patches)."""
    cfg = catalog_config("google/gemma-3-4b-it")
    return {**cfg, "text_config": {**cfg["text_config"], "num_hidden_layers": 2},
            "vision_config": {**cfg["vision_config"], "num_hidden_layers": layers}}


@pytest.mark.parametrize(("method", "gc"), [("lora", "none"), ("qlora", "full")])
def test_gemma3_with_an_image_and_a_trained_tower_agrees(config_file, method, gc):
    """One 896 x 896 image per sample: the SigLIP tower over 4096 patches with LoRA on its linears
    (freeze_vision no), the projector's 4 x 4 average pool to 256 tokens, those tokens in the language model's
    sequence; within 1 % of the simulator (-0.49 % and -0.86 % when written)."""
    sc = {"model": config_file(_with_tower()), "method": method, "seq_len": 128, "precision": "bf16-true",
          "images_per_sample": 1, "freeze_vision": "no", "gradient_checkpointing": gc}
    sim = simulate(sc, layers=2).result.peak.allocated_bytes
    est = estimate(sc).peak.allocated_bytes
    assert abs(est - sim) / sim <= 0.01, (est, sim)


@pytest.mark.parametrize(("gc", "seq"), [("none", 512), ("full", 512), ("none", 1792)])
def test_gemma3_image_mask_on_every_layer_agrees(config_file, gc, seq):
    """The batch carries the processor's token_type_ids (sim/images.py), so transformers masks every one of the
    6 layers, the full-attention one and, below the 1024-token window (512 + 256 image tokens), the sliding ones
    too (attention.image_mask_applies). Within 1 % of the simulator (-0.38 %, -0.46 %, -0.19 % when written;
    -0.78 %, -0.49 %, -0.33 % before the estimator knew the mask)."""
    cfg = catalog_config("google/gemma-3-4b-it")
    cfg = {**cfg, "text_config": {**cfg["text_config"], "num_hidden_layers": LAYERS},
           "vision_config": {**cfg["vision_config"], "num_hidden_layers": 1}}
    sc = {"model": config_file(cfg), "method": "lora", "seq_len": seq, "precision": "bf16-true",
          "images_per_sample": 1, "freeze_vision": "no", "gradient_checkpointing": gc}
    sim = simulate(sc, layers=LAYERS).result.peak.allocated_bytes
    est = estimate(sc).peak.allocated_bytes
    assert abs(est - sim) / sim <= 0.01, (est, sim)


def test_image_mask_bias_and_kv_repeat_on_every_layer():
    """Gemma 3 4B cut to 6 layers (8 query heads, 4 k/v heads, head_dim 256), one image (256 tokens) after 512 text
    tokens: S = 768, under the 1024 window. With the image every layer keeps a 16-bit [B, 1, S, S] bias and k and v
    repeated to 8 heads (the simulator's trace: six ``zeros_like`` (1, 1, 768, 768) and twelve (1, 4, 2, 768, 256)
    ``clone`` more, twelve un-repeated k/v fewer); under checkpointing the two boolean (B, 1, S, S) masks (full and
    sliding) are held instead. Text-only, or under transformers 4.52's one model mask, none of it."""
    from vramfit.estimate.attention import masked_layers, sliding_layers_kv_repeat
    from vramfit.estimate.forward_extras import sliding_window_masks
    from vramfit.estimate.framework import PROFILES, profile_for
    from vramfit.estimate.vision import lm_scenario
    from vramfit.models import spec_from_hf_config
    from vramfit.scenario import Framework, parse_scenario

    spec = spec_from_hf_config(_multimodal("google/gemma-3-4b-it"))
    hf, old = PROFILES[Framework.HF], profile_for(Framework.HF, "transformers-4.52")

    def lm(images: int, gc: str = "none", mb: int = 1):
        raw = {"model": "generic:1B", "seq_len": 512, "images_per_sample": images, "gradient_checkpointing": gc,
               "micro_batch_size": mb}
        return lm_scenario(spec, parse_scenario(raw))

    S = 768
    assert lm(1).seq_len == S and masked_layers(spec, lm(1), hf) == LAYERS
    assert sliding_window_masks(spec, lm(1, mb=2), hf) == LAYERS * 2 * 2 * S * S
    assert sliding_layers_kv_repeat(spec, lm(1, mb=2), hf) == LAYERS * 2 * (2 * 2 * S * 8 * 256 - 2 * 2 * S * 4 * 256)
    assert sliding_window_masks(spec, lm(1, "full", 2), hf) == 2 * 2 * S * S
    assert sliding_layers_kv_repeat(spec, lm(1, "full"), hf) == 0  # only the recomputed layer's
    text_only = lm(0)
    assert masked_layers(spec, text_only, hf) == 0 and sliding_window_masks(spec, text_only, hf) == 0
    assert masked_layers(spec, lm(1), old) == 0


def test_simulated_batch_marks_the_image_tokens():
    """The simulator's Gemma 3 batch: token_type_ids 1 at the 256 image-token positions of each sequence, 0 at
    the text (processing_gemma3.py marks the image_token_id positions)."""
    import torch

    from vramfit.scenario import parse_scenario
    from vramfit.sim import images

    cfg = _with_tower(1)
    sc = parse_scenario({"model": "generic:1B", "seq_len": 64, "images_per_sample": 1, "micro_batch_size": 2})
    inputs = images.image_inputs(cfg, sc)
    ids, _, kw = images.batch(inputs, 1024, 2, 64, torch.float32, "cpu")
    types = kw["token_type_ids"]
    assert types.shape == ids.shape and int(types.sum()) == 2 * 256
    assert bool((ids[types == 1] == cfg["image_token_index"]).all())


def test_transformers_4_gemma3_masks_every_sliding_layer_copy():
    """transformers v4.52.4 (profile transformers-4.52, no masking_utils): Gemma 3 always builds the model's float
    [B, 1, S, S] mask, even under the window (512 for gemma-3-1b, 256 tokens here), and each of the 5 sliding layers
    of 6 hands SDPA its own masked copy, saved by the kernel: 6 bf16 masks without checkpointing; under checkpointing
    the model mask (every checkpointed layer's argument) and the recomputed sliding layer's copy. transformers 5
    skips the mask under the window (attention.window_masked): none."""
    from vramfit.estimate.forward_extras import sliding_window_masks, sliding_window_recompute
    from vramfit.estimate.framework import PROFILES, profile_for
    from vramfit.models import spec_from_hf_config
    from vramfit.scenario import Framework, parse_scenario

    spec = spec_from_hf_config(_text("google/gemma-3-1b-pt"))
    v4, v5 = profile_for(Framework.HF, "transformers-4.52"), PROFILES[Framework.HF]
    assert spec.sliding_mask_copies_v4 and not v4.masks_per_layer_type

    def sc(gc: str):
        return parse_scenario({"model": "generic:1B", "seq_len": 256, "micro_batch_size": 2,
                               "precision": "bf16-true", "gradient_checkpointing": gc})

    one = 2 * 2 * 256 * 256
    assert sliding_window_masks(spec, sc("none"), v4) == (1 + 5) * one
    assert sliding_window_masks(spec, sc("full"), v4) == one
    assert sliding_window_recompute(spec, sc("full"), v4) == one
    assert sliding_window_masks(spec, sc("none"), v5) == 0 and sliding_window_recompute(spec, sc("full"), v5) == 0


def test_frozen_tower_gets_no_adapter_in_the_simulator():
    """freeze_vision yes: the simulator's LoRA reaches the language model's linears only (sim/build.py
    _language_model_targets, through get_decoder()), none of the tower's; 7 per decoder layer (q, k, v, o, gate, up,
    down) x 2 layers; freeze_vision no reaches the tower's 6 per layer (q, k, v, out, fc1, fc2) too."""
    from vramfit.scenario import parse_scenario
    from vramfit.sim.build import build_model

    def adapted(freeze: str) -> list[str]:
        sc = parse_scenario({"model": "generic:1B", "method": "lora", "seq_len": 64, "images_per_sample": 1,
                             "freeze_vision": freeze})
        model = build_model(_with_tower(1), sc, layers=2).model
        return [n for n, _ in model.named_modules() if n.endswith(".lora_A")]

    frozen, trained = adapted("yes"), adapted("no")
    assert len(frozen) == 2 * 7 and all(".language_model." in n for n in frozen)
    assert len(trained) == 2 * 7 + 6


@pytest.mark.parametrize("gc", ["none", "full"])
def test_gemma3_frozen_tower_agrees(config_file, gc):
    """The tower frozen, LoRA on the language model, one image; under checkpointing transformers v5.24.0 hooks the
    tower's patch embedding too (enable_input_require_grads), so the frozen tower's checkpointed layers keep their
    inputs (vision.frozen_tower_recorded). Within 1 % of the simulator (-0.08 %, -0.46 % when written; under
    checkpointing -1.18 % before the frozen tower's inputs were counted)."""
    cfg = catalog_config("google/gemma-3-4b-it")
    cfg = {**cfg, "text_config": {**cfg["text_config"], "num_hidden_layers": LAYERS},
           "vision_config": {**cfg["vision_config"], "num_hidden_layers": 3}}
    sc = {"model": config_file(cfg), "method": "lora", "seq_len": 512, "precision": "bf16-true",
          "images_per_sample": 1, "freeze_vision": "yes", "gradient_checkpointing": gc}
    sim = simulate(sc, layers=LAYERS).result.peak.allocated_bytes
    est = estimate(sc).peak.allocated_bytes
    assert abs(est - sim) / sim <= 0.01, (est, sim)


def test_frozen_tower_keeps_its_layer_inputs_only_where_autograd_records_it():
    """Gemma 3 4B's SigLIP tower (27 layers, width 1152) over one image's 4096 patches, frozen: under checkpointing
    with LoRA (transformers 5) each layer keeps its bf16 input, 27 x 4096 x 1152 x 2 bytes; none without
    checkpointing, under full fine-tuning, or with transformers 4.52 (only the language model's embeddings hooked)."""
    from vramfit.estimate.framework import PROFILES, profile_for
    from vramfit.estimate.vision import frozen_tower_recorded, tower_kept
    from vramfit.models import spec_from_hf_config
    from vramfit.scenario import Framework, parse_scenario

    spec = spec_from_hf_config(catalog_config("google/gemma-3-4b-it"))
    hf, old = PROFILES[Framework.HF], profile_for(Framework.HF, "transformers-4.52")

    def sc(gc: str = "full", method: str = "lora"):
        return parse_scenario({"model": "generic:1B", "method": method, "seq_len": 128, "precision": "bf16-true",
                               "images_per_sample": 1, "freeze_vision": "yes", "gradient_checkpointing": gc})

    assert frozen_tower_recorded(spec, sc(), hf)
    blocks, head, recompute = tower_kept(spec, sc(), hf, [])
    assert blocks == 27 * 4096 * 1152 * 2 and head > 0 and recompute > 0
    assert not frozen_tower_recorded(spec, sc(), old) and tower_kept(spec, sc(), old, []) == (0, 0, 0)
    assert tower_kept(spec, sc("none"), hf, []) == (0, 0, 0)
    assert tower_kept(spec, sc(method="full"), hf, []) == (0, 0, 0)
