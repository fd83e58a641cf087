"""What a simulation returns: an estimator-shaped result plus what only a trace can tell."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vramfit.estimate.result import EstimateResult


@dataclass(frozen=True)
class SimTensor:
    """One tensor live at the peak (from the deepest traced model)."""

    bytes: int  # as the caching allocator charges it (512-byte rounding)
    shape: tuple[int, ...]
    dtype: str
    component: str
    where: str  # module (or phase) that allocated it
    op: str  # the aten op that produced it

    def to_dict(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "shape": list(self.shape), "dtype": self.dtype,
                "component": self.component, "where": self.where, "op": self.op}


@dataclass(frozen=True)
class SimulationResult:
    """A simulated training step.

    ``result``: the same record the estimator returns (peaks per GPU, components, assumptions).
    ``timeline``: ``(phase label, allocated bytes)`` in order: after model load, per micro-batch the
    forward peak, memory after forward, backward peak, memory after backward, per iteration the optimizer
    step peak and memory after it (``it2`` is the steady state: optimizer state exists).
    ``top_tensors``: the largest tensors live at the peak, from the deepest traced model.
    ``layers_traced``: decoder depths actually run; ``num_layers``: the model's depth.
    """

    result: EstimateResult
    timeline: tuple[tuple[str, int], ...]
    top_tensors: tuple[SimTensor, ...]
    layers_traced: tuple[int, ...]
    num_layers: int
    peak_label: str  # the traced phase holding the peak, e.g. "it2.mb1.backward"
    seconds: float = 0.0
    rank: int = 0
    world_size: int = 1
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def extrapolated(self) -> bool:
        return self.layers_traced != (self.num_layers,)

    def to_dict(self) -> dict[str, Any]:
        out = self.result.to_dict()
        out["simulation"] = {
            "timeline": [{"phase": label, "allocated_bytes": b} for label, b in self.timeline],
            "top_tensors": [t.to_dict() for t in self.top_tensors],
            "layers_traced": list(self.layers_traced),
            "num_layers": self.num_layers,
            "extrapolated": self.extrapolated,
            "peak_label": self.peak_label,
            "seconds": round(self.seconds, 3),
            "rank": self.rank,
            "world_size": self.world_size,
        }
        return out
