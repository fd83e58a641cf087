"""Measure one CPU thread's torch AdamW(fused=True) step rate (plan/kernels.py CPU_ADAM_PARAMS_PER_S_ONE_THREAD).

Usage: python benchmarks/cpu_adam_thread.py [--params N]

torchrun (torch.distributed.run) leaves every rank of a multi-GPU node one OpenMP thread, so an optimizer step
offloaded to the CPU runs at this rate per rank. Prints parameters per second for bf16 and fp32 tensors: the best
of five steps on ``--params`` parameters (default 10^8) after a warm-up step.
"""

from __future__ import annotations

import argparse
import sys
import time


def rate(n: int, dtype) -> float:
    """Parameters per second of one fused AdamW step on one thread."""
    import torch

    p = torch.nn.Parameter(torch.randn(n, dtype=dtype))
    p.grad = torch.randn(n, dtype=dtype)
    opt = torch.optim.AdamW([p], lr=1e-4, fused=True)
    opt.step()
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        opt.step()
        best = min(best, time.perf_counter() - t)
    return n / best


def main(argv: list[str] | None = None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", type=int, default=100_000_000)
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    for dtype in (torch.bfloat16, torch.float32):
        print(f"{str(dtype).split('.')[1]:<9} {rate(a.params, dtype) / 1e9:.2f}e9 parameters/s on one thread")
    return 0


if __name__ == "__main__":
    sys.exit(main())
