"""Golden snapshot of the estimator: the full result of every accuracy-benchmark row and a grid of
a few hundred scenarios, so a refactor can prove that no printed number moved.

Regenerate only for a stated reason (say it in the commit message):

    python tests/golden/regen.py          # rewrites tests/golden/estimates.json
    python tests/golden/regen.py --diff   # lists the scenarios whose result changed
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
GOLDEN = HERE / "estimates.json"
MEASURED = ROOT / "benchmarks" / "data" / "measured" / "public.jsonl"

MODELS = [
    "meta-llama/Llama-3.1-8B",
    "mistralai/Mistral-7B-v0.1",
    "Qwen/Qwen2.5-7B",
    "google/gemma-2-9b",
    "microsoft/phi-2",
    "tiiuae/falcon-7b",
    "Qwen/Qwen3-30B-A3B",
    "mistralai/Mixtral-8x7B-v0.1",
    "Qwen/Qwen-7B",
    "google/gemma-3-4b-pt",
    "stabilityai/stablelm-base-alpha-3b",
    "bigscience/bloomz-7b1",
    "allenai/OLMo-2-1124-7B",
    "microsoft/phi-1_5",
    "tiiuae/falcon-40b",
    "Qwen/Qwen3-8B",
]


def grid() -> list[dict]:
    out: list[dict] = []
    for model, method, fw in itertools.product(MODELS, ("full", "lora", "qlora"), ("hf", "torchtune", "litgpt")):
        for ckpt, seq, mb in (("none", 512, 1), ("full", 4096, 2)):
            sc = {"model": model, "method": method, "framework": fw, "gradient_checkpointing": ckpt,
                  "seq_len": seq, "micro_batch_size": mb}
            out.append(sc)
    # precision, optimizer, sharding, loss, attention variety on one model
    base = {"model": "meta-llama/Llama-3.1-8B", "seq_len": 2048}
    for prec in ("bf16-true", "bf16-mixed", "fp16-mixed", "fp32"):
        for opt in ("adamw", "adamw-8bit", "paged-adamw-8bit", "adafactor", "sgd"):
            out.append({**base, "method": "full", "precision": prec, "optimizer": opt})
    for par, n in (("ddp", 2), ("zero1", 4), ("zero2", 4), ("zero3", 8), ("fsdp", 8)):
        for off in ("none", "optimizer"):
            out.append({**base, "method": "full", "precision": "bf16-mixed", "parallelism": par,
                        "num_gpus": n, "offload": off})
    for loss in ("standard", "chunked", "fused"):
        for attn in ("sdpa", "flash", "eager"):
            out.append({**base, "method": "lora", "loss": loss, "attention": attn})
    for p in ("1B", "7B", "70B"):
        out.append({"params": p, "method": "qlora", "seq_len": 1024})
    return out


def measured_rows() -> list[dict]:
    if not MEASURED.is_file():
        return []
    rows = [json.loads(x) for x in MEASURED.read_text().splitlines() if x.strip()]
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from accuracy import SOURCE_FRAMEWORK

    out = []
    for row in rows:
        sc = dict(row["scenario"])
        sc.setdefault("framework", SOURCE_FRAMEWORK.get(row["source_id"], "hf"))
        if "compile on" in row.get("notes", "") or "+ Compile" in row.get("source", ""):
            sc.setdefault("compile", True)
        out.append(sc)
    return out


def without_fits(entry: object) -> object:
    """An estimate's JSON without ``fits``: card verdicts are the planner's, not estimator figures."""
    return {k: v for k, v in entry.items() if k != "fits"} if isinstance(entry, dict) else entry


def snapshot() -> dict[str, object]:
    from vramfit import estimate
    from vramfit.errors import VramfitError

    result: dict[str, object] = {}
    for sc in measured_rows() + grid():
        key = json.dumps(sc, sort_keys=True)
        try:
            result[key] = without_fits(estimate(dict(sc)).to_dict())
        except VramfitError as e:
            result[key] = {"error": str(e)}
    return result


def main(argv: list[str]) -> int:
    snap = snapshot()
    if "--diff" in argv:
        old = json.loads(GOLDEN.read_text())
        changed = [k for k in snap if without_fits(old.get(k)) != snap[k]] + [k for k in old if k not in snap]
        for k in changed:
            print(k)
        print(f"{len(changed)} of {len(snap)} scenarios changed", file=sys.stderr)
        return 1 if changed else 0
    GOLDEN.write_text(json.dumps(snap, sort_keys=True, indent=0) + "\n")
    print(f"wrote {len(snap)} scenarios to {GOLDEN}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
