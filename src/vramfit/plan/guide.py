"""``guide_table()``: the seed guide's sizing recomputed, and every place where we disagree, and why.

The guide (a sample article; its figures, each with the section it comes from and in our own words, are
``src/vramfit/data/guide-claims.json``; sections 02 and 05) sizes 7B, 13B, 34B and
70B for full fine-tuning, LoRA and QLoRA in card classes of 24, 48 and 80 GB. For each pair we
estimate one GPU at the guide's "typical" settings and find, per class, the fewest cards of one node
that fit (ZeRO-3 beyond one card), then check each of the guide's statements against that.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from vramfit.estimate.phases import largest_per_component
from vramfit.gpus import get_gpu
from vramfit.plan.evaluate import Evaluator
from vramfit.plan.verdict import fits, limit_bytes
from vramfit.units import GB

#: The guide's classes are judged at the card's edge: the one verdict with a stated margin of 0.
GUIDE_MARGIN = 0.0

#: The model the guide's sizes stand for (the same ones the web guide pages use).
SIZES: tuple[tuple[str, str], ...] = (
    ("7B", "meta-llama/Llama-2-7b-hf"),
    ("13B", "meta-llama/Llama-2-13b-hf"),
    ("34B", "codellama/CodeLlama-34b-hf"),
    ("70B", "meta-llama/Llama-2-70b-hf"),
)
METHODS: dict[str, dict[str, Any]] = {
    "full": {"method": "full", "precision": "bf16-mixed"},  # the usual recipe: AMP bf16, fp32 AdamW
    "lora": {"method": "lora"},
    "qlora": {"method": "qlora"},
}
#: The guide's "treino em bf16" read literally: pure bf16 (bf16 weights, gradients and AdamW states), the default of
#: transformers 5 and torchtune; beyond one card under FSDP, since DeepSpeed ZeRO keeps fp32 master weights
#: (estimate/deepspeed.py master_note) and so has no pure-bf16 run.
PURE_BF16: dict[str, Any] = {"method": "full", "precision": "bf16-true"}
#: Why the table's full fine-tuning is bf16-mixed, and what the guide's own arithmetic is.
PRECISION_NOTE = (
    "Full fine-tuning here is bf16-mixed (PyTorch AMP, the usual recipe: fp32 weights, gradients and AdamW states, "
    "16 B per parameter). The guide's arithmetic (7B: 14 GB weights + 56 GB Adam + 14 GB gradients) is 12 B per "
    "parameter, fp32 Adam moments on bf16 weights: what bitsandbytes' 32-bit AdamW (paged_adamw_32bit) keeps, not "
    "the usual full fine-tuning recipes: AMP keeps the weights and gradients in fp32 too, and pure bf16 "
    "(bf16-true: bf16 weights, gradients and AdamW states, 8 B per parameter, the default of transformers 5 and "
    "torchtune) keeps Adam's moments in bf16. Each full fine-tuning card count is also checked in pure bf16 (FSDP "
    "beyond one card: DeepSpeed ZeRO keeps fp32 master weights), in its row's lines below. `vramfit estimate "
    "--method full` without --precision uses the framework's default: bf16-true for transformers 5 and torchtune, "
    "bf16-mixed for litgpt. Give --precision bf16-mixed to match this table."
)
#: "Typical" settings (the guide: bf16 and typical sequence lengths): stated with the table.
SETTINGS: dict[str, Any] = {"seq_len": 2048, "micro_batch_size": 1, "optimizer": "adamw", "lora_rank": 16}
#: The guide's card classes and the card that stands for each (the guide's own examples).
CLASSES: tuple[tuple[int, str], ...] = ((24, "rtx4090"), (48, "l40s"), (80, "h100-sxm"))
COUNTS = (1, 2, 4, 8)


@dataclass(frozen=True)
class Claim:
    """One card-count check of a guide claim: ``count`` cards of the ``class_gb`` class hold ``size`` ``method``."""

    section: str
    claim_id: str
    says: str  # the guide's statement, in our own words (src/vramfit/data/guide-claims.json)
    class_gb: int
    count: int

    def to_dict(self) -> dict[str, Any]:
        return {"section": self.section, "claim_id": self.claim_id, "says": self.says,
                "class_gb": self.class_gb, "count": self.count}


@functools.lru_cache(maxsize=1)
def guide_claims() -> dict[str, Any]:
    """``src/vramfit/data/guide-claims.json``: every figure of the guide with its section, in our own words."""
    return json.loads(resources.files("vramfit").joinpath("data/guide-claims.json").read_text("utf-8"))


def _claims() -> dict[tuple[str, str], tuple[Claim, ...]]:
    """The card-count checks of the guide's claims, per (size, method), in the guide's order."""
    out: dict[tuple[str, str], list[Claim]] = {}
    for c in guide_claims()["claims"]:
        for ck in c.get("checks", ()):
            out.setdefault((ck["size"], ck["method"]), []).append(
                Claim(c["section"], c["id"], c["says"], ck["class_gb"], ck["count"]))
    return {k: tuple(v) for k, v in out.items()}


def _guide_7b_full_gb() -> dict[str, int]:
    """The guide's own arithmetic for 7B full fine-tuning (section 02), in GB."""
    return next(c for c in guide_claims()["claims"] if c["id"] == "7b-full-arithmetic")["figures_gb"]


