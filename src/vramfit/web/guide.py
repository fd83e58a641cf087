"""The figures and tables of the guide pages, computed by vramfit when the server first needs them.

Nothing here is typed in: every number comes from :func:`vramfit.estimate.estimate` or the
planner for the scenario stated next to
it, and every cell links to the calculator with that scenario. The sizing table is the planner's
:func:`vramfit.plan.guide_table`.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any
from urllib.parse import urlencode

from vramfit.estimate import estimate
from vramfit.gpus import get_gpu
from vramfit.plan.guide import SIZES  # the model sizes the guide talks about: one table for both
from vramfit.plan.verdict import estimate_fits
from vramfit.scenario import Scenario
from vramfit.units import GB, GiB

#: Training recipes of the breakdown figure: (id, scenario keys).
RECIPES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("full-mixed", {"method": "full", "precision": "bf16-mixed"}),
    ("full-bf16", {"method": "full", "precision": "bf16-true"}),
    ("lora", {"method": "lora"}),
    ("qlora", {"method": "qlora"}),
)
SEQ_LENS = (512, 1024, 2048, 4096, 8192, 16384, 32768)
CARD_LINES = ("rtx4090", "l40s", "a100-80gb-sxm")
_DEFAULTS = Scenario(params=1).to_dict()


def calc_link(keys: dict[str, Any]) -> str:
    """Query string of the calculator for these scenario keys (defaults left out)."""
    q = {k: (",".join(v) if isinstance(v, (list, tuple)) else v) for k, v in keys.items()
         if v is not None and _DEFAULTS.get(k) != v}
    return "/?" + urlencode(q)


def gib(n: int) -> float:
    return round(n / GiB, 1)


@lru_cache(maxsize=1)
def sizing() -> dict[str, Any]:
    """The planner's guide table (7B-70B x full/LoRA/QLoRA): peak on one GPU, fewest cards per class,
    and the usual rules of thumb checked against it."""
    from vramfit.plan import guide_table

    table = guide_table().to_dict()
    settings = table["settings"]
    common = {k: settings[k] for k in ("seq_len", "micro_batch_size", "optimizer", "lora_rank")}
    recipes = {"full": settings["full"], "lora": {"method": "lora"}, "qlora": {"method": "qlora"}}
    classes = [{"gb": c["class_gb"], "id": c["gpu_id"], "name": get_gpu(c["gpu_id"]).name,
                "gib": gib(c["usable_bytes"])} for c in table["classes"]]
    rows = []
    for r in table["rows"]:
        keys = {"model": r["model"], **recipes[r["method"]], **common}
        rows.append({
            "size": r["size"], "model": r["model"], "method": r["method"],
            "peak_gib": gib(r["device_bytes"]), "ckpt_gib": gib(r["device_bytes_checkpointed"]),
            "link": calc_link(keys), "ckpt_link": calc_link({**keys, "gradient_checkpointing": "full"}),
            "fewest": {int(k): v for k, v in r["fewest"].items()}, "why": r["why"],
            "claims": list({(c["count"], c["class_gb"]): {**c, "gib": gib(c["device_bytes"]),
                                                           "pure_gib": gib(c["pure_bf16_device_bytes"] or 0)}
                            for c in r["claims"]}.values()),
        })
    by: dict[str, dict[str, Any]] = {}
    for row in rows:
        by.setdefault(row["size"], {})[row["method"]] = row
    return {"rows": rows, "by": by, "classes": classes, "settings": settings}


@lru_cache(maxsize=1)
def lora_share() -> dict[str, Any]:
    """Trainable share of LoRA, and the frozen base's size in 16 bits and in NF4."""
    rows = []
    for size, model in SIZES:
        wide = estimate(model=model, method="lora", lora_rank=16)
        narrow = estimate(model=model, method="lora", lora_rank=8, lora_targets=["q_proj", "v_proj"])
        q = estimate(model=model, method="qlora")
        rows.append({
            "size": size, "model": model, "params": wide.model.num_params,
            "wide": wide.model.num_trainable_params, "narrow": narrow.model.num_trainable_params,
            "params_s": f"{wide.model.num_params / GB:.2f} B",
            "wide_s": f"{wide.model.num_trainable_params / 1e6:.1f} M",
            "narrow_s": f"{narrow.model.num_trainable_params / 1e6:.2f} M",
            "wide_pct": round(100 * wide.model.num_trainable_params / wide.model.num_params, 2),
            "narrow_pct": round(100 * narrow.model.num_trainable_params / narrow.model.num_params, 3),
            "base16_gib": gib(wide.component("weights")),
            "base4_gib": gib(q.component("weights") + q.component("quantized_base")),
        })
    return {"rows": rows}


