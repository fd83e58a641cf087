"""One scenario's step time on its card, as the planner times it, and a user's speed calibration of it.

``vramfit calibrate`` compares a stored run's measured step time with :func:`scenario_speed` of the run's
scenario and card (the mechanism model: :func:`throughput.mechanism_step_time` through
:func:`throughput.step_time`, with the links, network and paging :meth:`search.Search.speed` gives it);
the planner then multiplies the predicted step time of a card of that family by the median ratio
(:func:`calibrated`, ``FamilyCalibration.speed_factor``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from vramfit.calibration import Calibration
from vramfit.plan.throughput import Speed


def scenario_speed(scenario: dict[str, Any], gpu_id: str) -> Speed | None:
    """The mechanism model's :class:`Speed` of ``scenario`` on ``gpu_id`` (a catalog id); None where the
    card lacks the figures the model needs (BF16 peak, memory bandwidth)."""
    from vramfit.gpus import GPUS_PER_NODE, get_gpu
    from vramfit.plan.evaluate import Evaluator
    from vramfit.plan.kernels import card_speed
    from vramfit.plan.search import peer_gbs
    from vramfit.plan.stage_work import scenario_flops
    from vramfit.plan.throughput import MFU_DEFAULT, scenario_net, step_time, step_work
    from vramfit.plan.verdict import limit_bytes, result_paging

    g = get_gpu(gpu_id)
    ev = Evaluator({**scenario, "gpu": g.gpu_id})
    sc = ev.base
    peer = peer_gbs(g, sc.num_gpus)
    card = card_speed(g, peer, min(sc.num_gpus, GPUS_PER_NODE))
    if card is None:
        return None
    est = ev.estimate()
    w = step_work(sc, scenario_flops(ev.spec, sc), est.model.num_trainable_params)
    return step_time(w, peak_tflops=g.bf16_tflops, mfu=MFU_DEFAULT.value, mem_bandwidth_gbs=g.mem_bandwidth_gbs,
                     peer_gbs=peer, host_gbs=g.host_link_gbs, card=card, net=scenario_net(sc.interconnect, g, peer),
                     paged_bytes=result_paging(est, limit_bytes(g, 0.0)) or 0)


def speed_factor(calibration: Calibration | None, gpu_id: str) -> float | None:
    """The measured/predicted step-time factor of ``gpu_id``'s family, or None (no calibration, no factor)."""
    fc = calibration.for_card(gpu_id) if calibration is not None else None
    return fc.speed_factor if fc is not None else None


def calibrated(s: Speed, factor: float | None) -> Speed:
    """``s`` with its step time multiplied by ``factor`` (tokens/s divided by it); unchanged without one."""
    if not factor:
        return s
    return dataclasses.replace(s, step_s=s.step_s * factor, tokens_per_s=s.tokens_per_s / factor)
