"""The training stage of an imported config: Axolotl ``rl`` and LLaMA-Factory ``stage`` + ``pref_loss``
become the scenario's ``stage`` (and GRPO's keys).

Axolotl: ``RLType`` = dpo, grpo, ipo, orpo, kto, simpo (axolotl-ai-cloud/axolotl@067b021
src/axolotl/utils/schemas/enums.py); IPO is TRL's DPO trainer with ``loss_type="ipo"``; GRPO's
settings sit under ``trl:`` (``num_generations``, ``max_completion_length``, ``use_vllm``,
``vllm_mode``, ``vllm_gpu_memory_utilization``, ``vllm_enable_sleep_mode``, ``beta``), passed to
``GRPOConfig`` (src/axolotl/utils/schemas/trl.py).
Axolotl passes ``cpo_alpha`` to TRL's CPOConfig for ``rl: simpo`` (src/axolotl/core/builders/rl.py:139-140).
LLaMA-Factory: ``stage`` = pt, sft, rm, ppo, dpo, kto; a dpo stage with ``pref_loss`` orpo or simpo
loads no reference (``use_ref_model = stage == "dpo" and pref_loss not in ["orpo", "simpo"]``,
hiyouga/LLaMA-Factory@ff6d4d1 src/llamafactory/hparams/finetuning_args.py). Its simpo is its own
``CustomDPOTrainer.simpo_loss`` on the summed log-probs, with no cross-entropy over the chosen logits
(``cpo_alpha`` 0), and its ``pref_ftx`` term is ``-policy_chosen_logps_avg``, the same per-token log-probs
(src/llamafactory/train/dpo/trainer.py:160-166, 300-302): no tensor of its own, so not ``rpo_alpha``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vramfit.config_import.report import KeyReader

AXOLOTL_RL = {"dpo": "dpo", "ipo": "dpo", "kto": "kto", "orpo": "orpo", "simpo": "simpo", "grpo": "grpo"}
LLAMAFACTORY_STAGE = {"dpo": "dpo", "kto": "kto", "ppo": "ppo"}


def axolotl_stage(r: KeyReader) -> None:
    """``rl`` -> ``stage``; for GRPO the ``trl.*`` keys that size the rollouts."""
    rl = r.get("rl")
    if rl is None:
        return
    stage = AXOLOTL_RL.get(str(rl).lower())
    if stage is None:
        r.mark("rl", f"rl '{rl}' is not modelled yet (modelled: {', '.join(AXOLOTL_RL)}): estimated as supervised "
                     "fine-tuning")
        return
    r.set("rl", "stage", stage)
    if stage == "simpo" and r.get("cpo_alpha") is not None:
        r.set("cpo_alpha", "cpo_alpha", r.get("cpo_alpha"))
    if stage != "grpo":
        return
    for key, target in (("trl.num_generations", "num_generations"), ("trl.max_completion_length", "completion_len")):
        value = r.get(key)
        if value is not None:
            r.set(key, target, value)
    if r.get("trl.use_vllm") is True:
        mode = r.get("trl.vllm_mode", "colocate", "axolotl passes vllm_mode None on: TRL 1.16.0 GRPOConfig.vllm_mode")
        r.set("trl.use_vllm", "generation", "vllm-colocate" if mode == "colocate" else "vllm-server")
        if mode == "colocate":
            util = r.get("trl.vllm_gpu_memory_utilization")
            if util is not None:
                r.set("trl.vllm_gpu_memory_utilization", "vllm_gpu_memory_utilization", util)
            if r.get("trl.vllm_enable_sleep_mode") is True:
                r.set("trl.vllm_enable_sleep_mode", "vllm_sleep", True)
    beta = r.get("trl.beta")
    if beta:  # beta > 0 loads a reference (TRL GRPOTrainer); auto picks copy or adapters-off by method
        r.set("trl.beta", "reference", "copy" if r.out.get("method") == "full" else "adapters-off")


def llamafactory_stage(r: KeyReader, stage: str, source: str) -> None:
    """``stage`` (+ ``pref_loss``) -> ``stage``; pt/sft stay sft, rm is reported as not modelled."""
    if stage in ("sft", "pt"):
        return
    if stage == "dpo":
        loss = r.get("pref_loss", "sigmoid", source)
        mapped = loss if loss in ("orpo", "simpo") else "dpo"
        r.set("pref_loss", "stage", mapped)
        r.set("stage", "stage", mapped)
        if mapped == "simpo":  # LLaMA-Factory's own SimPO loss: no chosen-half cross-entropy (module docstring)
            r.set("pref_loss", "cpo_alpha", 0)
        return
    if stage in LLAMAFACTORY_STAGE:
        r.set("stage", "stage", LLAMAFACTORY_STAGE[stage])
        if stage == "ppo":
            r.mark("stage", "ppo: modelled as TRL's PPO with a separate, fully trained value model; LLaMA-Factory puts "
                            "the value head on the policy itself, so the value model is an over-count")
        return
    r.mark("stage", f"stage '{stage}' (reward-model training) is not modelled yet: estimated as supervised fine-tuning")
