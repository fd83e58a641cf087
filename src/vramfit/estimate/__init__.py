"""``estimate(scenario) -> EstimateResult``: per-GPU peak memory of a fine-tuning step, no torch."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, NamedTuple

from vramfit.calibration import Calibration, adjust
from vramfit.errors import ScenarioError
from vramfit.estimate.accuracy import accuracy_for
from vramfit.estimate.block_extras import compile_note
from vramfit.estimate.cast_load import cast_is_peak, cast_reserved
from vramfit.estimate.deepspeed import master_note, trainer_note, unread_note
from vramfit.estimate.dora import dora_notes
from vramfit.estimate.ds_load import host_flatten_note
from vramfit.estimate.ds_offload import host_optimizer_note, offload_reserved
from vramfit.estimate.eager_carry import carried_outputs_segments
from vramfit.estimate.evaluation import evaluation_notes, evaluation_reserved
from vramfit.estimate.first_batch import longest_first_notes
from vramfit.estimate.fsdp1_moments import unshard_pool_idle
from vramfit.estimate.fsdp2 import fsdp2_notes
from vramfit.estimate.fsdp_reserved import fsdp_reserved, fsdp_reserved_notes
from vramfit.estimate.nf4_load import load_notes, load_reserved, step_fits_in_load
from vramfit.estimate.phases import StepPhase
from vramfit.estimate.reentrant_fsdp1 import reentrant_notes
from vramfit.estimate.reserved import process_bytes, reserved_bytes
from vramfit.estimate.result import (
    Component,
    EstimateResult,
    ModelInfo,
    Peak,
    Phase,
    PhasePeak,
)
from vramfit.estimate.saved_modules import notes as saved_module_notes
from vramfit.estimate.step import Step, compute
from vramfit.estimate.transients import first_step_note, length_variation_note, step_transients
from vramfit.estimate.unsloth import replays_step
from vramfit.estimate.vision_inputs import image_tokens_note
from vramfit.estimate.zero2_step import flatten_cached, zero2_step_reserved
from vramfit.gpus import GPUS_PER_NODE
from vramfit.models.context import past_context_note, trained_context
from vramfit.scenario import Checkpointing, Method, Optimizer, Quantize, Scenario, parse_scenario

if TYPE_CHECKING:
    from vramfit.gpus import GPU
    from vramfit.models.spec import ModelSpec

__all__ = ["estimate", "resolve_spec", "EstimateResult", "FitFigures", "fit_figures", "step_peak"]

_PAGED = (Optimizer.PAGED_ADAMW, Optimizer.PAGED_ADAMW_8BIT)


def resolve_spec(sc: Scenario):
    """(model id, ModelSpec, origin, notes) for a scenario's ``model`` or ``params``."""
    from vramfit.models import generic_spec, resolve_model

    if sc.model is not None:
        rm = resolve_model(sc.model)
        return rm.id, rm.spec, rm.origin, tuple(rm.notes)
    spec = generic_spec(sc.params)
    note = (
        f"params={sc.params:,}: a generic Llama-style dense decoder of that size "
        f"(hidden {spec.hidden_size}, {spec.num_hidden_layers} layers, vocab {spec.vocab_size}); "
        "give a model id or config.json for an exact figure"
    )
    return f"generic-{sc.params}", spec, "generic", (note,)


def _upcast_note(sc: Scenario, prof) -> str:
    """What prepare_model_for_kbit_training (and TRL's cast back, profile ``qlora_16bit_embeddings``) left in fp32."""
    from vramfit.estimate.core import qlora_embeddings_bf16

    if not prof.qlora_unquantized_fp32:
        return ""
    if qlora_embeddings_bf16(sc, prof):
        return (" (cast to fp32 by prepare_model_for_kbit_training; embeddings and lm_head back to bf16 by TRL's "
                "peft_module_casting_to_bf16)")
    return " (cast to fp32 by prepare_model_for_kbit_training)"


def _experts_note(sc: Scenario, prof) -> str:
    from vramfit.estimate.core import experts_quantized

    how = "quantized like the other block linears" if experts_quantized(sc, prof) else (
        "NOT quantized: fp32 (prepare_model_for_kbit_training casts them)" if prof.qlora_unquantized_fp32
        else "NOT quantized: 16-bit")
    why = (f"quantize_experts={sc.quantize_experts.value}" if sc.quantize_experts.value != "auto" else
           "quantize_experts=auto: " + ("transformers 5 stores experts as fused 3-D parameters, which bitsandbytes "
                                        "leaves unquantized (transformers 4 quantized them)" if prof.quantizes_exact_linear_only
                                        else f"{prof.name} quantizes each expert's linear"))
    return f"Mixture-of-experts weights {how} ({why}); set quantize_experts=yes or no to choose."


