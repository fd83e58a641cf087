"""One training step as a typed, frozen record: every figure the phases are built from.

:func:`compute` resolves the model state (:mod:`vramfit.estimate.core`), the saved activations
(:mod:`vramfit.estimate.activations`), the loss (:mod:`vramfit.estimate.loss`) and the transients into
a :class:`Step`; the contributors of :mod:`vramfit.estimate.contributions` then give each phase its
named contributions, and a phase's peak is their sum.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from vramfit.choices import ZERO_FAMILY
from vramfit.estimate import activations as act
from vramfit.estimate import block_extras as extras
from vramfit.estimate import dora, vision
from vramfit.estimate.allocator import round_allocation
from vramfit.estimate.attention import qk_l2_norm_saved, sliding_layers_kv_repeat
from vramfit.estimate.constants import (
    BNB_4BIT_BLOCK,
    CUBLAS_WORKSPACE,
    CUBLAS_WORKSPACE_HOPPER,
    CUBLASLT_WORKSPACE,
)
from vramfit.estimate.core import (
    Parts,
    comm_buffers,
    model_state,
)
from vramfit.estimate.deepspeed import zero3_fetch_copies
from vramfit.estimate.forward_extras import (
    autocast_adapter_copies,
    autocast_copies,
    head_autocast_copy,
    sliding_window_masks,
    sliding_window_recompute,
)
from vramfit.estimate.framework import (
    FrameworkProfile,
    casts_params,
    runs_under_autocast,
    scenario_profile,
)
from vramfit.estimate.loss import LossMemory, head_autocast_calls, loss_memory
from vramfit.estimate.moe_kernel import (
    dense_layer0_grads,
    every_token_top_freed,
    index_backward_transient,
)
from vramfit.estimate.moe_lora import autocast_cast_spec, block_autocast, dense_layers, folded_bank_backward
from vramfit.estimate.params import Adapter
from vramfit.estimate.phases import PhaseBreakdown
from vramfit.estimate.step_grads import (
    _fsdp_block_grads,
    _grad_dtype_bytes,
    _gradient_timing,
    _optimizer_step_temporaries,
)
from vramfit.estimate.vision import tower_autocast_copies
from vramfit.estimate.vision_backward import tower_backward_kept
from vramfit.gpus import GPU, Arch
from vramfit.models.spec import ModelSpec
from vramfit.scenario import (
    Checkpointing,
    Loss,
    Method,
    Parallelism,
    Precision,
    Quantize,
    Scenario,
)


@dataclass(frozen=True)
class Activations:
    """Saved tensors of the blocks and of the rest of the model, per micro-batch (bytes per GPU)."""

    saved: act.Saved  # one block without checkpointing, tensor by tensor
    per_layer: int  # that block's saved bytes, each tensor rounded by the allocator
    blocks: int  # all blocks as kept under the checkpointing policy
    recompute: int  # re-created inside one block's backward (checkpointing)
    outside_blocks: int  # final norm, lm_head input, eager mask ... (model_extra_saved)
    masks: int  # sliding-window SDPA biases (and the k/v a masked sliding layer repeats to every head)
    host: int  # offloaded block inputs
    tower: int = 0  # a VLM's trained vision tower: its blocks as kept (part of blocks)
    tower_recompute: int = 0  # one tower block re-created in its backward (checkpointing)
    lowest: int = 0  # block tensors still kept in the lowest block's backward (the others' consumed)
    forward_only: int = 0  # alive until the forward returns only (a VLM's tower output in the model's output)
    tower_backward: int = 0  # kept while the tower's top block runs backward (estimate/vision_backward.py)
    tower_backward_lowest: int = 0  # kept while its lowest block does
    top_freed: int = 0  # the top block's kept tensors freed before its working set (moe_kernel.every_token_top_freed)
    # MoE and dense layers mixed: (an MoE block's, a dense block's) recompute, the MoE one net of top_freed; each end
    # of the backward recomputes its own layer's kind (moe_lora.position_kinds). None: every block is ``recompute``
    kind_recompute: tuple[int, int] | None = None

    @property
    def total(self) -> int:
        return self.blocks + self.outside_blocks + self.masks


@dataclass(frozen=True)
class Step:
    """Every figure of one training step that a phase contribution reads (bytes per GPU)."""

    spec: ModelSpec
    sc: Scenario
    profile: FrameworkProfile
    parts: Parts  # the component table (final; not modified after compute)
    adapters: tuple[Adapter, ...]
    acts: Activations
    loss: LossMemory
    autocast_forward: int  # autocast copies that die at the end of forward
    block_transient: int  # gradient working set inside one block's backward
    dequant: int  # de-quantized copy of the largest 4-bit weight
    opt_temp: int  # temporaries of the optimizer step (0 when it runs in backward)
    held_grads: int  # gradients kept between micro-batches (grad_accum > 1)
    head_grad: int  # the output layer's weight gradient
    layer_grads: int  # one block's weight gradients during its backward
    lm_head_trainable: bool  # the output layer keeps its input for a weight or adapter gradient
    lowest_grads: int = 0  # gradients alive in the lowest block's backward (0: that position is not modelled)
    lowest_autocast: int = 0  # autocast weight copies alive in the lowest block's backward
    kind_autocast: tuple[int, int] | None = None  # MoE and dense layers mixed: (an MoE block's, a dense block's)
    layer0_grads: int = 0  # full fine-tuning, dense layers below the lowest MoE one: in layer 0's backward
    head_autocast: int = 0  # the output layer's autocast copy: freed by its matmul backward, before any block's
    phases: tuple[PhaseBreakdown, ...] = ()
    card: GPU | None = None  # the target card (a colocated vLLM takes a fraction of it)
    ranks: tuple = ()  # tensor/pipeline/context parallel: each pipeline rank's share (estimate/ranks.py)
    fetch_copy: tuple[int, int] = (0, 0)  # ZeRO-3 host partitions copied to the GPU (forward, block backward)
    block_grads: int = 0  # FSDP full fine-tuning: one block's whole gradients before their reduce-scatter
    eager_forward: tuple[int, int] = (0, 0)  # top block's eager softmax in forward: (working set, kept)
    dora_forward: int = 0  # the largest DoRA layer's forward working set (estimate/dora.py forward_transients)
    dora_recompute: int = 0  # its weight-norm part, which a checkpointed block's recompute adds
    head_trains: bool = False  # the output layer's weight has a gradient (full, or a modules_to_save copy)
    # the loss the scenario asked for (``sc`` holds the one the stage's trainer runs: stages.stage_loss_scenario)
    asked_loss: Loss | None = None

    # names read by estimate/__init__ (assumptions, reserved bytes)
    @property
    def saved(self) -> act.Saved:
        return self.acts.saved

    @property
    def per_layer(self) -> int:
        return self.acts.per_layer


def workspaces(card: GPU | None) -> int:
    """cuBLAS + cuBLASLt workspaces, allocated through the caching allocator (CublasHandlePool.cpp).

    sm90 cards get the 32 MiB cuBLAS workspace (CublasHandlePool.cpp); the catalog's architecture
    column says which card is sm90 (``card`` is the GPU record of the scenario's ``gpu``). One set
    for the forward thread and one for autograd's backward thread: cuBLAS workspaces are per thread
    since pytorch/pytorch PR #180283."""
    hopper = card is not None and card.arch is Arch.HOPPER
    return 2 * ((CUBLAS_WORKSPACE_HOPPER if hopper else CUBLAS_WORKSPACE).value + CUBLASLT_WORKSPACE.value)


def _autocast_copies(spec: ModelSpec, cast: ModelSpec, sc: Scenario, profile: FrameworkProfile,
                     adapters: list) -> tuple[int, int]:
    """(autocast copies to the end of forward, kept into backward): the weights' of ``cast`` (forward_extras.
    autocast_copies) and the fp32 adapters' cached casts (forward_extras.autocast_adapter_copies), which live to the
    end of forward, or are saved into backward without checkpointing."""
    forward, kept = autocast_copies(cast, sc, head_autocast_calls(sc, profile))
    casts = autocast_adapter_copies(adapters, sc, profile, spec.num_hidden_layers)
    if sc.gradient_checkpointing is Checkpointing.NONE:
        return forward, kept + casts
    return forward + casts, kept


def _activations(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, adapters: list, lm_head_trainable: bool) -> Activations:
    quantized = sc.quantize is not Quantize.NONE and sc.method is not Method.FULL
    saved = act.block_saved(spec, sc, profile, adapters, quantized)
    if quantized and sc.quantize is Quantize.GPTQ_INT4:
        # GPTQ for training runs the torch path (ModelCloud/GPTQModel v4.2.5 gptqmodel/nn_modules/qlinear/torch.py
        # TorchQuantLinear._forward: `weights = self.dequantize_weight(...).to(x.dtype)`, then
        # `torch.matmul(x, weights)`): the matmul saves the de-quantized 16-bit weight for the input's gradient,
        # so a block keeps every linear's weight in 16 bits (the recomputed block, under checkpointing)
        saved.add("gptq.dequantized_weights", sc.precision.compute_bytes * sum(
            lin.in_features * lin.out_features * lin.count for lin in spec.block_linears))
    # a VLM's image side of the language model (Llama 3.2 Vision's cross-attention layers) beside the walked layers
    cross, cross_recompute = vision.lm_image_activations(spec, sc, profile, adapters)
    per_layer = sum(round_allocation(v) for v in saved.items.values())
    layers_sum, per_layer_max, kinds = _layer_kinds(spec, sc, profile, adapters, quantized, saved)
    tower, tower_recompute = vision.vision_activations(spec, sc, profile, adapters)
    block_in = round_allocation(extras.block_input_bytes(spec, sc, profile))
    L = spec.num_hidden_layers
    ck, host = sc.gradient_checkpointing, 0
    kept = extras.op_sac_saved(spec, sc, profile) if ck is Checkpointing.SELECTIVE_OP else 0

    def recomputed(block: int) -> int:  # what one block of ``block`` saved bytes re-creates in its backward
        if ck is Checkpointing.NONE:
            return 0
        if ck is Checkpointing.SELECTIVE:
            return sum(round_allocation(v) for k, v in saved.items.items() if k.startswith("attn."))
        return max(0, block - kept)

    recompute = recomputed(per_layer_max)
    blocks = {Checkpointing.NONE: layers_sum, Checkpointing.SELECTIVE: layers_sum - L * recompute,
              Checkpointing.SELECTIVE_OP: L * (block_in + kept), Checkpointing.FULL: L * block_in}.get(ck)
    # a text-only step of a cross-attention model skips those layers (vision.skipped_cross_layers): each keeps
    # nothing, neither what a walked layer keeps under the policy on the GPU nor, offloaded, its input on the host
    skipped = vision.skipped_cross_layers(spec, sc)
    if blocks is None:  # offload: block inputs in host memory; on the GPU as many as the profile says
        blocks, host = profile.offload_ckpt_block_tensors * block_in, (L - skipped) * block_in
    # the lowest block's backward: the blocks above have consumed what they kept; offloaded inputs come back a
    # fixed number at a time (profile.offload_ckpt_block_tensors), less the next block's prefetched input,
    # which the lowest block does not have (profile.offload_ckpt_prefetched)
    lowest = ((profile.offload_ckpt_block_tensors - profile.offload_ckpt_prefetched) * block_in
              if ck is Checkpointing.OFFLOAD else blocks // L)
    if skipped and ck is not Checkpointing.OFFLOAD:  # the layers are alike (a text-only walk): each keeps blocks // L
        blocks -= skipped * lowest
    sliding = sliding_window_recompute(spec, sc, profile)  # a recomputed sliding layer's SDPA bias

    def finished(r: int) -> int:  # a decoder block's re-run (the tower's is its own backward's: tower_backward_kept)
        return max(r, cross_recompute) + sliding

    blocks, freed = blocks + cross, every_token_top_freed(spec, saved.items)
    # each kind's recompute (an MoE block net of what every-token experts free: contributions.py)
    by_kind = None if kinds is None else (finished(recomputed(kinds[0])) - freed, finished(recomputed(kinds[1])))
    return Activations(
        saved, per_layer, blocks + tower, finished(recompute),
        extras.model_extra_saved(spec, sc, profile, lm_head_trainable),
        sliding_window_masks(spec, sc, profile) + sliding_layers_kv_repeat(spec, sc, profile)
        + (extras.eager_mask(spec, sc, profile) if ck is not Checkpointing.NONE else 0), host,
        tower, tower_recompute, lowest + tower,
        vision.forward_only_bytes(spec, sc, profile) + extras.forward_only_masks(spec, sc, profile),
        *tower_backward_kept(spec, sc, profile, adapters), freed, by_kind,
    )


def _layer_kinds(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, adapters: list, quantized: bool,
                 saved: act.Saved) -> tuple[int, int, tuple[int, int] | None]:
    """(every block's saved bytes together, the largest block's, and where the kinds mix (an MoE block's, a dense
    block's)): the MoE block walked for the MoE layers, a dense MLP block for the dense ones (moe_lora.dense_layers).
    The attention part is the same in both."""
    per_layer = sum(round_allocation(v) for v in saved.items.values())
    L = spec.num_hidden_layers
    # Llama 4's weightless q/k norm on its RoPE layers only (attention.qk_l2_norm_saved)
    l2 = spec.qk_l2_norm_layers * qk_l2_norm_saved(spec, sc.micro_batch_size * sc.seq_len)
    mixed = dense_layers(spec)
    if mixed is None:
        return L * per_layer + l2, per_layer, None
    block, n_dense = mixed
    own = [ad for ad in adapters if not ad.param_wrapper]  # the expert banks' ParamWrappers are not in it
    dense = sum(round_allocation(v) for v in act.block_saved(block, sc, profile, own, quantized).items.values())
    return (L - n_dense) * per_layer + n_dense * dense + l2, max(per_layer, dense), (per_layer, dense)


def _dequant(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """bnb MatMul4Bit forward/backward: F.dequantize_4bit(B).to(A.dtype) -> one full weight in the
    compute dtype (+ fp32 absmax when double-quantized) (bitsandbytes autograd/_functions.py:315,346), two
    when the state's dtype is not the compute dtype; none while the fused kernel runs (``profile.qlora_fused_max_tokens``)."""
    quantized = sc.quantize is not Quantize.NONE and sc.method is not Method.FULL
    if not quantized or sc.micro_batch_size * sc.seq_len <= profile.qlora_fused_max_tokens:
        return 0
    biggest_q = max(lin.in_features * lin.out_features for lin in spec.block_linears)
    if profile.qlora_quantizes_lm_head:
        biggest_q = max(biggest_q, spec.lm_head_params or spec.embedding_params)
    # an fp16 de-quantized weight cast to bf16: both copies alive in the `.to` (profile.qlora_dequant_via_fp16)
    copies = 2 if profile.qlora_dequant_via_fp16 and sc.precision in (Precision.BF16_TRUE, Precision.BF16_MIXED) else 1
    return copies * sc.precision.compute_bytes * biggest_q + 4 * (-(-biggest_q // BNB_4BIT_BLOCK.value))


def compute(spec: ModelSpec, sc: Scenario, card: GPU | None = None) -> Step:
    """The step record of a scenario on a resolved architecture, its phases filled in.

    ``card``: the GPU record of ``sc.gpu`` (hardware facts come from it, never from the id). A stage
    other than sft is the SFT step of its policy (``stages.policy_scenario``) plus its contributors."""
    from vramfit.estimate import stages
    from vramfit.estimate.contributions import CONTRIBUTORS, phase_breakdowns

    if sc.per_rank_layout:
        from vramfit.estimate.ranks import model_parallel_step

        return model_parallel_step(spec, sc, card, compute)
    user_sc, sc = sc, vision.lm_scenario(spec, stages.policy_scenario(sc))
    profile = scenario_profile(sc)
    if profile.untied_head_copy and spec.tie_word_embeddings:
        spec = replace(spec, tie_word_embeddings=False, lm_head_params=spec.embedding_params)
    state, adapters = model_state(spec, sc, profile)
    head_trains = sc.method is Method.FULL or "lm_head" in sc.modules_to_save  # LoRA on lm_head: weight frozen
    lm_head_trainable = head_trains or "lm_head" in sc.lora_targets
    acts = _activations(spec, sc, profile, adapters, lm_head_trainable)
    autocast_fwd = autocast_kept = lowest_autocast = head_autocast = 0
    kind_autocast: tuple[int, int] | None = None
    # FSDP (either strategy) computes on its gathered 16-bit copies: autocast finds nothing to cast; NO_SHARD
    # computes on the flat parameters themselves, cast only under MixedPrecision (estimate/no_shard.py)
    no_shard_cast = sc.parallelism is Parallelism.FSDP_NO_SHARD and casts_params(sc, profile)
    if (runs_under_autocast(sc, profile) and not no_shard_cast
            and sc.parallelism not in (Parallelism.FSDP, Parallelism.FSDP_GRAD_OP, *ZERO_FAMILY)):
        cast = autocast_cast_spec(spec, profile)
        autocast_fwd, autocast_kept = _autocast_copies(spec, cast, sc, profile, adapters)
        autocast_kept += tower_autocast_copies(spec, sc, profile)  # the tower's backward runs last
        lowest_autocast, kind_autocast = block_autocast(spec, cast, sc)  # of its own layer kind (moe_lora.py)
        head_autocast = head_autocast_copy(cast, sc, head_autocast_calls(sc, profile))
    loss = loss_memory(spec, sc, profile)
    tb = extras.block_backward_transient(spec, sc, profile, acts.saved) + dora.backward_transient(spec, sc, profile, adapters)
    # transformers 4's indexed expert loop: a zero-filled bank per expert in backward (estimate/moe_kernel.py)
    tb = max(tb, index_backward_transient(spec, sc, profile, _grad_dtype_bytes(sc, profile)))
    dequant = _dequant(spec, sc, profile)
    dora_forward, dora_recompute = dora.forward_transients(spec, sc, profile, adapters)
    opt_temp = _optimizer_step_temporaries(spec, sc, profile, state, adapters)
    parts = replace(
        state, workspaces=workspaces(card), host=state.host + acts.host, activations=acts.total,
        autocast_copies=autocast_kept, logits_loss=loss.forward_peak,
        comm_buffers=comm_buffers(spec, sc, profile, state), temporaries=max(tb + dequant, opt_temp),
    )
    held, head_grad, layer_grads, lowest_grads = _gradient_timing(spec, sc, profile, parts, head_trains)
    # a MoE block's backward opens with the grouped experts' un-permute, before the block has made a gradient of its
    # own: that working set counts net of the block's gradients the block phase adds (block_extras.unpermute_backward)
    tb = max(tb, extras.unpermute_backward(spec, sc, profile) - layer_grads,
             folded_bank_backward(spec, sc, profile, adapters) - layer_grads)  # PEFT's folded bank (moe_lora.py)
    parts = replace(parts, temporaries=max(tb + dequant, opt_temp))
    step = stages.finish(Step(
        spec, stages.stage_loss_scenario(user_sc), profile, parts, tuple(adapters), acts, loss, autocast_fwd, tb, dequant, opt_temp,
        held, head_grad, layer_grads, lm_head_trainable, lowest_grads, lowest_autocast, card=card,
        fetch_copy=zero3_fetch_copies(spec, sc, profile), block_grads=_fsdp_block_grads(spec, sc, profile),
        layer0_grads=dense_layer0_grads(spec, sc, lowest_grads, _grad_dtype_bytes(sc, profile)),
        head_autocast=head_autocast, kind_autocast=kind_autocast, eager_forward=extras.forward_softmax_moment(
            spec, sc, profile, acts, loss.cache), dora_forward=dora_forward, dora_recompute=dora_recompute,
        head_trains=head_trains, asked_loss=user_sc.loss,
    ))
    return replace(step, phases=phase_breakdowns(step, CONTRIBUTORS + stages.contributors(step)))
