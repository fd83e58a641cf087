"""Score the estimator against published measurements (every peak-memory set in benchmarks/data/measured/).

Usage: python benchmarks/accuracy.py [--data PATH ...] [--all] [--rows] [--json] [--markdown] [--write-bands]

Without ``--data`` every measured set is scored (``MEASURED_SETS``: public.jsonl, found.jsonl,
stages.jsonl, vramfit_h200.jsonl, vlm.jsonl); ``--data`` (repeatable) scores only the files named. max_context.jsonl holds maximum
contexts, not peaks, and is scored by benchmarks/max_context.py.

``--write-bands`` rewrites src/vramfit/data/accuracy.json from the default sets: every row's path
(framework, method with its stage, sharding with its scope, offload, quantization) and our signed error, which each
estimate reads to state its error band (vramfit/estimate/accuracy.py); tests/benchmarks/test_accuracy_bands.py checks it is up to date.

For each row, the figure the source measured (allocated, reserved or device) is compared with ours;
an ``unknown`` metric counts as right (0 %) when it lies between our allocated and device figures,
else the error is taken against the nearer bound. A row whose sequence length is only an upper bound
(``seq_exact: false``) is scored the same way against the range its estimate states, where it states one
(vramfit.estimate.first_batch: the floor where later micro-batches are shorter, up to the peak at the bound);
``error_at_bound`` keeps its error against the peak alone, the summary line gives both, and the bands use it. Two naive references are scored the same way:
16 bytes per parameter for full fine-tuning and 2 bytes per parameter for LoRA/QLoRA.

The framework each source ran is a fact of the source (lit-gpt, torchtune, transformers + PEFT),
so it is set from ``source_id``; no constant is fitted to any row.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from vramfit import estimate
from vramfit.estimate.accuracy import path_of
from vramfit.estimate.first_batch import allocated_floor

HERE = Path(__file__).resolve().parent
MEASURED = HERE / "data" / "measured"
#: The published measurements, bundled with the repository (sources and fields: data/measured/README.md):
#: public.jsonl (the first sets), found.jsonl (later finds), stages.jsonl (DPO/GRPO peaks), vramfit_h200.jsonl
#: (this project's own H200 runs, benchmarks/gpu_grid.py), vlm.jsonl (vision-language runs with images, whose path
#: names them: an estimate with images is vouched for by these only, vramfit.estimate.accuracy.path_of).
MEASURED_SETS = ("public.jsonl", "found.jsonl", "stages.jsonl", "vramfit_h200.jsonl", "vramfit_h100.jsonl", "vlm.jsonl")
#: The first set alone (the golden snapshot's rows, tests/golden/regen.py).
DEFAULT_DATA = MEASURED / "public.jsonl"
#: What each estimate reads to state its error band (written by --write-bands).
BANDS = HERE.parent / "src" / "vramfit" / "data" / "accuracy.json"

#: Which training code produced each source's figures (see benchmarks/data/measured/README.md).
SOURCE_FRAMEWORK = {
    "LIT_RES": "litgpt",
    "TT_README_OPT": "torchtune",
    "TT_README_2409": "torchtune",
    "TT_README_2405": "torchtune",
    "TT_README_2404": "torchtune",
    "TT_TUT": "torchtune",
    "TORCHAO": "torchtune",
    "PEFT_README": "hf",
    "PEFT_DOCS": "hf",
    "TITAN_BENCH_2412": "torchtitan",
    "ODYN_DPO_2607": "hf",
    "AAI_FSDPQLORA_2403": "hf",  # Answer.AI fsdp_qlora train.py: transformers + PEFT + FSDP1
    "PEFT_MMQA_2607": "hf",
    "SWIFT_EX_2601": "hf",  # ms-swift runs the HF Trainer (TRL trainers for rlhf)
    "SWIFT_SCRIPTS_2404": "hf",  # ms-swift 1.x/2.x per-model example scripts (HF Trainer + PEFT, DeepSpeed through it)
    "SWIFT_BENCH_2401": "hf",  # ms-swift 1.x benchmark page: its sft_main over the HF Trainer + PEFT 0.7
    "SWIFT_DOCS_2506": "hf",  # ms-swift's documentation scripts: the same HF Trainer (DeepSpeed through it)
    "LIT_LORA_TUT_2310": "litgpt",  # lit-gpt finetune/lora.py of October 2023 (Lightning Fabric), as LIT_RES
    "AXOLOTL_EX_2508": "hf",  # axolotl runs the HF Trainer + PEFT (FSDP2 through its own accelerate patch)
    "UNSLOTH_NB_2509": "unsloth",  # Unsloth 2025.9.1 notebooks (FastLanguageModel + TRL SFTTrainer)
    "LIT_HUB_2409": "litgpt",
    "TORCHAO_FP8_2503": "torchtitan",  # torchao's float8 benchmarks run torchtitan's train.py (bf16 baseline row)
    "TORCHAO_MX_2508": "torchtitan",  # torchao's MX benchmarks on B200, the same script (bf16 baseline row)
    "TORCHAO_TUT_2506": "torchtitan",  # torchao's float8 pretraining tutorial: torchtitan's run_train.sh (bf16 baseline)
    "FMS_ACCEL_2502": "hf",  # fms-hf-tuning's sft_trainer: TRL 0.13 SFTTrainer over the HF Trainer + PEFT (FSDP1 via accelerate)
    "TT_PR961_2405": "torchtune",
    "LIT_LORA_TUT_2308": "litgpt",  # lit-gpt finetune_lora.md tables of August 2023 (064fd523): finetune/lora.py, as LIT_RES
    "LIGER_EX_2408": "hf",  # Liger-Kernel's HF example: TRL SFTTrainer over the HF Trainer, FSDP1 through accelerate
    "UNSLOTH_NB_2407": "unsloth",  # Unsloth's T4 Colab notebooks of 2024.5-2024.9 (FastLanguageModel + TRL SFTTrainer)
    "UNSLOTH_NB_24B": "unsloth",  # more of them, 2024.5-2024.11: conversational data, Phi-3, Llama 3.2, Qwen2.5-Coder
    "AXOLOTL_EX_2404": "hf",  # axolotl's Llama-3 QLoRA+FSDP example (April 2024): the HF Trainer + PEFT, FSDP1 via accelerate
    "AXOLOTL_EX_2308": "hf",  # axolotl's Llama-2 examples (August 2023): the HF Trainer + PEFT
    "DS_MUON_2605": "hf",  # DeepSpeed's Muon blog runner: a DeepSpeed engine loop over a transformers model (ZeRO-2)
    "LIT_DATA_TUT_2309": "litgpt",  # lit-gpt tutorials/prepare_dataset.md (Sept 2023): finetune/lora.py on Falcon-7B, as LIT_RES
    "LIT_ZERO_TUT_2403": "litgpt",  # litgpt tutorials/0_to_litgpt.md (March 2024): litgpt finetune lora on phi-2, one GPU
    "FMS_ACCEL_2407": "hf",  # fms-acceleration benchmark CSV of July 2024 (b6c1455): fms-hf-tuning over TRL 0.9.6 SFTTrainer + HF Trainer (FSDP1 via accelerate)
    "FMS_ACCEL_240715": "hf",  # the same benchmark's CSV of 2024-07-15 (c3a069c: transformers 4.39.3, peft 0.11.1, torch 2.2.2)
    "FMS_ACCEL_2409": "hf",  # the same benchmark's CSV of September 2024 (4e81c64: transformers 4.44.2, TRL 0.10.1, the --bf16 flag)
    "FMS_ACCEL_2411": "hf",  # fms-acceleration benchmark CSV of Nov 2024 (9239802): fms-hf-tuning over TRL 0.11.4 SFTTrainer + HF Trainer (FSDP1 via accelerate)
    "FMS_ACCEL_ORCA_2409": "hf",  # fms-acceleration orca-math benchmark (Sept 2024): fms-hf-tuning over the HF Trainer (FSDP1 via accelerate)
    "TT_README_2403": "torchtune",  # torchtune README of 2024-03-21 (a95c6b931): lora_finetune_distributed, FSDP1 over a rank-0 CPU model
    "UNSLOTH_VLM_NB": "unsloth",  # Unsloth's vision notebooks (FastVisionModel + TRL SFTTrainer), vlm.jsonl
    "LLAMA_REC_PR41_2307": "hf",  # llama-recipes' llama_finetuning.py: transformers + PEFT under FSDP1 (July 2023)  # torchtune PR #961: full_finetune_single_device re-measured at 4 x 2048  # litgpt config_hub/finetune table (2024 litgpt, Lightning Fabric, one A10G)
}


def find_data(paths: list[str] | None) -> list[Path]:
    """The files named, else every measured set that exists (at least public.jsonl)."""
    if paths:
        return [Path(p) for p in paths]
    if not DEFAULT_DATA.is_file():
        raise SystemExit(f"measured data not found at {DEFAULT_DATA}; pass --data")
    return [MEASURED / name for name in MEASURED_SETS if (MEASURED / name).is_file()]


def load(paths: list[Path]) -> list[dict]:
    rows = [json.loads(line) for p in paths for line in p.read_text().splitlines() if line.strip()]
    seen: set[str] = set()
    for row in rows:
        if row["id"] in seen:
            raise SystemExit(f"duplicate row id {row['id']!r} in {', '.join(p.name for p in paths)}")
        seen.add(row["id"])
    return rows


def signed_error(metric: str, measured: int, alloc: int, reserved: int, device: int) -> float:
    """Signed relative error of our figure against the measured one (0 inside the unknown band)."""
    if metric == "allocated":
        ours = alloc
    elif metric == "reserved":
        ours = reserved
    elif metric == "device":
        ours = device
    else:
        if alloc <= measured <= device:
            return 0.0
        ours = alloc if measured < alloc else device
    return (ours - measured) / measured


def bound_error(metric: str, measured: int, floor: int | None, alloc: int, device: int) -> float | None:
    """The error of a row whose sequence length is only an upper bound, against the range the estimate states for
    it (vramfit.estimate.first_batch: from the floor, where the recipe's later micro-batches are shorter, to the peak
    at ``seq_len``): 0 inside, else against the nearer end. None where the estimate states no floor, or the metric is
    not an allocated one (the floor is a count of live tensors)."""
    if floor is None or metric not in ("allocated", "unknown"):
        return None
    high = alloc if metric == "allocated" else device
    ours = floor if measured < floor else high if measured > high else measured
    return (ours - measured) / measured


def naive_bytes(scenario: dict, num_params: int) -> int:
    per = 16 if scenario.get("method") == "full" else 2
    return per * num_params // max(1, scenario.get("num_gpus", 1) if scenario.get("method") == "full" else 1)


def score(rows: list[dict]) -> list[dict]:
    out = []
    for row in rows:
        sc = dict(row["scenario"])
        sc.setdefault("framework", SOURCE_FRAMEWORK.get(row["source_id"], "hf"))
        # the rows record torch.compile in their notes ("torch.compile on (not a scenario key)")
        if "compile on" in row.get("notes", "") or "+ Compile" in row.get("source", ""):
            sc.setdefault("compile", True)
        r = estimate(sc)
        m = row["measured"]
        err = signed_error(m["metric"], m["bytes"], r.peak.allocated_bytes, r.peak.reserved_bytes, r.peak.device_bytes)
        at_bound = err
        if not row["seq_exact"]:
            ranged = bound_error(m["metric"], m["bytes"], allocated_floor(r.scenario), r.peak.allocated_bytes,
                                 r.peak.device_bytes)
            err = at_bound if ranged is None else ranged
        naive = naive_bytes(sc, r.model.num_params)
        nerr = signed_error(m["metric"], m["bytes"], naive, naive, naive)
        out.append(
            {
                "id": row["id"],
                "source_id": row["source_id"],
                "framework": r.scenario.framework.value,
                "path": path_of(r.scenario),
                "stage": r.scenario.stage.value,
                "metric": m["metric"],
                "seq_exact": row["seq_exact"],
                "measured_gib": m["bytes"] / 2**30,
                "allocated_gib": r.peak.allocated_bytes / 2**30,
                "reserved_gib": r.peak.reserved_bytes / 2**30,
                "device_gib": r.peak.device_bytes / 2**30,
                "error": err,
                "error_at_bound": at_bound,  # against the peak at seq_len alone (differs where a range is stated)
                "naive_error": nerr,
            }
        )
    return out


def pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def quantile(values: list[float], q: float) -> float:
    v = sorted(values)
    if not v:
        return float("nan")
    k = (len(v) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def bands(scored: list[dict], sources: list[Path] | None = None) -> dict:
    """The data file each estimate reads: every row's path and signed error (4 decimals); a DPO/GRPO row's path
    names its stage (``lora+dpo``: vramfit.estimate.accuracy.path_of), so it vouches for that stage only. The error is the
    peak figure's (``error_at_bound``): a band says how far the estimate's peak was from the measurement, also where
    the benchmark scores a length-bound row against the range its estimate states; ``exact`` False marks such a row,
    which an estimate's band leaves out where the path has rows of exact length (vramfit/estimate/accuracy.py)."""
    names = [p.name for p in sources] if sources else list(MEASURED_SETS)
    cases = [{"id": s["id"], "path": s["path"], "metric": s["metric"], "error": round(s["error_at_bound"], 4),
              "exact": s["seq_exact"]} for s in scored]
    return {"source": ", ".join(f"benchmarks/data/measured/{n}" for n in names),
            "written_by": "python benchmarks/accuracy.py --write-bands", "cases": cases}


