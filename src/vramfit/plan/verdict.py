"""The one definition of "fits", used by ``estimate``, ``fit``, ``sweep``, ``plan`` and the web page.

A run **fits** a card when the device memory it needs per GPU (``peak.required_bytes``) is at most
the card's usable memory (what CUDA exposes to a process, ``GPU.usable_bytes``) less a safety margin,
by default :data:`SAFETY_MARGIN` = 5 % of it. The margin is a stated policy, not a measurement: it
leaves room for what the estimate does not see (fragmentation beyond the modelled allocator slack,
other processes, driver versions that expose a few MiB less).

The figure needed is the device peak (what ``nvidia-smi`` shows on a card with headroom) less the cached
segments that hold no live block: when ``cudaMalloc`` fails, the caching allocator's ``malloc`` releases
them (``release_cached_blocks``) and retries before it reports an out-of-memory error (pytorch/pytorch@eb42ad6e
``c10/cuda/CUDACachingAllocator.cpp``; replayed in vramfit.sim.cuda_allocator). Free space inside a segment that
still holds a live block (fragmentation) is not released and stays counted.

Paged optimizer state (``paged-adamw``, ``paged-adamw-8bit``) lives in CUDA managed memory, which the
driver pages out to host RAM under memory pressure (bitsandbytes ``paged_optimizers`` docs; QLoRA,
Dettmers et al. 2023, sec. 2 "Paged Optimizers"). So a run whose device peak is over the limit
still fits when paging the state out brings it under: the verdict is then "fits, with paging of
N GiB optimizer state (slower)". Paging can therefore never make a verdict worse than plain AdamW.

The estimator computes bytes and reads no GPU catalog; verdicts are made here, from its result and
the cards given.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from vramfit.estimate.card_facts import per_card
from vramfit.estimate.result import EstimateResult, FitInfo
from vramfit.gpus import COMMON_CARDS, GPU
from vramfit.units import gib

if TYPE_CHECKING:
    from vramfit.calibration import Calibration

#: Default fraction of a card's usable memory kept free (policy; see the module docstring).
SAFETY_MARGIN = 0.05
#: what the margin means, for the CLI's and the API's help (the verdict holds the required figure, not the device one)
SAFETY_MARGIN_HELP = ("Fraction of each card's usable memory kept free: a run fits when the memory it needs (its device "
                      "peak less the cached blocks the allocator frees and retries before failing) is at most the rest.")

PAGED_COMPONENT = "paged_optimizer_state"


def definition(safety_margin: float = SAFETY_MARGIN) -> str:
    """The sentence that says what "fits" means, printed next to every verdict."""
    return (
        "Fits = the estimated device peak per GPU (what nvidia-smi shows), less cached allocator segments that "
        "PyTorch releases and retries before an out-of-memory error (torch c10/cuda/CUDACachingAllocator.cpp), "
        f"is at most the card's usable memory (what CUDA exposes) less a {safety_margin:.0%} safety margin; paged "
        "optimizer state may move to host RAM ('fits, with paging', slower)."
    )


def limit_bytes(gpu: GPU, safety_margin: float = SAFETY_MARGIN) -> int:
    """Bytes a run may use on ``gpu``: its usable memory less the safety margin."""
    return int(gpu.usable_bytes * (1.0 - safety_margin))


def paging_bytes(device_bytes: int, paged_bytes: int, limit: int) -> int | None:
    """Bytes of paged optimizer state that must live in host RAM for the run to fit ``limit``.

    0: fits with everything on the card; ``None``: does not fit even with all of it paged out.
    """
    over = device_bytes - limit
    if over <= 0:
        return 0
    return over if over <= paged_bytes else None


def result_paging(r: EstimateResult, limit: int) -> int | None:
    """:func:`paging_bytes` of an estimate."""
    return paging_bytes(r.peak.required_bytes, r.component(PAGED_COMPONENT), limit)


def fits(r: EstimateResult, limit: int) -> bool:
    """Whether an estimate fits ``limit`` bytes per GPU (paging of paged optimizer state allowed)."""
    return r.peak.required_bytes <= limit or result_paging(r, limit) is not None  # the planner's hot path


def figures_fit(f, limit: int) -> bool:
    """:func:`fits` on the fit test's figures alone (:class:`vramfit.estimate.FitFigures`: the same bytes)."""
    return paging_bytes(f.required_bytes, f.paged_bytes, limit) is not None


def card_refusal(gpu: GPU, sc: Any) -> tuple[str, str] | None:
    """(why, the setting that runs) where a run cannot start on ``gpu`` whatever its memory, or None: a bf16 run on a
    card without BF16 (the catalog's ``supports_bf16``; the HF Trainer refuses ``bf16=True`` there, transformers
    training_args.py: "Your setup doesn't support bf16/gpu"), FlashAttention-2 on a card it does not run on (the
    catalog's ``supports_flash_attn2``, where the framework's flash attention is FA2: profile ``flash_attention_is_fa2``).
    The planner leaves such a card out for the same reason (plan/rental.py ``cannot_run``), so estimate, fit, sweep and
    plan say the same of it. A colocated vLLM whose share of the card cannot hold its model copy (as stored) does not
    start either (estimate/stages/rl.py vllm_too_small: its model copy and one sequence's KV cache)."""
    from vramfit.estimate.framework import scenario_profile
    from vramfit.scenario import Attention, Generation, Precision

    if sc.precision in (Precision.BF16_MIXED, Precision.BF16_TRUE) and gpu.supports_bf16 is False:
        return f"no BF16 on {gpu.name}", "--precision fp16-mixed"
    if (sc.attention is Attention.FLASH and gpu.supports_flash_attn2 is False
            and scenario_profile(sc).flash_attention_is_fa2):
        return f"no FlashAttention-2 on {gpu.name}", "--attention sdpa"
    if getattr(sc, "generation", None) is Generation.VLLM_COLOCATE and sc.vllm_gpu_memory_utilization:
        return _vllm_refusal(gpu, sc)
    return None


