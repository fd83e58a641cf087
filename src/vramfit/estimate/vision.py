"""The vision tower of a vision-language model in a training step (``ModelSpec.vision``).

- The image placeholder tokens join the language model's sequence: ``seq_len`` text tokens plus
  ``images_per_sample`` x the processor's tokens per image and the tokens of ``frames_per_sample`` video
  frames (``vramfit.models.vlm_tokens``); the tower runs over all their patches.
- Trained (full fine-tuning, or PEFT adapters on its linears): each encoder block keeps the tensors
  the same walk as a decoder block finds (:func:`vramfit.estimate.activations.block_saved`) over all
  the micro-batch's image patches; under gradient checkpointing only the block inputs (transformers
  v5.24.0 makes every encoder layer a GradientCheckpointingLayer). Frozen, it keeps nothing for
  backward: pixel values and frozen weights need no gradient.
"""

from __future__ import annotations

import dataclasses

from vramfit.errors import ModelError, ScenarioError
from vramfit.estimate.allocator import round_allocation
from vramfit.estimate.framework import FrameworkProfile, adapter_bytes
from vramfit.estimate.params import Adapter, ParamTensor, resolve_adapters
from vramfit.models import hf_vlm
from vramfit.models.spec import ModelSpec, PositionEncoding
from vramfit.models.vlm_tokens import VIDEO_SUPPORTED, ImageTokens, has_video_rule, image_tokens, video_tokens
from vramfit.scenario import ALL_LINEAR, Checkpointing, FreezeVision, Method, Scenario


def per_image(spec: ModelSpec, sc: Scenario) -> ImageTokens | None:
    """Patches and language-model tokens of one of the scenario's images; None without images."""
    if not sc.images_per_sample:
        return None
    if spec.vision is None:
        if spec.vision_params:  # a vision-language checkpoint whose tower vramfit does not describe
            raise ScenarioError("images_per_sample", f"images of model_type {spec.model_type!r} are not modelled "
                                f"(no vision-tower description); modelled: {', '.join(TOWER_FAMILIES)}", valid=("0",))
        return None
    return image_tokens(spec.vision.image_config, sc.image_height, sc.image_width)


# the families whose tower is described (models/hf_vlm.py; Gemma 3's is read in hf_config.py)
TOWER_FAMILIES = tuple(sorted({*hf_vlm.BUILDERS, *hf_vlm.TOWERS, "gemma3"}))


def per_video(spec: ModelSpec, sc: Scenario) -> ImageTokens | None:
    """Patches and language-model tokens of the scenario's video frames; None without frames."""
    if not sc.frames_per_sample:
        return None
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
                       sum(n * x.features for n, x in parts if x))


def lm_scenario(spec: ModelSpec, sc: Scenario) -> Scenario:
    """The scenario as the language model sees it: its sequence includes the image and video tokens."""
    pix = per_sample(spec, sc)
    if pix is None:
        return sc
    return dataclasses.replace(sc, seq_len=sc.seq_len + pix.lm_tokens)


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
    tower = [dataclasses.replace(ad, layers=block.num_hidden_layers, vision=True) for ad in found]
    projector = [Adapter(x.name, x.in_features, x.out_features, 1, layers=1, vision=True)
                 for x in spec.vision.projector if ALL_LINEAR in sc.lora_targets or x.name in sc.lora_targets]
    return tower + projector


def vision_activations(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile,
                       adapters: list[Adapter]) -> tuple[int, int, TowerKept | None]:
    """(bytes the tower's blocks keep for backward, one block's bytes recomputed under checkpointing, by part)."""
    pix = per_sample(spec, sc)
    if pix is None or not trains_vision(sc, profile):
        return 0, 0, None
    t = tower_kept(spec, sc, profile, adapters, pix)
    return t.kept, t.per_layer if t.checkpointed else 0, t


def skipped_layers_split(tensors: list[ParamTensor], spec: ModelSpec, sc: Scenario) -> list[tuple[ParamTensor, bool]]:
    """(tensor, never gets a gradient) for every base tensor: a text-only step of a cross-attention model skips
    its cross-attention layers (MllamaTextModel.forward), whose weights then get no gradient and no optimizer
    state (torch.optim skips ``grad is None``); their share of each per-layer tensor is split off."""
    skipped = spec.vision.cross_attention_layers if spec.vision is not None and not sc.images_per_sample else 0
    out: list[tuple[ParamTensor, bool]] = []
    L = spec.num_hidden_layers
    for t in tensors:
        share = t.count * skipped // L if t.kind in ("linear", "bias") or t.name == "block_norms" else 0
        if share and t.count % L == 0:
            out += [(dataclasses.replace(t, count=t.count - share), False), (dataclasses.replace(t, count=share), True)]
        else:
            out.append((t, False))
    return out


