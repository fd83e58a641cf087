"""Image inputs for a vision-language model's simulated step (``images_per_sample`` > 0).

Each sequence holds ``images_per_sample`` runs of the model's image placeholder token (as many as
its processor puts there: ``vramfit.models.vlm_tokens``) after ``seq_len`` text tokens' worth of
ids, and the batch carries the pixel values the processor would produce: for LLaVA and Gemma 3 a
fixed (images, 3, image_size, image_size) tensor (the processors resize/crop every image to the
tower's size: transformers v5.24.0 models/llava/image_processing_llava.py crop_size,
models/gemma3/image_processing_gemma3.py size). Image positions are masked out of the labels
(-100), as TRL's vision collators do.

LLaVA-NeXT ("anyres"): every image is its base image and the crops of the best ``image_grid_pinpoints`` grid
(vlm_tokens), a (images, crops, 3, image_size, image_size) tensor, with ``image_sizes`` (images, 2) made a fake-tensor
constant: LlavaNextModel.get_image_features and pack_image_features read its values (``image_size_to_num_patches``,
``get_anyres_image_grid_shape``, ``unpad_image``: ``tolist``; transformers v5.24.0 models/llava_next/modeling_llava_next.py),
so the unpadded crop grid and the ``image_newline`` column are the real model's.

InternVL: every image is its tiles (dynamic 448-px tiles plus a thumbnail, vlm_tokens), a fixed
(tiles, 3, 448, 448) tensor; each tile's 256 features fill image-token positions, the start/end image
tokens around them are text (transformers v5.24.0 models/internvl/processing_internvl.py).

Idefics3 / SmolVLM: every image is its sub-images plus the global image (vlm_tokens), a
(batch, tiles, 3, size, size) tensor and a (batch, tiles, size, size) ``pixel_attention_mask``;
``get_image_features`` reads their values (padding images dropped by boolean indexing, the per-row
image counts by ``tolist``, the patch mask; transformers v5.24.0 models/idefics3/modeling_idefics3.py,
models/smolvlm/modeling_smolvlm.py). Both are made fake-tensor constants (sim/image_grid.py), all ones
(every tile real, every pixel valid, as the processor gives for an unpadded batch), so that bookkeeping
runs for real and the tower sees no mask (create_bidirectional_mask drops an all-true one).

LLaVA-NeXT-Video (frames, no images): one (batch, frames, 3, image_size, image_size) ``pixel_values_videos``
tensor and the pooled frames' video tokens (transformers v5.24.0 models/llava_next_video/
modeling_llava_next_video.py get_video_features; vlm_tokens).

Llama 3.2 Vision (mllama): the processor packs every image to ``max_num_tiles`` tiles (pixel values
(batch, images, tiles, 3, image_size, image_size), aspect-ratio ids and tile masks), puts one
``<|image|>`` token per image in the text and a (batch, tokens, images, tiles) cross-attention mask
(transformers v5.24.0 models/mllama/processing_mllama.py, image_processing_pil_mllama.py pack_images).

Gemma 3: the processor also returns ``token_type_ids``, 1 at the image tokens (transformers v5.24.0
models/gemma3/processing_gemma3.py ``return_mm_token_type_ids = True``, renamed ``token_type_ids``), which the
model turns into a bidirectional mask over each image's tokens on every layer (modeling_gemma3.py
create_masks_for_vision_model); the batch carries them too.

Qwen2.5-VL: its forward reads ``image_grid_thw`` and the ids as values; sim/image_grid.py feeds them as
fake-tensor constants.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from vramfit.errors import ModelError, ScenarioError
from vramfit.scenario import Scenario
from vramfit.sim.image_grid import GRID_FAMILIES, GridInputs, constants_kept, grid_inputs

#: the pixel values' dtype as the HF Trainer feeds them: the image processors return float32 (transformers v5.24.0
#: image_processing_backends.py ``rescale_and_normalize``: ``images.to(torch.float32)``) and Trainer._prepare_input
#: moves them uncast (under DeepSpeed it casts them to the engine's dtype: sim/deepspeed_zero.py feeds that); each
#: model casts them to its tower's dtype itself (estimate/vision.py ``pixel_input_bytes``)
FED_DTYPE = torch.float32
#: model types whose pixel input has a fixed shape (see the module docstring)
FIXED_PIXELS = ("llava", "llava_next", "gemma3", "internvl", "mllama", "idefics3", "smolvlm")
#: model types fed video frames as one fixed-shape tensor (see the module docstring)
POOLED_VIDEO = ("llava_next_video",)
#: model types whose pixel values and pixel mask are read as values (see the module docstring)
_VALUE_PIXELS = ("idefics3", "smolvlm")


@dataclass(frozen=True)
class ImageInputs:
    tokens_per_image: int
    image_token_id: int
    image_size: int
    images_per_sample: int
    features_per_image: int = 0  # image-token positions (the projector's rows); 0: tokens_per_image
    tiles_per_image: int = 1  # tower images per image
    cross_attention: bool = False  # mllama: tiles per image as their own axis, masks for the cross-attention
    pixel_mask: bool = False  # Idefics3 / SmolVLM: (batch, tiles, ...) constant pixels and pixel_attention_mask
    rows: int = 1  # sequences per micro-batch (the constants' size bound)
    video: bool = False  # LLaVA-NeXT-Video's frames: (batch, frames, ...) ``pixel_values_videos``
    image_hw: tuple[int, int] | None = None  # LLaVA-NeXT: (height, width) of every image, ``image_sizes``' rows
    token_type_ids: bool = False  # Gemma 3: the processor's ``token_type_ids``, 1 at the image tokens

    @property
    def pixel_numel(self) -> int:
        """Elements of one micro-batch's pixel values."""
        return self.rows * self.images_per_sample * self.tiles_per_image * 3 * self.image_size ** 2


