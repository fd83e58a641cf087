"""A vision-language model's images as the step sees them: how many patches and language-model tokens each
sample's images and video frames make (``vramfit.models.vlm_tokens``), the language model's scenario with those
tokens in its sequence, whether the tower trains, and what the forward holds outside the saved activations (the
pixel values as fed, the tower output the model's output object holds). Split out of
:mod:`vramfit.estimate.vision`, which re-exports these names."""

from __future__ import annotations

import dataclasses

from vramfit.choices import ZERO_FAMILY
from vramfit.errors import ModelError, ScenarioError
from vramfit.estimate.allocator import round_allocation
from vramfit.estimate.framework import FrameworkProfile
from vramfit.models import hf_vlm
from vramfit.models.spec import ModelSpec
from vramfit.models.vlm_tokens import VIDEO_SUPPORTED, ImageTokens, has_video_rule, image_tokens, video_tokens
from vramfit.scenario import FreezeVision, Method, Scenario


def check_image_framework(spec: ModelSpec, sc: Scenario, key: str) -> None:
    """Images only where the framework's recipes feed this checkpoint's images through its tower (profile
    ``image_model_types``), else one ScenarioError naming the frameworks that do."""
    from vramfit.estimate.framework import profile_for, scenario_profile
    from vramfit.scenario import Framework

    checkpoint = spec.vision.image_config.get("model_type") or spec.model_type  # gemma3, not its text model's type

    def feeds(profile: FrameworkProfile) -> bool:
        return profile.image_model_types is None or checkpoint in profile.image_model_types

    profile = scenario_profile(sc)
    if feeds(profile):
        return
    others = ", ".join(f.value for f in Framework if feeds(profile_for(f)))
    types = profile.image_model_types
    own = f"only {', '.join(types)} checkpoints" if types else "no vision-language model"
    raise ScenarioError(key, f"{sc.framework.value} ({profile.version}) trains {own}, no images of "
                        f"model_type {checkpoint!r}; frameworks that do: {others}", valid=("0",))


def per_image(spec: ModelSpec, sc: Scenario) -> ImageTokens | None:
    """Patches and language-model tokens of one of the scenario's images; None without images."""
    if not sc.images_per_sample:
        return None
    if spec.vision is None:
        if spec.vision_params:  # a vision-language checkpoint whose tower vramfit does not describe
            raise ScenarioError("images_per_sample", f"images of model_type {spec.model_type!r} are not modelled "
                                f"(no vision-tower description); modelled: {', '.join(TOWER_FAMILIES)}", valid=("0",))
        return None  # a text model: the images are ignored (and said so), whatever the framework
    check_image_framework(spec, sc, "images_per_sample")
    return image_tokens(spec.vision.image_config, sc.image_height, sc.image_width)


# the families whose tower is described (models/hf_vlm.py; Gemma 3's is read in hf_config.py)
TOWER_FAMILIES = tuple(sorted({*hf_vlm.BUILDERS, *hf_vlm.TOWERS, "gemma3"}))


def per_video(spec: ModelSpec, sc: Scenario) -> ImageTokens | None:
    """Patches and language-model tokens of the scenario's video frames; None without frames."""
    if not sc.frames_per_sample:
        return None
    if spec.vision is None and not spec.vision_params:
        return None  # a text model: the frames are ignored (and said so), as its images are (property sweep, 2026-12-07)
    if spec.vision is not None:
        check_image_framework(spec, sc, "frames_per_sample")
    refused = (f"video frames of model_type {spec.model_type!r} are not modelled; "
               f"modelled: {', '.join(sorted({*VIDEO_SUPPORTED} & {*TOWER_FAMILIES}))}")
    if spec.vision is None or not has_video_rule(spec.vision.image_config):
        raise ScenarioError("frames_per_sample", refused, valid=("0",))
    try:
        return video_tokens(spec.vision.image_config, sc.frames_per_sample, sc.image_height, sc.image_width)
    except ModelError as exc:  # a video the processor refuses (fewer frames than a temporal patch ...)
        raise ScenarioError("frames_per_sample", str(exc).removeprefix("model: "), valid=("0",)) from None


def per_sample(spec: ModelSpec, sc: Scenario) -> ImageTokens | None:
    """Patches, language-model tokens and projector rows of one sequence's images and video together."""
    img, video = per_image(spec, sc), per_video(spec, sc)
    if img is None and video is None:
        return None
    parts = [(sc.images_per_sample, img), (1, video)]
    return ImageTokens(sum(n * x.vision_patches for n, x in parts if x), sum(n * x.lm_tokens for n, x in parts if x),
                       sum(n * x.features for n, x in parts if x), sum(n * x.pixels for n, x in parts if x))