def lm_image_activations(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile,
                         adapters: list[Adapter]) -> tuple[int, int]:
    """(bytes the language model keeps for its images beyond its walked decoder layers, the bytes one of its
    cross-attention layers recomputes under checkpointing); ``sc``: the language model's scenario
    (:func:`lm_scenario`). Without images a cross-attention model's text forward skips those layers: their
    share of the walked layers is taken back (a negative figure). Placeholder models merge the image features into the token embeddings
    (``masked_scatter``: a new tensor), so under checkpointing with adapters the embedding output, a leaf
    that requires grad (modeling_utils.py ``enable_input_require_grads``), is kept beside it."""
    if spec.vision is not None and spec.vision.cross_attention and not sc.images_per_sample:
        from vramfit.estimate.cross_attention import skipped_layers_bytes

        return -skipped_layers_bytes(spec, sc, profile, adapters), 0
    if spec.vision is None or not sc.sees_pixels:
        return 0, 0
    if not spec.vision.cross_attention:
        leaf = sc.gradient_checkpointing is not Checkpointing.NONE and sc.method is not Method.FULL
        if not leaf:
            return 0, 0
        from vramfit.estimate import activations as act

        rows = sc.micro_batch_size * sc.seq_len
        return round_allocation(act.dtypes_for(sc, profile).residual * rows * spec.hidden_size), 0
    from vramfit.estimate.cross_attention import cross_attention_activations

    img = per_image(spec, sc)
    return cross_attention_activations(spec, sc, profile, adapters, sc.images_per_sample * img.features)


@dataclasses.dataclass(frozen=True)
class TowerKept:
    """One trained tower's kept tensors by part (bytes, each rounded by the allocator)."""

    per_layer: int  # one block without checkpointing (a layer scale's and segments' extras included)
    block_in: int  # a checkpointed block's input
    depth: int
    head: int  # the projector's, masks, stacks' and stem's: outside the blocks
    projector: int  # of ``head``: what the projector (the merger) keeps
    gates: int  # gated layers' branch outputs (Mllama), all of them
    checkpointed: bool
    consumed: int  # of one block's saved: freed by its MLP core's backward (block_extras.consumed_before_mlp_core)

    @property
    def kept(self) -> int:
        if self.checkpointed:
            return self.depth * self.block_in + self.head
        return self.depth * self.per_layer + self.gates + self.head


def tower_kept(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, adapters: list[Adapter],
               pix: ImageTokens) -> TowerKept:
    from vramfit.estimate import activations as act
    from vramfit.estimate import block_extras as extras

    block = spec.vision.block
    patches = sc.micro_batch_size * pix.vision_patches
    vsc = dataclasses.replace(sc, micro_batch_size=1, seq_len=patches)
    own = [dataclasses.replace(ad, layers=0, vision=False) for ad in adapters if ad.vision]
    from vramfit.scenario import Quantize

    quantized = sc.quantize is not Quantize.NONE and sc.method is not Method.FULL
    saved = act.block_saved(block, vsc, profile, own, quantized)
    per_layer = sum(round_allocation(v) for v in saved.items.values())
    if spec.vision.layer_scale and sc.method is Method.FULL:
        # a trained layer-scale vector (InternViT lambda_1 * attention, lambda_2 * mlp) saves the branch
        # output it multiplies for its own gradient (mul: other's value, tools/autograd/derivatives.yaml)
        per_layer += 2 * round_allocation(sc.precision.compute_bytes * patches * block.hidden_size)
    # every layer runs; the unused ones' tensors stay referenced (the tower's output object) until the
    # forward returns, where the activations peak
    projector = projector_kept(spec, sc, profile, adapters)
    head, c, img = projector, sc.precision.compute_bytes, per_image(spec, sc)
    if spec.vision.attention_mask and img:  # one (P, P) float mask per image, saved by every layer's attention
        head += round_allocation(c * sc.micro_batch_size * sc.images_per_sample * img.vision_patches ** 2)
    if spec.vision.stacks > 1:  # each upper stack's input beside the lower stack's output its norm keeps
        head += (spec.vision.stacks - 1) * round_allocation(act.dtypes_for(sc, profile).residual * patches * block.hidden_size)
    head += _stem_kept(spec, sc, patches)
    full = sc.method is Method.FULL
    if spec.vision.segmented_attention and full:  # the joined segment outputs, the output projection's input
        per_layer += round_allocation(c * patches * block.hidden_size)
    gates = (spec.vision.gated_layers if full else 0) * 2 * round_allocation(c * patches * block.hidden_size)
    ckpt = sc.gradient_checkpointing is not Checkpointing.NONE and spec.vision.checkpointed
    return TowerKept(per_layer, round_allocation(extras.block_input_bytes(block, vsc, profile)), block.num_hidden_layers,
                     head, projector, gates, ckpt, extras.consumed_before_mlp_core(saved))


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


