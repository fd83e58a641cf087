"""What a renter filters by: the software stack of a card, the units it is rented in, the price basis.

A plan is only believable if the card can run it with the user's software and can be rented in that
shape: a GB200 is rented per 4-GPU tray (CoreWeave's NVL72 instances), not as one card or as an
8-GPU node; an AMD card runs ROCm, where bitsandbytes and FlashAttention have their own builds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vramfit.estimate.profile_fields import BNB_OPTIMIZERS
from vramfit.gpus import GPU
from vramfit.units import GB

_BNB_VALUES = frozenset(o.value for o in BNB_OPTIMIZERS)  # the optimizers bitsandbytes runs, as scenario keys hold them


@dataclass(frozen=True)
class Stack:
    """The software stack a card's vendor ships, and what the planner's settings need from it."""

    name: str  # cuda | rocm | habana
    label: str
    lacks: tuple[str, ...]  # plan features it cannot run: "fused-loss", "flash-attention", "bnb-optimizer"
    note: str  # what works, for the plan's notes ("" for CUDA: the reference stack)


#: Per vendor (gpus.csv ``vendor``). Sources: bitsandbytes 0.50.2 (the venv's release) loads
#: ``libbitsandbytes_rocm*`` on HIP builds (cextension.py) and tunes its 4-bit GEMM on gfx942 = MI300X/
#: MI325X (backends/cuda/ops.py ``_gemm_4bit_use_custom_rocm``); its HPU backend registers only
#: ``dequantize_4bit`` (backends/hpu/ops.py), so 8-bit/paged optimizer kernels are CUDA/ROCm only.
#: FlashAttention 2: ROCm CK backend for MI200/MI300 (Dao-AILab README, gpus.csv supports_flash_attn2);
#: none on Gaudi. Liger Kernel (the fused loss) is Triton, which Gaudi does not run.
STACKS: dict[str, Stack] = {
    "NVIDIA": Stack("cuda", "CUDA", (), ""),
    "AMD": Stack("rocm", "ROCm", (), "ROCm: use the ROCm builds of PyTorch and bitsandbytes (>= 0.50: 4-bit QLoRA "
                 "and 8-bit optimizers), FlashAttention 2 via its ROCm CK backend; CUDA-only kernels will not load"),
    "Intel (Habana)": Stack("habana", "Habana SynapseAI", ("fused-loss", "flash-attention", "bnb-optimizer"),
                            "Gaudi (SynapseAI, optimum-habana): bitsandbytes 0.50 only de-quantizes 4-bit on HPU; "
                            "no FlashAttention 2, no Triton (Liger), no bitsandbytes 8-bit/paged optimizers"),
}
STACK_NAMES = tuple(s.name for s in STACKS.values())


def stack_of(g: GPU) -> Stack:
    """The card's stack; a user card with an unknown vendor is taken as CUDA (said in its notes)."""
    return STACKS.get(g.vendor, STACKS["NVIDIA"])


def needs(keys: dict) -> tuple[str, ...]:
    """Stack features a plan's scenario keys use."""
    out = []
    if keys.get("loss") == "fused":
        out.append("fused-loss")
    if keys.get("attention") == "flash":
        out.append("flash-attention")
    if keys.get("optimizer") in _BNB_VALUES:  # not torchao's adamw-8bit-torchao (estimate/profile_fields.py)
        out.append("bnb-optimizer")
    return tuple(out)


def node_limit(g: GPU, cap: int) -> int:
    """Most GPUs of ``g`` in one plan: its largest rental unit (GB200: a 4-GPU tray), at most ``cap``."""
    return min(cap, max(g.rental_gpus)) if g.rental_gpus else cap


def billed_gpus(g: GPU, n: int) -> int:
    """GPUs paid for when a plan uses ``n``: the smallest rental unit that holds them (n if rented per GPU)."""
    return next((u for u in g.rental_gpus if u >= n), n) if g.rental_gpus else n


_DATE = re.compile(r"\b(20\d\d-\d\d(?:-\d\d)?|(?:January|February|March|April|May|June|July|August|September|"
                   r"October|November|December) 20\d\d)\b")


def price_basis(g: GPU) -> str:
    """``provider, date`` of the low price (the one that ranks plans), read from ``price_details``."""
    if g.price_low is None:
        return ""
    token = re.compile(r"\$(?:" + re.escape(f"{g.price_low:.2f}") + "|" + re.escape(f"{g.price_low:g}") + r")(?![0-9])")
    for seg in g.price_details.split("; "):
        m = token.search(seg)
        if not m:
            continue
        before = re.split(r", | / ", re.sub(r"\([^)]*\)", "", seg[: m.start()]))[-1]
        words = before.split("$")[0].strip(" =~").split() or seg.split()[:1]
        provider = " ".join(words[:2] if len(words) > 1 and words[1] in ("Community", "Secure") else words[:1])
        dates = _DATE.findall(seg[m.start():]) or _DATE.findall(seg)
        kind = " research note" if "research note" in seg else ""
        return f"{provider},{kind} {dates[0] if dates else 'undated'}"
    return "see price_details"


