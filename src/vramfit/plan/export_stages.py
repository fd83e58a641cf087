"""The TRL config of a preference or RL stage, for the ``trl`` export's ``train_config.yaml``.

Each stage is TRL 1.16.0's own trainer and config class (read by ``train.py``'s ``STAGES`` table):
``DPOConfig``/``KTOConfig``/``GRPOConfig`` (trl/trainer/*_config.py), ``ORPOConfig`` and ``CPOConfig``
(trl/experimental/orpo, trl/experimental/cpo; SimPO is ``CPOConfig(loss_type="simpo")``, with the plan's
``cpo_alpha``: TRL's CPO docs "SimPO" set it to 0.0 for the paper's loss, CPOConfig's default is 1.0). Keys TRL 1.16 no longer has
(``max_prompt_length``) are not written: its parser rejects an unknown key. PPO left TRL after v1.9.0,
so no config is written for it.
"""

from __future__ import annotations

from typing import Any

from vramfit.plan.report import Plan
from vramfit.stage_keys import CPO_ALPHA, TRL_CONFIG_CLASS

#: stage -> the TRL config class train.py parses it with (for the file's header)
CONFIG_CLASS = TRL_CONFIG_CLASS
#: GRPO's beta when the scenario keeps a reference: TRL's default before 0.20 and the GRPO paper's
#: (DeepSeekMath, arXiv:2402.03300, section 4.2: KL coefficient 0.04); TRL 1.16 defaults to 0.0
GRPO_BETA = 0.04
_SFT_ONLY = ("packing",)


def exportable(plan: Plan) -> bool:
    return plan.scenario.get("stage", "sft") in CONFIG_CLASS


def stage_args(plan: Plan, args: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """``args`` (the SFTConfig fields every stage shares) turned into the stage's config fields."""
    sc = plan.scenario
    stage = sc.get("stage", "sft")
    if stage == "sft" or stage not in CONFIG_CLASS:  # ppo: the supervised files and a note (export.py)
        return args
    out = {"stage": stage, **{k: v for k, v in args.items() if k not in _SFT_ONLY}}
    if out.pop("use_liger_kernel", False):  # DPO/GRPO patch the forward with their own fused LM head
        notes[:] = [n for n in notes if not n.startswith("use_liger_kernel needs")]
        notes.append(f"{stage}: TRL scores log-probs with its own fused LM head; use_liger_kernel is not written")
    if stage == "grpo":
        out.pop("max_length", None)  # GRPOConfig has no max_length: the prompt is what the completion leaves
        return out | _grpo(sc, notes)
    ref = sc.get("reference", "auto")
    if stage == "dpo":
        out["loss_type"] = ["sigmoid"]  # the loss the estimate and the simulator model (DPOConfig's default)
    if stage in ("dpo", "kto"):
        out["precompute_ref_log_probs"] = ref == "precomputed"
        if ref == "copy" and sc["method"] != "full":
            notes.append("reference copy beside LoRA: train.py passes ref_model=None, so TRL disables the adapters "
                         "instead (less memory than planned)")
    if stage == "simpo":  # the plan's NLL weight (the scenario's cpo_alpha: TRL's CPOConfig default 1.0 if not given)
        out |= {"loss_type": "simpo", "cpo_alpha": sc.get("cpo_alpha", CPO_ALPHA)}
    return out


def _grpo(sc: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    gen = sc.get("generation", "hf")
    out: dict[str, Any] = {
        "num_generations": sc["num_generations"], "max_completion_length": sc["completion_len"],
        "beta": GRPO_BETA if sc.get("reference", "auto") in ("copy", "adapters-off") else 0.0,
        "use_vllm": gen != "hf",
    }
    if gen == "vllm-colocate":
        out |= {"vllm_mode": "colocate", "vllm_gpu_memory_utilization": sc["vllm_gpu_memory_utilization"],
                "vllm_enable_sleep_mode": bool(sc.get("vllm_sleep"))}
    elif gen == "vllm-server":
        out["vllm_mode"] = "server"
        notes.append("vllm-server: start `trl vllm-serve --model <model>` on GPUs of its own first "
                     "(CUDA_VISIBLE_DEVICES set apart from the training GPUs)")
    # TRL 1.16.0 grpo_trainer.py l. 558 (AutoModelForSequenceClassification.from_pretrained) and l. 1214
    # (accelerator.prepare_model, evaluation mode): a frozen copy on every training GPU, which no scenario key sizes
    notes.append("grpo: train.py needs --reward_model (a sequence-classification model path or id) to score "
                 "the completions; TRL loads it on every training GPU beside the policy, which the plan's figures do "
                 "not count: add its weights (2 bytes per parameter in bf16) to each GPU's")
    return out