def forward_only_bytes(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """The tower's output the model's output object holds through the forward (``VisionTower.output_held``),
    where no saved tensor is that same tensor: only the projector's weight gradient saves it as it is, outside
    autocast (full fine-tuning of a trained tower); LoRA casts it to the adapter's dtype (peft v0.21.2
    tuners/lora/layer.py Linear.forward). Rows: every tile's unpadded patches; width: the projector's input."""
    img = per_image(spec, sc)
    if img is None or not spec.vision.output_held or not spec.vision.projector:
        return 0
    from vramfit.estimate import activations as act

    dt = act.dtypes_for(sc, profile)
    if sc.method is Method.FULL and trains_vision(sc, profile) and not dt.autocast:
        return 0
    rows = sc.micro_batch_size * sc.images_per_sample * img.features
    return round_allocation(dt.residual * rows * spec.vision.projector[0].in_features)


def projector_kept(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, adapters: list[Adapter]) -> int:
    """What the trained projector keeps for backward."""
    pix = per_sample(spec, sc)
    if pix is None or not trains_vision(sc, profile):
        return 0
    from vramfit.estimate import activations as act

    kept = _projector_saved(spec, sc, profile, adapters, sc.micro_batch_size * pix.features)
    if spec.vision.projector_rmsnorm:
        patches, h = sc.micro_batch_size * pix.vision_patches, spec.vision.block.hidden_size
        kept += round_allocation(4 * patches * h) + round_allocation(4 * patches)
        kept += round_allocation(sc.precision.compute_bytes * patches * h) if sc.method is Method.FULL else 0
    if spec.vision.projector_layernorm:  # its input (the last block's output) and fp32 mean and rstd per patch
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


def tower_backward_transient(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """The working set of one tower block's backward (the decoder block's rule over the patches)."""
    from vramfit.estimate import block_extras as extras

    pix = per_sample(spec, sc)
    if pix is None:
        return 0
    block = spec.vision.block
    patches = sc.micro_batch_size * pix.vision_patches
    vsc = dataclasses.replace(sc, micro_batch_size=1, seq_len=patches)
    base = max(extras.block_backward_transient(block, vsc, profile), _recompute_locals(spec, vsc, profile))
    if block.gated_mlp or block.act_saved_tensors < 2:
        return base
    # a python-composed activation (QuickGELU: x * sigmoid(1.702 x)) runs its backward op by op: the
    # output gradient, the two product gradients and sigmoid's input gradient are alive together
    # (autograd formulas of mul and sigmoid, tools/autograd/derivatives.yaml)
    return max(base, (2 + block.act_saved_tensors) * sc.precision.compute_bytes * patches * block.intermediate_size)


def _recompute_locals(spec: ModelSpec, vsc: Scenario, profile: FrameworkProfile) -> int:
    """What the last tower block's re-run forward holds beside its saved tensors, under full checkpointing
    with LoRA on the MLP's output linear (``vsc``: the tower's patches as one sequence).

    Non-reentrant checkpointing stops the re-run once the last saved tensor is made (torch 2.13
    ``utils/checkpoint.py`` ``_StopRecomputationError``, early stop on by default): here lora_B's input
    inside the output linear, while the block's frames still hold the activation's output (that linear's
    input), the second norm's output, a layer scale's product (transformers v5.24.0
    models/internvl/modeling_internvl.py ``InternVLVisionLayer.forward``: ``attention_output`` lives until the
    block returns), the base layer's result and its clone (peft v0.21.2 tuners/lora/bnb.py
    ``Linear4bit.forward``: ``result = result.clone()``, the original then freed) and lora_B's output;
    beside them the gradient arriving at the tower's output. The simulator's trace of InternVL under QLoRA
    shows each of these at the peak. Under QLoRA the MLP runs in fp32 (``Linear4bit`` returns its input's
    dtype, bitsandbytes 0.50.2 nn/modules.py) and the layer scale is an fp32 parameter (peft v0.21.2
    utils/other.py ``prepare_model_for_kbit_training``), as the residual stream is."""
    from vramfit.estimate import activations as act

    block = spec.vision.block
    down = next((x for x in block.block_linears if x.group == "mlp" and x.out_features == block.hidden_size), None)
    adapted = {ad.target for ad in vision_adapters(spec, vsc, profile)}
    ckpt = vsc.gradient_checkpointing in (Checkpointing.FULL, Checkpointing.OFFLOAD)
    if not ckpt or down is None or down.name not in adapted:
        return 0
    dt = act.dtypes_for(vsc, profile)
    fp32_mlp = vsc.method is Method.QLORA and profile.qlora_unquantized_fp32
    m = dt.norm_out if fp32_mlp else dt.compute
    T, h = vsc.seq_len, block.hidden_size
    scale = dt.residual * T * h if spec.vision.layer_scale else 0
    result = m * T * h  # the base layer's output (PEFT's bnb clone replaces it: one is alive)
    lora_b = (dt.compute if dt.autocast else dt.adapter) * T * h
    return sum(round_allocation(x) for x in (
        m * T * act.mlp_width(block), dt.norm_out * T * h, scale, result, lora_b, dt.residual * T * h))


def tower_grads_pending(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """Gradient bytes of the tower not yet made while its last block runs backward (all its blocks
    but that one; the embeddings' too): the tower's backward comes after the language model's."""
    if spec.vision is None or not sc.sees_pixels or not trains_vision(sc, profile):
        return 0
    block = spec.vision.block
    if sc.method is Method.FULL:
        trained = spec.vision_params - spec.vision.unused_params
        projector = sum(x.params for x in spec.vision.projector)
        return max(0, trained - projector - block.block_params) * sc.precision.param_bytes
    ab, r = adapter_bytes(profile, sc.precision), sc.lora_rank
    per_block = sum(r * (ad.in_features + ad.out_features) for ad in vision_adapters(spec, sc, profile)
                    if ad.layers == block.num_hidden_layers)
    return (block.num_hidden_layers - 1) * per_block * ab


def tower_block_position(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, t: TowerKept | None,
                         all_grads: int) -> tuple[int, int] | None:
    """(gradients, activations) inside the tower block backward that holds more: the top block's or the lowest's.

    Both sit at the block's MLP core backward (``t.consumed`` freed, block_extras.consumed_before_mlp_core) after
    the merger's backward, the tower's last module, has freed what it kept (``t.projector``). A placeholder
    model embeds the text before it runs the tower (transformers v5.24.0 modeling_qwen2_5_vl.py
    Qwen2_5_VLModel.forward: ``get_input_embeddings()(input_ids)``, then the image and video features
    ``masked_scatter``-ed into them), so the untied input embedding's gradient comes after the whole tower's
    backward (autograd runs the later node first). Top: every block's kept tensors, the top block's MLP output
    gradients; lowest (full fine-tuning): its own kept tensors, every block's gradients above. ``None``: the
    older single position: LoRA (its few gradients: the top always holds more) and a cross-attention model (Mllama:
    its tower's output feeds the decoder's cross-attention layers, not the embeddings)."""
    if t is None or sc.method is not Method.FULL or spec.vision.cross_attention:
        return None
    pb, block = sc.precision.param_bytes, spec.vision.block
    down = next((x for x in block.block_linears if x.group == "mlp" and x.out_features == block.hidden_size), None)
    own_later = block.block_params - (down.params if down else 0)  # the block's gradients not yet made
    embedding = 0 if spec.vision.cross_attention or spec.tie_word_embeddings else spec.embedding_params
    stem = spec.vision_params - spec.vision.unused_params - sum(x.params for x in spec.vision.projector) \
        - t.depth * block.block_params
    recompute = t.per_layer if t.checkpointed else 0
    top = (all_grads - (embedding + stem + (t.depth - 1) * block.block_params + own_later) * pb,
           t.kept - t.projector + recompute - t.consumed)
    own = t.block_in if t.checkpointed else t.per_layer
    lowest = (all_grads - (embedding + stem + own_later) * pb,
              own + t.head - t.projector + recompute - t.consumed)
    return max(top, lowest, key=sum)


def embeds_grad_pending(spec: ModelSpec, sc: Scenario) -> int:
    """Full fine-tuning of a placeholder model: the gradient of the merged input embeddings (``masked_scatter``'s
    backward for ``inputs_embeds``, B x (text + image tokens) x H) waits in the embedding's backward node through
    the whole tower backward (the embedding ran first, :func:`tower_block_position`)."""
    pix = per_sample(spec, sc)
    if pix is None or sc.method is not Method.FULL or spec.vision.cross_attention:
        return 0
    return round_allocation(sc.precision.compute_bytes * sc.micro_batch_size * (sc.seq_len + pix.lm_tokens)
                            * spec.hidden_size)