@dataclass(frozen=True)
class GuideRow:
    size: str
    model: str
    method: str
    num_params: int
    device_bytes: int  # one GPU, no checkpointing
    device_bytes_checkpointed: int  # one GPU, full checkpointing
    components: dict[str, int]  # of the checkpointed one-GPU run
    fewest: dict[int, int | None]  # class GB -> fewest cards of one node (None: more than 8)
    smallest: str  # e.g. "1 x 24 GB"
    claims: tuple[dict[str, Any], ...]  # each claim with our verdict
    agrees: bool
    why: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["fewest"] = {str(k): v for k, v in self.fewest.items()}
        out["claims"] = list(self.claims)
        out["why"] = list(self.why)
        return out


@dataclass(frozen=True)
class GuideTable:
    settings: dict[str, Any]
    classes: tuple[dict[str, Any], ...]
    rows: tuple[GuideRow, ...]

    @property
    def disagreements(self) -> list[GuideRow]:
        return [r for r in self.rows if not r.agrees]

    def to_dict(self) -> dict[str, Any]:
        return {"settings": dict(self.settings), "classes": [dict(c) for c in self.classes],
                "rows": [r.to_dict() for r in self.rows],
                "disagreements": [{"size": r.size, "method": r.method, "why": list(r.why)} for r in self.disagreements]}


def _gb(n: int) -> str:
    return f"{n / GB:,.1f} GB"


def _usable(class_gb: int) -> int:
    """Bytes the class's card exposes (a "80 GB" H100: 85.0 GB, 79.2 GiB), what each verdict holds a peak to."""
    return get_gpu(dict(CLASSES)[class_gb]).usable_bytes


def _fits(ev: Evaluator, card: str, n: int, sharded: str = "zero3") -> tuple[bool, int]:
    """Whether n cards fit (``sharded`` beyond one; best of no and full checkpointing), and that peak."""
    limit = limit_bytes(get_gpu(card), GUIDE_MARGIN)
    par = {"num_gpus": n, "parallelism": "none" if n == 1 else sharded, "gpu": card}
    best = min((ev.estimate(**par, gradient_checkpointing=ck) for ck in ("none", "full")),
               key=lambda r: r.peak.device_bytes)
    return fits(best, limit), best.peak.device_bytes


def _part_sizes(r) -> dict[str, int]:
    """Each part where the text below describes it (the component table holds sizes at the peak):
    saved activations and logits at the end of forward, the autocast copies kept into backward,
    the model state and gradients at their largest; processes as in the component table."""
    by_phase = {p.phase: dict(p.breakdown) for p in r.phases}
    sizes = largest_per_component(r.phases)
    for name, phase in (("activations", "forward"), ("logits_loss", "forward"), ("autocast_copies", "backward-loss")):
        sizes[name] = by_phase.get(phase, {}).get(name, 0)
    sizes.update({c.name: c.bytes for c in r.components if c.counted_in != "allocated"})
    order = ("weights", "quantized_base", "adapters", "master_weights", "gradients", "optimizer_state",
             "activations", "autocast_copies", "logits_loss", "temporaries", "comm_buffers", "workspaces")
    return {k: sizes[k] for k in sorted(sizes, key=lambda k: order.index(k) if k in order else 99) if sizes[k]}