def _context_note(sc: Scenario, card) -> str:
    from vramfit.estimate.constants import CUDA_CONTEXT_HOPPER
    from vramfit.estimate.reserved import context_constant

    ctx = context_constant(sc, card)
    measured = " (measured on an H200, torch 2.11 + CUDA 13)" if ctx is CUDA_CONTEXT_HOPPER else ""
    return (f"CUDA context and lazily loaded kernels assumed {ctx.value / 2**20:.0f} MiB per GPU"
            f"{measured}; `vramfit measure` records yours and `vramfit calibrate` reports the overhead your runs imply.")


def _fallback_attention_note(sc: Scenario, r: Step) -> str | None:
    """What flash or SDPA attention runs as on a card without FlashAttention-2: a framework's fallback kernel that
    takes k and v copied out to every query head (estimate/attention.py ``falls_back_repeating_kv``), or PyTorch's
    math kernel for grouped-query SDPA (``gqa_math_on_card``)."""
    from vramfit.estimate.attention import falls_back_repeating_kv, gqa_math_on_card

    spec = r.spec
    if spec.num_key_value_heads >= spec.num_attention_heads:
        return None
    card = r.card.name if r.card else sc.gpu
    if falls_back_repeating_kv(sc, r.profile, r.card, spec):
        return (f"Attention: the {card} has no FlashAttention-2, so {r.profile.name} runs xformers with k and v "
                f"copied out to all {spec.num_attention_heads} query heads (not {spec.num_key_value_heads}), and those "
                "copies are saved for backward.")
    if gqa_math_on_card(spec, sc, r.profile, r.card):
        return (f"Attention: the {card} has no flash SDPA kernel and PyTorch's memory-efficient one takes no "
                f"grouped-query heads, so transformers' SDPA call (enable_gqa) runs the math kernel: fp32 "
                f"probabilities ({sc.micro_batch_size} x {spec.num_attention_heads} x {sc.seq_len}^2 per layer) and "
                "fp32 q, k and v of every head are saved for backward.")
    return None


def _assumptions(sc: Scenario, r: Step, spec, reserved: int = 0, events: list[int] | None = None,
                 headroom: int | None = None) -> list[str]:
    prof = r.profile
    default = dict(prof.default_precision).get(sc.method)
    out = [
        f"Framework: {prof.name} (scenario key 'framework'); its layout of adapters, norms and loss is used.",
        *([prof.release_note] if prof.release_note else []),
        f"Precision {sc.precision.value}: {sc.precision.meaning}"
        + (f" ({prof.name}'s default for {sc.method.value})." if sc.precision is default else
           f" (set; {prof.name}'s default for {sc.method.value} is {default.value})." if default else "."),
        f"Activations are counted tensor by tensor from what autograd saves in a {spec.model_type} block "
        f"({r.per_layer / 2**20:,.1f} MiB per block per micro-batch without checkpointing).",
        f"Loss: {r.loss.detail}.",
        "Gradients are freed with zero_grad(set_to_none=True) after each optimizer step.",
        _context_note(sc, r.card),
    ]
    out += [n for n in (compile_note(spec, sc, prof), _fallback_attention_note(sc, r)) if n]
    if sc.method is not Method.FULL:
        dropout = prof.lora_dropout(sc.lora_dropout)
        out += [f"LoRA rank {sc.lora_rank} on {', '.join(sc.lora_targets)}; dropout {dropout}; "
                f"adapters in {'fp32' if prof.adapters_fp32 else 'the parameter dtype'}.", *dora_notes(r), *saved_module_notes(sc, spec, prof, r.parts.copy_grads)]
    if sc.method is Method.QLORA:
        out.append(
            f"Quantized base {sc.quantize.value}: block linears {8 if sc.quantize is Quantize.INT8 else 4}-bit, "
            + ("lm_head too" if prof.qlora_quantizes_lm_head else "embeddings, norms and lm_head unquantized")
            + _upcast_note(sc, prof)
            + f"; the de-quantized copy of the largest layer ({r.dequant / 2**20:,.0f} MiB) is a transient."
        )
        if any(lin.group == "expert" for lin in spec.block_linears):
            out.append(_experts_note(sc, prof))
        if prof.qlora_unquantized_fp32:
            out.append(
                f"QLoRA as the HF recipe runs it (Trainer bf16=True): attention and "
                f"{8 if sc.quantize is Quantize.INT8 else 4}-bit matmuls in 16 bits "
                "under autocast; without autocast, fp32 activations and SDPA's math kernel would need more."
            )
    if sc.optimizer in _PAGED:
        out.append(
            "Paged optimizer: states of tensors >= 1e5 elements live in CUDA managed memory, outside "
            "PyTorch's counters (allocated/reserved); counted in the device figure only."
        )
    out.extend(_offload_and_experts_notes(sc, spec, prof) + image_tokens_note(spec, sc))
    out.extend(inert_key_notes(sc, spec) + unread_note(sc) + trainer_note(sc) + master_note(sc) + host_optimizer_note(sc))
    from vramfit.estimate import stages

    out.extend(stages.assumptions(r))
    if sc.precision.mixed:
        out.append(_mixed_note(sc, r))
    gpus = _gpus_note(sc)
    if gpus:
        out.append(gpus)
    if r.ranks:
        from vramfit.estimate.ranks import layout_note

        out.append(layout_note(sc, r.ranks))
    out.extend(_segment_notes(r, reserved, events, headroom))
    out.extend(evaluation_notes(r))
    out.extend(reentrant_notes(r.spec, sc, prof))
    return out + longest_first_notes(r) + fsdp_reserved_notes(r, reserved) + load_notes(r, reserved) + fsdp2_notes(sc, prof)


