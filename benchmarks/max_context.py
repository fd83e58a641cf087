"""Score the longest trainable context against published maximum-context tables.

Usage: python benchmarks/max_context.py [--data PATH] [--json] [--markdown]

Each row of ``data/measured/max_context.jsonl`` is a published "longest sequence that trains on a card
of N GB" (Unsloth's README tables, for Unsloth and for Hugging Face + FA2). Ours is the planner's own
max-sequence search (:func:`vramfit.plan.fit.max_seq_len_within`) under the row's memory budget, held
to the figure the publication measured (``vram.counter``: ``device`` by default, ``reserved`` for a
``torch.cuda.max_memory_reserved()`` figure); the error is (ours - published) / published. No constant is
fitted to any row.

``lines``: each (model, framework, release) column of the table as a straight line, budget = intercept + slope x tokens
(least squares), beside the same line through our own figure at the published token counts. Unsloth's rows lie
on one line to under 1e-4 GiB, i.e. they are a fit of runs, not one run per card (docs/validation.md): the two
lines say whether a miss is per token (the slope: a tensor per token left out or added) or fixed (the
intercept: a term held whatever the length, such as Unsloth 2024.12's RoPE caches below 32,768 tokens).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from vramfit.plan.fit import max_seq_len_within
from vramfit.scenario import parse_scenario

DEFAULT_DATA = Path(__file__).resolve().parent / "data" / "measured" / "max_context.jsonl"


def score(path: Path = DEFAULT_DATA) -> list[dict]:
    """Each row: the published and our longest context, the error in tokens, and ``memory_error``: our figure at the
    published length against the card's budget, (figure - budget) / budget. Near the short end a token error is a
    small memory error spread over few tokens: where the figure rises slowly with the length (the loss phase peaks,
    not the blocks'), a few percent of memory is tens of percent of context."""
    from vramfit import estimate

    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        budget = row["vram"]["bytes"]
        ours = max_seq_len_within(row["scenario"], budget, row["vram"].get("counter", "device"))
        published = row["measured"]["tokens"]
        err = None if ours is None else (ours - published) / published
        out.append({"id": row["id"], "framework": row["scenario"]["framework"], "published": published,
                    "ours": ours, "error": err, "memory_error": (_figure(estimate, row) - budget) / budget})
    return out


def _line(points: list[tuple[int, int]]) -> tuple[float, float]:
    """(intercept bytes, slope bytes per token) of the least-squares line through (tokens, bytes) points."""
    n = len(points)
    mx = sum(t for t, _ in points) / n
    my = sum(b for _, b in points) / n
    slope = sum((t - mx) * (b - my) for t, b in points) / sum((t - mx) ** 2 for t, _ in points)
    return my - slope * mx, slope


def _figure(estimate, row: dict) -> int:
    """Our figure (the row's counter) at the row's published length."""
    r = estimate(parse_scenario({**row["scenario"], "seq_len": row["measured"]["tokens"]}))
    return getattr(r.peak, f"{row['vram'].get('counter', 'device')}_bytes")


def lines(path: Path = DEFAULT_DATA) -> list[dict]:
    """Per column of a table (source, model, framework, release: ``framework_version``, checkpointing) with two rows
    or more: the published budgets against tokens as a line, and our figure (the row's counter) at those token counts
    as a line. The release keeps a column of an older Unsloth (the Llama 3.3 blog's 'Unsloth (Old)') off the line of
    the current one; the checkpointing keeps the April 2024 post's 'Unsloth (Old)' (transformers' checkpointing) off
    its offloaded 'Unsloth (New)'."""
    from vramfit import estimate

    groups: dict[tuple[str, ...], list[dict]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            sc = row["scenario"]
            key = (row["source_id"], sc["model"], sc["framework"], sc.get("framework_version", ""),
                   sc.get("gradient_checkpointing", ""))
            groups.setdefault(key, []).append(row)
    out = []
    for (source, model, fw, version, checkpointing), rows in groups.items():
        if len(rows) < 2:
            continue
        published = [(r["measured"]["tokens"], r["vram"]["bytes"]) for r in rows]
        ours = [(r["measured"]["tokens"], _figure(estimate, r)) for r in rows]
        (pa, pb), (oa, ob) = _line(published), _line(ours)
        out.append({"source_id": source, "model": model, "framework": fw, "framework_version": version,
                    "gradient_checkpointing": checkpointing, "n": len(rows),
                    "published": {"intercept_bytes": round(pa), "slope_bytes_per_token": pb},
                    "ours": {"intercept_bytes": round(oa), "slope_bytes_per_token": ob}})
    return out


def summary(results: list[dict]) -> dict[str, dict]:
    groups: dict[str, list[float]] = {}
    for r in results:
        if r["error"] is not None:
            groups.setdefault(r["framework"], []).append(abs(r["error"]))
    return {fw: {"n": len(e), "median_abs": statistics.median(e), "max_abs": max(e)} for fw, e in groups.items()}


def format_markdown(results: list[dict], path: Path = DEFAULT_DATA) -> str:
    """The README's table: per row the model, the release modelled, its checkpointing (the April 2024 post's two Unsloth
    columns share a release), the card, the published and our longest context, the error in tokens and our figure at the
    published length against the card (the memory error)."""
    rows = {json.loads(x)["id"]: json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()}
    out = ["| model | release | checkpointing | card | published | ours | error (tokens) | error (memory) |",
           "|---|---|---|---|---:|---:|---:|---:|"]
    for r in results:
        sc = rows[r["id"]]["scenario"]
        err = "no fit" if r["error"] is None else f"{r['error']:+.1%}"
        ours = "—" if r["ours"] is None else f"{r['ours']:,}"
        out.append(f"| {sc['model'].split('/')[-1]} | {sc.get('framework_version') or sc['framework']} | "
                   f"{sc.get('gradient_checkpointing', '')} | {rows[r['id']]['vram']['label']} | {r['published']:,} | {ours} | {err} | {r['memory_error']:+.1%} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--markdown", action="store_true", help="the rows as a Markdown table (the README's)")
    args = ap.parse_args(argv)
    try:
        results = score(args.data)
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, RecursionError) as e:  # not a max-context set
        print(f"--data: not a max-context set of JSON Lines rows ({type(e).__name__}: {e})", file=sys.stderr)
        return 2
    if args.markdown:
        print(format_markdown(results, args.data), end="")
        return 0
    if args.json:
        json.dump({"rows": results, "summary": summary(results), "lines": lines(args.data)}, sys.stdout, indent=1)
        print()
        return 0
    print(f"{'row':48} {'published':>10} {'ours':>10} {'error':>8} {'memory at the published length':>31}")
    for r in results:
        err = "no fit" if r["error"] is None else f"{r['error']:+.1%}"
        print(f"{r['id']:48} {r['published']:>10,} {r['ours'] or 0:>10,} {err:>8} {r['memory_error']:>+31.1%}")
    for fw, s in summary(results).items():
        print(f"{fw}: n={s['n']}  median |err| {s['median_abs']:.1%}  max |err| {s['max_abs']:.1%}")
    print("as lines (budget = intercept + slope x tokens):")
    for g in lines(args.data):
        p, o = g["published"], g["ours"]
        column = f"{g['model']} {g['framework_version'] or g['framework']} {g['gradient_checkpointing']} (n={g['n']})"
        print(f"  {column}: published {p['intercept_bytes'] / 2**30:.3f} GiB + "
              f"{p['slope_bytes_per_token']:,.0f} B/token; ours {o['intercept_bytes'] / 2**30:.3f} GiB + "
              f"{o['slope_bytes_per_token']:,.0f} B/token")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
