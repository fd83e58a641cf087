"""Score the simulator's and the estimator's reserved figure against this project's own measured reserved peaks.

Usage: python benchmarks/sim_reserved.py [--data PATH ...] [--json]

Each ``reserved`` row of ``data/measured/vramfit_h200.jsonl`` and ``vramfit_h100.jsonl`` is a run of
``vramfit measure`` on a real GPU (benchmarks/gpu_grid.py): ``torch.cuda.max_memory_reserved()`` over five training
steps of the real model, with its scenario. For each, ``vramfit simulate`` (the real model's step on fake tensors, its
allocations replayed through the caching allocator model, sim/cuda_allocator.py; the depths it picks by default) and
``vramfit estimate`` give their reserved figure; the error is (figure - measured) / measured. Nothing is fitted.

What the two share is the allocated peak (within 0.6 % on these runs, benchmarks/accuracy.py). What they do not is
where every tensor lands: the simulator replays each allocation of two training steps, so it sees the segments the
first step's gradients and lazily created optimizer states take from the loss's cached blocks, which the next loss
then cannot use (estimate/transients.py ``first_step_note``), and the fragmentation a checkpointed forward leaves;
the estimator replays only the step's large transients and adds a per-tensor slack for the rest
(estimate/reserved.py). Needs the ``simulate`` extra (torch, transformers, peft).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

MEASURED = Path(__file__).resolve().parent / "data" / "measured"
DEFAULT_DATA = (MEASURED / "vramfit_h200.jsonl", MEASURED / "vramfit_h100.jsonl")


def rows(paths=DEFAULT_DATA, ids: set[str] | None = None) -> list[dict]:
    """The measured ``reserved`` rows of ``paths`` (all, or those whose run id is in ``ids``)."""
    out = []
    for path in paths:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            row = json.loads(line) if line.strip() else None
            if row and row["measured"]["metric"] == "reserved" and (ids is None or _run(row) in ids):
                out.append(row)
    return out


def _run(row: dict) -> str:
    """The run id of a ``vramfit-measure-<run>-<counter>`` row."""
    return row["id"].removeprefix("vramfit-measure-").rsplit("-", 1)[0]


def score(paths=DEFAULT_DATA, ids: set[str] | None = None) -> list[dict]:
    """Each row: the run id, the measured reserved bytes, the simulator's and the estimator's, and their errors."""
    from vramfit import estimate
    from vramfit.sim import simulate

    out = []
    for row in rows(paths, ids):
        measured = row["measured"]["bytes"]
        sim = simulate(row["scenario"]).result.peak.reserved_bytes
        est = estimate(row["scenario"]).peak.reserved_bytes
        out.append({"run": _run(row), "model": row["scenario"]["model"], "method": row["scenario"]["method"],
                    "checkpointing": row["scenario"].get("gradient_checkpointing", "none"), "measured": measured,
                    "simulated": sim, "estimated": est, "sim_error": (sim - measured) / measured,
                    "est_error": (est - measured) / measured})
    return out


def summary(scored: list[dict]) -> dict[str, dict[str, float]]:
    """Median and largest absolute error of each figure."""
    return {name: {"median_abs": statistics.median(abs(s[f"{name}_error"]) for s in scored),
                   "max_abs": max(abs(s[f"{name}_error"]) for s in scored)}
            for name in ("sim", "est")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", action="append", type=Path, help="a measured set (repeatable; default: this project's two)")
    ap.add_argument("--json", action="store_true", help="print the rows and the summary as JSON")
    args = ap.parse_args(argv)
    try:
        scored = score(tuple(args.data) if args.data else DEFAULT_DATA)
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, RecursionError) as e:  # not a measured set
        print(f"--data: not a measured set of JSON Lines rows ({type(e).__name__}: {e})", file=sys.stderr)
        return 2
    if not scored:
        print("no measured reserved rows", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"rows": scored, "summary": summary(scored)}, indent=1))
        return 0
    g = 2**30
    print(f"{'run':18s} {'model':28s} {'method':6s} {'ckpt':5s} {'measured':>9s} {'simulated':>10s} {'estimated':>10s}")
    for s in scored:
        print(f"{s['run']:18s} {s['model'][:28]:28s} {s['method']:6s} {s['checkpointing'][:5]:5s} "
              f"{s['measured'] / g:8.2f}  {s['simulated'] / g:6.2f} {s['sim_error']:+6.1%} "
              f"{s['estimated'] / g:6.2f} {s['est_error']:+6.1%}")
    for name, figs in summary(scored).items():
        label = "simulator" if name == "sim" else "estimator"
        print(f"{label}: {len(scored)} runs, median |error| {figs['median_abs']:.1%}, largest {figs['max_abs']:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