def _why(size: str, method: str, row_claims: list[dict], comps: dict[str, int], n_params: int,
         fewest: dict[int, int | None]) -> list[str]:
    out: list[str] = []
    wrong = [c for c in row_claims if c["verdict"] != "agrees"]
    if not wrong:
        return out
    if method == "full":
        ours = {k: comps.get(k, 0) for k in ("master_weights", "weights", "gradients", "optimizer_state", "autocast_copies")}
        per = sum(ours.values()) / n_params
        if size == "7B":
            g7 = _guide_7b_full_gb()
            theirs = (f"for 7B: {g7['weights']} + {g7['optimizer_state']} + {g7['gradients']} = "
                      f"{sum(g7.values())} GB, section 02")
        else:
            theirs = f"by the same count {12 * n_params / GB:,.0f} GB for {size}"
        out.append(
            f"The guide counts bf16 weights + Adam + bf16 gradients = 2 + 8 + 2 = 12 bytes per parameter ({theirs}) "
            "and no fp32 master weights or activations. "
            f"Mixed-precision AdamW (PyTorch AMP, bf16-mixed) keeps fp32 weights that are the master copy "
            f"({_gb(ours['master_weights'] + ours['weights'])}), fp32 gradients ({_gb(ours['gradients'])}), Adam's two fp32 "
            f"moments ({_gb(ours['optimizer_state'])}) and bf16 autocast copies of the weights ({_gb(ours['autocast_copies'])}): "
            f"{per:.1f} bytes per parameter before activations ({_gb(comps.get('activations', 0))} at seq 2048 with "
            f"checkpointing), logits ({_gb(comps.get('logits_loss', 0))}) and the CUDA context."
        )
    if method == "lora":
        out.append(f"The frozen base alone is {_gb(comps.get('weights', 0))} in bf16 (2 bytes per parameter); "
                   "LoRA removes gradients and optimizer state, not the weights.")
    if method == "qlora":
        base = comps.get("quantized_base", 0) + comps.get("weights", 0)
        out.append(f"The 4-bit base with its unquantized embeddings and norms is {_gb(base)}; the rest is activations, "
                   "the de-quantized layer and the CUDA context.")
    for c in wrong:
        need = fewest.get(c["class_gb"])
        need_s = f"{need} x {c['class_gb']} GB" if need else f"more than {max(COUNTS)} x {c['class_gb']} GB"
        if c["verdict"] == "does not fit":
            out.append(f"Section {c['section']} says {c['count']} x {c['class_gb']} GB; we estimate "
                       f"{_gb(c['device_bytes'])} per GPU there, so it needs {need_s}.")
        else:
            out.append(f"Section {c['section']} asks for {c['count']} x {c['class_gb']} GB; {need_s} already fits.")
        if c.get("pure_bf16_fits") is not None:
            out.append(f"In pure bf16 (bf16-true, 8 B per parameter{', FSDP' if c['count'] > 1 else ''}) "
                       f"{c['count']} x {c['class_gb']} GB {'fits' if c['pure_bf16_fits'] else 'does not fit either'}: "
                       f"{_gb(c['pure_bf16_device_bytes'])} per GPU, of the {_gb(_usable(c['class_gb']))} each card exposes.")
    if size == "7B" and method == "full" and any(c["class_gb"] == 48 for c in wrong):
        out.append("Section 05 puts 7B full fine-tuning in the 48 GB class, but the guide's own total (84 GB) already exceeds 48 GB.")
    return out


def _claim(ev: Evaluator, cl: Claim, need: int | None, method: str) -> dict[str, Any]:
    """One card-count check with our verdict; full fine-tuning's also in pure bf16 (``pure_bf16_fits``,
    ``pure_bf16_device_bytes``: :data:`PURE_BF16` under FSDP beyond one card; None for the other methods)."""
    card = dict((g, c) for g, c in CLASSES)[cl.class_gb]
    ok, dev = _fits(ev, card, cl.count)
    verdict = "does not fit" if not ok else ("agrees" if need == cl.count else "more than needed")
    pure = _fits(Evaluator({**ev.base.to_dict(), **PURE_BF16}), card, cl.count, "fsdp") if method == "full" else (None, None)
    return {**cl.to_dict(), "fits": ok, "device_bytes": dev, "verdict": verdict,
            "pure_bf16_fits": pure[0], "pure_bf16_device_bytes": pure[1]}


def guide_table() -> GuideTable:
    """The guide's table (7B, 13B, 34B, 70B x full, LoRA, QLoRA) with our figures and verdicts."""
    rows: list[GuideRow] = []
    all_claims = _claims()
    for size, model in SIZES:
        for method, recipe in METHODS.items():
            ev = Evaluator({"model": model, **recipe, **SETTINGS})
            one = ev.estimate()
            ck = ev.estimate(gradient_checkpointing="full")
            fewest: dict[int, int | None] = {}
            for gb, card in CLASSES:
                fewest[gb] = next((n for n in COUNTS if _fits(ev, card, n)[0]), None)
            claims = [_claim(ev, cl, fewest[cl.class_gb], method) for cl in all_claims.get((size, method), ())]
            options = [(n * gb, n, gb) for gb, n in fewest.items() if n]
            smallest = f"{min(options)[1]} x {min(options)[2]} GB" if options else f"more than {max(COUNTS)} x 80 GB"
            comps = _part_sizes(ck)
            why = _why(size, method, claims, comps, one.model.num_params, fewest)
            rows.append(GuideRow(size, model, method, one.model.num_params, one.peak.device_bytes,
                                 ck.peak.device_bytes, comps, fewest, smallest, tuple(claims),
                                 all(c["verdict"] == "agrees" for c in claims), tuple(why)))
    classes = tuple({"class_gb": gb, "gpu_id": c, "usable_bytes": get_gpu(c).usable_bytes} for gb, c in CLASSES)
    settings = {**SETTINGS, "full": METHODS["full"], "multi_gpu": "zero3", "checkpointing": "none or full, the one that fits",
                "fits": "device peak <= the card's usable memory (no safety margin)", "precision_note": PRECISION_NOTE}
    return GuideTable(settings, classes, tuple(rows))
