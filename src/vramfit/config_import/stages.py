"""The training stage of an imported config: Axolotl ``rl`` and LLaMA-Factory ``stage`` + ``pref_loss``
become the scenario's ``stage`` (and GRPO's keys).

Axolotl: ``RLType`` = dpo, gdpo, grpo, ipo, orpo, kto, simpo, ebft (axolotl-ai-cloud/axolotl@067b021
src/axolotl/utils/schemas/enums.py l. 28-38; pydantic refuses any other value); IPO is TRL's DPO trainer with
``loss_type="ipo"``; GDPO is the GRPO trainer and config with ``multi_objective_aggregation`` (core/builders/rl.py l. 54, 161-195).
GRPO's settings sit under ``trl:`` (``num_generations``, ``max_completion_length``, ``use_vllm``, ``vllm_mode``,
``vllm_enable_sleep_mode``, ``beta``; src/axolotl/utils/schemas/trl.py), the colocated vLLM's share under ``vllm:``
(``gpu_memory_utilization``, schemas/vllm.py), passed to ``GRPOConfig`` (core/trainers/grpo/__init__.py l. 68-79).
Axolotl passes ``cpo_alpha`` to TRL's CPOConfig for ``rl: simpo`` (src/axolotl/core/builders/rl.py:139-140).
LLaMA-Factory: ``stage`` = pt, sft, rm, ppo, dpo, kto; a dpo stage with ``pref_loss`` orpo or simpo
loads no reference (``use_ref_model = stage == "dpo" and pref_loss not in ["orpo", "simpo"]``,
hiyouga/LLaMA-Factory@ff6d4d1 src/llamafactory/hparams/finetuning_args.py). Its dpo and kto stages run its own
trainers, not TRL's: ``framework_version`` llamafactory-0.9 (estimate/framework.py) says what they compute —
fp32 logits and the whole ``log_softmax`` (src/llamafactory/train/dpo/trainer.py:230, trainer_utils.py:612), its
orpo's SFT term ``-chosen_logps`` (:150-157), simpo's loss (:160-166) and ``pref_ftx`` (:300-302) all on those
per-token log-probs: no cross-entropy over the chosen logits, no tensor of their own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vramfit.stage_keys import TRL_CONFIG_CLASS

if TYPE_CHECKING:
    from vramfit.config_import.report import KeyReader

AXOLOTL_RL = {"dpo": "dpo", "ipo": "dpo", "kto": "kto", "orpo": "orpo", "simpo": "simpo", "grpo": "grpo",
              "gdpo": "grpo"}
AXOLOTL_RL_TYPES = ("dpo", "gdpo", "grpo", "ipo", "orpo", "kto", "simpo", "ebft")  # schemas/enums.py RLType
LLAMAFACTORY_STAGE = {"dpo": "dpo", "kto": "kto", "ppo": "ppo"}
LLAMAFACTORY_TRAINERS = "llamafactory-0.9"  # its CustomDPOTrainer / CustomKTOTrainer (ppo runs TRL's PPOTrainer)
_AX = "axolotl-ai-cloud/axolotl@067b021 src/axolotl"
#: use_vllm with no vllm_mode: Axolotl sets "server" (utils/schemas/validation.py l. 1906-1913 check_vllm_mode_set)
AXOLOTL_VLLM_MODE_SRC = f"{_AX}/utils/schemas/validation.py l. 1906-1913: use_vllm without vllm_mode = server"
#: colocate: GRPOConfig's vllm_gpu_memory_utilization is vllm.gpu_memory_utilization (core/trainers/grpo/__init__.py
#: l. 72-76), 0.9 unless given (utils/schemas/vllm.py l. 25-28; config.py l. 271-273 builds a VllmConfig by default)
AXOLOTL_VLLM_SRC = f"{_AX}/utils/schemas/vllm.py l. 25-28: gpu_memory_utilization 0.9"
#: beta = trl.beta, else rl_beta, else orpo_alpha (core/builders/rl.py l. 122-128), else GRPOConfig's 0.0 (TRL 1.8.0,
#: axolotl's pin): beta 0 loads no reference (trl v1.8.0 trainer/grpo_trainer.py l. 887-894; the adapters are disabled for
#: a PEFT model, a copy is loaded otherwise)
AXOLOTL_BETA_KEYS = ("trl.beta", "rl_beta", "orpo_alpha")
TRL_VLLM_UTIL_KEY = ("not a key of Axolotl's trl section (schemas/trl.py TRLConfig): pydantic drops it; the colocated "
                     "vLLM's share is vllm.gpu_memory_utilization")


def axolotl_stage(r: KeyReader) -> None:
    """``rl`` -> ``stage``; for GRPO (and GDPO) the keys that size the rollouts and the reference."""
    from vramfit.safe_input import shown

    rl = r.get("rl")
    if rl is None:
        return
    if not isinstance(rl, str) or rl not in AXOLOTL_RL_TYPES:
        raise r.error(f"rl: {shown(rl)} is not an Axolotl RL type (valid values: {', '.join(AXOLOTL_RL_TYPES)})")
    stage = AXOLOTL_RL.get(rl)
    if stage is None:
        r.mark("rl", f"rl '{rl}' is not modelled yet (modelled: {', '.join(AXOLOTL_RL)}): estimated as supervised "
                     "fine-tuning")
        return
    r.set("rl", "stage", stage)
    if stage == "simpo" and r.get("cpo_alpha") is not None:
        r.set("cpo_alpha", "cpo_alpha", r.get("cpo_alpha"))
    if stage == "grpo":
        _axolotl_grpo(r)
    _axolotl_dpo_keys(r, stage)


def _axolotl_dpo_keys(r: KeyReader, stage: str) -> None:
    """``rpo_alpha`` and ``precompute_ref_log_probs``, top-level keys Axolotl passes to TRL's trainers.

    ``rpo_alpha``: axolotl@ba3dba3e4 (axolotl-0.12, the release the import names; trl==0.20.0) core/builders/rl.py
    l. 106-107 passes it to the training arguments; axolotl@067b021 (trl 1.8.0) refuses it (schemas/deprecated.py
    l. 117-125: TRL 0.29 dropped it). ``precompute_ref_log_probs``: a top-level key (067b021 schemas/config.py l. 315)
    that core/trainers/dpo/__init__.py l. 43-46 passes to DPOConfig for rl dpo and ipo (core/builders/rl.py l. 197-199);
    TRLConfig (schemas/trl.py, a plain pydantic BaseModel) has no such field, so ``trl.precompute_ref_log_probs`` is
    dropped."""
    rpo = r.get("rpo_alpha")
    if rpo is not None and stage == "dpo":
        r.set("rpo_alpha", "rpo_alpha", rpo)
        r.entries["rpo_alpha"].note = "Axolotl 0.12 passes it to TRL's DPOConfig; releases on TRL 0.29 or later refuse it"
    r.ignore("rpo_alpha", "loss weight of the rl stage")
    # axolotl-0.12 (ba3dba3e4 core/builders/rl.py l. 180-183) hands it to every RL trainer's config; of the stages only
    # dpo and kto keep a reference model to precompute (review 2026-12-07: "DPO only" held at 067b021 alone)
    if r.flat.get("precompute_ref_log_probs") is True and stage in ("dpo", "kto"):
        r.get("precompute_ref_log_probs")
        r.set("precompute_ref_log_probs", "reference", "precomputed")
    r.ignore("precompute_ref_log_probs", "off" if stage in ("dpo", "kto") else "no reference model in this stage")
    r.ignore("trl.precompute_ref_log_probs", "not a key of Axolotl's trl section: pydantic drops it; the top-level "
             "precompute_ref_log_probs is the one Axolotl passes")


def _axolotl_grpo(r: KeyReader) -> None:
    from vramfit.config_import.axolotl_dtype import switch
    from vramfit.safe_input import shown

    for key, target in (("num_generations", "num_generations"), ("max_completion_length", "completion_len")):
        if r.get("trl." + key) is not None:
            r.set("trl." + key, target, r.get("trl." + key))
    r.ignore("trl.vllm_gpu_memory_utilization", TRL_VLLM_UTIL_KEY)
    if switch(r, "trl.use_vllm"):
        mode = r.get("trl.vllm_mode", "server", AXOLOTL_VLLM_MODE_SRC)
        if mode not in ("server", "colocate"):
            raise r.error(f"trl.vllm_mode: {shown(mode)} is not a vLLM mode (valid values: server, colocate)")
        r.set("trl.use_vllm", "generation", f"vllm-{mode}")
        if mode == "colocate":
            util = r.get("vllm.gpu_memory_utilization", 0.9, AXOLOTL_VLLM_SRC)
            r.set("vllm.gpu_memory_utilization", "vllm_gpu_memory_utilization", util)
            if switch(r, "trl.vllm_enable_sleep_mode"):
                r.set("trl.vllm_enable_sleep_mode", "vllm_sleep", True)
    key = next((k for k in AXOLOTL_BETA_KEYS if r.flat.get(k) is not None), None)
    if key is not None:
        beta = r.get(key)
        if isinstance(beta, bool) or not isinstance(beta, (int, float)):
            raise r.error(f"{key}: {shown(beta)} is not a number (valid values: 0 for no reference, or a KL weight)")
        ref = "none" if beta == 0 else "copy" if r.out.get("method") == "full" else "adapters-off"
        r.set(key, "reference", ref)


def grpo_keys(r: KeyReader, prefix: str, mode_source: str) -> None:
    """GRPOConfig's keys that size the rollouts (under ``prefix``: Axolotl's ``trl.``, none in a TRL file); keys left
    out keep the scenario's defaults, which are TRL 1.16.0's (stage_keys.py: 8 generations of 512 tokens, no vLLM)."""
    for key, target in (("num_generations", "num_generations"), ("max_completion_length", "completion_len")):
        value = r.get(prefix + key)
        if value is not None:
            r.set(prefix + key, target, value)
    if r.get(prefix + "use_vllm") is True:
        mode = r.get(prefix + "vllm_mode", "colocate", mode_source)
        r.set(prefix + "use_vllm", "generation", "vllm-colocate" if mode == "colocate" else "vllm-server")
        if mode == "colocate":
            util = r.get(prefix + "vllm_gpu_memory_utilization")
            if util is not None:
                r.set(prefix + "vllm_gpu_memory_utilization", "vllm_gpu_memory_utilization", util)
            if r.get(prefix + "vllm_enable_sleep_mode") is True:
                r.set(prefix + "vllm_enable_sleep_mode", "vllm_sleep", True)
    beta = r.get(prefix + "beta")
    if beta:  # beta > 0 loads a reference (TRL GRPOTrainer); auto picks copy or adapters-off by method
        r.set(prefix + "beta", "reference", "copy" if r.out.get("method") == "full" else "adapters-off")


#: The stages a TRL file names with ``stage`` (vramfit's own key, which picks the trainer in the ``train.py`` that
#: ``plan --export trl`` writes), and the config class each one's keys are.
TRL_STAGES = TRL_CONFIG_CLASS
TRL_SRC = "trl 1.16.0 trl/trainer/dpo_config.py, kto_config.py, grpo_config.py"
#: Keys of the preference configs with no memory effect (loss weights and margins; TRL 1.16.0 *_config.py).
TRL_STAGE_IGNORED = [("beta", "a loss weight"), ("label_smoothing", "a loss weight"), ("simpo_gamma", "a loss margin"),
                     ("desirable_weight", "a loss weight"), ("undesirable_weight", "a loss weight"),
                     ("loss_weights", "loss weights"), ("temperature", "sampling"), ("top_p", "sampling"),
                     ("top_k", "sampling"), ("reward_weights", "loss weights"), ("scale_rewards", "reward scaling"),
                     ("epsilon*", "clipping range"), ("num_iterations", "updates per batch (the step holds one)"),
                     # DPO/KTO/ORPO/CPO configs before TRL 0.26 split max_length between prompt and completion
                     ("max_prompt_length", "the prompt's share of max_length (TRL before 0.26), which bounds the pair"),
                     ("max_completion_length", "the completion's share of max_length (TRL before 0.26)")]


def trl_stage(r: KeyReader) -> None:
    """``stage`` in a TRL file (what ``plan --export trl`` writes with the stage's config fields): the scenario's
    stage, its reference (DPO/KTO ``precompute_ref_log_probs``; GRPO ``beta``), SimPO's ``cpo_alpha`` and GRPO's
    rollout keys. A DPO ``loss_type`` other than sigmoid keeps the same log-probs: marked, counted as sigmoid's."""
    from vramfit.safe_input import shown

    stage = r.get("stage")
    if stage is None:
        return
    if not isinstance(stage, str) or stage.lower() not in TRL_STAGES:
        raise r.error(f"stage: {shown(stage)} is not a stage of TRL's trainers (valid values: {', '.join(TRL_STAGES)})")
    stage = stage.lower()
    r.set("stage", "stage", stage)
    if stage in ("dpo", "kto") and r.get("precompute_ref_log_probs", False, TRL_SRC) is True:
        r.set("precompute_ref_log_probs", "reference", "precomputed")
    if stage == "dpo":
        _trl_dpo_reference(r)
    loss = r.get("loss_type")
    if stage == "dpo" and loss not in (None, "sigmoid", ["sigmoid"]):
        r.mark("loss_type", "DPO losses other than sigmoid are counted as sigmoid's (the same log-probs)")
    elif stage == "simpo":
        if loss not in (None, "simpo"):
            raise r.error(f"loss_type: {shown(loss)} with stage simpo (valid values: simpo)")
        if r.get("cpo_alpha") is not None:
            r.set("cpo_alpha", "cpo_alpha", r.get("cpo_alpha"))
    elif stage == "grpo":
        grpo_keys(r, "", "TRL 1.16.0 GRPOConfig.vllm_mode")
    r.ignore("loss_type", "the loss formula: the same log-probs")
    for key, why in TRL_STAGE_IGNORED:
        r.ignore(key, why)


#: DPOConfig's TR-DPO settings (trl 1.16.0 trainer/dpo_config.py ref_model_mixup_alpha, ref_model_sync_steps)
TRL_SYNC_NOTE = "TR-DPO's sync weight and interval: no memory effect"


def _trl_dpo_reference(r: KeyReader) -> None:
    """DPOConfig's reference keys. ``force_use_ref_model`` (trl v0.20.0-v0.28.0 trainer/dpo_config.py; gone in 0.29):
    a ``ref_model`` passed beside a PEFT config is used, not refused (v0.28.0 dpo_trainer.py l. 349-352, 599-604), so the
    reference is a frozen model of its own -> ``reference: copy`` (precomputed log-probs stay). ``rpo_alpha`` (DPOConfig
    to v0.28.0) -> ``rpo_alpha``. ``ref_adapter_name`` (to v0.28.0): the reference pass switches to a second adapter
    (dpo_trainer.py l. 957-968 ``set_adapter``). ``use_logits_to_keep`` (to v0.28.0): the prompt's logits are not
    computed. ``sync_ref_model`` (1.16.0 too): TR-DPO mixes the policy into the reference copy every
    ``ref_model_sync_steps`` (TRL 1.16.0 dpo_trainer.py l. 992-1007 refuses it with PEFT or precomputed log-probs)."""
    if r.flat.get("force_use_ref_model") is True:
        # the flag only lets a script's own ref_model stand beside a PEFT config; TRL's scripts/dpo.py (v0.28.0
        # l. 109-114) passes ref_model=None under PEFT, and the trainer then runs the policy with its adapters off
        # (dpo_trainer.py l. 395-399): no copy unless the script loads one (review 2026-12-07)
        r.not_modelled("force_use_ref_model", "a reference model your script passes beside PEFT: set reference copy "
                                              "if it loads one")
    r.ignore("force_use_ref_model", "off")
    if r.get("rpo_alpha") is not None:
        r.set("rpo_alpha", "rpo_alpha", r.get("rpo_alpha"))
    r.not_modelled("ref_adapter_name", "a second LoRA adapter as the reference: its weights not counted")
    r.ignore("model_adapter_name", "adapter layout")
    r.not_modelled("use_logits_to_keep", "the prompt's logits skipped (TRL before 0.29): the estimate counts every "
                                         "token's where the trainer builds the logits")
    r.not_modelled("sync_ref_model", "TR-DPO's reference sync: the reference counted as a frozen copy, the sync's "
                                     "own temporaries not")
    for key in ("ref_model_mixup_alpha", "ref_model_sync_steps"):
        r.ignore(key, TRL_SYNC_NOTE)


def llamafactory_stage(r: KeyReader, stage: str, source: str) -> None:
    """``stage`` (+ ``pref_loss``) -> ``stage``; pt/sft stay sft, rm is reported as not modelled."""
    if stage in ("sft", "pt"):
        return
    if stage == "dpo":
        loss = r.get("pref_loss", "sigmoid", source)
        mapped = loss if loss in ("orpo", "simpo") else "dpo"
        r.set("pref_loss", "stage", mapped)
        r.set("stage", "stage", mapped)
        r.set("stage", "framework_version", LLAMAFACTORY_TRAINERS)
        return
    if stage in LLAMAFACTORY_STAGE:
        r.set("stage", "stage", LLAMAFACTORY_STAGE[stage])
        if stage == "kto":
            r.set("stage", "framework_version", LLAMAFACTORY_TRAINERS)
        if stage == "ppo":
            r.mark("stage", "ppo: modelled as TRL's PPO with a separate, fully trained value model; LLaMA-Factory puts "
                            "the value head on the policy itself, so the value model is an over-count")
        return
    r.mark("stage", f"stage '{stage}' (reward-model training) is not modelled yet: estimated as supervised fine-tuning")