def _segment_notes(r: Step, reserved: int, events: list[int] | None, headroom: int | None) -> list[str]:
    """What the reserved figure depends on beyond this step: batch-length variation and the first step's placement
    (estimate/transients.py)."""
    out = []
    note = length_variation_note(r, reserved, events)
    if note and not step_fits_in_load(r):  # in the load's cached blocks a longer batch opens no segment
        out.append(note)
    if first := first_step_note(r, reserved, headroom):
        out.append(first)
    return out


def inert_key_notes(sc: Scenario, spec) -> list[str]:
    """Choices set (not ``auto``) where the scenario gives them nothing to act on: said, not silently dropped.

    Each follows the choice's own contract (vramfit/choices.py: KbitPrepare, UseReentrant, QuantizeExperts,
    QuantizeVision and AdamwImpl are ignored without quantization, checkpointing, experts, a vision tower or AdamW); GPTQ keeps its
    16-bit parameters whatever is asked (peft v0.21.2 src/peft/utils/other.py prepare_model_for_kbit_training
    casts to fp32 only ``if not is_gptq_quantized``)."""
    from vramfit.choices import (
        AdamwImpl,
        FreezeVision,
        KbitPrepare,
        Optimizer,
        Quantize,
        QuantizeExperts,
        QuantizeVision,
        UseReentrant,
    )

    out = []
    qlora = sc.method is Method.QLORA
    if sc.kbit_prepare is not KbitPrepare.AUTO and not qlora:
        out.append(f"kbit_prepare={sc.kbit_prepare.value} is ignored: only a quantized base (method qlora) is "
                   f"prepared for k-bit training, and this run is {sc.method.value}.")
    elif sc.kbit_prepare is KbitPrepare.YES and sc.quantize is Quantize.GPTQ_INT4:
        out.append("kbit_prepare=yes casts nothing here: peft's prepare_model_for_kbit_training skips the fp32 cast "
                   "for a GPTQ model (is_gptq_quantized), so norms, embeddings and head stay 16-bit.")
    if sc.use_reentrant is not UseReentrant.AUTO and sc.gradient_checkpointing is Checkpointing.NONE:
        out.append(f"use_reentrant={sc.use_reentrant.value} is ignored: gradient checkpointing is off.")
    if sc.optimizer_impl is not AdamwImpl.AUTO and sc.optimizer is not Optimizer.ADAMW:
        out.append(f"optimizer_impl={sc.optimizer_impl.value} is ignored: it picks torch's AdamW implementation, and "
                   f"this run's optimizer is {sc.optimizer.value}.")
    experts = any(lin.group == "expert" for lin in spec.block_linears)
    if sc.quantize_experts is not QuantizeExperts.AUTO and not (qlora and experts):
        why = "the model has no experts" if not experts else f"this run is {sc.method.value}, not qlora"
        out.append(f"quantize_experts={sc.quantize_experts.value} is ignored: {why}.")
    if sc.quantize_vision is not QuantizeVision.AUTO and not (qlora and spec.vision is not None):
        why = "the model has no vision tower" if spec.vision is None else f"this run is {sc.method.value}, not qlora"
        out.append(f"quantize_vision={sc.quantize_vision.value} is ignored: {why}.")
    if sc.freeze_vision is not FreezeVision.AUTO and spec.vision is None:
        out.append(f"freeze_vision={sc.freeze_vision.value} is ignored: the model has no vision tower.")
    for key in ("images_per_sample", "frames_per_sample"):  # as vision_inputs.per_image / per_video leave them
        if spec.vision is None and not spec.vision_params and getattr(sc, key):
            out.append(f"{key} is ignored: the model has no vision tower, so its sequences hold text tokens only.")
    return out


