"""The vision tower of a vision-language model in a training step (``ModelSpec.vision``).

- The image placeholder tokens join the language model's sequence: ``seq_len`` text tokens plus
  ``images_per_sample`` x the processor's tokens per image and the tokens of ``frames_per_sample`` video
  frames (``vramfit.models.vlm_tokens``); the tower runs over all their patches.
- Trained (full fine-tuning, or PEFT adapters on its linears): each encoder block keeps the tensors
  the same walk as a decoder block finds (:func:`vramfit.estimate.activations.block_saved`) over all
  the micro-batch's image patches; under gradient checkpointing only the block inputs (transformers
  v5.24.0 makes every encoder layer a GradientCheckpointingLayer). Frozen, it keeps nothing for
  backward: pixel values and frozen weights need no gradient.

The images' tokens, the language model's scenario and what the forward holds outside the saved tensors are in
:mod:`vramfit.estimate.vision_inputs` (re-exported here).
"""

from __future__ import annotations

import dataclasses

from vramfit.estimate.allocator import round_allocation
from vramfit.estimate.framework import FrameworkProfile, adapter_bytes
from vramfit.estimate.params import Adapter, ParamTensor, resolve_adapters, vision_tensors

# the images' tokens, the language model's scenario, whether the tower trains and what the forward holds
# (estimate/vision_inputs.py), re-exported: step.py, core.py, vision_backward.py and tests import them here
from vramfit.estimate.vision_inputs import (  # noqa: F401
    TOWER_FAMILIES,
    forward_only_bytes,
    lm_scenario,
    per_image,
    per_sample,
    per_video,
    pixel_input_bytes,
    trains_vision,
)
from vramfit.models.spec import ModelSpec, PositionEncoding
from vramfit.models.vlm_tokens import ImageTokens
from vramfit.scenario import ALL_LINEAR, Checkpointing, Method, Quantize, QuantizeVision, Scenario


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
    tower = [dataclasses.replace(ad, layers=block.num_hidden_layers, vision=True) for ad in found]
    projector = [Adapter(x.name, x.in_features, x.out_features, spec.vision.mergers, layers=1, vision=True)
                 for x in spec.vision.projector if ALL_LINEAR in sc.lora_targets or x.name in sc.lora_targets]
    return tower + projector


def vision_activations(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile,
                       adapters: list[Adapter]) -> tuple[int, int]:
    """(bytes the tower keeps for backward, one block's bytes recomputed under checkpointing)."""
    blocks, head, recompute = tower_kept(spec, sc, profile, adapters)
    return blocks + head, recompute


def tower_kept(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, adapters: list[Adapter]) -> tuple[int, int, int]:
    """(what the tower's blocks keep, what it keeps outside them, one block's bytes recomputed under checkpointing);
    a frozen tower that autograd records (:func:`frozen_tower_recorded`) keeps what its input gradients need: the
    same walk with no adapters."""
    pix = per_sample(spec, sc)
    if pix is None:
        return 0, 0, 0
    if trains_vision(sc, profile):
        return _tower_activations(spec, sc, profile, adapters, pix)
    if frozen_tower_recorded(spec, sc, profile):
        return _tower_activations(spec, sc, profile, [], pix)
    return 0, 0, 0


