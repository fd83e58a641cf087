"""LLaMA-Factory's RLHF keys (a separate reference or reward model, PPO's settings) and its generation keys, which
size PPO's rollouts (hparams/finetuning_args.py RLHFArguments, hparams/generating_args.py GeneratingArguments)."""

from __future__ import annotations

from vramfit.config_import import hf_common as hf
from vramfit.config_import.report import KeyReader
from vramfit.errors import ScenarioError
from vramfit.safe_input import shown

_R = "hiyouga/LLaMA-Factory@ff6d4d1"
RLHF_SRC = f"{_R} src/llamafactory/hparams/finetuning_args.py RLHFArguments"
GEN_SRC = f"{_R} src/llamafactory/hparams/generating_args.py GeneratingArguments"

#: The stages that load a reference model: DPO (not its orpo/simpo losses: finetuning_args.py __post_init__
#: ``use_ref_model``, dpo/workflow.py l. 57-63), KTO (kto/workflow.py l. 57-60) and PPO (ppo/workflow.py
#: ``create_ref_model``); the scenario's stage names them.
REFERENCE_STAGES = ("dpo", "kto", "ppo")
#: GeneratingArguments that choose tokens, not how many: no memory effect.
SAMPLING = ("do_sample", "temperature", "top_p", "top_k", "repetition_penalty", "length_penalty")
REWARD_TYPES = ("lora", "full", "api")
#: What the estimate counts for PPO's reward model (estimate/stages/rl.py ppo_models: a frozen copy of the policy's
#: architecture) against what LLaMA-Factory loads for each reward_model_type (train/trainer_utils.py create_reward_model:
#: lora loads the reward adapter onto the policy itself, l. 159-175; full loads the checkpoint as a frozen model,
#: l. 176-190; api calls a server, l. 155-158).
REWARD_NOTES = {
    "lora": "reward_model_type lora: LLaMA-Factory loads the reward model as a second adapter on the policy, so the "
            "frozen reward-model copy the estimate counts for PPO is an over-count",
    "full": "reward_model_type full: counted as PPO's frozen reward model, a copy of the policy's architecture and "
            "precision (not the reward checkpoint's own size)",
    "api": "reward_model_type api: a reward server, no memory on these GPUs, so the frozen reward-model copy the "
           "estimate counts for PPO is an over-count",
}


def read_rlhf(r: KeyReader, stage: str, method: str) -> None:
    """The RLHF and generation keys of a file whose scenario stage is ``stage`` (sft for pt/sft/rm)."""
    _reference(r, stage)
    _reward(r, stage, method)
    # ppo_epochs, ppo_target, ppo_score_norm, ppo_whiten_rewards: PPOConfig's update count, KL target and reward
    # scaling (train/ppo/trainer.py l. 99-116 PPOConfig(...)): each step holds one update's tensors
    r.ignore("ppo_epochs", "updates per batch (the step holds one)")
    r.ignore("ppo_target", "a loss weight")
    for key in ("ppo_score_norm", "ppo_whiten_rewards"):
        r.ignore(key, "reward scaling")
    # ppo_buffer_size: PPOConfig(batch_size = per-device batch x accumulation x ppo_buffer_size) (trainer.py l. 99-104)
    r.not_modelled("ppo_buffer_size", "rollouts per PPO step: the estimate counts one optimizer step's")
    _generation(r, stage)


def _reference(r: KeyReader, stage: str) -> None:
    """``ref_model``: a separate frozen reference model (train/trainer_utils.py create_ref_model l. 123-135, loaded
    with is_trainable=False) -> ``reference: copy``, a frozen copy of the policy's architecture."""
    if stage not in REFERENCE_STAGES:
        for key in ("ref_model", "ref_model_adapters", "ref_model_quantization_bit"):
            r.ignore(key, "no reference model in this stage")
        return
    if r.get("ref_model") is not None:
        r.set("ref_model", "reference", "copy")
    r.not_modelled("ref_model_adapters", "adapters on the reference model: not counted")
    r.not_modelled("ref_model_quantization_bit", "the reference model's own quantization: the copy is counted as "
                                                 "the policy's base is stored")


def _reward(r: KeyReader, stage: str, method: str) -> None:
    """``reward_model`` and ``reward_model_type`` (PPO's; RLHFArguments, default type lora): no scenario key; the
    estimate's PPO reward model is said against what LLaMA-Factory loads (:data:`REWARD_NOTES`)."""
    if stage != "ppo":
        r.ignore("reward_model*", "PPO only: no effect in this stage")
        return
    kind = hf.scalar(r, "reward_model_type", r.get("reward_model_type", "lora", RLHF_SRC), REWARD_TYPES)
    if kind not in REWARD_TYPES:
        raise r.error(f"reward_model_type: {shown(kind)} is unknown (valid values: {', '.join(REWARD_TYPES)})")
    if kind == "lora" and method == "full":  # finetuning_args.py __post_init__ l. 603-604 refuses it
        raise r.error("reward_model_type: lora needs finetuning_type lora (valid values with full: full, api)")
    if r.get("reward_model") is not None:
        r.mark("reward_model", REWARD_NOTES[kind])
    r.not_modelled("reward_model_adapters", "adapters on the reward model: not counted")
    r.not_modelled("reward_model_quantization_bit", "the reward model's own quantization: not counted")


def _generation(r: KeyReader, stage: str) -> None:
    """GeneratingArguments: under PPO ``max_new_tokens`` (default 1024, GEN_SRC) is the rollout's completion length
    (train/ppo/trainer.py l. 159-163 GenerationConfig(**generating_args.to_dict())); the other stages generate only
    at inference (predict, chat)."""
    if stage != "ppo":
        for key in (*SAMPLING, "max_new_tokens", "max_length", "num_beams", "skip_special_tokens"):
            r.ignore(key, "inference")
        return
    new = r.flat.get("max_new_tokens", 1024)
    if isinstance(new, int) and not isinstance(new, bool) and new <= 0 and r.flat.get("max_length") is not None:
        # generating_args.py to_dict: with max_new_tokens <= 0 it drops that key and keeps max_length, the cap on prompt
        # and completion together; the completion is what it leaves beside a cutoff_len prompt (review 2026-12-07: the
        # pair had been refused as "not a positive integer")
        r.ignore("max_new_tokens", "0 or less: max_length caps the prompt and the completion")
        total = hf.whole(r, "max_length", r.get("max_length", None, GEN_SRC))
        cutoff = hf.whole(r, "cutoff_len", r.flat.get("cutoff_len", 2048))  # named as its own key when it is no integer
        if total <= cutoff:
            raise ScenarioError("max_length", f"must exceed cutoff_len ({cutoff}) when max_new_tokens is 0 or less: it "
                                              "caps the prompt and the completion together")
        r.set("max_length", "completion_len", total - cutoff)
    else:
        r.set("max_new_tokens", "completion_len", hf.whole(r, "max_new_tokens", r.get("max_new_tokens", 1024, GEN_SRC)))
        # generating_args.py to_dict drops max_length while max_new_tokens > 0
        r.ignore("max_length", "generation length cap: max_new_tokens wins")
    if r.flat.get("num_beams") not in (None, 1):
        r.not_modelled("num_beams", "beam search in the rollouts: the estimate counts one sequence per completion")
    for key in (*SAMPLING, "num_beams"):
        r.ignore(key, "sampling")
    r.ignore("skip_special_tokens", "tokenizer")
