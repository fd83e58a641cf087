"""The floor of a run whose longest sample is its first micro-batch, while later micro-batches hold gradients.

The estimate assumes every micro-batch is ``seq_len`` tokens long (the length the scenario states). lit-gpt's
LoRA recipe forces the longest sample into the first micro-batch and pads that batch to it
(``profile.longest_sample_first``), and under FSDP1's ``no_sync`` (``profile.fsdp_unsharded_accum_grads``) every
later micro-batch of the accumulation carries the earlier ones' whole unsharded block gradients
(estimate/fsdp1_units.py). So the only micro-batch known to be ``seq_len`` long is the one that starts with no
gradient held; with shorter later micro-batches the peak falls below this estimate, down to the larger of:

- the first micro-batch's loss backward, nothing held yet;
- its lowest block's backward: every block above has made its whole flat gradient, the lowest makes its own
  (``step.layer_grads``), its recompute at ``seq_len``, and the fp32 logits the loop still binds (``loss.held``:
  lit-gpt@8641822 finetune/lora.py keeps ``logits`` bound through ``fabric.backward``);
- the second micro-batch's forward: every gradient held, and the first one's fp32 logits, which die only when
  ``logits = model(...)`` rebinds the name after the call returns (Lightning@71aed75 fabric/wrappers.py
  _FabricModule.forward converts the outputs with ``convert_output`` before returning);
- a later block backward with nothing but the held gradients and one block's new ones.

Traced with lit-gpt@8641822's own lit_gpt/model.py and lora.py on torch FSDP1 (CPU/gloo, 2 ranks, use_orig_params,
MixedPrecision bf16, {Block} units, non-reentrant checkpointing per block, ``no_sync`` while accumulating, fp32
``convert_output``): with a 96-token first micro-batch and 32-token later ones, the second micro-batch's forward
peaks with the first one's fp32 logits (614,400 B) beside the held block gradients (415,232 B), and each backward's
fp32 logits stay alive through its block backward. Where between the floor and the estimate a run lands depends on
the later micro-batches' lengths, which the scenario does not state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vramfit.estimate.fsdp1_units import mixed_block_units
from vramfit.estimate.phases import StepPhase

if TYPE_CHECKING:
    from vramfit.estimate.step import Step


def longest_first_floor(step: Step, peak: int | None = None) -> int | None:
    """Allocated bytes of the floor above (module docstring), at most ``peak`` (the step's, if not given); None where
    the recipe does not put its longest sample first, or no gradient is held between micro-batches (then the first
    micro-batch is the worst one)."""
    sc, profile = step.sc, step.profile
    if not (profile.longest_sample_first and step.held_grads and sc.grad_accum > 1 and mixed_block_units(sc, profile)):
        return None
    at = {p.phase: dict(p.parts) for p in step.phases}
    bl, bb = at[StepPhase.BACKWARD_LOSS], at[StepPhase.BACKWARD_BLOCK]
    a, held, loop_logits = step.acts, step.held_grads, step.loss.held
    first_loss = sum(bl.values()) - bl.get("gradients", 0)
    others = sum(bb.values()) - bb.get("gradients", 0) - bb.get("activations", 0) - bb.get("logits_loss", 0)
    lowest_unit = held // step.spec.num_hidden_layers  # one block unit's whole flat gradient
    # the block phase's logits_loss holds this micro-batch's fp32 logits (loop_logits) and any kept output
    first_lowest = (others + held - lowest_unit + step.layer_grads + a.lowest + a.masks + a.recompute
                    + bb.get("logits_loss", 0))
    second_forward = sum(bl.values()) - bl.get("activations", 0) - bl.get("logits_loss", 0) + loop_logits
    # a later, shorter micro-batch: its own logits may be any length, none at the floor
    later_block = others - bb.get("temporaries", 0) + held + step.layer_grads + bb.get("logits_loss", 0) - loop_logits
    peak = max(p.total for p in step.phases) if peak is None else peak
    return min(peak, max(first_loss, first_lowest, second_forward, later_block))


def longest_first_notes(step: Step) -> list[str]:
    """The note an estimate states when :func:`longest_first_floor` applies and is below its peak (else none)."""
    peak = max(p.total for p in step.phases)
    floor = longest_first_floor(step, peak)
    if floor is None or floor >= peak:
        return []
    return [
        f"Assumes every micro-batch is {step.sc.seq_len} tokens long. This recipe puts its longest sample in the "
        "first micro-batch, before any gradient is held; the later ones carry every block's unsharded gradient "
        f"(FSDP no_sync). If they are shorter, the peak lies between {floor / 2**30:,.2f} GiB and this figure, "
        "depending on their lengths."
    ]


def allocated_floor(scenario) -> int | None:
    """The floor above for a scenario (a dict or :class:`~vramfit.scenario.Scenario`), in allocated bytes, when it
    lies below the estimate's peak: the low end of the range the estimate states in its assumptions (the peak at
    ``seq_len`` is the high end). None where the recipe's first micro-batch is its worst one. The accuracy benchmark
    scores a measurement whose sequence length is only an upper bound against this range (benchmarks/accuracy.py)."""
    from vramfit.estimate import resolve_spec
    from vramfit.estimate.step import compute
    from vramfit.gpus import get_gpu
    from vramfit.scenario import parse_scenario

    sc = parse_scenario(scenario.to_dict() if hasattr(scenario, "to_dict") else dict(scenario))
    _, spec, _, _ = resolve_spec(sc)
    step = compute(spec, sc, get_gpu(sc.gpu) if sc.gpu else None)  # the card picks the workspace, as estimate()
    peak = max(p.total for p in step.phases)
    floor = longest_first_floor(step, peak)
    return floor if floor is not None and floor < peak else None
