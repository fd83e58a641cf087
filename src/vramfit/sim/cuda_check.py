"""The same simulated step, run for real on a CUDA GPU: how accurate is the tracker?

:func:`check_on_cuda` builds the scenario's model at one depth, runs the simulator on fake tensors,
then runs the identical code (same builder, same loop, real tensors) on ``cuda`` under the same
tracker, and compares three figures with ``torch.cuda.max_memory_allocated()`` /
``max_memory_reserved()``:

- ``simulated``: the fake-tensor simulation at that depth (what ``vramfit simulate`` would report);
- ``tracked``: the tracker's replay of the real run's own events (isolates what the tracker cannot see);
- ``cuda``: the allocator's own counters.

Run it with ``python -m vramfit.sim.cuda_check --model ... --layers 2`` on a GPU machine, or through
``tests/sim/test_cuda_real.py`` (``gpu`` marker).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from vramfit.scenario import Scenario, parse_scenario


def check_on_cuda(scenario: Any, layers: int = 2) -> dict[str, Any]:
    """Simulated vs tracked vs CUDA allocator peaks for ``scenario`` at ``layers`` decoder layers."""
    import torch

    from vramfit.sim.analyze import summarize
    from vramfit.sim.build import build_model
    from vramfit.sim.engine import resolve_config, workspaces_for
    from vramfit.sim.run import run_training

    if not torch.cuda.is_available():
        raise RuntimeError("check_on_cuda needs a CUDA device")
    sc: Scenario = parse_scenario(scenario)
    _, config, *_ = resolve_config(sc)
    full = sc.method.value == "full"

    fake = run_training(build_model(config, sc, layers), sc, workspaces=workspaces_for(sc))
    sim = summarize(fake.trace, full)

    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    base_alloc = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    real = run_training(build_model(config, sc, layers), sc, device="cuda", fake=False)
    torch.cuda.synchronize()
    cuda_alloc = torch.cuda.max_memory_allocated() - base_alloc
    cuda_res = torch.cuda.max_memory_reserved()
    tracked = summarize(real.trace, full)

    def err(x: int) -> float:
        return round(100.0 * (x - cuda_alloc) / cuda_alloc, 3) if cuda_alloc else 0.0

    return {
        "scenario": sc.to_dict(),
        "layers": layers,
        "device": torch.cuda.get_device_name(),
        "cuda_max_allocated": cuda_alloc,
        "cuda_max_reserved": cuda_res,
        "simulated_allocated": sim.peak_allocated,
        "simulated_reserved": sim.reserved,
        "tracked_allocated": tracked.peak_allocated,
        "tracked_reserved": tracked.reserved,
        "simulated_error_pct": err(sim.peak_allocated),
        "tracked_error_pct": err(tracked.peak_allocated),
        "simulated_peak_phase": sim.peak_phase,
        "tracked_peak_phase": tracked.peak_phase,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", help="scenario as JSON", default=None)
    ap.add_argument("--model", default="meta-llama/Llama-3.2-1B")
    ap.add_argument("--method", default="lora")
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=2)
    args = ap.parse_args(argv)
    sc = json.loads(args.scenario) if args.scenario else {
        "model": args.model, "method": args.method, "seq_len": args.seq_len}
    print(json.dumps(check_on_cuda(sc, args.layers), indent=2))


if __name__ == "__main__":  # pragma: no cover
    main()
