"""Score the speed model against published training throughputs (benchmarks/data/throughput/published.jsonl).

Usage: python benchmarks/speed_accuracy.py [--data PATH] [--rows] [--json]

Each row is one published measurement (its exact citation in ``source``) with its setup as a vramfit
scenario and the measured tokens/s over all GPUs. Three predictions are scored by the absolute
relative error of tokens/s, ``|predicted / measured - 1|``:

- ``model``: the mechanism model (``throughput.step_time(..., card=kernels.card_speed(gpu))``), with the
  paged optimizer state that does not fit the card (``verdict.result_paging``) paged in and out;
- ``old``: the previous model, every FLOP at 0.40 of the dense BF16 peak (``MFU_DEFAULT``);
- ``naive``: ``6 N`` FLOPs per token (N = all parameters, any method) at 0.40 of the peak.

A row whose card the catalog lacks names one of ``data/throughput/cards.csv`` (loaded while scoring).
Rows marked ``"design": true`` are those the model's *design* constants were read from
(``src/vramfit/plan/kernels.py``); the summary reports them apart from the held-out rest.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_DATA = HERE / "data" / "throughput" / "published.jsonl"
#: Cards some rows ran on that the catalog lacks (each row cited in its ``source`` column)
CARDS = HERE / "data" / "throughput" / "cards.csv"


def predict(scenario: dict) -> dict:
    """Predicted tokens/s of one scenario: mechanism model, old 0.40-MFU model and the naive 6N rule."""
    from vramfit.gpus import get_gpu
    from vramfit.nodes import network_for
    from vramfit.plan.evaluate import Evaluator
    from vramfit.plan.kernels import card_speed
    from vramfit.plan.search import peer_gbs
    from vramfit.plan.stage_work import scenario_flops
    from vramfit.plan.throughput import MFU_DEFAULT, net_rate, step_time, step_work
    from vramfit.plan.verdict import PAGED_COMPONENT, limit_bytes, result_paging

    ev = Evaluator(scenario)
    sc = ev.base
    g = get_gpu(sc.gpu)
    est = ev.estimate()
    mf = scenario_flops(ev.spec, sc)
    w = step_work(sc, mf, est.model.num_trainable_params)
    links = {"peak_tflops": g.bf16_tflops, "mem_bandwidth_gbs": g.mem_bandwidth_gbs,
             "peer_gbs": peer_gbs(g, sc.num_gpus), "host_gbs": g.host_link_gbs}
    paged = result_paging(est, limit_bytes(g, 0.0))  # the driver evicts at the card's usable memory
    if paged is None:  # over even with all of it evicted (the run did run): all of it pages
        paged = est.component(PAGED_COMPONENT)
    net = network_for(sc.interconnect, g.gpu_id)  # rings that span nodes (num_nodes > 1), as the planner times them
    card = card_speed(g, peer_gbs(g, sc.num_gpus), sc.gpus_per_node)
    links["net"] = net_rate(links["peer_gbs"] * 1e9, net.node_bytes_s, net.latency_us)
    new = step_time(w, mfu=MFU_DEFAULT.value, card=card, paged_bytes=paged, **links)
    old = step_time(w, mfu=MFU_DEFAULT.value, **links)
    naive = sc.num_gpus * g.bf16_tflops * 1e12 * MFU_DEFAULT.value / (6 * mf.num_params)
    return {"model": new.tokens_per_s, "old": old.tokens_per_s, "naive": naive}


def _stats(errs: list[float]) -> dict:
    if not errs:
        return {"n": 0}
    s = sorted(errs)
    p90 = s[min(len(s) - 1, int(round(0.9 * (len(s) - 1))))]
    return {"n": len(s), "median": round(statistics.median(s), 3), "p90": round(p90, 3)}


def score(rows: list[dict]) -> dict:
    """Per-row predictions and the summary: median/p90 absolute error overall, held-out, design, by source,
    by card and by framework (``+compile`` where the row ran torch.compile)."""
    out = []
    with bench_cards():
        preds = [predict(r["scenario"]) for r in rows]
    for r, p in zip(rows, preds, strict=True):
        errs = {k: abs(v / r["tokens_per_s"] - 1) for k, v in p.items()}
        sc = r["scenario"]
        out.append({"id": r["id"], "source_id": r["source_id"], "design": r["design"], "gpu": sc["gpu"],
                    "framework": sc.get("framework", "hf") + ("+compile" if sc.get("compile") else ""),
                    "measured": r["tokens_per_s"], **{f"pred_{k}": round(v, 1) for k, v in p.items()},
                    **{f"err_{k}": round(v, 4) for k, v in errs.items()}})
    groups = {"all": out, "held_out": [o for o in out if not o["design"]], "design": [o for o in out if o["design"]]}
    for key, prefix in (("source_id", ""), ("gpu", "gpu "), ("framework", "framework ")):
        for v in sorted({o[key] for o in out}):
            groups[prefix + v] = [o for o in out if o[key] == v]
    summary = {g: {k: _stats([o[f"err_{k}"] for o in rs]) for k in ("model", "old", "naive")} for g, rs in groups.items()}
    return {"rows": out, "summary": summary}


def load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@contextlib.contextmanager
def bench_cards():
    """:data:`CARDS` in the catalog while scoring (so their ``gpu`` ids resolve), then the catalog as before."""
    from vramfit.gpus import user_gpus_added

    with user_gpus_added(CARDS):
        yield


def format_summary(summary: dict) -> str:
    lines = [f"{'rows':<26}{'n':>4}  {'model med/p90':>14}  {'old med/p90':>13}  {'6N med/p90':>12}"]
    for g, s in ((g, s) for g, s in summary.items() if s["model"]["n"]):
        cells = [f"{s[k]['median']:.0%}/{s[k]['p90']:.0%}" for k in ("model", "old", "naive")]
        lines.append(f"{g:<26}{s['model']['n']:>4}  {cells[0]:>14}  {cells[1]:>13}  {cells[2]:>12}")
    return "\n".join(lines)


def format_markdown(summary: dict) -> str:
    """The summary as a Markdown table (the README's speed table, scripts/gen_examples.py)."""
    lines = ["| rows | n | median abs. error | p90 abs. error | before (one utilisation) median / p90 | 6N rule median / p90 |",
             "|---|---:|---:|---:|---:|---:|"]
    for g, s in ((g, s) for g, s in summary.items() if s["model"]["n"]):
        m, o, n = s["model"], s["old"], s["naive"]
        lines.append(f"| {g} | {m['n']} | {m['median']:.0%} | {m['p90']:.0%} | {o['median']:.0%} / {o['p90']:.0%} "
                     f"| {n['median']:.0%} / {n['p90']:.0%} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--rows", action="store_true", help="print every row's prediction and error")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--markdown", action="store_true", help="the summary as a Markdown table")
    a = ap.parse_args(argv)
    res = score(load(a.data))
    if a.markdown:
        print(format_markdown(res["summary"]), end="")
        return 0
    if a.json:
        print(json.dumps(res if a.rows else res["summary"], indent=1))
        return 0
    if a.rows:
        for o in res["rows"]:
            print(f"{o['id']:<34} {o['measured']:>9.0f} {o['pred_model']:>9.0f} {o['err_model']:>6.0%} "
                  f"old {o['pred_old']:>8.0f} {o['err_old']:>6.0%}")
    print(format_summary(res["summary"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
