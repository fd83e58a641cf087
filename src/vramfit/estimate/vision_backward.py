"""The vision tower's backward (after the language model's: its nodes were made after the token embedding's,
so autograd runs them first, and the token embedding's last): the tensors kept, the working set and the
gradients not yet made while the tower's top block runs backward."""

from __future__ import annotations

import dataclasses

from vramfit.estimate.allocator import round_allocation
from vramfit.estimate.framework import FrameworkProfile, adapter_bytes
from vramfit.estimate.params import Adapter
from vramfit.estimate.vision import (
    embeds_leaf_bytes,
    lm_scenario,
    per_sample,
    rescale_scores,
    tower_block_saved,
    tower_checkpointed,
    tower_head_consumed,
    tower_kept,
    trains_vision,
    vision_adapters,
)
from vramfit.models.spec import ModelSpec
from vramfit.scenario import Attention, Checkpointing, Method, Scenario


def tower_backward_kept(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile,
                        adapters: list[Adapter]) -> tuple[int, int]:
    """What the tower keeps while its top block's activation runs backward, and while its lowest block's does:
    its blocks as kept (the lowest block's only: the blocks above have consumed theirs), what it keeps outside
    them and the block re-created under checkpointing, less what backward consumed before: the projector's and
    a final norm's saved tensors (:func:`~vramfit.estimate.vision.tower_head_consumed`) and, in a plain MLP,
    what its output linear saved (:func:`_released`), and the language model's input-embeddings leaf
    (:func:`~vramfit.estimate.vision.embeds_leaf_bytes`)."""
    blocks, head, recompute = tower_kept(spec, sc, profile, adapters)
    if not blocks + head:
        return 0, 0
    rest = head - tower_head_consumed(spec, sc, profile, adapters) + recompute - _released(spec, sc, profile)
    rest += embeds_leaf_bytes(spec, sc, profile)  # ``sc`` is the language model's scenario here (estimate/step.py)
    return blocks + rest, blocks // spec.vision.block.num_hidden_layers + rest


def tower_position(step) -> tuple[int, int]:  # noqa: ANN001
    """(gradients, activations) of the tower's backward where their sum is higher: at its top block (every
    block's kept tensors, its gradients still to come) or its lowest (its own, every block's gradient made);
    going down, each block frees what it kept and adds its gradients (the decoder's rule,
    contributions._block_position)."""
    spec, sc, profile, p = step.spec, step.sc, step.profile, step.parts
    if step.held_grads or sc.optimizer_in_backward:
        # held between micro-batches, or in ZeRO-3's flat buffer from init (deepspeed.zero3_grads_resident): every
        # gradient exists before the tower's backward starts; the optimizer in backward frees each as it is made
        # (step_grads._gradient_timing: a decoder block's position adds none then either)
        top, low = step.held_grads, step.held_grads
    else:
        top = p.gradients - grads_share(p, spec, sc, profile)
        low = p.gradients - grads_share(p, spec, sc, profile, lowest=True)
    return max((top, step.acts.tower_backward), (low, step.acts.tower_backward_lowest), key=sum)


def grads_share(parts, spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, **where: bool) -> int:  # noqa: ANN001
    """This GPU's bytes of the gradients :func:`tower_numel_pending` (``where``: its keywords) counts, out of
    ``parts.gradients``. Those are this GPU's share of every trainable tensor's whole gradient
    (``parts.whole_gradients``), each split alike: FSDP's and ZeRO-3's reduce-scatter keep 1/n of each unit's
    (state.shard per tensor), ZeRO-2 its partition, a tensor/pipeline rank ``frac`` of them (ranks._rank_step), an
    offloaded run the buckets in flight. So the pending ones weigh their whole bytes' share of the whole, in the
    dtype the gradients are stored in (core._trainable_state: 16-bit under DeepSpeed's mixed precision): their
    whole bytes taken from the split figure made it negative (Qwen2.5-VL-7B, LoRA, FSDP on 8 GPUs: 25,915,392 B of
    adapter gradient shards less the tower's 43,211,520 B whole)."""
    from vramfit.estimate.core import _ds_mixed

    numel = tower_numel_pending(spec, sc, profile, **where)
    if not numel or not parts.whole_gradients:
        return 0
    per = 2 if _ds_mixed(sc) else sc.precision.param_bytes if sc.method is Method.FULL else adapter_bytes(
        profile, sc.precision)
    return parts.gradients * min(numel * per, parts.whole_gradients) // parts.whole_gradients