def check_ranking(sort: str, deadline: float | str | None, stacks: list[str] | str | None
                  ) -> tuple[str, float | None, tuple[str, ...]]:
    """Validated ``sort`` (cost | time), ``deadline`` in hours, and the software stacks to plan."""
    from vramfit.errors import ScenarioError
    from vramfit.safe_input import shown
    from vramfit.scenario import positive_number

    if sort not in ("cost", "time"):
        raise ScenarioError("sort", f"unknown value {shown(sort)}", ["cost", "time"])
    hours = None if deadline is None else positive_number("deadline", deadline, what="a positive number of hours")
    items = stacks.split(",") if isinstance(stacks, str) else list(stacks or ())
    wanted = tuple(dict.fromkeys(str(s).strip().lower() for s in items if str(s).strip()))
    for s in wanted:
        if s not in STACK_NAMES:
            raise ScenarioError("stack", f"unknown software stack {shown(s)}", STACK_NAMES)
    return sort, hours, wanted


def cannot_run(g: GPU, sc, wanted: tuple[str, ...]) -> str | None:
    """Why ``g`` is not planned for scenario ``sc`` (no BF16, a stack not wanted or lacking a feature), or None."""
    from vramfit.plan.verdict import card_refusal

    st = stack_of(g)
    if wanted and st.name not in wanted:
        return f"{st.label} card; --stack {','.join(wanted)}"
    missing = [f for f in needs(sc.to_dict()) if f in st.lacks]
    if missing:  # a stack's own reason first (Gaudi: no FlashAttention 2 in its software)
        return f"the scenario needs {', '.join(missing)}; {st.note}"
    refused = card_refusal(g, sc)  # the card verdicts' own rule (estimate, fit, sweep)
    return None if refused is None else f"{refused[0]}: plan it with {refused[1]}"


def not_found(g: GPU, mine: tuple[int, ...], counts: tuple[int, ...], all_counts: tuple[int, ...], eff: int,
              lacking: list[int], pinned: tuple[str, str] | None = None, host: tuple[int, int] | None = None,
              tried: str = "even with ZeRO-3, checkpointing and offload (at micro-batch 1)",
              one_gpu: str | None = None) -> str:
    """The reason a card got no plan (``pinned``: the layout a DeepSpeed config fixes, :func:`search.pinned_layout`;
    ``host``: the GPUs and host bytes per GPU of a plan that fits the card only beyond the planner's host RAM cap;
    ``tried``: what the framework's plans could try, :func:`search.tried_words`; ``one_gpu``: why the run takes one
    GPU only, :func:`search.one_gpu_only`)."""
    from vramfit.plan.planner import HOST_RAM_PER_GPU

    if not mine:
        return f"rented in units of {min(g.rental_gpus)} GPUs; effective batch {eff} allows at most {max(counts)}"
    if lacking:
        return f"fits {lacking[0]} x {g.gpu_id} only with settings its stack lacks ({stack_of(g).note})"
    fewer = f"; effective batch {eff} allows at most {max(counts)} GPUs" if counts != all_counts else ""
    if host is not None:
        return (f"fits {host[0]} x {g.gpu_id} or more only with offloaded state, needing {host[1] / GB:,.0f} GB of host "
                f"RAM per GPU at {host[0]}, over the {HOST_RAM_PER_GPU.value / GB:.0f} GB per GPU plans assume (a DGX H100: 2 TB for 8 GPUs)"
                + fewer)
    unit = f" (rented at most {max(g.rental_gpus)} per instance)" if g.rental_gpus else ""
    if one_gpu is not None:
        return f"does not fit 1 x {g.gpu_id} at micro-batch 1 ({one_gpu})"
    if pinned is not None:
        tried = f"even with the DeepSpeed config's {pinned[0]} and offload {pinned[1]}, with checkpointing (at micro-batch 1)"
    return (f"does not fit {max(mine)} x {g.gpu_id}{unit} {tried}"
            + fewer
            + ("; give max_gpus above 8 to plan across nodes" if max(all_counts) == 8 and max(mine) == 8 else ""))


def ranking_assumptions(sort: str, deadline: float | None, wanted: tuple[str, ...]) -> tuple[str, ...]:
    by = "cost per token at the low price" if sort == "cost" else "tokens per second (fastest first)"
    out = [f"Ranked: plans within budget{' and the deadline' if deadline else ''} first, then by {by} (--sort cost|time).",
           "Cards are planned in the units they are rented in where the catalog knows them (gpus.csv rental_gpus: "
           "GB200 per 4-GPU NVL72 tray, a GH200 per superchip); a smaller plan pays for the whole unit. Other cards are "
           "rented per GPU, one node of at most 8.",
           "Each cost names its price basis (provider, date read): GPU rental prices change often; refresh them with --gpus."]
    if deadline:
        out.append(f"Deadline {deadline:g} h (--deadline): plans that take longer are ranked after the rest.")
    if wanted:
        out.append(f"Only cards of the {', '.join(wanted)} software stack (--stack).")
    return tuple(out)
