"""ZeRO-1/2's initialisation: the 16-bit parameters flattened into one buffer beside themselves.

``DeepSpeedZeroOptimizer.__init__`` (DeepSpeed 0.19.8 runtime/zero/stage_1_and_2.py) flattens each group of
trainable 16-bit parameters into one aligned buffer (``flatten_dense_tensors_aligned``: a ``torch.cat`` of the
parameters) while they still exist, then points them into it (``_update_model_bit16_weights``), which frees the
originals. It does so on the accelerator when the free memory holds the buffer (``flatten_on_accelerator =
accelerator.is_available() and available_memory >= flat_buffer_bytes``); otherwise it moves the group to the host
first (``param.cpu_data = param.data.cpu()``) and copies the flat buffer back, never holding both on the GPU. The
fp32 master partition, the optimizer states and the offload staging buffer come after the flatten, so the
load's high point is the model's weights and one copy of its trainable 16-bit weights. The HF Trainer leaves the
model on the host until the engine moves it there (transformers 5.24.0 trainer.py ``place_model_on_device``),
after the engine's 16-bit cast (engine.py ``_configure_distributed_model``). The card is taken to have the room
(as the simulator's engine does): a card without it flattens on the host and never holds both, so the figure
can only be high there, and it stays one figure per scenario that a card class shifts by a constant (the
planner's premise, plan/evaluate.py ``class_shifts``). For the same reason the load counts the card's cuBLAS
workspaces, which a real load does not have yet (the first matmul makes them): at most 32 MiB high
(estimate/step.py ``workspaces``). The freed originals' segments stay cached (no ``empty_cache`` after the flatten):
:func:`flatten_events` replays them into the ZeRO-2 step's allocator replay (estimate/zero2_step.py
``zero2_step_reserved``), where they count in the reserved figure and, left wholly free, not in the required one (a
card without room gets them back). Releases before 0.18.7 (PR #7828) always flatten on the host (v0.16.2
stage_1_and_2.py l. 320-329: ``move_to_cpu(self.bit16_groups[i])`` then ``empty_cache()``; profile
``ds_flattens_on_host``, releases deepspeed-0.8/0.16/0.18): no original is left cached there.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from vramfit.estimate.phases import Contribution, StepPhase
from vramfit.scenario import Method, Parallelism

if TYPE_CHECKING:
    from vramfit.estimate.step import Step


def flat_copy(step: Step) -> int:
    """Bytes of the flat 16-bit buffer of the trainable parameters (whole on every rank: ZeRO-1/2 partition it
    afterwards, ``get_data_parallel_partitions`` views it)."""
    p = step.parts
    return p.weights if step.sc.method is Method.FULL else p.adapters


def flattens_on_gpu(step: Step) -> bool:
    """ZeRO-1/2 flatten on the accelerator: the card holds the buffer beside the weights (module docstring)."""
    return (step.sc.parallelism in (Parallelism.ZERO1, Parallelism.ZERO2) and flat_copy(step) > 0
            and not step.profile.ds_flattens_on_host)


def flatten_load_phase(step: Step) -> Iterator[Contribution]:
    """The load's high point under ZeRO-1/2: the weights and the flat copy of the trainable ones (and the
    workspaces, module docstring)."""
    if not flattens_on_gpu(step):
        return
    p = step.parts
    for name in ("weights", "quantized_base", "adapters", "workspaces"):
        yield Contribution(name, StepPhase.LOAD, getattr(p, name))
    yield Contribution("temporaries", StepPhase.LOAD, flat_copy(step))


def flatten_events(step: Step, by_module: bool = False) -> list[int]:
    """The flatten on the GPU as allocator events (``n``: allocate, ``-k``: free the ``k``-th, as
    estimate/allocator.py ``transient_reserved``): each trainable 16-bit parameter the engine moved to the GPU one by
    one (``module.to(device)`` after the 16-bit cast: one segment each when 1 MiB or more), the flat buffer
    (``torch.cat``, kept: the parameters' storage from then on), then the originals freed
    (``_update_model_bit16_weights`` points the parameters into the flat buffer). DeepSpeed 0.19.8
    runtime/zero/stage_1_and_2.py ``DeepSpeedZeroOptimizer.__init__`` (module docstring). Empty unless full
    fine-tuning flattens on the GPU: LoRA's originals are the adapters, small-pool blocks of a few MiB in all.
    ``by_module``: the originals in module order, a layer's linears and norms together, as ``module.to(device)`` moves
    them (estimate/zero12_partition.py ``module_order``): the engine's load (`vramfit simulate --full-depth`, Qwen2.5-0.5B
    ZeRO-2 offload) reserves 2,408 MiB, this order's replay the same, the linears grouped by kind across layers 2,488
    (1-10 MiB tensors share 20 MiB segments differently). The ZeRO-1/2 step's replay (estimate/zero2_step.py) still
    takes the grouped order and no saved activations, whose segments it leaves to the usual slack."""
    from vramfit.estimate.params import base_tensors
    from vramfit.estimate.zero12_partition import module_order

    if not flattens_on_gpu(step) or step.sc.method is not Method.FULL:
        return []
    c = step.sc.precision.compute_bytes
    if by_module:
        originals = [c * n for n, _ in module_order(step.spec, step.profile.runs_transformers_modeling)]
    else:
        originals = [c * t.numel for t in base_tensors(step.spec) for _ in range(t.count)]
    n = len(originals)
    return originals + [flat_copy(step)] + [-k for k in range(1, n + 1)]


def host_flatten_note(step: Step, phases: dict[str, int], peak_phase: str) -> list[str]:
    """Where ZeRO-1/2's flatten on the GPU sets the peak: DeepSpeed flattens there only when the card's free memory
    holds the copy (module docstring, 0.18.7 stage_1_and_2.py l. 370-383), so a card without that room runs the
    flatten on the host and peaks at the next phase. The figure stays the one with the flatten (one figure per
    scenario); the note gives the other."""
    if peak_phase != StepPhase.LOAD.value or not flattens_on_gpu(step):
        return []
    phase, top = max(((k, v) for k, v in phases.items() if k != StepPhase.LOAD.value), key=lambda kv: kv[1])
    return [f"The peak is ZeRO's load: the {flat_copy(step) / 2**30:,.2f} GiB flat copy of the 16-bit trainable "
            f"weights beside themselves, which DeepSpeed (0.18.7 and later) makes on the GPU only where the card's "
            f"free memory holds it; on a card without that room it flattens on the host and the peak is the "
            f"{phase} phase's, {top / 2**30:,.2f} GiB allocated."]