def _offload_and_experts_notes(sc: Scenario, spec, prof) -> list[str]:
    """How offloaded block inputs come back (the profile's offload fields), and what ran a MoE block's experts."""
    from vramfit.estimate.moe_kernel import note as moe_note

    out = []
    if spec.router_linear_subclass and sc.method is not Method.FULL and "all-linear" in sc.lora_targets \
            and prof.runs_transformers_modeling:
        out.append("PEFT's all-linear wraps the router, an nn.Linear subclass whose forward returns a tuple, and "
                   "peft 0.21.2's LoRA layer fails reading that output's dtype (the simulator's run of transformers "
                   "5.24.0 and peft 0.21.2): name the linears to adapt; the router is left unadapted here.")
    given = getattr(sc, "_given", None)
    where = "one GPU" if sc.num_gpus == 1 else "several GPUs"
    if given is not None and "gradient_checkpointing" not in given and prof.derives_checkpointing:
        what = f"what its scripts run on {where}" if prof.checkpointing_by_devices else "its default"
        out.append(f"gradient_checkpointing {sc.gradient_checkpointing.value}: not set, so {prof.name}'s own, {what}.")
    runs = prof.scripts_checkpointing(sc.num_gpus)  # the scripts fix it by device count (profile_fields.py)
    if runs is not None and sc.gradient_checkpointing is not runs:
        out.append(f"gradient_checkpointing {sc.gradient_checkpointing.value}: {prof.name}'s scripts run "
                   f"{runs.value} on {where} (checkpointing is their FSDP strategy's per-block policy); counted as "
                   "set, which takes an edited script.")
    if sc.gradient_checkpointing is Checkpointing.OFFLOAD:
        back = "prefetched one block ahead" if prof.offload_ckpt_prefetched else "brought back when its block's backward runs"
        out.append(f"Activation offload: checkpointed block inputs in pinned host memory, {back}.")
    moe = moe_note(spec, sc, prof)
    if spec.vision is not None and sc.method is Method.QLORA:
        out.append(_vision_quant_note(sc, prof))
    return out + ([moe] if moe else [])


def _vision_quant_note(sc: Scenario, prof) -> str:
    """Whether the 4-bit base holds the vision tower and projector (scenario key quantize_vision)."""
    from vramfit.estimate.vision import vision_quantized

    how = "quantized like the language model's linears" if vision_quantized(sc, prof) else "kept 16-bit"
    why = f"quantize_vision={sc.quantize_vision.value}" + ("" if sc.quantize_vision.value != "auto" else (
        ": bitsandbytes replaces every linear but the head" if prof.qlora_quantizes_vision
        else f": {prof.name}'s dynamic 4-bit checkpoints keep the vision layers 16-bit"))
    return f"Vision tower and projector {how} ({why}); set quantize_vision=yes or no to choose."


def _mixed_note(sc: Scenario, r: Step) -> str:
    """What ``-mixed`` runs as: autocast over fp32 weights, or the DeepSpeed engine's 16-bit cast."""
    from vramfit.estimate.framework import ds_engine_cast, runs_under_autocast

    if ds_engine_cast(sc, r.profile):
        return ("Mixed precision: the engine holds the weights in 16 bits (fp32 master copy in the "
                "optimizer's partitions), no autocast: 16-bit activations.")
    if not runs_under_autocast(sc, r.profile):  # profile mixed_casts_params: FSDP2's MixedPrecisionPolicy
        return ("Mixed precision: FSDP's policy casts the weights to 16 bits as it gathers them, no autocast: "
                "16-bit activations; fp32 only in the kept weights, gradients and optimizer states.")
    return "Mixed precision: fp32 weights with 16-bit autocast copies kept for backward."


def _gpus_note(sc: Scenario) -> str | None:
    """How the GPUs of the scenario are laid out (one node, several nodes, or more than a node holds)."""
    if sc.per_rank_layout:  # the layout's own note (estimate/ranks.py layout_note) says the rest
        return f"{sc.num_nodes} nodes of {sc.gpus_per_node} GPUs." if sc.num_nodes > 1 else None
    if sc.num_nodes > 1:
        return _nodes_note(sc)
    if 1 < sc.num_gpus <= GPUS_PER_NODE:
        from vramfit.estimate.framework import scenario_profile
        from vramfit.estimate.nccl import nvls_note

        return (f"{sc.num_gpus} GPUs in one node with {sc.parallelism.value}; NCCL buffers counted in the device figure."
                + nvls_note(sc, scenario_profile(sc).nccl_nvls))
    if sc.num_gpus > GPUS_PER_NODE:
        return (
            f"{sc.num_gpus} GPUs is more than one node holds ({GPUS_PER_NODE}): modelled as {sc.num_gpus} GPUs "
            f"sharing the work with {sc.parallelism.value} as if in one node (intra-node NCCL buffers); "
            "multi-node effects (network transport buffers, hierarchical sharding) are not modelled yet."
        )
    return None