def bands_text(data: dict) -> str:
    """One case per line, so a change to one row's error is one line of diff."""
    head = {k: v for k, v in data.items() if k != "cases"}
    cases = ",\n".join(json.dumps(c, sort_keys=True) for c in data["cases"])
    return json.dumps(head)[:-1] + ', "cases": [\n' + cases + "\n]}\n"


def summarize(scored: list[dict], by: str = "source_id") -> dict:
    groups: dict[str, list[dict]] = {}
    for s in scored:
        groups.setdefault(s[by], []).append(s)
    table = {}
    for name, items in sorted(groups.items()) + [("ALL", scored)]:
        ab = [abs(i["error"]) for i in items]
        nb = [abs(i["naive_error"]) for i in items]
        table[name] = {
            "n": len(items),
            "median_abs": statistics.median(ab) if ab else float("nan"),
            "p90_abs": quantile(ab, 0.9),
            "worst": max(items, key=lambda i: abs(i["error"]))["error"] if items else float("nan"),
            "median_signed": statistics.median([i["error"] for i in items]) if items else float("nan"),
            "naive_median_abs": statistics.median(nb) if nb else float("nan"),
        }
    return table


def every_rows_line(scored: list[dict]) -> str:
    """The all-rows summary, with the rows scored against a stated range counted and scored at their bound too."""
    every = summarize(scored)["ALL"]
    over = sum(abs(s["error"]) > 0.08 for s in scored)
    ranged = [s for s in scored if s["error"] != s["error_at_bound"]]
    line = (f"All {len(scored)} rows, those whose sequence length is only an upper bound included (`--all`): "
            f"median {100 * every['median_abs']:.1f} %, p90 {100 * every['p90_abs']:.1f} %, {over} rows above 8 %.")
    if ranged:
        at = [abs(s["error_at_bound"]) for s in scored]
        line += (f" {len(ranged)} of them are scored against the range their estimate states (estimate/first_batch.py: "
                 f"from the floor where later micro-batches are shorter to the peak at the bound); against "
                 f"the peak at the bound alone: median {100 * statistics.median(at):.1f} %, p90 "
                 f"{100 * quantile(at, 0.9):.1f} %, {sum(a > 0.08 for a in at)} rows above 8 %.")
    return line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", action="append", help="a measured set to score (repeatable; default: every set)")
    ap.add_argument("--all", action="store_true", help="score every row, not only seq_exact ones")
    ap.add_argument("--rows", action="store_true", help="print every row")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--markdown", action="store_true", help="print the summary as a Markdown table")
    ap.add_argument("--write-bands", action="store_true", help=f"rewrite {BANDS.relative_to(HERE.parent)}")
    args = ap.parse_args(argv)
    paths = find_data(args.data)
    try:
        scored = score(load(paths))
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, RecursionError) as e:  # not a measured set
        print(f"--data: not a measured set of JSON Lines rows ({type(e).__name__}: {e})", file=sys.stderr)
        return 2
    if args.write_bands:
        if args.data:
            raise SystemExit("--write-bands writes the bands from every measured set; drop --data")
        data = bands(scored, paths)
        BANDS.write_text(bands_text(data))
        print(f"wrote {BANDS} ({len(data['cases'])} cases)")
        return 0
    chosen = scored if args.all else [s for s in scored if s["seq_exact"]]
    table = summarize(chosen)
    if args.json:
        print(json.dumps({"rows": chosen, "summary": table}, indent=1))
        return 0
    if args.rows:
        for s in scored:
            print(
                f"{s['id']:<22} {s['metric']:<9} meas {s['measured_gib']:7.2f} GiB  "
                f"alloc {s['allocated_gib']:7.2f} res {s['reserved_gib']:7.2f} dev {s['device_gib']:7.2f}  "
                f"err {pct(s['error']):>8}  naive {pct(s['naive_error']):>8}  exact={s['seq_exact']}"
            )
        print()
    which = "all rows" if args.all else "rows with an exact sequence length"
    if args.markdown:
        print(f"Accuracy on {which} ({len(chosen)} of {len(scored)}):\n")
        for by, tab in (("source", table), ("framework", summarize(chosen, "framework"))):
            print(f"| {by} | rows | median abs. error | p90 abs. error | worst (signed) | naive median abs. error |")
            print("|---|---:|---:|---:|---:|---:|")
            for name, t in tab.items():
                print(
                    f"| {name} | {t['n']} | {100 * t['median_abs']:.1f} % | {100 * t['p90_abs']:.1f} % | "
                    f"{pct(t['worst'])} | {100 * t['naive_median_abs']:.1f} % |"
                )
            print()
        if not args.all:
            print(every_rows_line(scored) + "\n")
        return 0
    print(f"Accuracy on {which} ({len(chosen)} of {len(scored)}):")
    if args.all:
        print(every_rows_line(scored))
    for by, tab in (("source", table), ("framework", summarize(chosen, "framework"))):
        print(f"{by:<20}{'n':>4}{'median |err|':>14}{'p90 |err|':>11}{'worst':>9}{'naive median':>14}")
        for name, t in tab.items():
            print(
                f"{name:<20}{t['n']:>4}{100 * t['median_abs']:>13.1f}%{100 * t['p90_abs']:>10.1f}%"
                f"{pct(t['worst']):>9}{100 * t['naive_median_abs']:>13.1f}%"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
