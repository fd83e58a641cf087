"""The facts of a card that an estimate reads, so a verdict on another card uses that card's own figure.

An estimate depends on the card it is made for, not only on the run: Hopper's larger cuBLAS workspace
(estimate/step.py ``workspaces``) and CUDA context (estimate/reserved.py ``context_constant``), NCCL's NVLS
buffers on an sm90+ NVSwitch node (estimate/nccl.py ``nvls_card``), a colocated vLLM's fraction of the card's
memory (estimate/stages/rl.py ``vllm_bytes``), a user's calibration of the card's family
(vramfit.calibration ``for_card``) and the attention kernel a run falls back to on a card without
FlashAttention-2 (estimate/attention.py ``falls_back_repeating_kv``, ``gqa_math_on_card``). Two cards with equal :func:`card_facts` get the same estimate
(tests/plan/test_card_verdicts.py checks it over the catalog), so the card verdicts of one estimate
(vramfit.plan.verdict ``with_fits``) re-estimate once per distinct set of facts, not once per card.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vramfit.calibration import Calibration, card_family
from vramfit.choices import Attention, Generation

if TYPE_CHECKING:
    from vramfit.estimate.result import EstimateResult
    from vramfit.gpus import GPU
    from vramfit.scenario import Scenario


def card_facts(sc: Scenario, card: GPU | None, calibration: Calibration | None = None) -> tuple[Any, ...]:
    """What the estimate of ``sc`` reads of ``card`` (None: no card named), as a hashable key, each fact from the
    estimator's own function for it."""
    from vramfit.estimate.attention import lacks_flash_attention
    from vramfit.estimate.nccl import nvls_card
    from vramfit.estimate.reserved import context_constant
    from vramfit.estimate.step import workspaces

    named = dataclasses.replace(sc, gpu=card.gpu_id if card is not None else None)
    usable = card.usable_bytes if card is not None and sc.generation is Generation.VLLM_COLOCATE else None
    family = card_family(card.gpu_id) if card is not None and calibration is not None and \
        calibration.for_card(card.gpu_id) else None
    # a card without FlashAttention-2 runs flash or SDPA attention through another kernel (estimate/attention.py
    # falls_back_repeating_kv, gqa_math_on_card)
    no_flash = card is not None and sc.attention in (Attention.FLASH, Attention.SDPA) and lacks_flash_attention(sc, card)
    return workspaces(card), context_constant(named, card).value, nvls_card(named), usable, family, no_flash


def per_card(r: EstimateResult, on_card: Callable[[GPU], EstimateResult] | None,
             calibration: Calibration | None = None) -> Callable[[GPU], EstimateResult]:
    """``card -> the estimate of r's run on card``: ``r`` itself where the card's facts are those of the card ``r``
    was made for (or without ``on_card``), else ``on_card(card)``, made once per distinct set of facts."""
    from vramfit.gpus import get_gpu

    if on_card is None:
        return lambda card: r
    own = get_gpu(r.scenario.gpu) if r.scenario.gpu else None
    made = {card_facts(r.scenario, own, calibration): r}

    def on(card: GPU) -> EstimateResult:
        key = card_facts(r.scenario, card, calibration)
        if key not in made:
            made[key] = on_card(card)
        return made[key]

    return on