def _nodes_note(sc: Scenario) -> str:
    from vramfit.scenario import Parallelism, ShardScope

    node = sc.shard_scope is ShardScope.NODE
    if node and sc.parallelism is Parallelism.ZERO3:
        how = (f"ZeRO-3 shards over all {sc.num_gpus} ranks, plus ZeRO++ hpZ's second 16-bit copy of the weights "
               f"sharded over the {sc.gpus_per_node} GPUs of a node")
    elif node:
        how = f"HSDP: model state sharded over the {sc.gpus_per_node} GPUs of a node, replicated on each node"
    elif sc.parallelism in (Parallelism.NONE, Parallelism.DDP):
        how = f"{sc.parallelism.value}: every rank holds the whole model state"
    else:
        how = f"{sc.parallelism.value} over all {sc.num_gpus} ranks"
    return (f"{sc.num_nodes} nodes of {sc.gpus_per_node} GPUs; {how}. Per rank, every rank alike; NCCL's network "
            "transport buffers (host memory, proxy) are not counted in the device figure.")


def estimate(
    scenario: Scenario | dict[str, Any] | None = None,
    *,
    card: GPU | None = None,
    spec: ModelSpec | None = None,
    label: str = "config.json",
    notes: tuple[str, ...] = (),
    calibration: Calibration | None = None,
    **keys: Any,
) -> EstimateResult:
    """Estimate the per-GPU peak memory of one training step.

    ``estimate({"model": "meta-llama/Llama-2-7b-hf", "method": "qlora"})`` or
    ``estimate(model="meta-llama/Llama-2-7b-hf", method="qlora")``. Raises
    :class:`vramfit.errors.ScenarioError` on invalid input.

    ``spec``: an architecture already read (e.g. a pasted config.json), named ``label``, used instead of
    resolving ``model``. ``card``: the GPU record of the scenario's ``gpu`` (its architecture picks the
    cuBLAS workspace); when the scenario names a ``gpu`` and no card is given, it is looked up in the
    catalog. Without ``gpu`` the estimate reads no GPU catalog. Fit verdicts are not made here (see
    :mod:`vramfit.plan.verdict`). ``calibration``: a user's measured overheads (:mod:`vramfit.calibration`),
    applied only when the card's family has an entry.
    """
    if scenario is None:
        sc = parse_scenario(keys)
    elif keys and isinstance(scenario, Scenario):
        sc = scenario.replace(**keys)  # keys that follow the changed ones (checkpointing, accumulation) follow them
    elif keys:
        sc = parse_scenario({**dict(scenario), **keys})
    else:
        sc = parse_scenario(scenario)
    if card is None and sc.gpu:
        from vramfit.gpus import get_gpu

        card = get_gpu(sc.gpu)
    if card is not None and sc.gpu != card.gpu_id:  # an alias ("4090") names the card by its catalog id
        given = getattr(sc, "_given", None)
        sc = dataclasses.replace(sc, gpu=card.gpu_id)
        if given is not None:  # the keys the user set stay recorded (Scenario.replace, the assumption lines)
            object.__setattr__(sc, "_given", given)
    if spec is not None:
        model_id, origin = label, "config-file"
    else:
        model_id, spec, origin, notes = resolve_spec(sc)
    r = estimate_spec(sc, spec, model_id, origin, notes, card=card, calibration=calibration)
    return _version_note(sc, r, lambda s: estimate_spec(s, spec, model_id, origin, notes, card=card,
                                                        calibration=calibration))


def _version_note(sc: Scenario, r: EstimateResult, again) -> EstimateResult:
    """``r`` with a line naming each part of the scenario's ``framework_version`` whose release changes none of the
    run's figures (the estimate without that part, ``again``, is byte for byte the same: what that release does
    differently is not on this run's path, e.g. unsloth-2024.11's vision-tower checkpointing on a text model), so a
    choice with nothing to act on is said, not dropped silently. Made here, for one estimate, not for the planner's."""
    from vramfit.estimate.framework_profiles import PROFILES

    if not sc.framework_version or sc.framework_version == PROFILES[sc.framework].version:  # the default release acts
        return r
    parts = sc.framework_version.split("+")
    figures = (r.peak.allocated_bytes, r.peak.reserved_bytes, r.peak.device_bytes, r.peak.required_bytes, r.host_bytes)
    inert = []
    for part in parts:
        try:
            other = again(sc.replace(framework_version="+".join(p for p in parts if p != part) or None))
        except ScenarioError:
            continue
        if (other.peak.allocated_bytes, other.peak.reserved_bytes, other.peak.device_bytes, other.peak.required_bytes,
                other.host_bytes) == figures:
            inert.append(part)
    if not inert:
        return r
    note = (f"framework_version {', '.join(inert)}: what {'this release does' if len(inert) == 1 else 'these releases do'} "
            "differently is not on this run's path (the figures are the same without it).")
    return dataclasses.replace(r, assumptions=(*r.assumptions, note))


class FitFigures(NamedTuple):
    """What the fit test reads of an estimate: ``peak.required_bytes``, the paged optimizer state (the
    ``paged_optimizer_state`` component) and ``host_bytes``; equal to :func:`estimate_spec`'s, byte for byte
    (tests/estimate/test_fit_figures.py)."""

    required_bytes: int
    paged_bytes: int
    host_bytes: int