def image_inputs(config: dict, sc: Scenario) -> ImageInputs | GridInputs | None:
    """What the scenario's images add to each micro-batch; None for a text-only batch."""
    model_type = config.get("model_type")
    if model_type in GRID_FAMILIES and sc.sees_pixels:
        return grid_inputs(config, sc)
    if sc.frames_per_sample:
        if model_type in POOLED_VIDEO and not sc.images_per_sample:
            return _pooled_video(config, sc)
        fed = ", ".join((*GRID_FAMILIES, *(f"{t} (without images)" for t in POOLED_VIDEO)))
        raise ScenarioError("frames_per_sample", f"the simulator feeds video frames to {fed} only, not "
                            f"{model_type!r} with these inputs; use `vramfit estimate`", valid=("0",))
    if not sc.images_per_sample:
        return None
    if model_type not in FIXED_PIXELS:
        fed = ", ".join((*FIXED_PIXELS, *GRID_FAMILIES))
        raise ModelError(f"the simulator feeds images to {fed} only: {model_type!r} is not modelled there; "
                         "use `vramfit estimate`")
    from vramfit.models.hf_config import spec_from_hf_config
    from vramfit.models.vlm_tokens import image_tokens

    spec = spec_from_hf_config(config)
    if spec.vision is None:
        raise ModelError(f"{model_type!r} config has no vision_config: it cannot take images")
    img = image_tokens(spec.vision.image_config, sc.image_height, sc.image_width)
    token_id = config.get("image_token_id", config.get("image_token_index"))
    if not isinstance(token_id, int):
        raise ModelError("config.json has no image_token_id: the image placeholder cannot be placed")
    size = spec.vision.image_config["vision_config"]["image_size"]
    size = int(size[0] if isinstance(size, list | tuple) else size)
    patch = spec.vision.image_config["vision_config"].get("patch_size", 14)
    side = size // int(patch[0] if isinstance(patch, list | tuple) else patch)
    tiles = 1  # the tower's images per image: InternVL's tiles (+ CLS each), Idefics3's sub-images + global image
    if model_type in ("internvl", "llava_next"):  # tiles (LLaVA-NeXT: base image + anyres crops), CLS each
        tiles = img.vision_patches // (side * side + 1)
    elif model_type in _VALUE_PIXELS:
        tiles = img.vision_patches // (side * side)
    if spec.vision.cross_attention:
        tiles = int(spec.vision.image_config["vision_config"]["max_num_tiles"])
    return ImageInputs(img.lm_tokens, token_id, size, sc.images_per_sample, img.features, tiles,
                       spec.vision.cross_attention, model_type in _VALUE_PIXELS,
                       sc.micro_batch_size, image_hw=(sc.image_height, sc.image_width) if model_type == "llava_next" else None,
                       token_type_ids=spec.vision.bidirectional_image_mask)


def values_kept(images: ImageInputs | GridInputs | None) -> contextlib.AbstractContextManager:
    """Around the forward and backward: a grid family's integer inputs keep their values (sim/image_grid.py)."""
    if isinstance(images, GridInputs) or (isinstance(images, ImageInputs) and images.image_hw):
        return constants_kept()
    if isinstance(images, ImageInputs) and images.pixel_mask:
        return constants_kept(images.pixel_numel)
    return contextlib.nullcontext()


