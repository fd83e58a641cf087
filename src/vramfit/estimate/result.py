"""Typed results: integer bytes per named part, the peak per GPU, and the assumptions.

The JSON form (:meth:`EstimateResult.to_dict`) is the result object of ``shared/design/scenario.md``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vramfit.scenario import Scenario


class Phase:
    """When a component is live. Plain strings so they serialise as they read."""

    PERSISTENT = "persistent"  # from model load to the end of training
    AFTER_FIRST_STEP = "after-first-step"  # created by the first optimizer step, then persistent
    FORWARD_BACKWARD = "forward-backward"  # saved in forward, freed as backward consumes it
    BACKWARD = "backward"  # produced in backward
    ACCUMULATION = "accumulation"  # held between micro-batches of one optimizer step
    OPTIMIZER_STEP = "optimizer-step"  # temporaries of the step
    TRANSIENT = "transient"  # the largest short-lived allocation of a phase
    PROCESS = "process"  # outside PyTorch's allocator (CUDA context, NCCL, workspaces)


@dataclass(frozen=True)
class Component:
    """One named part of the per-GPU memory, in integer bytes."""

    name: str
    bytes: int
    phase: str
    counted_in: str  # "allocated" | "reserved" | "device" | "host": the first counter that sees it
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "bytes": self.bytes,
            "phase": self.phase,
            "counted_in": self.counted_in,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class Peak:
    """Per-GPU peak: live tensors, the caching allocator's hold, and the whole process on the card."""

    allocated_bytes: int
    reserved_bytes: int
    device_bytes: int
    phase: str  # the phase in which the allocated peak happens
    breakdown: tuple[tuple[str, int], ...] = ()  # components live at that moment; sums to allocated
    #: what the run needs on the card (the fit verdict's figure, vramfit.plan.verdict): ``device_bytes`` less the
    #: cached segments holding no live block, which the allocator's ``malloc`` releases and retries before it fails
    #: (vramfit.sim.cuda_allocator); not given (-1): ``device_bytes`` (nothing modelled as releasable). It counts a paged
    #: optimizer's whole state, so on a named card the run fits only by paging, where ``device_bytes`` stops at the card
    #: (estimate.on_card), it can exceed ``device_bytes``: the verdict's ``paging_bytes`` is the part in host memory
    required_bytes: int = -1

    def __post_init__(self) -> None:
        if self.required_bytes < 0:
            object.__setattr__(self, "required_bytes", self.device_bytes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "allocated_bytes": self.allocated_bytes,
            "reserved_bytes": self.reserved_bytes,
            "device_bytes": self.device_bytes,
            "required_bytes": self.required_bytes,
            "phase": self.phase,
            "breakdown": dict(self.breakdown),
        }


@dataclass(frozen=True)
class PhasePeak:
    """Allocated bytes at the high point of one phase of a training step."""

    phase: str
    allocated_bytes: int
    breakdown: tuple[tuple[str, int], ...] = ()  # named contributions; they sum to allocated_bytes

    def to_dict(self) -> dict[str, Any]:
        return {"phase": self.phase, "allocated_bytes": self.allocated_bytes, "breakdown": dict(self.breakdown)}


@dataclass(frozen=True)
class ModelInfo:
    """The model the estimate is for: its id, parameter count and trainable parameters."""

    id: str
    num_params: int
    num_trainable_params: int
    origin: str = "catalog"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "num_params": self.num_params,
            "num_trainable_params": self.num_trainable_params,
            "origin": self.origin,
        }


@dataclass(frozen=True)
class FitInfo:
    """The verdict on one card, made by the planner (``vramfit.plan.verdict``), never by the estimator.

    ``fits``: the required peak per GPU (``Peak.required_bytes``) is within ``limit_bytes`` (usable memory less the safety
    margin), with ``paging_bytes`` of paged optimizer state moved to host RAM where that is needed.
    """

    gpu_id: str
    name: str
    usable_bytes: int
    fits: bool
    headroom_bytes: int  # limit_bytes less what stays on the card; negative when over
    limit_bytes: int = 0
    safety_margin: float = 0.0
    paging_bytes: int = 0  # paged optimizer state that lives in host RAM for the run to fit
    verdict: str = ""  # "fits" | "fits, with paging of N GiB optimizer state (slower)" | "does not fit" | "cannot run: ..."
    #: False where the run cannot start on the card at all, whatever its memory (plan/verdict.py card_refusal: no BF16,
    #: FlashAttention-2 before Ampere, ...); ``verdict`` then says why and what runs instead, ``fits`` is False
    runs: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(frozen=True)
class EstimateResult:
    """The result object of scenario.md: per-GPU bytes, the breakdown and the assumptions."""

    scenario: Scenario
    model: ModelInfo
    peak: Peak
    components: tuple[Component, ...]
    phases: tuple[PhasePeak, ...]
    assumptions: tuple[str, ...]
    host_bytes: int = 0  # host RAM for offloaded state (ZeRO-Offload / FSDP CPU offload / paging)
    #: card verdicts, filled by the planner (``vramfit.plan.verdict.with_fits``); the estimator leaves it empty
    fits: tuple[FitInfo, ...] = field(default=())
    # the measured cases nearest to this path and our errors on them (estimate/accuracy.py); None: not computed
    accuracy: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    #: tensor/pipeline/context parallel: each pipeline rank's share (vramfit.estimate.ranks.RankMemory), the
    #: most loaded one being ``peak``; empty when every rank holds the same
    ranks: tuple[Any, ...] = ()
    #: a dataset's real lengths in random order (vramfit.dataset.spread): bytes the stranded allocator segments add to
    #: ``peak.reserved_bytes`` (p10/median/p90 over epoch orders); None: no dataset, or lengths that do not vary
    reserved_spread: dict[str, Any] | None = field(default=None, compare=False, hash=False)

    def component(self, name: str) -> int:
        """Bytes of a named component (0 if absent)."""
        return sum(c.bytes for c in self.components if c.name == name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario.to_dict(),
            "model": self.model.to_dict(),
            "peak": self.peak.to_dict(),
            "components": [c.to_dict() for c in self.components],
            "phases": [p.to_dict() for p in self.phases],
            "host_bytes": self.host_bytes,
            "fits": [f.to_dict() for f in self.fits],
            "assumptions": list(self.assumptions),
            "accuracy": self.accuracy,
            "ranks": [r.to_dict() for r in self.ranks],
        } | ({} if self.reserved_spread is None else {"reserved_spread": self.reserved_spread})
