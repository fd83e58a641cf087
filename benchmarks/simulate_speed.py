"""How long `vramfit simulate` takes: Llama 1B, 8B and 70B, LoRA and full fine-tuning.

    python benchmarks/simulate_speed.py            # table on stdout
    python benchmarks/simulate_speed.py --json     # one JSON object per scenario
    python benchmarks/simulate_speed.py --full-depth-check   # also time a full-depth 8B trace

Goal (issue 4): under 10 s for 8B and under 30 s for 70B on a 2-core machine, per simulation, the
Python imports (torch, transformers, peft, bitsandbytes: paid once per process) reported separately.
LoRA traces two small depths and extrapolates; full fine-tuning traces its whole depth (up to 96 layers,
sim/engine.py ``default_depths``); ``layers_traced`` says which.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
try:
    import vramfit  # noqa: F401
except ImportError:  # a checkout without `pip install -e .`
    sys.path.insert(0, str(HERE.parent / "src"))

MODELS = {"1B": "meta-llama/Llama-3.2-1B", "8B": "meta-llama/Llama-3.1-8B", "70B": "meta-llama/Llama-3.1-70B"}
GOALS_S = {"8B": 10.0, "70B": 30.0}
GiB = 2**30


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    ap.add_argument("--full-depth-check", action="store_true", help="also trace Llama-3.1-8B LoRA at all 32 layers")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    import peft  # noqa: F401
    import torch  # noqa: F401
    from transformers import AutoModelForCausalLM  # noqa: F401

    from vramfit.sim import simulate

    simulate({"model": MODELS["1B"], "method": "qlora", "seq_len": 64})  # first call: bitsandbytes, model code
    import_s = time.perf_counter() - t0

    rows = []
    for size, model in MODELS.items():
        for method in ("lora", "full"):
            sc = {"model": model, "method": method, "seq_len": args.seq_len}
            t = time.perf_counter()
            r = simulate(sc)
            wall = time.perf_counter() - t
            goal = GOALS_S.get(size)
            rows.append({
                "size": size, "model": model, "method": method, "seq_len": args.seq_len, "seconds": round(wall, 2),
                "goal_s": goal, "meets_goal": None if goal is None else wall < goal,
                "layers_traced": list(r.layers_traced), "num_layers": r.num_layers,
                "peak_allocated_gib": round(r.result.peak.allocated_bytes / GiB, 2),
            })
    if args.full_depth_check:
        sc = {"model": MODELS["8B"], "method": "lora", "seq_len": args.seq_len}
        t = time.perf_counter()
        r = simulate(sc, layers=32)
        rows.append({"size": "8B", "model": MODELS["8B"], "method": "lora (all 32 layers)", "seq_len": args.seq_len,
                     "seconds": round(time.perf_counter() - t, 2), "goal_s": None, "meets_goal": None,
                     "layers_traced": [32], "num_layers": 32,
                     "peak_allocated_gib": round(r.result.peak.allocated_bytes / GiB, 2)})

    if args.json:
        print(json.dumps({"imports_seconds": round(import_s, 2)}))
        for row in rows:
            print(json.dumps(row))
    else:
        print(f"imports and first call (torch, transformers, peft, bitsandbytes): {import_s:.1f} s, once per process")
        print(f"{'model':>5} {'method':<22} {'seconds':>8} {'goal':>6} {'traced':>8} {'peak GiB':>9}")
        for row in rows:
            goal = f"<{row['goal_s']:.0f}" if row["goal_s"] else ""
            ok = "" if row["meets_goal"] is None else (" ok" if row["meets_goal"] else " MISSED")
            traced = "+".join(map(str, row["layers_traced"]))
            print(f"{row['size']:>5} {row['method']:<22} {row['seconds']:>8.2f} {goal:>6}{ok} {traced:>8} "
                  f"{row['peak_allocated_gib']:>9.2f}")
    return 0 if all(r["meets_goal"] is not False for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
