"""The measuring process: ``python -m vramfit.measure.worker --request REQ.json --output OUT.json``.

One process per GPU (``torchrun`` starts N of them for multi-GPU scenarios); each writes its own
figures to ``OUT.json.rank<R>`` and :func:`vramfit.measure.launch.merge_ranks` combines them. A fresh
process per measurement means the device-level figure holds one CUDA context and nothing cached
from another run.

The request: ``{"scenario": {...}, "steps": 10, "device": "cuda" | "cpu", "weights": DIR | null,
"probe": "cuda" | "fake" | "none", "probe_spec": {...}, "seed": 0}``.
The result (per rank): ``status`` (``ok`` / ``oom`` / ``error``, or ``setup-error`` when nothing ran
because the request cannot run here), ``steps_done``, ``step_times_s``, the three peaks, ``failed_at``,
``error``, ``load``, ``environment``, parameter counts and ``assumptions``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from pathlib import Path
from typing import Any

from vramfit.errors import VramfitError
from vramfit.measure import dist
from vramfit.measure.probe import MemoryProbe, is_oom, make_probe
from vramfit.scenario import parse_scenario


def setup_error(message: str) -> dict[str, Any]:
    return {"status": "setup-error", "error": message}


def _request_probe(request: dict[str, Any], device: str, device_type: str, rank: int) -> MemoryProbe:
    """The probe the request names (before anything touches CUDA: the NVML baseline is taken here)."""
    kind = request.get("probe") or ("cuda" if device_type == "cuda" else "none")
    spec = dict(request.get("probe_spec") or {})
    if spec.get("oom_rank") is not None and int(spec["oom_rank"]) != rank:
        spec.pop("oom_at", None)  # tests: only that rank runs out of memory
    return make_probe(kind, device, spec)


def device_problem(device_type: str, local_rank: int, num_gpus: int) -> str | None:
    """Why the requested device is not there, or None. The CLI asks it before its progress line (the launching
    process only counts devices, it creates no CUDA context) and each worker asks it again for its own rank."""
    import torch

    if device_type == "cuda" and not torch.cuda.is_available():
        return ("no CUDA GPU is visible to PyTorch here: `vramfit measure` needs one "
                "(--device cpu runs the harness without memory figures)")
    if device_type == "cuda" and local_rank >= torch.cuda.device_count():
        return f"num_gpus={num_gpus} but only {torch.cuda.device_count()} GPU(s) are visible"
    return None


def _device_error(device_type: str, local_rank: int, num_gpus: int) -> dict[str, Any] | None:
    """A setup error when the requested device is not there, else None."""
    why = device_problem(device_type, local_rank, num_gpus)
    return setup_error(why) if why else None


def _build_failed(exc: Exception, base: dict[str, Any], probe: MemoryProbe, device: str, world: int) -> dict[str, Any]:
    """The result when building the model raised: an out-of-memory result, or a setup error."""
    from vramfit.measure.env import capture
    from vramfit.measure.loop import first_line

    if not is_oom(exc):
        return setup_error(f"building the model failed: {first_line(exc)}")
    peaks = probe.peaks() if hasattr(probe, "peaks") else {}
    return {**base, "status": "oom", "steps_done": 0, "step_times_s": [], "failed_at": "build",
            "error": first_line(exc), **peaks, "load": {},
            "environment": capture(device, world, probe.method), "assumptions": []}


def execute(request: dict[str, Any], probe: MemoryProbe | None = None) -> dict[str, Any]:
    """Run one measurement in this process (this rank) and return its result dict."""
    try:
        scenario = parse_scenario(request["scenario"])
    except VramfitError as exc:
        return setup_error(str(exc))
    steps = int(request.get("steps", 10))
    device_type = request.get("device", "cuda")
    rank, local_rank, world = dist.rank_info()
    if world != scenario.num_gpus:
        return setup_error(f"num_gpus is {scenario.num_gpus} but {world} processes were started")
    device = f"cuda:{local_rank}" if device_type == "cuda" else "cpu"
    if probe is None:
        probe = _request_probe(request, device, device_type, rank)
    if (error := _device_error(device_type, local_rank, scenario.num_gpus)) is not None:
        return error
    if world > 1:
        dist.init(device_type, local_rank)
    from vramfit.measure.build import build_run, model_config
    from vramfit.measure.env import capture
    from vramfit.measure.loop import run_steps

    base: dict[str, Any] = {"rank": rank, "world_size": world}
    try:
        built = build_run(scenario, model_config(scenario), device, request.get("weights"))
        model, no_sync, wrap_notes = dist.wrap(built.model, scenario, device, local_rank, built.autocast_dtype)
    except VramfitError as exc:
        return setup_error(str(exc))
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        return _build_failed(exc, base, probe, device, world)
    result = run_steps(model, scenario, vocab_size=built.vocab_size, steps=steps, device=device, probe=probe,
                       autocast_dtype=built.autocast_dtype, no_sync=no_sync, seed=int(request.get("seed", 0)) + rank)
    return {
        **base,
        "status": result.status,
        "steps_done": result.steps_done,
        "step_times_s": result.step_times_s,
        "step_peaks": result.step_peaks,
        "step_time_s": result.step_time_s,
        "failed_at": result.failed_at,
        "error": result.error,
        **result.peaks,
        "load": result.load,
        "environment": capture(device, world, probe.method),
        "num_params": built.num_params,
        "num_trainable_params": built.num_trainable_params,
        "assumptions": built.assumptions + wrap_notes + result.assumptions,
    }


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write atomically: a reader sees the whole file or none."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vramfit.measure.worker", description=__doc__)
    parser.add_argument("--request", required=True, type=Path)
    parser.add_argument("--output", required=True, type=Path)
    args = parser.parse_args(argv)
    request = json.loads(args.request.read_text(encoding="utf-8"))
    rank, _, world = dist.rank_info()
    out = execute(request)
    write_json(args.output.with_name(f"{args.output.name}.rank{rank}"), out)  # before any collective can hang
    if world > 1 and out.get("status") == "ok":
        # the wrapped model (DDP reducer, FSDP state) left with execute()'s frame, but reference cycles keep it (a
        # weakref to a DDP module built in a returned function stays alive until gc.collect(), torch 2.13): collected
        # here, while its process group is alive, not at interpreter exit after the group is destroyed, which aborted
        # a Gloo rank in 13 of 50 two-rank launches (plan/templates/train.py frees its model in the same order)
        gc.collect()
        dist.finish()
    # a failed rank exits non-zero so torchrun stops its peers instead of leaving them in a collective
    return 0 if world == 1 or out.get("status") == "ok" else 3


if __name__ == "__main__":  # pragma: no cover - exercised through subprocess tests
    sys.exit(main())
