"""Measure a grid of fine-tuning scenarios on one CUDA GPU and write the runs as JSON Lines.

One command on a GPU machine (about 5 minutes on an H100/H200; it stops starting runs after ``--budget-s``):

    python benchmarks/gpu_grid.py                     # writes under $OUT, else benchmarks/results/
    python benchmarks/gpu_grid.py --out DIR --steps 5 --budget-s 420 --only l1b-lora-s2048,l8b-qlora-s512-ckpt

The grid (``GRID``): Llama-3.2-1B, Llama-3.2-3B and Llama-3.1-8B (built from the bundled configs with
random weights, nothing downloaded); full, LoRA and QLoRA; sequence lengths 512 and 2048; gradient
checkpointing off and on; ``FAMILY_GRID`` adds Qwen2.5, Gemma-2, Qwen3 (dense and MoE) and QLoRA 8B at 8k and 32k
tokens, and Llama-3.1-8B LoRA/QLoRA with both whole copies (``modules_to_save``) and DoRA at 1,024 tokens.
``--only`` runs the named entries in the order given. Each scenario runs in a fresh process (``vramfit.measure``) so the device
figure holds one CUDA context and nothing cached from the previous run; out of memory is recorded,
not fatal. Runs are appended as they finish, so a budget stop or a kill keeps the finished ones:

- ``gpu-grid-<stamp>.measured.jsonl``: the ``benchmarks/data/measured/`` format, one line per counter
  (``vramfit runs import`` reads it; so can ``benchmarks/accuracy.py --data``);
- ``gpu-grid-<stamp>.runs.jsonl``: the whole run records, out-of-memory runs included.

``--dry-run`` runs the same grid on the CPU with a tiny model (2 layers, hidden 64) and a fake memory
probe: it checks the whole path except the CUDA counters (tests/measure/test_gpu_grid.py runs it).
Needs torch, transformers, peft and bitsandbytes; nvidia-ml-py for the device figure (else
``torch.cuda.mem_get_info``); SQLAlchemy only with ``--db``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
try:
    import vramfit  # noqa: F401
except ImportError:  # a checkout without `pip install -e .`
    sys.path.insert(0, str(HERE.parent / "src"))

L1B, L3B, L8B = "meta-llama/Llama-3.2-1B", "meta-llama/Llama-3.2-3B", "meta-llama/Llama-3.1-8B"


def _sc(model: str, method: str, seq: int, mbs: int, ckpt: str, **extra: object) -> dict:
    return {"model": model, "method": method, "seq_len": seq, "micro_batch_size": mbs,
            "gradient_checkpointing": ckpt, "precision": "bf16-true", "optimizer": "adamw", **extra}


#: name -> scenario. Sized for one 80-141 GB card; a smaller card records OOM rows, which are results too.
GRID: dict[str, dict] = {  # ordered so that a budget stop still leaves every size, method and setting covered
    "l1b-full-s512": _sc(L1B, "full", 512, 4, "none"),
    "l8b-qlora-s2048": _sc(L8B, "qlora", 2048, 2, "none"),
    "l3b-lora-s2048-ckpt": _sc(L3B, "lora", 2048, 2, "full"),
    "l8b-lora-s512": _sc(L8B, "lora", 512, 2, "none"),
    "l1b-full-s2048-ckpt": _sc(L1B, "full", 2048, 4, "full"),
    "l3b-qlora-s2048": _sc(L3B, "qlora", 2048, 2, "none"),
    "l8b-full-s512-ckpt": _sc(L8B, "full", 512, 1, "full", optimizer="adamw-8bit"),
    "l1b-lora-s2048": _sc(L1B, "lora", 2048, 4, "none"),
    "l3b-full-s512-ckpt": _sc(L3B, "full", 512, 2, "full"),
    "l8b-qlora-s512-ckpt": _sc(L8B, "qlora", 512, 2, "full"),
    "l1b-qlora-s512": _sc(L1B, "qlora", 512, 4, "none"),
    "l3b-lora-s512": _sc(L3B, "lora", 512, 2, "none"),
    "l8b-lora-s2048-ckpt": _sc(L8B, "lora", 2048, 2, "full"),
    "l1b-full-mixed-s512": _sc(L1B, "full", 512, 4, "none", precision="bf16-mixed"),
}

#: Other families, each with a mechanism the Llama grid lacks: Qwen2.5's 152k untied vocabulary and qkv biases,
#: Gemma-2's 256k tied vocabulary and logit soft-capping, Qwen3's full fine-tuning with fp32 AdamW states, and a
#: mixture-of-experts (Qwen3-30B-A3B: 128 experts, 8 active); and QLoRA 8B at long context with checkpointing (two
#: lengths give the per-token slope and the fixed part of the line Unsloth's tables are read against).
FAMILY_GRID: dict[str, dict] = {
    "l8b-qlora-s8192-ckpt": _sc(L8B, "qlora", 8192, 1, "full"),
    "qwen25-7b-lora-s2048-ckpt": _sc("Qwen/Qwen2.5-7B", "lora", 2048, 2, "full"),
    "gemma2-2b-lora-s2048": _sc("google/gemma-2-2b", "lora", 2048, 2, "none", attention="eager"),  # no SDPA in transformers 5
    "qwen3-4b-full-s2048-ckpt": _sc("Qwen/Qwen3-4B", "full", 2048, 2, "full"),
    "l8b-qlora-s32768-ckpt": _sc(L8B, "qlora", 32768, 1, "full"),
    "qwen3-moe-lora-s2048-ckpt": _sc("Qwen/Qwen3-30B-A3B", "lora", 2048, 1, "full"),
    # PEFT's whole trained copies (modules_to_save: fp32 after prepare_model_for_kbit_training under QLoRA) and DoRA
    # (the weight norm and B·A formed on every forward), each against its LoRA twin
    "l8b-lora-saved-s1024-ckpt": _sc(L8B, "lora", 1024, 1, "full", modules_to_save=["embed_tokens", "lm_head"]),
    "l8b-qlora-saved-s1024-ckpt": _sc(L8B, "qlora", 1024, 1, "full", modules_to_save=["embed_tokens", "lm_head"]),
    "l8b-dora-s1024-ckpt": _sc(L8B, "lora", 1024, 1, "full", dora=True),
    "l8b-lora-s1024-ckpt": _sc(L8B, "lora", 1024, 1, "full"),
}
ALL_GRID = {**GRID, **FAMILY_GRID}

#: The dry run's model: a 2-layer Llama with the grid's shapes scaled down.
TINY_CONFIG = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
    "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}


def scenarios(names: list[str] | None, dry_run: bool, out: Path) -> list[tuple[str, dict]]:
    """The grid entries to run; in a dry run the model is the tiny config (written under ``out``)."""
    grid = ALL_GRID
    unknown = sorted(set(names or ()) - set(grid))
    if unknown:
        raise SystemExit(f"unknown grid entries: {', '.join(unknown)} (valid: {', '.join(grid)})")
    chosen = [(n, dict(grid[n])) for n in dict.fromkeys(names)] if names else [(n, dict(sc)) for n, sc in grid.items()]
    if dry_run:
        cfg = out / "tiny-llama-config.json"
        cfg.write_text(json.dumps(TINY_CONFIG), encoding="utf-8")
        for _, sc in chosen:
            sc["model"] = str(cfg)
    return chosen


def preflight(dry_run: bool) -> str:
    """One line on the machine; exits with the fix when a needed library or the GPU is missing."""
    import importlib.util

    missing = [m for m in ("torch", "transformers", "peft", "bitsandbytes") if importlib.util.find_spec(m) is None]
    if missing:
        raise SystemExit(f"missing Python packages: {', '.join(missing)} (pip install -e '.[measure]')")
    import torch

    if dry_run:
        return f"dry run on the CPU, torch {torch.__version__}"
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU visible to torch: run on a GPU machine, or --dry-run")
    nvml = importlib.util.find_spec("pynvml") is not None
    props = torch.cuda.get_device_properties(0)
    return (f"{props.name}, {props.total_memory / 2**30:.1f} GiB, torch {torch.__version__}, CUDA {torch.version.cuda}; "
            f"device figure from {'NVML' if nvml else 'torch.cuda.mem_get_info (pip install nvidia-ml-py for NVML)'}")


def _append(path: Path, lines: list[str]) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("".join(line + "\n" for line in lines))
        fh.flush()
        os.fsync(fh.fileno())


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**30:.2f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="output directory (default: $OUT, else benchmarks/results)")
    ap.add_argument("--steps", type=int, default=5, help="optimizer steps per scenario (first one is warm-up)")
    ap.add_argument("--budget-s", type=float, default=420.0,
                    help="start no scenario that could end after this many seconds (by the longest run so far)")
    ap.add_argument("--timeout-s", type=float, default=150.0, help="per-scenario limit (recorded as an error)")
    ap.add_argument("--only", default="", help="comma-separated grid entry names")
    ap.add_argument("--simulate", action="store_true", help="also run the simulator for each scenario (CPU time)")
    ap.add_argument("--db", default=None, help="also store the runs in this database (SQLAlchemy URL or file)")
    ap.add_argument("--dry-run", action="store_true", help="tiny model on the CPU with a fake memory probe")
    ap.add_argument("--list", action="store_true", help="print the grid and exit")
    args = ap.parse_args(argv)
    if args.list:
        for name, sc in ALL_GRID.items():
            print(name, json.dumps(sc))
        return 0

    print(preflight(args.dry_run), flush=True)
    from vramfit.measure.records import dumps_records, to_lines
    from vramfit.measure.runner import MeasureError, measure

    out = args.out or Path(os.environ.get("OUT") or HERE / "results")
    out.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + ("-dry" if args.dry_run else "")
    measured_path = out / f"gpu-grid-{stamp}.measured.jsonl"
    runs_path = out / f"gpu-grid-{stamp}.runs.jsonl"
    store = None
    if args.db:
        from vramfit.measure.store import RunStore

        store = RunStore(args.db)
    names = [n.strip() for n in args.only.split(",") if n.strip()] or None
    todo = scenarios(names, args.dry_run, out)
    device = "cpu" if args.dry_run else "cuda"
    probe = {"probe_kind": "fake", "probe_spec": {"allocated": 2**30, "reserved": 2**31, "device": 3 * 2**30}} \
        if args.dry_run else {}
    start = time.monotonic()
    errors = 0
    print(f"{len(todo)} scenario(s), {args.steps} steps each, {device}; writing {measured_path}", flush=True)
    print(f"{'name':24} {'status':6} {'alloc':>7} {'reserv':>7} {'device':>7} {'est.al':>7} {'tok/s':>9} {'s':>5}")
    durations: list[float] = []
    for name, sc in todo:
        if time.monotonic() - start + max(durations, default=0.0) > args.budget_s:
            print(f"budget of {args.budget_s:g} s would be exceeded: {name} and later entries not run", flush=True)
            break
        t0 = time.monotonic()
        try:
            rec = measure(sc, steps=args.steps, device=device, store=store, simulate=args.simulate,
                          notes=f"benchmarks/gpu_grid.py entry {name}", timeout_s=args.timeout_s, **probe)
        except MeasureError as exc:
            print(f"{name:24} cannot run: {exc}", flush=True)
            errors += 1
            continue
        durations.append(time.monotonic() - t0)
        _append(runs_path, [dumps_records([rec]).rstrip("\n")])
        _append(measured_path, [json.dumps(line) for line in to_lines(rec)])
        errors += rec.status == "error"
        est = (rec.estimate or {}).get("allocated_bytes")
        tps = f"{rec.tokens_per_s:,.0f}" if rec.tokens_per_s else "-"
        print(f"{name:24} {rec.status:6} {_gib(rec.allocated_bytes):>7} {_gib(rec.reserved_bytes):>7} "
              f"{_gib(rec.device_bytes):>7} {_gib(est):>7} {tps:>9} {time.monotonic() - t0:5.0f}", flush=True)
        if rec.status == "error":
            print(f"    {rec.details.get('error')}\n{rec.details.get('log_tail', '')}", flush=True)
    print(f"done in {time.monotonic() - start:.0f} s: {runs_path}", flush=True)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