class _StepPeak(NamedTuple):
    r: Step
    breakdowns: dict[str, dict[str, int]]
    phases: dict[str, int]
    peak_phase: str
    step_phase: str
    tensors: int
    events: list[int]

    @property
    def allocated(self) -> int:
        return self.phases[self.peak_phase]

    def reserved(self, required: bool = False) -> int:
        """:func:`_reserved` of the step (``required``: the cached segments the required figure leaves out)."""
        return max(self.allocated, _reserved(self.r, self.breakdowns, self.step_phase, self.tensors, self.events, required))


def step_peak(sc: Scenario, spec, card: GPU | None) -> _StepPeak:
    """The step's phases, allocated peak and transients: what :func:`fit_figures` and :func:`estimate_spec` share
    (the plan search computes it once for both)."""
    r = compute(spec, sc, card)
    breakdowns = {b.phase.value: dict(b.parts) for b in r.phases}
    phases = {name: sum(d.values()) for name, d in breakdowns.items()}
    # the step's own high point: an evaluation pass adds its segments on top (estimate/evaluation.py)
    step_phase = max((k for k in phases if k != StepPhase.EVALUATE.value), key=phases.get)
    tensors = 0 if replays_step(spec, r.sc, r.profile) else len(r.saved.items)  # a replayed step has its own rounding
    return _StepPeak(r, breakdowns, phases, max(phases, key=phases.get), step_phase, tensors, step_transients(r))


def _card_calibration(card: GPU | None, calibration: Calibration | None):
    """The calibration's entry for the card's family, if any."""
    return calibration.for_card(card.gpu_id if card is not None else None) if calibration is not None else None


def fit_figures(s: _StepPeak, sc: Scenario, card: GPU | None, calibration: Calibration | None = None) -> FitFigures | None:
    """:func:`estimate_spec`'s required peak, paged state and host bytes from the step (:func:`step_peak`), without
    the figures only the reserved and device peaks read: the reserved peak's replays of what the required path leaves
    out (ZeRO-3's load and steps, ZeRO-1/2 offload's: estimate/ds_offload.py ``offload_reserved``), the components and
    the notes. The plan and fit searches read only these (plan/screen.py). None where a calibration covers the card:
    its required peak is the whole device peak (no cached segment is taken off a measured slack), which only the full
    estimate has."""
    if _card_calibration(card, calibration) is not None:
        return None
    ctx, nccl = process_bytes(sc, card)
    paged = s.r.parts.paged_optimizer_state
    return FitFigures(s.reserved(True) + ctx + nccl + paged, paged, s.r.parts.host)


def estimate_spec(
    sc: Scenario, spec, model_id: str, origin: str = "catalog", notes=(), *, card: GPU | None = None,
    calibration: Calibration | None = None, step: _StepPeak | None = None,
) -> EstimateResult:
    """The estimate of ``sc`` on a resolved architecture; ``card`` carries the hardware facts used;
    ``calibration``'s entry for the card's family (if any) replaces the modelled allocator slack and context;
    ``step``: :func:`step_peak` of the same scenario, spec and card where already computed."""
    s = step if step is not None else step_peak(sc, spec, card)
    r, breakdowns, phases, peak_phase, events = s.r, s.breakdowns, s.phases, s.peak_phase, s.events
    parts, allocated = r.parts, s.allocated
    reserved = s.reserved()
    ctx, nccl = process_bytes(sc, card)
    fc = _card_calibration(card, calibration)
    # a measured slack (calibration) is what the user's runs reserved: no cached segment is taken off it. Otherwise the
    # wholly free segments are whatever the required path leaves out (the transients', DeepSpeed 0.19's flatten, the
    # ZeRO-1/2 offload and ZeRO-3 load replays, a GPU load's): one rule for every source of them, so a setting never
    # needs more than another only because its cached segments came from a different place (fit_figures: the same sum)
    released = reserved - s.reserved(True) if fc is None else 0
    reserved, ctx = adjust(allocated, reserved, ctx, fc)
    device = reserved + ctx + nccl + parts.paged_optimizer_state
    required = device - released
    reserved, device, full_card = on_card(card, reserved, device, required, parts.paged_optimizer_state)
    comps = _components(sc, r, breakdowns[peak_phase], reserved - allocated, ctx, nccl)
    past = past_context_note(sc.seq_len, trained_context(spec, origin))  # the rule fit states too (models/context.py)
    headroom = None if card is None else max(0, card.usable_bytes - device)  # what reserved can still grow into
    assumptions = list(notes) + ([past] if past else []) + _assumptions(sc, r, spec, reserved, events, headroom)
    assumptions += [fc.note()] if fc is not None else []
    assumptions += full_card + host_flatten_note(r, phases, peak_phase)
    return EstimateResult(
        scenario=sc,
        model=ModelInfo(model_id, spec.num_params, parts.num_trainable, origin),
        peak=Peak(allocated, reserved, device, peak_phase, tuple(sorted(breakdowns[peak_phase].items())), required),
        components=comps,
        phases=tuple(PhasePeak(k, v, tuple(sorted(breakdowns[k].items()))) for k, v in phases.items()),
        assumptions=tuple(assumptions),
        host_bytes=parts.host,
        accuracy=accuracy_for(sc, sc.sees_pixels and spec.vision is not None),  # a text model ignores images
        ranks=r.ranks,
    )


