"""GRPO plans: their bad combinations, and vLLM on GPUs of its own.

With ``generation: vllm-server`` TRL's trainer asks a ``trl vllm-serve`` process for completions
(grpo_config.py ``vllm_mode="server"``); that server holds the model on GPUs apart from the training
ones. A plan therefore takes ``server`` more cards of the same node: the fewest (tensor-parallel 1, 2,
4) whose ``gpu_memory_utilization`` share (0.9 by default in ``trl vllm-serve``,
trl/scripts/vllm_serve.py:111, TRL 1.16) holds the 16-bit weights with room left for the KV cache
(vLLM refuses to start without it: "No available memory for the cache blocks", vllm/v1/core/kv_cache_utils.py).
With ``vllm-colocate`` the planner also tries that split, and ranks both: colocating costs memory on
every training card, the split costs cards.
"""

from __future__ import annotations

import math
from dataclasses import replace

from vramfit.choices import Generation, Stage
from vramfit.errors import ScenarioError
from vramfit.gpus import GPU
from vramfit.scenario import Scenario

VLLM_SERVE_UTILIZATION = 0.9  # trl vllm-serve --gpu_memory_utilization default (trl/scripts/vllm_serve.py:111)
TENSOR_PARALLEL = (1, 2, 4)  # server sizes tried (one node; attention heads divide these in every catalog model)


def check(sc: Scenario, eff: int, max_gpus: int) -> None:
    """The plan-level bad combinations of GRPO, one error each naming the keys."""
    if sc.stage is not Stage.GRPO:
        return
    if eff % sc.num_generations:
        raise ScenarioError("effective_batch", f"grpo needs the completions per step to be a multiple of "
                            f"num_generations ({sc.num_generations}), as TRL requires; got {eff}")
    if sc.generation is Generation.VLLM_SERVER and max_gpus < 2:
        raise ScenarioError("generation", "vllm-server runs vLLM on GPUs of its own beside the training ones: "
                            f"max_gpus {max_gpus} leaves none for it; raise max_gpus or colocate",
                            ["hf", "vllm-colocate"])


def server_gpus(num_params: int, card: GPU) -> int | None:
    """Cards the vLLM server takes on ``card``: the fewest of :data:`TENSOR_PARALLEL` whose share holds
    the 16-bit weights with some KV cache room; None when four do not."""
    weights = 2 * num_params
    share = VLLM_SERVE_UTILIZATION * card.usable_bytes
    for tp in TENSOR_PARALLEL:
        if math.ceil(weights / tp) < share:
            return tp
    return None


def wants_split(sc: Scenario) -> bool:
    """GRPO with vLLM: the server split is planned (vllm-server) or tried beside colocation."""
    return sc.stage is Stage.GRPO and sc.generation in (Generation.VLLM_SERVER, Generation.VLLM_COLOCATE)


def as_server(sc: Scenario) -> Scenario:
    """The colocated scenario with vLLM moved to a server (no share of the training cards)."""
    return replace(sc, generation=Generation.VLLM_SERVER, vllm_gpu_memory_utilization=None, vllm_sleep=False)


def note(server: int) -> str:
    return (f"+ {server} GPU{'s' if server > 1 else ''} of the node for the vLLM server (trl vllm-serve, "
            f"tensor parallel {server}); the time counts training only, the cost all the cards")
