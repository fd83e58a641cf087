"""The phases of one training step, shared by the estimator and the simulator.

The simulator traces whole phases (``FORWARD``, ``BACKWARD``, ``OPTIMIZER_STEP``); the estimator
splits the backward at the points where its high water mark can sit (the loss gradients, inside a
block, the end of backward). Each phase's allocated peak is the sum of the :class:`Contribution`
objects that contributors (:mod:`vramfit.estimate.contributions`) give it, so the breakdown of a
peak is exact by construction.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any


class StepPhase(str, Enum):
    """A phase of one training step; the value is what results print."""

    LOAD = "load"  # model, adapters and workspaces on the GPU before the first step
    GENERATE = "generate"  # GRPO/PPO rollouts: the generation engine and its KV cache (estimate/stages/rl.py)
    SCORE = "score"  # reference / old-policy log-prob passes under no_grad (estimate/stages)
    FORWARD = "forward"  # end of forward: every saved tensor alive, the loss computed
    # the top block's forward: its eager softmax (scores, softmax's fp32 copy and output: block_extras) or its
    # widest DoRA layer's weight norm (estimate/dora.py), whichever is higher
    FORWARD_ATTENTION = "forward-attention"
    BACKWARD = "backward"  # the whole backward, as the simulator traces it
    BACKWARD_LOSS = "backward-loss"  # start of backward: the loss and logits gradients
    BACKWARD_BLOCK = "backward-block"  # inside one block's backward (recompute, working set)
    BACKWARD_VISION = "backward-vision"  # a VLM's vision tower, after the language model's whole backward
    BACKWARD_END = "backward-end"  # end of backward: FSDP full fine-tuning's last unit's gradients beside the shards
    BACKWARD_END_TIED = "backward-end-tied"  # tied embeddings: both gradients of the shared weight
    # optimizer in backward with a torchao optimizer: the input embedding's step, the last one, and its temporaries
    BACKWARD_END_STEP = "backward-end-step"
    ZERO_GRAD = "zero_grad"  # gradients released (set_to_none=True)
    OPTIMIZER_STEP = "optimizer-step"  # the optimizer's update and its temporaries
    EVALUATE = "evaluate"  # an evaluation pass between optimizer steps, under no_grad (estimate/evaluation.py)

    @property
    def traced_as(self) -> StepPhase:
        """The phase the simulator traces this one in (the estimator's backward sub-phases are
        parts of ``BACKWARD``, its forward ones of ``FORWARD``)."""
        if self.value.startswith("backward"):
            return StepPhase.BACKWARD
        return StepPhase.FORWARD if self.value.startswith("forward") else self

    @property
    def trace_mark(self) -> str:
        """The suffix the simulator's tracker marks the start of this phase with (``it1.mb1.forward``)."""
        return _TRACE_MARKS.get(self, self.value)

    @classmethod
    def of_trace_label(cls, label: str) -> StepPhase | None:
        """The phase a simulator trace label (``load``, ``it2.mb1.backward``, ``it2.optimizer``) marks."""
        tail = label.rsplit(".", 1)[-1]
        return _BY_MARK.get(tail)


#: the phases of the training step proper, forward to optimizer step, in report order: every contributor that is
#: resident through the step (the model state, a colocated vLLM, PPO's value and reward models) is in each of them
TRAINING_PHASES = (
    StepPhase.FORWARD, StepPhase.FORWARD_ATTENTION, StepPhase.BACKWARD_LOSS, StepPhase.BACKWARD_BLOCK,
    StepPhase.BACKWARD_VISION, StepPhase.BACKWARD_END, StepPhase.BACKWARD_END_TIED, StepPhase.BACKWARD_END_STEP,
    StepPhase.OPTIMIZER_STEP,
)

_TRACE_MARKS = {StepPhase.OPTIMIZER_STEP: "optimizer"}
_BY_MARK = {
    p.trace_mark: p
    for p in (StepPhase.LOAD, StepPhase.SCORE, StepPhase.FORWARD, StepPhase.BACKWARD, StepPhase.ZERO_GRAD, StepPhase.OPTIMIZER_STEP,
              StepPhase.EVALUATE)
}


@dataclass(frozen=True)
class Contribution:
    """``bytes`` of the component ``name`` alive at the high point of ``phase`` (allocated counter)."""

    name: str
    phase: StepPhase
    bytes: int


@dataclass(frozen=True)
class PhaseBreakdown:
    """The named contributions at the high point of one phase; they sum to its allocated peak."""

    phase: StepPhase
    parts: tuple[tuple[str, int], ...]  # (component, bytes), non-zero only

    @property
    def total(self) -> int:
        return sum(b for _, b in self.parts)


def largest_per_component(phases: Iterable[Any]) -> dict[str, int]:
    """Each component's largest size over the phases of a step (from ``EstimateResult.phases``).

    The component table holds sizes at the peak; this per-phase view is what a component can reach
    anywhere in the step (activations before the optimizer step, all gradients at it ...)."""
    out: dict[str, int] = {}
    for p in phases:
        for name, nbytes in p.breakdown:
            out[name] = max(out.get(name, 0), nbytes)
    return out
