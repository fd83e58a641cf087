"""The vision tower of a vision-language model in a training step (``ModelSpec.vision``).

- The image placeholder tokens join the language model's sequence: ``seq_len`` text tokens plus
  ``images_per_sample`` x the processor's tokens per image (``vramfit.models.vlm_tokens``).
- Trained (full fine-tuning, or PEFT adapters on its linears): each encoder block keeps the tensors
  the same walk as a decoder block finds (:func:`vramfit.estimate.activations.block_saved`) over all
  the micro-batch's image patches; under gradient checkpointing only the block inputs (transformers
  v5.24.0 makes every encoder layer a GradientCheckpointingLayer). Frozen, it keeps nothing for
  backward: pixel values and frozen weights need no gradient.
"""

from __future__ import annotations

import dataclasses

from vramfit.estimate.allocator import round_allocation
from vramfit.estimate.framework import FrameworkProfile
from vramfit.estimate.params import Adapter, resolve_adapters
from vramfit.models.spec import ModelSpec
from vramfit.models.vlm_tokens import ImageTokens, image_tokens
from vramfit.scenario import ALL_LINEAR, Checkpointing, FreezeVision, Method, Scenario


def per_image(spec: ModelSpec, sc: Scenario) -> ImageTokens | None:
    """Patches and language-model tokens of one of the scenario's images; None without images."""
    if spec.vision is None or not sc.images_per_sample:
        return None
    return image_tokens(spec.vision.image_config, sc.image_height, sc.image_width)


def lm_scenario(spec: ModelSpec, sc: Scenario) -> Scenario:
    """The scenario as the language model sees it: its sequence includes the image tokens."""
    img = per_image(spec, sc)
    if img is None:
        return sc
    return dataclasses.replace(sc, seq_len=sc.seq_len + sc.images_per_sample * img.lm_tokens)


def trains_vision(sc: Scenario, profile: FrameworkProfile) -> bool:
    """Whether the tower and projector train: ``freeze_vision``, ``auto`` = the framework's."""
    if sc.freeze_vision is FreezeVision.AUTO:
        return not profile.freezes_vision
    return sc.freeze_vision is FreezeVision.NO


def vision_adapters(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> list[Adapter]:
    """LoRA adapters on the tower's block linears: ``all-linear`` reaches them (PEFT matches every
    nn.Linear but the output layer), named targets where a tower linear bears the name."""
    if spec.vision is None or sc.method is Method.FULL or not trains_vision(sc, profile):
        return []
    block = spec.vision.block
    if ALL_LINEAR in sc.lora_targets:
        found = resolve_adapters(block, dataclasses.replace(sc, lora_targets=(ALL_LINEAR,)), False)
    else:
        found = [Adapter(x.name, x.in_features, x.out_features, x.count)
                 for x in block.block_linears if x.name in sc.lora_targets]
    return [dataclasses.replace(ad, layers=block.num_hidden_layers, vision=True) for ad in found]


def vision_activations(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile,
                       adapters: list[Adapter]) -> tuple[int, int]:
    """(bytes the tower's blocks keep for backward, one block's bytes recomputed under checkpointing)."""
    from vramfit.estimate import activations as act

    img = per_image(spec, sc)
    if img is None or not trains_vision(sc, profile):
        return 0, 0
    block = spec.vision.block
    patches = sc.micro_batch_size * sc.images_per_sample * img.vision_patches
    vsc = dataclasses.replace(sc, micro_batch_size=1, seq_len=patches)
    own = [dataclasses.replace(ad, layers=0, vision=False) for ad in adapters if ad.vision]
    saved = act.block_saved(block, vsc, profile, own, False)
    per_layer = sum(round_allocation(v) for v in saved.items.values())
    depth = block.num_hidden_layers
    if sc.gradient_checkpointing is Checkpointing.NONE:
        return depth * per_layer, 0
    return depth * round_allocation(act.block_input_bytes(block, vsc, profile)), per_layer