def tower_segments(spec: ModelSpec, sc: Scenario) -> tuple[tuple[int, int], ...]:
    """(patches per attention segment, segments) of one sequence's images and of its video
    (``ImageTokens.segment``: a tile, a sub-image, a video's temporal patch, or the whole image)."""
    out = []
    for count, tok in ((sc.images_per_sample, per_image(spec, sc)), (1, per_video(spec, sc))):
        if tok is not None:
            out.append((tok.segment_len, count * tok.vision_patches // tok.segment_len))
    return tuple(out)


def attended_patches(spec: ModelSpec, sc: Scenario) -> int:
    """Patches each of one sequence's tower patches attends to, summed over the patches and the tower's layers (the
    attention's score elements per head): its segment (:func:`tower_segments`), except in windowed layers (Qwen2.5-VL:
    the layers outside ``fullatt_block_indexes`` attend within windows of ``window_size`` pixels,
    (window_size / patch_size)^2 patches: transformers v5.24.0 models/qwen2_5_vl/modeling_qwen2_5_vl.py
    Qwen2_5_VisionTransformerPretrainedModel.get_window_index and forward, ``cu_window_seqlens``)."""
    layers = spec.vision.block.num_hidden_layers
    vc = spec.vision.image_config.get("vision_config") or {}
    full, window = vc.get("fullatt_block_indexes"), vc.get("window_size")
    windowed = isinstance(full, list) and window and vc.get("patch_size")
    total = 0
    for seg, n in tower_segments(spec, sc):
        if windowed:
            win = min(seg, (int(window) // int(vc["patch_size"])) ** 2)
            total += n * seg * (seg * len(full) + win * max(0, layers - len(full)))
        else:
            total += n * seg * seg * layers
    return total


def segment_scores(spec: ModelSpec, sc: Scenario) -> int:
    """One sequence's score elements per head in a full-attention layer: each segment's length squared."""
    return sum(n * seg * seg for seg, n in tower_segments(spec, sc))


def attention_scenario(spec: ModelSpec, sc: Scenario) -> Scenario:
    """The micro-batch's tower patches as a full-attention layer attends over them: ``micro_batch_size`` segments of
    ``seq_len`` patches (the longest segment, where images and video frames differ: the others counted at its
    length, their patches in ``micro_batch_size`` rounded down)."""
    segs = tower_segments(spec, sc)
    length = max(seg for seg, _ in segs)
    patches = sc.micro_batch_size * sum(seg * n for seg, n in segs)
    return dataclasses.replace(sc, micro_batch_size=max(1, patches // length), seq_len=length)


def lm_scenario(spec: ModelSpec, sc: Scenario) -> Scenario:
    """The scenario as the language model sees it: its sequence includes the image and video tokens."""
    pix = per_sample(spec, sc)
    if pix is None:
        return sc
    return dataclasses.replace(sc, seq_len=sc.seq_len + pix.lm_tokens)


def image_tokens_note(spec: ModelSpec, sc: Scenario) -> list[str]:
    """What one sequence's images and video add to the language model's sequence, which ``seq_len`` does not count
    (:func:`lm_scenario`): said, so the figures' token counts can be followed (a drive, 2026-12-07: the header and
    the reserved line quoted the text length alone)."""
    pix = per_sample(spec, sc)
    if pix is None:
        return []
    what = " and ".join(x for x in (f"{sc.images_per_sample} image(s) of {sc.image_height} x {sc.image_width}"
                                    if sc.images_per_sample else "",
                                    f"{sc.frames_per_sample} video frame(s)" if sc.frames_per_sample else "") if x)
    return [f"Vision inputs: {what} per sequence make {pix.lm_tokens:,} language-model tokens and {pix.vision_patches:,} "
            f"tower patches, so the language model runs {sc.seq_len:,} + {pix.lm_tokens:,} = "
            f"{sc.seq_len + pix.lm_tokens:,} tokens per sequence (seq_len counts the text only)."]


def trains_vision(sc: Scenario, profile: FrameworkProfile) -> bool:
    """Whether the tower and projector train: ``freeze_vision``, ``auto`` = the framework's."""
    if sc.freeze_vision is FreezeVision.AUTO:
        return not profile.freezes_vision
    return sc.freeze_vision is FreezeVision.NO


def pixel_input_bytes(sc: Scenario, profile: FrameworkProfile) -> int:
    """Bytes per pixel value as the model receives them. The image processors return float32 (transformers v5.24.0
    image_processing_backends.py ``rescale_and_normalize``: ``images.to(torch.float32)``; the PIL backend's numpy
    arrays likewise) and ``Trainer._prepare_input`` moves them to the GPU uncast, except under DeepSpeed, where it
    casts floating inputs to the engine's dtype (trainer.py: ``hf_ds_config.dtype()``), and where the framework's
    collator casts them to the model's dtype (``FrameworkProfile.pixels_in_model_dtype``). Each model then casts
    them to its tower's dtype (CLIP/SigLIP ``patch_embedding(pixel_values.to(dtype=target_dtype))``, Qwen-VL
    ``pixel_values.type(self.visual.dtype)``, Idefics3 / InternVL ``pixel_values.to(dtype=self.dtype)``): a copy
    in that dtype, freed after the patch embedding unless its trained weight saves it (:func:`_tower_activations`)."""
    cast = profile.pixels_in_model_dtype or sc.parallelism in ZERO_FAMILY
    return sc.precision.compute_bytes if cast else 4


def forward_only_bytes(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """What lives until the forward returns only: the batch's pixel values as the trainer feeds them
    (:func:`pixel_input_bytes`; the trainer drops its inputs before backward: transformers Trainer.training_step
    ``del inputs``), unless they are in the tower's dtype already and the trained patch embedding saves them (counted
    there), with Idefics3's byte-per-pixel mask; the tower's output held by the model's output object
    (:func:`_held_tower_output`)."""
    pix = per_sample(spec, sc)
    if pix is None:
        return 0
    B, c, fed = sc.micro_batch_size, sc.precision.compute_bytes, pixel_input_bytes(sc, profile)
    saved = (fed == c and sc.method is Method.FULL and trains_vision(sc, profile)
             and not spec.vision.pixels_copied)
    held = 0 if saved else round_allocation(fed * B * pix.pixels)
    if spec.vision.pixels_copied:
        held += round_allocation(B * pix.pixels // 3)
    if spec.vision.post_norm_held:  # the normed tower output and the projector's output (the features' list)
        held += round_allocation(c * B * pix.vision_patches * spec.vision.block.hidden_size)
        held += round_allocation(c * B * pix.features * spec.hidden_size)
    return held + _held_tower_output(spec, sc, profile)


def _held_tower_output(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """The tower's output the model's output object holds through the forward (``VisionTower.output_held``),
    where no saved tensor is that same tensor: only the projector's weight gradient saves it as it is, outside
    autocast (full fine-tuning of a trained tower); LoRA casts it to the adapter's dtype (peft v0.21.2
    tuners/lora/layer.py Linear.forward). Rows: every tile's unpadded patches; width: the projector's input."""
    if spec.vision is not None and spec.vision.deepstack_mergers:
        return _deepstack_outputs_held(spec, sc, profile)
    img = per_image(spec, sc)
    if img is None or not spec.vision.output_held or not spec.vision.projector:
        return 0
    from vramfit.estimate import activations as act

    dt = act.dtypes_for(sc, profile)
    if sc.method is Method.FULL and trains_vision(sc, profile) and not dt.autocast:
        return 0
    rows = sc.micro_batch_size * sc.images_per_sample * img.features
    return round_allocation(dt.residual * rows * spec.vision.projector[0].in_features)


def _deepstack_outputs_held(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """Qwen3-VL: the model's output object holds the tower's output until the loss is taken
    (transformers v5.24.0 models/qwen3_vl/modeling_qwen3_vl.py Qwen3VLForConditionalGeneration.forward returns
    ``image_outputs`` / ``video_outputs``, BaseModelOutputWithDeepstackFeatures): every merger's output, which
    ``masked_scatter`` and the DeepStack add read without saving, and the last block's output, which only a
    trained merger's LayerNorm saves (beside what ``projector_kept`` counts); in the residual stream's dtype."""
    pix = per_sample(spec, sc)
    if pix is None:
        return 0
    from vramfit.estimate import activations as act

    r, tower = act.dtypes_for(sc, profile).residual, spec.vision
    rows, patches = sc.micro_batch_size * pix.features, sc.micro_batch_size * pix.vision_patches
    merged = tower.mergers * round_allocation(r * rows * tower.projector[-1].out_features)
    return merged + round_allocation(r * patches * tower.block.hidden_size)