def _released(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """A plain MLP's (fc1 -> activation -> fc2) tensors the top block frees before its activation's backward: what
    the output linear saved (its input for the weight gradient, an adapter's cast input and rank-wide output), which
    autograd frees once that linear's backward ran (a node's saved tensors die with it); under checkpointing, the
    re-run's first norm input, which is the checkpoint's own saved block input (one tensor, counted in both)."""
    block = spec.vision.block
    down = _mlp_out(block)
    if block.gated_mlp or down is None:
        return 0
    saved = tower_block_saved(spec, sc, profile, vision_adapters(spec, sc, profile))
    released = sum(round_allocation(v) for k, v in saved.items.items()
                   if k == "mlp_mid" or k.startswith(f"{down.name}."))
    if sc.gradient_checkpointing is not Checkpointing.NONE and tower_checkpointed(spec, profile):
        released += round_allocation(saved.items.get("block_in", 0))
    return released


def _mlp_out(block: ModelSpec):  # noqa: ANN202
    return next((x for x in block.block_linears if x.group == "mlp" and x.out_features == block.hidden_size), None)


def tower_backward_transient(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """The working set of the tower's top block backward beside :func:`tower_backward_kept`: the largest of the
    activation's backward (the decoder block's rule over the patches) and, under checkpointing, the re-run forward
    at its MLP linears' adapters (:func:`_recompute_locals`, :func:`_input_linear_locals`); a plain MLP's moments
    net of what :func:`_released` took back, with the gradient arriving at the block (:func:`_arriving`)."""
    pix = per_sample(spec, sc)
    if pix is None:
        return 0
    block = spec.vision.block
    patches = sc.micro_batch_size * pix.vision_patches
    vsc = dataclasses.replace(sc, micro_batch_size=1, seq_len=patches)
    base = _block_transient(spec, sc, profile, vsc)
    if not block.gated_mlp and block.act_saved_tensors >= 2:
        base = max(base, _composed_activation_backward(block, sc, profile, patches))
    released = _released(spec, sc, profile) if trains_vision(sc, profile) else 0
    if not released:
        return max(base, _recompute_locals(spec, vsc, profile) + _arriving(spec, sc, profile, vsc, own=True))
    grad = _arriving(spec, sc, profile, vsc)
    return grad + max(base, _recompute_locals(spec, vsc, profile) + released, _input_linear_locals(spec, sc, vsc, profile))


def _block_transient(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, vsc: Scenario) -> int:
    """The decoder block's backward rule over the tower's patches (``vsc``: one sequence of all of them), its eager
    softmax over each attention segment's scores (vision_inputs.attention_scenario): all segments at once in a tower
    that takes its tiles as a batch; one segment at a time where the attention loops over them
    (``VisionTower.segmented_attention``: each segment's ops, made after the previous segment's, come first in
    autograd's order, so one segment's score gradients live at a time), beside the MLP's over every patch. The
    softmax's working set is net of what autograd has freed by then (the decoder's rule, ``Saved.freed_before_*``): the
    re-created block's MLP tensors and, of the scores, the probabilities ``probs @ v`` kept, every segment's at once in a
    batched tower, the segment's own in a looped one."""
    from vramfit.estimate import block_extras as extras
    from vramfit.estimate.attention import runs_eager_attention
    from vramfit.estimate.vision_inputs import attention_scenario, segment_scores

    block = spec.vision.block
    if not runs_eager_attention(block, vsc, profile):
        return extras.block_backward_transient(block, vsc, profile)
    segments = attention_scenario(spec, sc)
    saved = tower_block_saved(spec, sc, profile, vision_adapters(spec, sc, profile), largest=True)
    if not spec.vision.segmented_attention:
        return extras.block_backward_transient(block, segments, profile, saved)
    one = dataclasses.replace(segments, micro_batch_size=1)
    whole = dataclasses.replace(vsc, attention=Attention.SDPA)  # the MLP's rule, over every patch
    rescale_scores(saved, segments.seq_len ** 2, sc.micro_batch_size * segment_scores(spec, sc))  # one segment's
    return max(extras.block_backward_transient(block, one, profile, saved),
               extras.block_backward_transient(block, whole, profile))


def embeds_grad_pending(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """Full fine-tuning of a placeholder model: the gradient of the merged input embeddings (``masked_scatter``'s
    backward for ``inputs_embeds``, B x (text + image tokens) x H, in the residual stream's dtype) waits in the
    token embedding's backward node through the whole tower backward: the text is embedded before the tower runs
    (transformers v5.24.0 models/qwen2_5_vl/modeling_qwen2_5_vl.py Qwen2_5_VLModel.forward:
    ``get_input_embeddings()(input_ids)``, then the features ``masked_scatter``-ed into them), so that node runs
    last (:func:`tower_grads_pending`). The simulator's trace of Qwen2.5-VL video shows it (a ``masked_fill`` output)
    at the lowest tower block's peak. A cross-attention model runs its tower first; adapters keep the LoRA
    case's leaf gradient in :func:`_arriving`."""
    from vramfit.estimate import activations as act

    pix = per_sample(spec, sc)
    if pix is None or sc.method is not Method.FULL or spec.vision.cross_attention or not trains_vision(sc, profile):
        return 0
    tokens = sc.micro_batch_size * (sc.seq_len + pix.lm_tokens)
    return round_allocation(act.dtypes_for(sc, profile).residual * tokens * spec.hidden_size)


def _composed_activation_backward(block: ModelSpec, sc: Scenario, profile: FrameworkProfile, patches: int) -> int:
    """A python-composed activation (QuickGELU: x * sigmoid(1.702 x)) runs its backward op by op (autograd formulas
    of mul and sigmoid, tools/autograd/derivatives.yaml): in the compute dtype the output gradient and the two product
    gradients are alive together at the product's backward, the most at once (the simulator's trace of LLaVA-NeXT-Video
    under full fine-tuning with checkpointing: the arriving ``mm`` and two ``mul`` outputs; sigmoid's input gradient
    is made after the product's node frees the output gradient; counting it too put that case 3.5 % over). Under QLoRA the tower's MLP runs in fp32 (Linear4bit
    returns its input's dtype, bitsandbytes 0.50.2 nn/modules.py; the residual stream is fp32): the arriving
    gradient's fp32 cast and the two fp32 product gradients are the peak (the simulator's trace of LLaVA-NeXT-Video
    under QLoRA with checkpointing), the cast freed once the product's backward ran."""
    TI = patches * block.intermediate_size
    if sc.method is Method.QLORA and profile.qlora_unquantized_fp32:
        return (1 + block.act_saved_tensors) * 4 * TI
    return (1 + block.act_saved_tensors) * sc.precision.compute_bytes * TI


def _arriving(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, vsc: Scenario, own: bool = False) -> int:
    """The gradient at the tower's output while its top block runs backward: in the residual stream's dtype and,
    when the projector's first linear carries an adapter outside autocast, the adapter-dtype gradient its LoRA
    path gives its input (its rows x in_features) and that gradient's cast back (the simulator's trace of
    SmolVLM under LoRA shows both at the peak); under checkpointing with adapters, the gradient of the
    token-embedding output that ``enable_input_require_grads`` made a leaf (AccumulateGrad keeps it).
    ``own``: the block's own term only."""
    from vramfit.estimate import activations as act

    dt = act.dtypes_for(vsc, profile)
    T, h = vsc.seq_len, spec.vision.block.hidden_size
    total = round_allocation(dt.residual * T * h)
    if own:
        return total
    first = spec.vision.projector[0] if spec.vision.projector else None
    if first and not dt.autocast and any(ad.target == first.name for ad in vision_adapters(spec, sc, profile)):
        x = sc.micro_batch_size * per_sample(spec, sc).features * first.in_features  # the projector's input
        total += round_allocation(adapter_bytes(profile, sc.precision) * x) + round_allocation(dt.compute * x)
    if sc.gradient_checkpointing is not Checkpointing.NONE and sc.method is not Method.FULL:
        # rows: the language model's whole sequence, text and image tokens (the leaf is the merged embeddings)
        total += round_allocation(dt.residual * sc.micro_batch_size * lm_scenario(spec, sc).seq_len * spec.hidden_size)
    return total


def _input_linear_locals(spec: ModelSpec, sc: Scenario, vsc: Scenario, profile: FrameworkProfile) -> int:
    """The re-run forward at the MLP's input linear under checkpointing with LoRA on it: PEFT's ``result =
    result + lora_B(lora_A(dropout(x))) * scaling`` (peft v0.21.2 tuners/lora/layer.py Linear.forward) holds the
    base output, lora_B's output and the scaled product (T x I each) beside the block's second norm output;
    the activation's input it goes on to make (saved, ``mlp.fc1_out``) is not made yet."""
    from vramfit.estimate import activations as act

    block = spec.vision.block
    up = next((x for x in block.block_linears if x.group == "mlp" and x.in_features == block.hidden_size), None)
    ckpt = vsc.gradient_checkpointing in (Checkpointing.FULL, Checkpointing.OFFLOAD)
    if not ckpt or up is None or up.name not in {ad.target for ad in vision_adapters(spec, vsc, profile)}:
        return 0
    dt = act.dtypes_for(vsc, profile)
    fp32_mlp = vsc.method is Method.QLORA and profile.qlora_unquantized_fp32
    m = dt.norm_out if fp32_mlp else dt.compute
    lb = dt.compute if dt.autocast else dt.adapter
    T, width = vsc.seq_len, act.mlp_width(block)
    saved = tower_block_saved(spec, sc, profile, vision_adapters(spec, sc, profile))
    return (sum(round_allocation(x) for x in (dt.norm_out * T * block.hidden_size, m * T * width, lb * T * width,
                                              lb * T * width)) - round_allocation(saved.items.get("mlp.fc1_out", 0)))


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
    beside them the gradient arriving at the tower's output (:func:`_arriving`). The simulator's trace of InternVL under QLoRA
    shows each of these at the peak. Under QLoRA the MLP runs in fp32 (``Linear4bit`` returns its input's
    dtype, bitsandbytes 0.50.2 nn/modules.py) and the layer scale is an fp32 parameter (peft v0.21.2
    utils/other.py ``prepare_model_for_kbit_training``), as the residual stream is."""
    from vramfit.estimate import activations as act

    block = spec.vision.block
    down = _mlp_out(block)
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
    return sum(round_allocation(x) for x in (m * T * act.mlp_width(block), dt.norm_out * T * h, scale, result, lora_b))


def tower_numel_pending(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, embedding: bool = True,
                        lowest: bool = False, lm_block: bool = False) -> int:
    """Trainable elements whose gradients are not yet made while the tower's top block (``lowest``: its lowest
    block) runs its activation's backward: the tower's but the projector's, the blocks above's and that block's
    MLP output linear's (the embeddings' too), and under full fine-tuning of a placeholder model the untied token
    embedding's (its lookup ran before the tower, so its backward runs last; a cross-attention model runs the tower
    first); whole, not a GPU's share of them (:func:`grads_share`). ``embedding=False``: the caller counts that one itself. ``lm_block``: while the language model's lowest block
    runs backward, when the projector's (and the DeepStack mergers') are not made either: autograd's ready queue
    runs the node made latest first (torch 2.13 include/torch/csrc/autograd/engine.h
    ``ReadyQueue::CompareNodeTaskTime``: the higher sequence number), and the projector's nodes were made before
    any decoder layer's (full fine-tuning; an adapter's are a few rank-wide matrices)."""
    if spec.vision is None or not sc.sees_pixels or not trains_vision(sc, profile):
        return 0
    block = spec.vision.block
    down = _mlp_out(block)
    above = block.num_hidden_layers - 1 if lowest else 0
    if sc.method is Method.FULL:
        trained = spec.vision_params - spec.vision.unused_params
        projector = spec.vision.mergers * sum(x.params for x in spec.vision.projector)
        made = (down.params if down is not None and not block.gated_mlp else block.block_params) + above * block.block_params
        if lm_block:
            projector = made = 0
        later = embedding and not (spec.vision.cross_attention or spec.tie_word_embeddings)
        return max(0, trained - projector - made) + (spec.embedding_params if later else 0)
    r = sc.lora_rank
    per_block = sum(r * (ad.in_features + ad.out_features) for ad in vision_adapters(spec, sc, profile)
                    if ad.layers == block.num_hidden_layers)
    return (block.num_hidden_layers - 1 - above) * per_block
