"""Estimator speed: one estimate, and a batch of 10,000 scenarios (python benchmarks/estimate_speed.py).

Targets (issue 2): a single estimate well under a millisecond; 10,000 scenarios in seconds.
Model resolution is cached after the first call, as in a long-running CLI batch or web server.
"""

from __future__ import annotations

import itertools
import statistics
import time

from vramfit import estimate
from vramfit.estimate import estimate_spec, resolve_spec
from vramfit.scenario import parse_scenario


def main() -> None:
    base = {"model": "meta-llama/Llama-3.1-8B", "method": "qlora", "seq_len": 4096, "micro_batch_size": 2}
    estimate(base)  # warm the catalog cache
    times = []
    for _ in range(2000):
        t0 = time.perf_counter()
        estimate(base)
        times.append(time.perf_counter() - t0)
    sc = parse_scenario(base)
    mid, spec, origin, notes = resolve_spec(sc)
    core = []
    for _ in range(2000):
        t0 = time.perf_counter()
        estimate_spec(sc, spec, mid, origin, notes)
        core.append(time.perf_counter() - t0)
    print(f"single estimate (validate + resolve + compute): median {1e6 * statistics.median(times):.0f} µs, "
          f"p99 {1e6 * sorted(times)[int(0.99 * len(times))]:.0f} µs")
    print(f"estimate on a resolved model: median {1e6 * statistics.median(core):.0f} µs")

    models = ["meta-llama/Llama-2-7b-hf", "meta-llama/Llama-3.1-70B", "Qwen/Qwen2.5-7B",
              "mistralai/Mixtral-8x7B-v0.1", "google/gemma-2-9b", "microsoft/phi-2"]
    grid = itertools.product(models, ("full", "lora", "qlora"), (512, 1024, 2048, 4096, 8192),
                             (1, 2, 4, 8), ("none", "full"), ("adamw", "adamw-8bit"), (1, 2, 4, 8, 16, 32, 64))
    scenarios = []
    for m, meth, s, b, ck, opt, g in grid:
        par = "none" if g == 1 else "fsdp"
        scenarios.append({"model": m, "method": meth, "seq_len": s, "micro_batch_size": b,
                          "gradient_checkpointing": ck, "optimizer": opt, "num_gpus": g, "parallelism": par})
        if len(scenarios) == 10_000:
            break
    t0 = time.perf_counter()
    for s in scenarios:
        estimate(s)
    dt = time.perf_counter() - t0
    print(f"batch of {len(scenarios):,} scenarios: {dt:.2f} s ({len(scenarios) / dt:,.0f} per second)")


if __name__ == "__main__":
    main()
