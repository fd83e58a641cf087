"""Score the longest trainable context against published maximum-context tables.

Usage: python benchmarks/max_context.py [--data PATH] [--json]

Each row of ``data/measured/max_context.jsonl`` is a published "longest sequence that trains on a card
of N GB" (Unsloth's README tables, for Unsloth and for Hugging Face + FA2). Ours is the planner's own
max-sequence search (:func:`vramfit.plan.fit.max_seq_len_within`) under the row's memory budget, held
to the figure the publication measured (``vram.counter``: ``device`` by default, ``reserved`` for a
``torch.cuda.max_memory_reserved()`` figure); the error is (ours - published) / published. No constant is
fitted to any row.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from vramfit.plan.fit import max_seq_len_within

DEFAULT_DATA = Path(__file__).resolve().parent / "data" / "measured" / "max_context.jsonl"


def score(path: Path = DEFAULT_DATA) -> list[dict]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        ours = max_seq_len_within(row["scenario"], row["vram"]["bytes"], row["vram"].get("counter", "device"))
        published = row["measured"]["tokens"]
        err = None if ours is None else (ours - published) / published
        out.append({"id": row["id"], "framework": row["scenario"]["framework"], "published": published,
                    "ours": ours, "error": err})
    return out


def summary(results: list[dict]) -> dict[str, dict]:
    groups: dict[str, list[float]] = {}
    for r in results:
        if r["error"] is not None:
            groups.setdefault(r["framework"], []).append(abs(r["error"]))
    return {fw: {"n": len(e), "median_abs": statistics.median(e), "max_abs": max(e)} for fw, e in groups.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    results = score(args.data)
    if args.json:
        json.dump({"rows": results, "summary": summary(results)}, sys.stdout, indent=1)
        print()
        return 0
    print(f"{'row':48} {'published':>10} {'ours':>10} {'error':>8}")
    for r in results:
        err = "no fit" if r["error"] is None else f"{r['error']:+.1%}"
        print(f"{r['id']:48} {r['published']:>10,} {r['ours'] or 0:>10,} {err:>8}")
    for fw, s in summary(results).items():
        print(f"{fw}: n={s['n']}  median |err| {s['median_abs']:.1%}  max |err| {s['max_abs']:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