def _vllm_refusal(gpu: GPU, sc: Any) -> tuple[str, str] | None:
    """:func:`card_refusal`'s reason where a colocated vLLM's share cannot start (estimate/stages/rl.py
    vllm_too_small); None for a model given as a pasted config.json (its spec is not in the scenario)."""
    from vramfit.errors import ScenarioError
    from vramfit.estimate import resolve_spec
    from vramfit.estimate.stages.rl import vllm_too_small
    from vramfit.estimate.vision_inputs import lm_scenario

    try:
        spec = resolve_spec(sc)[1]
    except ScenarioError:
        return None
    short = vllm_too_small(sc.vllm_gpu_memory_utilization, gpu.usable_bytes, spec, lm_scenario(spec, sc).seq_len)
    if short is None:
        return None
    budget, least, share = short
    return (f"vLLM's {sc.vllm_gpu_memory_utilization:.2f} share ({gib(budget)} GiB) is less than its model copy and one "
            f"sequence's KV cache ({gib(least)} GiB)",
            f"--vllm-gpu-memory-utilization {share:.2f} or more" if share <= 1 else "a card with more memory")


def verdict_text(paged_out: int | None) -> str:
    """``fits`` / ``fits, with paging of N GiB optimizer state (slower)`` / ``does not fit``."""
    if paged_out is None:
        return "does not fit"
    if paged_out == 0:
        return "fits"
    return f"fits, with paging of {gib(paged_out)} GiB optimizer state (slower)"


def card_fit(r: EstimateResult, gpu: GPU, safety_margin: float = SAFETY_MARGIN) -> FitInfo:
    """The verdict of one estimate on one card.

    ``headroom_bytes`` is the limit less what stays on the card (negative: over the limit).
    """
    limit = limit_bytes(gpu, safety_margin)
    paged = result_paging(r, limit)
    resident = r.peak.required_bytes - (paged if paged is not None else r.component(PAGED_COMPONENT))
    refused = card_refusal(gpu, r.scenario)
    return FitInfo(
        gpu_id=gpu.gpu_id, name=gpu.name, usable_bytes=gpu.usable_bytes, fits=paged is not None and refused is None,
        headroom_bytes=limit - resident, limit_bytes=limit, safety_margin=safety_margin,
        paging_bytes=(paged or 0) if refused is None else 0,
        verdict=verdict_text(paged) if refused is None else refusal_verdict(refused), runs=refused is None,
    )


def refusal_verdict(refused: tuple[str, str]) -> str:
    """The verdict on a card the run cannot start on (:func:`card_refusal`)."""
    return f"cannot run: {refused[0]} ({refused[1]} runs)"


def default_cards(gpu_id: str | None = None) -> list[GPU]:
    """The scenario's card (if any) first, then :data:`COMMON_CARDS` (read from the catalog)."""
    from vramfit.gpus import get_gpu

    ids = ([gpu_id] if gpu_id else []) + list(COMMON_CARDS)
    return list({g.gpu_id: g for g in map(get_gpu, ids)}.values())  # an alias of a common card counts once


def with_fits(r: EstimateResult, cards: Iterable[GPU] | None = None, safety_margin: float = SAFETY_MARGIN,
              on_card: Callable[[GPU], EstimateResult] | None = None,
              calibration: Calibration | None = None) -> EstimateResult:
    """The estimate with its ``fits`` filled for ``cards`` (default: :func:`default_cards`). ``on_card(card)``: the
    estimate of the same run on ``card``; given, each card is judged on its own figure (the estimate depends on the
    card: vramfit.estimate.card_facts), ``r``'s where the card's facts are those of the card it was made for.
    ``calibration``: the one ``on_card`` applies (a calibrated family is a fact of the card)."""
    gpus = list(cards) if cards is not None else default_cards(r.scenario.gpu)
    on = per_card(r, on_card, calibration)
    return replace(r, fits=tuple(card_fit(on(g), g, safety_margin) for g in gpus))


def estimate_fits(scenario: Any, cards: Iterable[GPU] | None = None, safety_margin: float = SAFETY_MARGIN,
                  calibration: Calibration | None = None, **kw: Any) -> EstimateResult:
    """``estimate(scenario, calibration=calibration, **kw)`` with its card verdicts (:func:`with_fits`), each card
    judged on the run's estimate on that card."""
    from vramfit.estimate import estimate

    r = estimate(scenario, calibration=calibration, **kw)
    return with_fits(r, cards, safety_margin, lambda g: estimate(r.scenario.replace(gpu=g.gpu_id),
                                                                 calibration=calibration, **kw), calibration)
