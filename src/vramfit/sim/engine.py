"""``simulate(scenario)``: trace real training steps on fake tensors and report them like the estimator."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from vramfit import limits
from vramfit.errors import ScenarioError
from vramfit.estimate.phases import StepPhase
from vramfit.estimate.result import Component, EstimateResult, ModelInfo, Peak, Phase, PhasePeak
from vramfit.scenario import Method, Parallelism, Scenario, parse_scenario
from vramfit.sim.result import SimulationResult

Progress = Callable[[str, float], None]  # (what is running, fraction done)

_COMPONENT_INFO = {
    "weights": (Phase.PERSISTENT, "model weights held on this GPU (frozen base, or every weight for full)"),
    "quantized_base": (Phase.PERSISTENT, "packed 4-bit weights and their quantization state"),
    "adapters": (Phase.PERSISTENT, "LoRA A and B matrices"),
    "gradients": (Phase.BACKWARD, "gradients of trainable parameters"),
    "optimizer_state": (Phase.AFTER_FIRST_STEP, "optimizer state on the GPU"),
    "autocast_copies": (Phase.FORWARD_BACKWARD, "16-bit weight copies cached by autocast"),
    "activations": (Phase.FORWARD_BACKWARD, "tensors saved for backward (and recomputed ones)"),
    "logits_loss": (Phase.FORWARD_BACKWARD, "logits, their fp32 upcast and the loss's saved tensors"),
    "temporaries": (Phase.TRANSIENT, "short-lived tensors of the phase holding the peak"),
    "workspaces": (Phase.PERSISTENT, "cuBLAS and cuBLASLt workspaces (forward thread and autograd thread)"),
    "allocator_slack": (Phase.TRANSIENT, "unsplit cached blocks charged whole to allocated_bytes"),
}


_ZERO = (Parallelism.ZERO1, Parallelism.ZERO2, Parallelism.ZERO3)


def resolve_config(sc: Scenario) -> tuple[str, dict, str, tuple[str, ...], int]:
    """(model id, config.json dict, origin, notes, num_params) for a scenario."""
    from vramfit.models.catalog import resolve_generic, resolve_model

    rm = resolve_model(sc.model) if sc.model is not None else resolve_generic(sc.params)
    return rm.id, rm.config, rm.origin, tuple(rm.notes), rm.spec.num_params


def _check_model(sc: Scenario) -> None:
    """The estimator's refusals that need the model (estimate/fsdp2_fused_head.py, estimate/fsdp_dtype.py): a setup
    the real library fails on is told in one line here too, not as the traceback the traced run would raise (FSDP2's
    ``AssertionError: FSDP expects uniform original parameter dtype``)."""
    from vramfit.estimate.framework import scenario_profile
    from vramfit.estimate.fsdp2_fused_head import check_fused_head_unit
    from vramfit.estimate.fsdp_dtype import check_uniform_dtype
    from vramfit.models.catalog import resolve_generic, resolve_model

    spec = (resolve_model(sc.model) if sc.model is not None else resolve_generic(sc.params)).spec
    profile = scenario_profile(sc)
    check_fused_head_unit(spec, sc, profile)
    check_uniform_dtype(spec, sc, profile)


# FSDP2 fully_shard with reshard_after_forward True (fsdp) or False (fsdp-grad-op), sim/fsdp.py
_FSDP = (Parallelism.FSDP, Parallelism.FSDP_GRAD_OP)


def _check(sc: Scenario) -> None:
    from vramfit.sim.stages import check

    check(sc)
    if sc.parallelism in _ZERO:  # DeepSpeed's own engine on fake tensors (sim/deepspeed_zero.py)
        from vramfit.sim.deepspeed_zero import check as check_zero

        check_zero(sc)
    elif sc.num_gpus > 1 and sc.parallelism not in _FSDP:
        raise ScenarioError("parallelism", f"the simulator runs one GPU, FSDP2 (full shard or grad-op) or DeepSpeed "
                            f"ZeRO; {sc.parallelism.value} is estimator-only",
                            ["none", "fsdp", "fsdp-grad-op", "zero1", "zero2", "zero3"])
    if sc.parallelism not in (Parallelism.NONE, Parallelism.DDP, *_FSDP) and sc.parallelism not in _ZERO:
        raise ScenarioError("parallelism", f"{sc.parallelism.value} is estimator-only in the simulator",
                            ["none", "fsdp", "fsdp-grad-op", "zero1", "zero2", "zero3"])
    if sc.offload.value != "none" and sc.parallelism not in _ZERO:  # DeepSpeed offloads in its own engine
        raise ScenarioError("offload", "CPU offload of model state is simulated under DeepSpeed ZeRO only; "
                            "set parallelism to zero1, zero2 or zero3, or offload none", ["none"])
    if sc.num_gpus > limits.SIM_MAX_GPUS:  # bounded before work (vramfit.limits gives the reason)
        raise ScenarioError("num_gpus", f"the simulator traces at most {limits.SIM_MAX_GPUS:,} GPUs (SIM_MAX_GPUS); "
                            "the estimator takes more")
    if sc.trains_adapters and sc.lora_rank > limits.SIM_MAX_LORA_RANK:
        raise ScenarioError("lora_rank", f"the simulator traces LoRA ranks up to {limits.SIM_MAX_LORA_RANK:,} "
                            "(SIM_MAX_LORA_RANK); the estimator takes more")
    if sc.optimizer_in_backward and sc.grad_accum > 1:
        raise ScenarioError("optimizer_in_backward", "cannot accumulate gradients when the step runs in backward "
                            "(torchtune rejects it too); set grad_accum to 1")


def simulate(scenario: Any, layers: int | tuple[int, ...] | None = None,
             progress: Progress | None = None) -> SimulationResult:
    """Run two real optimizer steps of the scenario on fake tensors and return its memory.

    ``layers``: decoder depths to trace. ``None``: :func:`default_depths` (the whole depth for full fine-tuning, else
    two small depths extrapolated, exact for identical layers); an int or a 1-tuple equal to the model's depth traces the whole model;
    two depths are traced and extrapolated. ``progress(text, fraction)`` is called as it runs.
    """
    from vramfit.sim.build import num_layers_of

    t0 = time.perf_counter()
    sc, ran_as = as_fsdp2(parse_scenario(scenario))
    sc, eager = as_eager(sc)
    ran_as += eager
    _check(sc)
    _check_model(sc)
    model_id, config, origin, notes, num_params = resolve_config(sc)
    full = num_layers_of(config)
    depths, windows = _depths(config, layers, full) if layers is not None else default_depths(sc, config, full)
    if max(depths) > limits.SIM_MAX_FULL_DEPTH_LAYERS:
        raise ScenarioError("layers", f"tracing {max(depths):,} decoder layers one by one is more than "
                            f"{limits.SIM_MAX_FULL_DEPTH_LAYERS} (SIM_MAX_FULL_DEPTH_LAYERS); leave out --full-depth "
                            "to extrapolate from two small depths")
    summaries = []
    counts = []
    assumptions: list[str] = []
    for i, depth in enumerate(depths):
        def report(text: str, i: int = i, depth: int = depth) -> None:
            if progress:
                progress(f"{depth} layers: {text}", i / len(depths))

        s, n_params, n_train, a = _trace_one(sc, config, depth, report, windows)
        summaries.append(s)
        counts.append((n_params, n_train))
        assumptions = a
    if progress:
        progress("done", 1.0)
    if len(depths) == 1:
        summary = summaries[0]
        n_train = counts[0][1]
    else:
        from vramfit.sim.extrapolate import extrapolate

        a, b = depths
        summary = extrapolate(summaries[0], a, summaries[1], b, full)
        n_train = round(counts[0][1] + (counts[1][1] - counts[0][1]) * (full - a) / (b - a))
        assumptions.append(
            f"Traced {a} and {b} of {full} decoder layers and extrapolated linearly (every figure is affine "
            "in the number of identical layers; checked against full-depth traces in the test suite)."
        )
    if sc.method is Method.FULL:
        n_train = num_params
    return _result(sc, model_id, origin, notes, num_params, n_train, summary, depths, full,
                   list(notes) + ran_as + assumptions, time.perf_counter() - t0)


#: how a trace run with FSDP2 in place of the scenario's FSDP1 begins its assumption (:func:`as_fsdp2`)
FSDP2_TRACED = "Traced with FSDP2 as accelerate prepares it (fsdp_version 2)"


def as_fsdp2(sc: Scenario) -> tuple[Scenario, list[str]]:
    """The scenario the simulator runs, and what it says where that is not the one asked for.

    A framework whose FSDP is FSDP1 (hf: accelerate's plugin defaults ``fsdp_version`` to 1, choices.py
    ``FsdpVersion``) is traced as FSDP1 itself for full fine-tuning, LoRA, and QLoRA without
    ``prepare_model_for_kbit_training`` (sim/fsdp.py ``traces_fsdp1``). QLoRA after it (fp32 norms beside 16-bit
    4-bit storage in one block unit, which FSDP1 refuses), where the framework offers FSDP2 as well (its profile's
    ``fsdp2_variant``: accelerate's ``fsdp2_prepare_model``), is traced as ``fsdp_version: 2``, and the result's
    scenario says so, so that its estimate beside it is the same run's."""
    from dataclasses import replace

    from vramfit.choices import FsdpVersion
    from vramfit.estimate.framework import profile_for, scenario_profile
    from vramfit.sim.fsdp import traces_fsdp1

    if sc.parallelism not in _FSDP or sc.num_gpus < 2 or scenario_profile(sc).fsdp2 or traces_fsdp1(sc):
        return sc, []
    if profile_for(sc.framework, sc.framework_version).fsdp2_variant is None:
        raise ScenarioError("framework", f"the simulator traces FSDP1 as accelerate prepares it, and FSDP2; "
                            f"{sc.framework.value} runs its own FSDP1 only: estimator-only", ["hf", "torchtitan"])
    asked = "fsdp_version 1" if sc.fsdp_version is FsdpVersion.V1 else \
        f"fsdp_version auto, FSDP1 under {sc.framework.value} (accelerate's default)"
    note = (f"{FSDP2_TRACED}, not the scenario's FSDP1 ({asked}): the "
            "simulator traces FSDP1 where a block's tensors share one dtype (not QLoRA after "
            "prepare_model_for_kbit_training, whose norms are fp32) and, for LoRA, the model has no MoE expert banks, "
            "so this trace and the estimate beside it are "
            "fsdp_version 2's; "
            "`vramfit estimate` gives FSDP1's.")
    return replace(sc, fsdp_version=FsdpVersion.V2), [note]


#: how a trace of a ``compile: true`` scenario begins its assumption (:func:`as_eager`)
EAGER_TRACED = "Traced eagerly (compile: false)"


def as_eager(sc: Scenario) -> tuple[Scenario, list[str]]:
    """The scenario traced in place of a compiled one, and the note that says so. The simulator runs every op through
    fake tensors eagerly; what ``torch.compile`` changes (AOTAutograd's partition of each compiled graph into the
    tensors its backward reads, fused kernels' intermediates: estimate/block_extras.py ``op_sac_saved``,
    estimate/norms.py, estimate/loss.py ``compiles_loss``) is the estimator's alone, so the trace is set against
    the estimate of the same run uncompiled."""
    from dataclasses import replace

    if not sc.compile:
        return sc, []
    note = (f"{EAGER_TRACED}: the simulator does not run torch.compile, so this trace and the estimate beside it "
            "are the eager run's; `vramfit estimate` gives the compiled one's.")
    return replace(sc, compile=False), [note]


def default_depths(sc: Scenario, config: dict, full: int) -> tuple[tuple[int, ...], tuple[int, int]]:
    """The depths traced without ``layers``: full fine-tuning's whole depth (up to
    ``limits.SIM_DEFAULT_FULL_DEPTH_LAYERS``), else two small depths to extrapolate from (:func:`trace_plan`).

    Why full fine-tuning: its reserved figure depends on where every layer's gradients and lazily created optimizer
    states land among the segments the first step's loss left cached (estimate/transients.py ``first_step_note``), and
    the extrapolation takes reserved as the deeper trace's allocated peak plus the larger overhead of two shallow traces,
    which hold a few layers' worth of them. Against the measured runs (benchmarks/data/measured/vramfit_h100.jsonl,
    vramfit_h200.jsonl: the six full fine-tuning runs) reserved went from -9.1 % to -3.1 % (Qwen3-4B), +12.3 % to
    0.0 % (Llama-3.2-1B at 4 x 2,048), +1.7 % / -2.4 % to -0.1 % / -0.2 % (the 1B at 512), -0.2 % / -0.5 % to 0.0 % /
    -0.9 %; Llama-3.1-8B under ZeRO-3 on two GPUs: 86.5 GiB extrapolated, 67.6 GiB traced whole. LoRA's trainable
    tensors are rank-r and mostly in the small pool, and there the extrapolation is within 1.6 % of the measured
    reserved (the H100 runs)."""
    if sc.method is Method.FULL and full <= limits.SIM_DEFAULT_FULL_DEPTH_LAYERS:
        return (full,), (full, full)
    return _depths(config, None, full)


def _depths(config: dict, layers: int | tuple[int, ...] | None, full: int) -> tuple[tuple[int, ...], tuple[int, int]]:
    from vramfit.sim.extrapolate import trace_plan

    plan, windows = trace_plan(config)
    if layers is None:
        return plan, windows
    if isinstance(layers, int):
        layers = (layers,)
    depths = tuple(sorted(set(int(x) for x in layers)))
    if any(d < 1 or d > full for d in depths) or len(depths) > 2:
        raise ScenarioError("layers", f"trace one or two depths from 1 to {full}, got {layers}")
    if len(depths) == 1 and depths[0] != full:
        raise ScenarioError("layers", f"a single traced depth must be the model's {full} layers; "
                            "give two depths to extrapolate")
    if len(depths) == 2 and depths[0] <= windows[0]:
        raise ScenarioError("layers", f"extrapolation needs the shallower depth above {windows[0]} layers "
                            f"(default plan: {plan})")
    return depths, windows


def _trace_one(sc: Scenario, config: dict, depth: int, report: Callable[[str], None],
               windows: tuple[int, int]) -> tuple[Any, int, int, list[str]]:
    from vramfit.sim.analyze import summarize
    from vramfit.sim.build import build_model
    from vramfit.sim.run import run_training

    report("building")
    built = build_model(config, sc, depth)
    reference = _reference_copy(config, sc, depth)
    if sc.parallelism in _ZERO:
        from vramfit.sim.deepspeed_zero import run_deepspeed

        step = run_deepspeed(built, sc, progress=report, workspaces=workspaces_for(sc))
    elif sc.parallelism in _FSDP:
        from vramfit.sim.fsdp import fake_process_group, shard_model, shard_model_fsdp1, traces_fsdp1

        shard = shard_model_fsdp1 if traces_fsdp1(sc) else shard_model
        with fake_process_group(sc.num_gpus), _uniform_dtype_refusal():
            step = run_training(built, sc, progress=report, prepare=lambda b: shard(b, sc),
                                workspaces=workspaces_for(sc))
    else:
        step = run_training(built, sc, progress=report, workspaces=workspaces_for(sc), reference=reference)
    return summarize(step.trace, sc.method is Method.FULL, windows), step.num_params, step.num_trainable, \
        built.assumptions + step.assumptions


def card_capacity(sc: Scenario) -> int | None:
    """Bytes the named card lets PyTorch's allocator reserve: its usable memory less the CUDA context and NCCL
    buffers beside the allocator (estimate/reserved.py process_bytes; estimate ``on_card`` stops reserved there
    too). None without a catalog card."""
    if not sc.gpu:
        return None
    from vramfit.estimate.reserved import process_bytes
    from vramfit.gpus import get_gpu

    try:
        card = get_gpu(sc.gpu)
    except ScenarioError:
        return None
    ctx, nccl = process_bytes(sc, card)
    return card.usable_bytes - ctx - nccl


@contextmanager
def _uniform_dtype_refusal() -> Iterator[None]:
    """FSDP2's mixed-dtype assertion as one line naming ``precision``, for any model whose fp32 parameters the spec
    does not list (estimate/fsdp_dtype.py refuses the listed ones before tracing): torch v2.13.0
    distributed/fsdp/_fully_shard/_fsdp_param_group.py ``_init_mp_dtypes`` raises it at the first forward."""
    try:
        yield
    except AssertionError as exc:
        if not str(exc).startswith("FSDP expects uniform original parameter dtype"):
            raise
        raise ScenarioError("precision", f"this model keeps some parameters in fp32 in a 16-bit load, and FSDP2 needs "
                            f"one dtype for the trainable parameters of each unit ({exc}); use bf16-mixed (fp32 "
                            "weights), LoRA, or DeepSpeed ZeRO", ["bf16-mixed", "fp16-mixed", "fp32"]) from None


def _reference_copy(config: dict, sc: Scenario, depth: int) -> Any:
    """The frozen reference of full fine-tuning: the same model loaded again with the policy's dtype
    (dpo_trainer.py:909-927, grpo_trainer.py:984-1003), in eval mode, nothing trainable."""
    from dataclasses import replace

    from vramfit.choices import Checkpointing
    from vramfit.sim.build import build_model
    from vramfit.sim.stages import reference_copy

    if not reference_copy(sc):
        return None
    ref = build_model(config, replace(sc, gradient_checkpointing=Checkpointing.NONE), depth)
    ref.model.requires_grad_(False)
    ref.model.eval()
    return ref


def workspaces_for(sc: Scenario) -> list[int]:
    from vramfit.estimate.constants import CUBLAS_WORKSPACE, CUBLAS_WORKSPACE_HOPPER, CUBLASLT_WORKSPACE
    from vramfit.gpus import Arch, get_gpu

    hopper = bool(sc.gpu) and get_gpu(sc.gpu).arch is Arch.HOPPER  # the catalog's architecture column
    return [(CUBLAS_WORKSPACE_HOPPER if hopper else CUBLAS_WORKSPACE).value, CUBLASLT_WORKSPACE.value]


_TRACED = (StepPhase.SCORE, StepPhase.FORWARD, StepPhase.BACKWARD, StepPhase.OPTIMIZER_STEP, StepPhase.EVALUATE)


def _phase_kind(label: str) -> str:
    """The step phase a trace label belongs to (the label itself outside the traced phases)."""
    phase = StepPhase.of_trace_label(label)
    return phase.value if phase in _TRACED else label


def _result(sc: Scenario, model_id: str, origin: str, notes: tuple[str, ...], num_params: int, n_train: int,
            s: Any, depths: tuple[int, ...], full: int, assumptions: list[str], seconds: float) -> SimulationResult:
    from vramfit.estimate.reserved import process_bytes
    from vramfit.sim.result import SimTensor

    label = s.peak_phase
    allocated = s.segment_peaks[label]
    ctx, nccl = process_bytes(sc)
    reserved = max(s.reserved, allocated)
    capacity = card_capacity(sc)
    if capacity is not None and allocated <= capacity < reserved:
        # the replay's card is unbounded (sim/cuda_allocator.py); a real one's OOM retry releases the cached segments
        # first, as the estimator's on_card stops reserved (measured, benchmarks/data/measured/vramfit_h100.jsonl:
        # Llama-3.1-8B QLoRA at 32,768 tokens on an H100 reserved 81,954,603,008 B, the unbounded replay
        # 96,854,867,968 B and this cap 84,225,818,624 B)
        reserved = capacity
        assumptions = [*assumptions, f"Reserved stops at {capacity / 2**30:,.2f} GiB, what the {sc.gpu} lets the "
                       "allocator hold: it releases its free cached segments and retries before an allocation fails."]
    device = reserved + ctx + nccl
    comps = [Component(name, b, _COMPONENT_INFO[name][0], "allocated", _COMPONENT_INFO[name][1])
             for name, b in s.components[label].items() if b]
    comps.append(Component("allocator_overhead", reserved - allocated, Phase.PROCESS, "reserved",
                           "caching allocator: reserved but not allocated (replayed block by block)"))
    comps.append(Component("cuda_context", ctx, Phase.PROCESS, "device", "CUDA context and kernels (outside PyTorch)"))
    if nccl:
        comps.append(Component("nccl", nccl, Phase.PROCESS, "device", "NCCL communication buffers"))
    phases: dict[str, tuple[int, str]] = {}
    for seg, peak in s.segment_peaks.items():
        kind = _phase_kind(seg)
        if kind in {p.value for p in _TRACED} and peak >= phases.get(kind, (-1, ""))[0]:
            phases[kind] = (peak, seg)
    def breakdown(seg: str) -> tuple[tuple[str, int], ...]:
        return tuple(sorted((k, v) for k, v in s.components.get(seg, {}).items() if v))

    est = EstimateResult(
        scenario=sc,
        model=ModelInfo(model_id, num_params, n_train, origin),
        peak=Peak(allocated, reserved, device, _phase_kind(label), breakdown(label)),
        components=tuple(comps),
        phases=tuple(PhasePeak(k, v, breakdown(seg)) for k, (v, seg) in phases.items()),
        assumptions=tuple(assumptions),
        host_bytes=s.host_peak,
    )
    top = tuple(SimTensor(t.bytes, t.shape, t.dtype, t.component, t.where, t.op) for t in s.top.get(label, []))
    return SimulationResult(est, tuple(s.timeline.items()), top, depths, full, label, seconds,
                            world_size=sc.num_gpus if sc.parallelism not in (Parallelism.NONE, Parallelism.DDP) else 1)