def frozen_tower_recorded(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> bool:
    """A frozen tower (``freeze_vision``) under gradient checkpointing with adapters, where enable_input_require_grads
    hooks the tower's patch embedding too (``profile.hooks_sub_model_embeddings``, transformers v5.24.0
    modeling_utils.py l. 2147-2180: every PreTrainedModel's get_input_embeddings, SiglipVisionModel's patch_embedding
    among them, where the tower exposes it: ``VisionTower.patch_embedding_exposed``): its output requires grad, so
    autograd records the frozen tower and its checkpointed layers keep their inputs for the gradient that flows back
    to that leaf. The simulator's trace of Gemma 3 with the tower frozen
    (LoRA on the language model only): the patch embedding's output, each layer's input and the projector's saved
    tensors at the peak, as a trained tower's without adapters."""
    return (spec.vision is not None and spec.vision.patch_embedding_exposed and profile.hooks_sub_model_embeddings
            and sc.method is not Method.FULL
            and sc.gradient_checkpointing is not Checkpointing.NONE and not trains_vision(sc, profile))


def skipped_cross_layers(spec: ModelSpec, sc: Scenario) -> int:
    """The cross-attention decoder layers a text-only step of a cross-attention model skips (transformers v5.24.0
    models/mllama/modeling_mllama.py ``MllamaTextModel.forward``: ``continue`` when a cross-attention layer has no
    ``cross_attention_states``): they run nothing, so they keep nothing for backward and get no gradient."""
    return spec.vision.cross_attention_layers if spec.vision is not None and not sc.images_per_sample else 0


def skipped_layers_split(tensors: list[ParamTensor], spec: ModelSpec, sc: Scenario) -> list[tuple[ParamTensor, bool]]:
    """(tensor, never gets a gradient) for every base tensor: a text-only step of a cross-attention model skips
    its cross-attention layers (MllamaTextModel.forward), whose weights then get no gradient and no optimizer
    state (torch.optim skips ``grad is None``); their share of each per-layer tensor is split off."""
    skipped = skipped_cross_layers(spec, sc)
    out: list[tuple[ParamTensor, bool]] = []
    L = spec.num_hidden_layers
    for t in tensors:
        share = t.count * skipped // L if t.kind in ("linear", "router", "bias") or t.name == "block_norms" else 0
        if share and t.count % L == 0:
            out += [(dataclasses.replace(t, count=t.count - share), False), (dataclasses.replace(t, count=share), True)]
        else:
            out.append((t, False))
    return out


def lm_image_activations(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile,
                         adapters: list[Adapter]) -> tuple[int, int]:
    """(bytes the language model keeps for its images beyond its walked decoder layers, the bytes one of its
    cross-attention layers recomputes under checkpointing); ``sc``: the language model's scenario
    (:func:`lm_scenario`). Without images a cross-attention model's text forward skips those layers, which
    the caller leaves out of the walked ones (:func:`skipped_cross_layers`). Placeholder models merge the image
    features into the token embeddings (``masked_scatter``: a new tensor), so under checkpointing with adapters
    the embedding output, a leaf that requires grad (modeling_utils.py ``enable_input_require_grads``), is kept
    beside it."""
    if spec.vision is None or not sc.sees_pixels or skipped_cross_layers(spec, sc):
        return 0, 0
    if not spec.vision.cross_attention:
        return embeds_leaf_bytes(spec, sc, profile), 0
    from vramfit.estimate.cross_attention import cross_attention_activations

    img = per_image(spec, sc)
    return cross_attention_activations(spec, sc, profile, adapters, sc.images_per_sample * img.features)


def embeds_leaf_bytes(spec: ModelSpec, lm: Scenario, profile: FrameworkProfile) -> int:
    """A placeholder model's merged input embeddings under checkpointing with adapters: the token embedding's
    output is a leaf that requires grad (modeling_utils.py ``enable_input_require_grads``), referenced by its
    AccumulateGrad node until the graph is freed at the end of backward, so it lives through the tower's backward
    too (the simulator's trace of LLaVA-NeXT under QLoRA shows it at the tower's peak); B x the language model's
    sequence (``lm``: :func:`lm_scenario`) x hidden, in the residual stream's dtype."""
    if (spec.vision is None or spec.vision.cross_attention or not lm.sees_pixels
            or lm.gradient_checkpointing is Checkpointing.NONE or lm.method is Method.FULL):
        return 0
    from vramfit.estimate import activations as act

    rows = lm.micro_batch_size * lm.seq_len
    return round_allocation(act.dtypes_for(lm, profile).residual * rows * spec.hidden_size)


def _tower_activations(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, adapters: list[Adapter],
                       pix: ImageTokens) -> tuple[int, int, int]:
    from vramfit.estimate import activations as act
    from vramfit.estimate import block_extras as extras

    block = spec.vision.block
    patches = sc.micro_batch_size * pix.vision_patches
    vsc = dataclasses.replace(sc, micro_batch_size=1, seq_len=patches)
    own = tower_block_adapters(block, adapters)
    saved = tower_block_saved(spec, sc, profile, adapters)
    per_layer = sum(round_allocation(v) for v in saved.items.values())
    # the block a recompute re-creates at its largest: a full-attention one, where eager scores differ by layer
    top = sum(round_allocation(v) for v in tower_block_saved(spec, sc, profile, adapters, largest=True).items.values())
    extra = 0
    if spec.vision.layer_scale and sc.method is Method.FULL:
        # a trained layer-scale vector (InternViT lambda_1 * attention, lambda_2 * mlp) saves the branch
        # output it multiplies for its own gradient (mul: other's value, tools/autograd/derivatives.yaml)
        extra += 2 * round_allocation(sc.precision.compute_bytes * patches * block.hidden_size)
    # every layer runs; the unused ones' tensors stay referenced (the tower's output object) until the
    # forward returns, where the activations peak
    depth = block.num_hidden_layers
    head = projector_kept(spec, sc, profile, adapters)
    c, img = sc.precision.compute_bytes, per_image(spec, sc)
    if spec.vision.attention_mask and img:  # one (P, P) float mask per image, saved by every layer's attention
        head += round_allocation(c * sc.micro_batch_size * sc.images_per_sample * img.vision_patches ** 2)
    if spec.vision.stacks > 1:  # each upper stack's input beside the lower stack's output its norm keeps
        head += (spec.vision.stacks - 1) * round_allocation(act.dtypes_for(sc, profile).residual * patches * block.hidden_size)
    head += _stem_kept(spec, sc, patches)
    if spec.vision.post_norm_held:  # the final LayerNorm saves its input, the last block's output
        head += round_allocation(c * patches * block.hidden_size)
    if sc.method is Method.FULL:  # the patch embedding's weight saves its input: the pixels in the tower's dtype
        head += round_allocation(c * sc.micro_batch_size * pix.pixels)
    full = sc.method is Method.FULL
    if spec.vision.segmented_attention and (full or _out_proj_saves_input(block, saved, own)):
        extra += round_allocation(c * patches * block.hidden_size)  # the joined segment outputs
    per_layer, top = per_layer + extra, top + extra
    gates = spec.vision.gated_layers if full else 0
    per_gated = 2 * round_allocation(c * patches * block.hidden_size)  # tanh(gate) x branch saves the branch
    if sc.gradient_checkpointing is Checkpointing.NONE or not tower_checkpointed(spec, profile):
        return depth * per_layer + gates * per_gated, head, 0
    return depth * round_allocation(extras.block_input_bytes(block, vsc, profile)), head, top


def tower_checkpointed(spec: ModelSpec, profile: FrameworkProfile) -> bool:
    """Whether the tower's layers run under the model's gradient checkpointing: always where the modelling code
    checkpoints them (``VisionTower.checkpointed``), or where only transformers 4's does (``checkpointed_v4``) and the
    profile runs that code (``vision_v4_checkpointing``; e.g. Unsloth 2024.11.9 on transformers 4.46.2, whose
    FastBaseVisionModel.for_training sets ``gradient_checkpointing`` on every module that has the attribute,
    unslothai/unsloth@7e7656c5a1 unsloth/models/vision.py l. 384-390)."""
    tower = spec.vision
    return tower.checkpointed or (tower.checkpointed_v4 and profile.vision_v4_checkpointing)


def vision_quantized(sc: Scenario, profile: FrameworkProfile) -> bool:
    """The vision tower and projector in the quantized base: the scenario's quantize_vision, ``auto`` = the
    profile's ``qlora_quantizes_vision``."""
    if sc.quantize is Quantize.NONE:
        return False
    if sc.quantize_vision is QuantizeVision.AUTO:
        return profile.qlora_quantizes_vision
    return sc.quantize_vision is QuantizeVision.YES


def tower_autocast_copies(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """16-bit copies of the tower's and projector's unquantized linear weights that autocast makes and their matmuls
    keep for backward (forward_extras.autocast_copies: a frozen weight is cast at each use, the copy saved for the
    input gradient); none where the tower is checkpointed (its recompute casts again, one layer at a time), sees no
    image, or its linears are 4-bit. The caller applies it only when the step runs under autocast on fp32 weights."""
    if spec.vision is None or not sc.sees_pixels or vision_quantized(sc, profile):
        return 0
    if sc.gradient_checkpointing is not Checkpointing.NONE and tower_checkpointed(spec, profile):
        return 0
    return sum(round_allocation(2 * t.numel) * t.count for t in vision_tensors(spec) if t.kind == "vision_linear")


#: a block's saved tensors that eager attention sizes by its scores (estimate/attention.py _eager_scores_saved)
SCORE_KEYS = ("attn.softmax_out", "attn.dropout_mask", "attn.dropout_out", "attn.probs", "attn.softcap_tanh")


def tower_block_saved(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, adapters: list[Adapter],  # noqa: ANN201
                      largest: bool = False):
    """One tower block's saved tensors (``activations.Saved``) over the micro-batch's patches as one sequence; eager
    attention's score tensors are each attention segment's (vision_inputs.attended_patches, an average layer: a
    batched tower's (tiles, H, P, P), a Qwen tower's per image or window), not one sequence's over every patch.
    ``largest``: a full-attention layer's (Qwen2.5-VL's windowed layers hold less), the block a recompute re-creates
    at its largest."""
    from vramfit.estimate import activations as act
    from vramfit.estimate.attention import runs_eager_attention
    from vramfit.estimate.vision_inputs import attended_patches, segment_scores

    patches = sc.micro_batch_size * per_sample(spec, sc).vision_patches
    vsc = dataclasses.replace(sc, micro_batch_size=1, seq_len=patches)
    own = tower_block_adapters(spec.vision.block, adapters)
    quantized = vision_quantized(sc, profile) and sc.method is not Method.FULL
    saved = act.block_saved(spec.vision.block, vsc, profile, own, quantized)
    if runs_eager_attention(spec.vision.block, vsc, profile):
        per_layer = segment_scores(spec, sc) if largest else attended_patches(spec, sc) // spec.vision.block.num_hidden_layers
        rescale_scores(saved, sc.micro_batch_size * per_layer, patches * patches)
    return saved


def rescale_scores(saved, scores: int, of: int) -> None:  # noqa: ANN001
    """``saved``'s score-sized tensors (:data:`SCORE_KEYS`) at ``scores`` elements per head where they were counted at
    ``of``, in place."""
    for key in SCORE_KEYS:
        if key in saved.items:
            saved.items[key] = saved.items[key] * scores // of


def tower_block_adapters(block: ModelSpec, adapters: list[Adapter]) -> list[Adapter]:
    """The tower blocks' own adapters, as one block's: a projector linear may bear a block linear's name
    (Qwen3-VL's merger ``linear_fc1``/``linear_fc2``), so only those on every block count."""
    return [dataclasses.replace(ad, layers=0, vision=False) for ad in adapters
            if ad.vision and ad.layers == block.num_hidden_layers]


def tower_head_consumed(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, adapters: list[Adapter]) -> int:
    """What the trained tower keeps outside its blocks that backward consumes before the blocks' backward: the
    projector's saved tensors and a final norm's input (``VisionTower.post_norm_held``)."""
    pix = per_sample(spec, sc)
    if pix is None or not trains_vision(sc, profile):
        return 0
    consumed = projector_kept(spec, sc, profile, adapters)
    if spec.vision.post_norm_held:
        consumed += round_allocation(sc.precision.compute_bytes * sc.micro_batch_size * pix.vision_patches
                                     * spec.vision.block.hidden_size)
    return consumed


def _out_proj_saves_input(block: ModelSpec, saved, adapters: list[Adapter]) -> bool:
    """The attention's output projection saves its own input, the joined segment outputs (not the kernels' outputs):
    an adapter on it whose input is not cast to another dtype first (peft v0.21.2 tuners/lora/layer.py Linear.forward:
    ``x = self._cast_input_dtype(x, lora_A.weight.dtype)``, a no-op where the dtypes agree: lora_A's matmul saves x)."""
    proj = [x for x in block.block_linears if x.group == "attn"][-1]
    adapted = any(ad.target == proj.name for ad in adapters)
    return adapted and not any(k.startswith(f"{proj.name}.") and k.endswith("autocast_in") for k in saved.items)


def _stem_kept(spec: ModelSpec, sc: Scenario, patches: int) -> int:
    """Tower tensors outside its blocks that backward keeps: a rotary tower's fp32 cos and sin over every patch
    (Qwen2_5_VisionTransformerPretrainedModel.forward passes them to every block); under checkpointing with
    adapters, the patch embedding's output, which transformers makes a leaf that requires grad
    (modeling_utils.py ``enable_input_require_grads``, run by ``gradient_checkpointing_enable``, hooks the input
    embeddings of every sub-model: the tower's patch embedding too), held by its AccumulateGrad node."""
    block, total = spec.vision.block, 0
    if block.position_encoding is PositionEncoding.ROPE:
        total += 2 * round_allocation(4 * patches * block.head_dim)
    if sc.gradient_checkpointing is not Checkpointing.NONE and sc.method is not Method.FULL:
        total += round_allocation(sc.precision.compute_bytes * patches * block.hidden_size)
    return total


def projector_kept(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, adapters: list[Adapter]) -> int:
    """What the trained projector keeps for backward."""
    pix = per_sample(spec, sc)
    if pix is None or not trains_vision(sc, profile):
        return 0
    kept = spec.vision.mergers * _projector_saved(spec, sc, profile, adapters, sc.micro_batch_size * pix.features)
    if spec.vision.projector_rmsnorm:
        patches, h = sc.micro_batch_size * pix.vision_patches, spec.vision.block.hidden_size
        kept += round_allocation(4 * patches * h) + round_allocation(4 * patches)
        kept += round_allocation(sc.precision.compute_bytes * patches * h) if sc.method is Method.FULL else 0
    if spec.vision.projector_layernorm:  # its input (the last block's output) and fp32 mean and rstd per patch
        from vramfit.estimate import activations as act

        patches, h = sc.micro_batch_size * pix.vision_patches, spec.vision.block.hidden_size
        kept += round_allocation(act.dtypes_for(sc, profile).residual * patches * h) + 2 * round_allocation(4 * patches)
    return kept


def _projector_saved(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, adapters: list[Adapter],
                     tokens: int) -> int:
    """What the projector keeps over its ``tokens`` rows: each linear's input for its weight gradient
    (full) or its adapter's fp32 copy and rank-wide output (PEFT casts the input to the adapter dtype,
    peft v0.21.2 tuners/lora/layer.py Linear.forward), the activation's input between the linears
    (GELU saves its input; autograd formulas, tools/autograd/derivatives.yaml)."""
    c, ab = sc.precision.compute_bytes, adapter_bytes(profile, sc.precision)
    adapted = {ad.target for ad in adapters if ad.vision and ad.layers == 1}
    full = sc.method is Method.FULL
    total, grad_flows = 0, full
    for i, lin in enumerate(spec.vision.projector):
        if i:
            total += round_allocation(c * tokens * lin.in_features) if grad_flows else 0  # the activation
        if full:
            total += round_allocation(c * tokens * lin.in_features)
        elif lin.name in adapted:
            x = ab if profile.lora_casts_input else c
            total += round_allocation(x * tokens * lin.in_features) + round_allocation(ab * tokens * sc.lora_rank)
            grad_flows = True
    return total