def batch(images: ImageInputs | GridInputs | None, vocab: int, B: int, S: int, dtype: torch.dtype,
          device: str) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """(input_ids, labels, the model's image keyword arguments) of one micro-batch."""
    if isinstance(images, GridInputs):
        return images.batch(vocab, B, S, dtype, device)
    n = images.images_per_sample * images.tokens_per_image if images else 0
    ids = torch.randint(0, vocab, (B, S + n), device=device)
    if images is None:
        return ids, ids.clone(), {}
    features = images.features_per_image or images.tokens_per_image
    ids[:, :images.images_per_sample * features] = images.image_token_id  # the framing tokens: text ids
    labels = ids.clone()
    labels[:, :n] = -100
    if images.cross_attention:
        return ids, labels, _cross_attention_inputs(images, B, S + n, dtype, device)
    if images.pixel_mask:
        return ids, labels, _masked_pixel_inputs(images, B, dtype, device)
    if images.image_hw:
        return ids, labels, _anyres_inputs(images, B, dtype, device)
    if images.video:
        shape = (B, images.tiles_per_image, 3, images.image_size, images.image_size)
        return ids, labels, {"pixel_values_videos": torch.empty(shape, dtype=dtype, device=device)}
    pixels = torch.empty(B * images.images_per_sample * images.tiles_per_image, 3, images.image_size,
                         images.image_size, dtype=dtype, device=device)
    if images.token_type_ids:  # 1 at the image-token positions, as the processor marks them
        types = torch.zeros_like(ids)
        types[:, :images.images_per_sample * features] = 1
        return ids, labels, {"pixel_values": pixels, "token_type_ids": types}
    return ids, labels, {"pixel_values": pixels}


def _cross_attention_inputs(images: ImageInputs, B: int, S: int, dtype: torch.dtype, device: str) -> dict:
    """mllama's keyword arguments: every tile of every image present and attended by every token
    (MllamaForConditionalGeneration.forward: pixel_values, aspect_ratio_ids, aspect_ratio_mask,
    cross_attention_mask)."""
    n, t = images.images_per_sample, images.tiles_per_image
    return {
        "pixel_values": torch.empty(B, n, t, 3, images.image_size, images.image_size, dtype=dtype, device=device),
        "aspect_ratio_ids": torch.ones(B, n, dtype=torch.long, device=device),
        "aspect_ratio_mask": torch.ones(B, n, t, dtype=torch.long, device=device),
        "cross_attention_mask": torch.ones(B, S, n, t, dtype=torch.long, device=device),
    }


def _anyres_inputs(images: ImageInputs, B: int, dtype: torch.dtype, device: str) -> dict:
    """LLaVA-NeXT's keyword arguments as LlavaNextImageProcessor gives them: ``pixel_values`` (images, crops, 3,
    size, size), the base image and the anyres crops of each, and ``image_sizes`` (images, 2), each image's
    (height, width), a fake-tensor constant: LlavaNextModel.get_image_features reads its values
    (``image_size_to_num_patches``, ``pack_image_features``: ``tolist``; module docstring)."""
    n = B * images.images_per_sample
    shape = (n, images.tiles_per_image, 3, images.image_size, images.image_size)
    with constants_kept():
        sizes = torch.tensor([list(images.image_hw)] * n, device=device)
    return {"pixel_values": torch.empty(shape, dtype=dtype, device=device), "image_sizes": sizes}


def _pooled_video(config: dict, sc: Scenario) -> ImageInputs:
    """LLaVA-NeXT-Video's frames: one video of ``frames_per_sample`` frames, its pooled tokens in the text."""
    from vramfit.models.vlm_tokens import video_tokens

    token_id = config.get("video_token_id", config.get("video_token_index", 32000))  # LlavaNextVideoConfig default
    size = int((config.get("vision_config") or {}).get("image_size", 336))
    video = video_tokens(config, sc.frames_per_sample, sc.image_height, sc.image_width)
    return ImageInputs(video.lm_tokens, int(token_id), size, 1, video.features, sc.frames_per_sample, video=True)


def _masked_pixel_inputs(images: ImageInputs, B: int, dtype: torch.dtype, device: str) -> dict:
    """Idefics3 / SmolVLM's ``pixel_values`` (batch, tiles, 3, size, size) and ``pixel_attention_mask``
    (batch, tiles, size, size) as fake-tensor constants of ones (module docstring)."""
    import numpy as np

    tiles, size = images.images_per_sample * images.tiles_per_image, images.image_size
    with constants_kept(max(images.pixel_numel, B * images.pixel_numel // images.rows)):
        pixels = torch.tensor(np.ones((B, tiles, 3, size, size), dtype=np.float32), device=device).to(dtype)
        mask = torch.tensor(np.ones((B, tiles, size, size), dtype=np.bool_), device=device)
    return {"pixel_values": pixels, "pixel_attention_mask": mask}