def on_card(card: GPU | None, reserved: int, device: int, required: int, paged: int = 0) -> tuple[int, int, list[str]]:
    """(reserved, device, note) on a named card the run fits only by releasing cached segments: its reserved figure
    cannot pass what the card lets the allocator hold. When ``cudaMalloc`` fails, the caching allocator frees every
    cached segment holding no live block and retries (pytorch/pytorch@eb42ad6e c10/cuda/CUDACachingAllocator.cpp
    ``malloc``: ``release_cached_blocks`` and retry, modelled in vramfit.sim.cuda_allocator), so the high-water mark of
    reserved stops at the card's usable bytes less the context, NCCL and paged bytes beside it. ``paged``: the paged
    optimizer state in the device figure (CUDA managed memory), of which a run that fits only by paging keeps on the
    card what the verdict leaves there (plan/verdict.py ``paging_bytes``: the least that must page out, ``required``
    less the usable bytes). Unchanged where the card holds the whole figure, where no card is named, or where even the
    retried allocation with all of the paged state in host memory fails (no fit)."""
    if card is None or not required - paged <= card.usable_bytes < device:
        return reserved, device, []
    paged_out = max(0, required - card.usable_bytes)
    before = reserved
    reserved -= device - card.usable_bytes - paged_out
    note = (f"On the {card.name} ({card.usable_bytes / 2**30:,.2f} GiB usable) the allocator releases its free cached "
            f"segments and retries before an allocation fails: reserved stops at {reserved / 2**30:,.2f} GiB, the "
            f"card full (without that limit it would reach {before / 2**30:,.2f} GiB)"
            + (f", at least {paged_out / 2**30:,.2f} GiB of the paged optimizer state in host memory." if paged_out else "."))
    return reserved, card.usable_bytes, [note]


def _dequant_segment_at_logits(r: Step, breakdowns: dict[str, dict[str, int]], allocated: int) -> int:
    """The segment a block's de-quantized weight leaves cached where forward peaks at the logits without it
    (contributions._forward_temporaries): freed with its matmul, it stays reserved (no empty_cache) beside the logits'
    larger tensors, which it cannot hold; a card without headroom releases it (not in the fit figure). Where a later
    phase is the allocated peak (``allocated``), what forward reached with that segment is still the high-water mark
    if it is higher (``max_memory_reserved`` never falls): forward's allocated and segment above ``allocated``, with
    the same slack on top."""
    from vramfit.estimate.allocator import round_allocation

    forward = breakdowns.get(StepPhase.FORWARD.value)
    if forward is None or not r.dequant:
        return 0
    segment = max(0, round_allocation(r.dequant) - forward.get("temporaries", 0))
    return max(0, sum(forward.values()) + segment - allocated)


def _reserved(r: Step, breakdowns: dict[str, dict[str, int]], step_phase: str, tensors: int, events: list[int],
              required: bool = False) -> int:
    """The reserved peak (``required``: with the step's transients at the segments that hold a live block,
    reserved.reserved_bytes, and without the cached segments the ZeRO-2 step and the GPU load leave wholly free:
    zero2_step.zero2_step_reserved, nf4_load.load_reserved), the FSDP and load terms on top (the same path for both,
    so they differ only there). A forced-float32 load's bf16 -> fp16 cast at the allocated peak leaves nothing cached
    (estimate/cast_load.py): its own reserved bytes beside the step's, which starts from its own allocated peak."""
    at_load, allocated = 0, sum(breakdowns[step_phase].values())  # the step's high point, evaluation apart
    if cast_is_peak(r, breakdowns, allocated):
        at_load, allocated = cast_reserved(r, breakdowns)
    conf = r.profile.alloc_conf
    reserved = reserved_bytes(allocated, r.parts, tensors, r.spec.num_hidden_layers, events, conf, required)
    # FSDP1's unshard stream keeps its block units' segments where the peak moment holds fewer (estimate/fsdp1_moments.py)
    reserved += unshard_pool_idle(r, breakdowns, allocated)
    reserved += carried_outputs_segments(r)  # outputs carried into the next forward under eager attention
    reserved += 0 if required else _dequant_segment_at_logits(r, breakdowns, allocated)
    step_allocated = sum(breakdowns.get("optimizer-step", {}).values())
    if cached := zero2_step_reserved(r, events, conf, required):
        step = reserved_bytes(step_allocated, r.parts, tensors, r.spec.num_hidden_layers, (), conf)
        step -= min(step - step_allocated, flatten_cached(r))  # that slack lies in the originals' replayed segments
        reserved = max(reserved, step + cached)  # DeepSpeed ZeRO-2's flat step tensors
    reserved = offload_reserved(r, step_phase, reserved, required)  # ZeRO-1/2 offload: load and norm-copy segments
    reserved = fsdp_reserved(r, breakdowns, allocated, reserved, required)  # FSDP side-stream pools, host wrap
    reserved = load_reserved(r, allocated, reserved, required)  # a model built and quantized on the GPU (estimate/nf4_load.py)
    return max(at_load, evaluation_reserved(r, events, reserved, conf))  # the segments an evaluation pass opens