@lru_cache(maxsize=1)
def breakdown() -> dict[str, Any]:
    """What is alive at the peak of a 7B step for each recipe (no checkpointing): the parts of the
    allocated peak, plus allocator slack and CUDA context, which add up to the device peak."""
    model = SIZES[0][1]
    bars = []
    for rid, recipe in RECIPES:
        keys = {"model": model, "seq_len": 2048, "micro_batch_size": 1, **recipe}
        r = estimate(keys)
        parts = dict(r.peak.breakdown) if getattr(r.peak, "breakdown", None) else {
            c.name: c.bytes for c in r.components if c.counted_in == "allocated"}
        parts.update({c.name: c.bytes for c in r.components if c.counted_in != "allocated"})
        order = [c.name for c in r.components]
        parts = dict(sorted(parts.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else 99))
        bars.append({"recipe": rid, "link": calc_link(keys), "peak_gib": gib(r.peak.device_bytes),
                     "phase": r.peak.phase, "components": {k: gib(v) for k, v in parts.items() if v}})
    return {"model": model, "bars": bars}


@lru_cache(maxsize=1)
def seq_curves() -> dict[str, Any]:
    """Peak of a 7B LoRA step against sequence length: checkpointing and the eager kernel."""
    model = SIZES[0][1]
    variants = {
        "none-sdpa": {"gradient_checkpointing": "none", "attention": "sdpa"},
        "full-sdpa": {"gradient_checkpointing": "full", "attention": "sdpa"},
        "none-eager": {"gradient_checkpointing": "none", "attention": "eager"},
    }
    lines = {}
    for vid, keys in variants.items():
        lines[vid] = [gib(estimate(model=model, method="lora", seq_len=s, **keys).peak.device_bytes)
                      for s in SEQ_LENS]
    cards = [{"id": c, "name": get_gpu(c).name, "gib": gib(get_gpu(c).usable_bytes)} for c in CARD_LINES]
    return {"model": model, "seq_lens": list(SEQ_LENS), "lines": lines, "cards": cards,
            "link": calc_link({"model": model, "method": "lora"})}


@lru_cache(maxsize=1)
def accumulation() -> dict[str, Any]:
    """The same effective batch (32 sequences) reached with smaller micro-batches."""
    model = SIZES[0][1]
    rows = []
    for micro, accum in ((32, 1), (8, 4), (2, 16), (1, 32)):
        keys = {"model": model, "method": "lora", "seq_len": 2048, "micro_batch_size": micro, "grad_accum": accum}
        r = estimate_fits(keys)
        rows.append({"micro": micro, "accum": accum, "effective": micro * accum,
                     "peak_gib": gib(r.peak.device_bytes), "link": calc_link(keys),
                     "fits": {f.gpu_id: f.fits for f in r.fits}})
    return {"model": model, "rows": rows, "cards": [
        {"id": c, "name": get_gpu(c).name} for c in ("rtx4090", "a100-80gb-sxm")]}


#: Training stages of the stage table: (id, scenario keys on top of a 7B, 2,048 tokens, LoRA unless full).
#: GRPO: 8 completions of 512 tokens per prompt generated at once (grad_accum 8, TRL's steps_per_generation).
_GRPO = {"stage": "grpo", "completion_len": 512, "num_generations": 8, "grad_accum": 8}
STAGE_ROWS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("sft-lora", {"method": "lora"}),
    ("dpo-lora", {"method": "lora", "stage": "dpo"}),
    ("sft-full", {"method": "full"}),
    ("dpo-full", {"method": "full", "stage": "dpo"}),
    ("grpo-hf", {"method": "lora", **_GRPO}),
    ("grpo-colocate", {"method": "lora", **_GRPO, "generation": "vllm-colocate", "gpu": "h100-sxm"}),
    ("grpo-server", {"method": "lora", **_GRPO, "generation": "vllm-server"}),
)
_TRAINING = ("forward", "backward-loss", "backward-block", "backward-end", "backward-end-tied", "optimizer-step")


@lru_cache(maxsize=1)
def stages() -> dict[str, Any]:
    """Why DPO and GRPO cost what they do: the peak per GPU of each stage beside its SFT step, the phase
    holding it, and what the stage adds (reference copy, scoring pass, KV cache, vLLM's share)."""
    model = SIZES[0][1]
    rows = []
    for sid, extra in STAGE_ROWS:
        keys = {"model": model, "seq_len": 2048, **extra}
        r = estimate(keys)
        phases = {p.phase: p for p in r.phases}
        parts = {k: v for p in r.phases for k, v in p.breakdown}
        gen = dict(phases["generate"].breakdown) if "generate" in phases else {}
        rows.append({
            "id": sid, "link": calc_link(keys), "peak_gib": gib(r.peak.device_bytes), "phase": r.peak.phase,
            "train_gib": gib(max(p.allocated_bytes for k, p in phases.items() if k in _TRAINING)),
            "score_gib": gib(phases["score"].allocated_bytes) if "score" in phases else None,
            "generate_gib": gib(phases["generate"].allocated_bytes) if "generate" in phases else None,
            "reference_gib": gib(parts.get("reference_model", 0)),
            "engine_gib": gib(gen.get("kv_cache", 0) + gen.get("generation_transient", 0) + gen.get("vllm", 0)),
        })
    return {"model": model, "rows": rows, "by": {row["id"]: row for row in rows}}


def guide_data() -> dict[str, Any]:
    """Everything the guide templates show, and the figure data its script draws."""
    return {"sizing": sizing(), "lora": lora_share(), "breakdown": breakdown(),
            "seq": seq_curves(), "accum": accumulation(), "stages": stages()}
