"""The simulator: one real training step of the real model on fake tensors, on the CPU.

``simulate(scenario) -> SimulationResult`` builds the Hugging Face model of a scenario on the ``meta``
device (nothing is downloaded), materialises it as fake CPU tensors (shapes and dtypes, no data),
runs two HF-Trainer-style optimizer steps under a live-bytes tracker, replays the allocations
through a model of the CUDA caching allocator, and extrapolates from a few layers to the full depth.

Needs the ``sim`` extra (torch, transformers, peft, bitsandbytes). ``import vramfit.sim`` does not
import torch; :func:`simulate` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vramfit.sim.result import SimTensor, SimulationResult

if TYPE_CHECKING:  # pragma: no cover
    from vramfit.sim.engine import Progress

__all__ = ["simulate", "SimulationResult", "SimTensor"]


def simulate(scenario: Any, layers: int | tuple[int, ...] | None = None,
             progress: Progress | None = None) -> SimulationResult:
    """See :func:`vramfit.sim.engine.simulate`."""
    import logging

    # bitsandbytes warns at import that its optional CPU 4-bit kernel package is missing; the
    # simulator never runs bitsandbytes kernels (fake tensors), so the warning is noise here
    logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)
    from vramfit.sim.engine import simulate as _simulate

    return _simulate(scenario, layers=layers, progress=progress)