_A = "allocated"
# the components of the step in report order: name, phase (None: worked out per scenario), the first
# counter that sees it, detail (None: worked out per scenario)
_STEP_COMPONENTS = (
    ("weights", Phase.PERSISTENT, _A, "16-bit or fp32 model weights held on this GPU"),
    ("quantized_base", Phase.PERSISTENT, _A, None),
    ("adapters", Phase.PERSISTENT, _A, None),
    ("master_weights", Phase.PERSISTENT, _A, None),
    ("gradients", None, _A, "gradients of trainable parameters"),
    ("optimizer_state", Phase.AFTER_FIRST_STEP, _A, None),
    ("paged_optimizer_state", Phase.AFTER_FIRST_STEP, "device", "bitsandbytes paged state in CUDA managed memory"),
    ("activations", Phase.FORWARD_BACKWARD, _A, "tensors saved for backward (all blocks, final norm)"),
    ("autocast_copies", Phase.FORWARD_BACKWARD, _A, "16-bit weight copies made by autocast"),
    ("logits_loss", Phase.TRANSIENT, _A, None),
    ("temporaries", Phase.TRANSIENT, _A, "block backward working set / de-quantization / optimizer step"),
    ("comm_buffers", Phase.FORWARD_BACKWARD, _A, "DDP buckets, ZeRO/FSDP gather and reduce buffers"),
    ("eval_forward", Phase.TRANSIENT, _A, "evaluation pass under no_grad: whole logits and the loss's fp32 tensors"),
    ("workspaces", Phase.PERSISTENT, _A, "cuBLAS and cuBLASLt workspaces"),
    ("rope_cache", Phase.PERSISTENT, _A,
     "RoPE cos/sin caches, one per layer (Unsloth 2024.5 to 2024.12; transformers <= 4.44 Llama/Mistral/Qwen2)"),
    ("previous_step_inputs", Phase.FORWARD_BACKWARD, _A,
     "the previous micro-batch's 4-bit matmul inputs (bitsandbytes <= 0.43.1), kept through this forward"),
)


def _components(sc: Scenario, r: Step, at_peak: dict[str, int], slack: int, ctx: int, nccl: int) -> tuple[Component, ...]:
    """The non-zero components. One size per allocated component: what is alive at the peak (``at_peak``;
    the per-phase breakdowns show how each changes across the step), so they sum to the allocated peak;
    then the allocator's ``slack``, the CUDA context and NCCL."""
    from vramfit.estimate.stages import COMPONENTS

    detail = {
        "quantized_base": f"{sc.quantize.value} storage of the frozen linears",
        "master_weights": "fp32 master copy of trainable weights",
        "optimizer_state": f"{sc.optimizer.value} state",
        "logits_loss": r.loss.detail,
        "adapters": "LoRA A and B matrices" + (f" and the whole trained copies of {', '.join(sc.modules_to_save)} "
                                               "(modules_to_save)" if sc.modules_to_save else ""),
    }
    grads = Phase.ACCUMULATION if sc.grad_accum > 1 else Phase.BACKWARD
    sizes = dict(at_peak, paged_optimizer_state=r.parts.paged_optimizer_state)  # paged: device figure only
    out = [Component(name, sizes[name], phase or grads, where, text if text is not None else detail[name])
           for name, phase, where, text in _STEP_COMPONENTS if sizes.get(name)]
    out += [Component(n, at_peak[n], COMPONENTS[n][0], _A, COMPONENTS[n][1]) for n in COMPONENTS if at_peak.get(n)]
    tail = (("allocator_overhead", slack, "reserved", "caching allocator: reserved but not allocated"),
            ("cuda_context", ctx, "device", "CUDA context and kernels (outside PyTorch)"),
            ("nccl", nccl, "device", "NCCL communication buffers"))
    return tuple(out + [Component(n, b, Phase.PROCESS, where, text) for n, b, where, text in tail if b])
