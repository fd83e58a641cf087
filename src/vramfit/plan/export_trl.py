"""The ``trl`` export: ``train.py`` (a fixed script, ``templates/train.py``) and ``train_config.yaml``.

``train_config.yaml`` is TRL's own ``--config`` file for ``TrlParser((DataArguments, SFTConfig, ModelConfig))``:
flat keys, each a field of ``trl.SFTConfig`` or ``trl.ModelConfig`` (TRL 1.x, ``trl/trainer/model_config.py``),
so TRL's parser rejects a key it does not know. A preference or RL stage writes its own config class's
fields instead (:mod:`vramfit.plan.export_stages`) and ``stage``, which picks the trainer in ``train.py``.
"""

from __future__ import annotations

from importlib.resources import files as _resources
from typing import Any

from vramfit.plan.export import (
    DS_FILE,
    SCRIPT,
    TRL_CONFIG_FILE,
    _yaml,
    _zero_stage,
    fsdp_16bit_full,
    optim_name,
)
from vramfit.plan.report import Plan
from vramfit.units import gib

# vramfit quantize -> (bnb_4bit_quant_type, use_bnb_nested_quant) of trl.ModelConfig
_QUANT = {"nf4": ("nf4", False), "nf4-dq": ("nf4", True), "fp4": ("fp4", False), "fp4-dq": ("fp4", True)}
_TESTED = {"trl": "1.16", "transformers": "5.24"}
_ATTN = {"eager": "eager", "flash": "flash_attention_2", "sdpa": "sdpa"}


def script_text() -> str:
    return (_resources("vramfit.plan") / "templates" / SCRIPT).read_text(encoding="utf-8")


def _dtype(prec: str) -> str:
    """Weight dtype the model loads in: mixed precision keeps fp32 master weights."""
    if prec.endswith("mixed") or prec == "fp32":
        return "float32"
    return "bfloat16" if prec.startswith("bf16") else "float16"


def _model_args(plan: Plan, notes: list[str]) -> dict[str, Any]:
    sc = plan.scenario
    method, prec = sc["method"], sc["precision"]
    out: dict[str, Any] = {
        "model_name_or_path": sc["model"] or f"<a {sc['params']:,}-parameter model>",
        "dtype": _dtype(prec),
        "attn_implementation": _ATTN[sc["attention"]],
        "use_peft": method != "full",
    }
    if method == "full":
        return out
    alpha = sc["lora_alpha"]
    out |= {"lora_r": sc["lora_rank"], "lora_alpha": int(alpha) if float(alpha).is_integer() else alpha,
            "lora_dropout": sc.get("lora_dropout") or 0.0, "lora_target_modules": list(sc["lora_targets"])}
    if sc.get("dora"):  # trl ModelConfig.use_dora -> LoraConfig(use_dora=True) (templates/train.py lora_config)
        out["use_dora"] = True
    if sc.get("modules_to_save"):  # trl ModelConfig.lora_modules_to_save -> LoraConfig(modules_to_save=...)
        out["lora_modules_to_save"] = list(sc["modules_to_save"])
    if method == "qlora":
        q = sc["quantize"]
        trl = "trl-1.16" in str(sc.get("framework_version") or "").split("+")
        if sc.get("stage") not in ("orpo", "simpo") and not trl and sc.get("kbit_prepare") != "no":
            notes.append("TRL's SFT, DPO, KTO and GRPO trainers neither call prepare_model_for_kbit_training nor keep fp32 "
                         "adapters (trl 1.16.0 trainer/sft_trainer.py l. 902-911): this run needs less than the plan, "
                         "sized for a prepared model (estimate again with framework_version trl-1.16)")
        if q == "int8":
            return out | {"load_in_8bit": True}
        if q not in _QUANT:
            notes.append(f"quantize {q} is not a bitsandbytes type: nf4 with double quantization written instead")
        qtype, dq = _QUANT.get(q, ("nf4", True))
        # quant storage = the compute dtype lets FSDP/ZeRO-3 shard the 4-bit weights (TRL/PEFT FSDP-QLoRA docs)
        storage = "float32" if prec == "fp32" else "bfloat16" if prec.startswith("bf16") else "float16"
        out |= {"load_in_4bit": True, "bnb_4bit_quant_type": qtype, "use_bnb_nested_quant": dq,
                "bnb_4bit_quant_storage": storage}
    return out


def _upcast_off(sc: dict[str, Any], shard: str) -> bool:
    """Written with bf16/fp16 false under FSDP (export.fsdp_16bit_full), the model loaded in 16 bits."""
    return shard == "fsdp" and fsdp_16bit_full(sc)


def _batching(policy: dict | None, notes: list[str]) -> dict[str, Any]:
    """The dataset's batching policy (vramfit.dataset.policy.Policy, as DatasetReport.policy holds it) in SFTConfig's
    keys (TRL 1.16.0 trainer/sft_config.py: packing, packing_strategy bfd / bfd_split / wrapped, padding_free,
    pad_to_multiple_of; transformers 5.24.0 training_args.py train_sampling_strategy group_by_length); nothing without a
    dataset (rows packed to seq_len, what the plan then assumes)."""
    if policy is None:
        return {}
    packing = policy.get("packing", "none")
    out: dict[str, Any] = {"max_length": policy.get("max_length"), "packing": packing != "none",
                           "padding_free": bool(policy.get("padding_free"))}
    if packing != "none":
        out["packing_strategy"] = packing
    if policy.get("pad_to_multiple_of"):
        out["pad_to_multiple_of"] = policy["pad_to_multiple_of"]
    if policy.get("group_by_length"):
        out["train_sampling_strategy"] = "group_by_length"
    if policy.get("padding") == "max_length" and packing == "none" and not out["padding_free"]:
        notes.append("the dataset was sized padded to max_length; TRL's collator pads each batch to its longest row, "
                     "which needs no more")
    return out


def _sft_args(plan: Plan, shard: str, epochs: float, notes: list[str]) -> dict[str, Any]:
    sc = plan.scenario
    prec = sc["precision"]
    out: dict[str, Any] = {
        "output_dir": "out",
        "per_device_train_batch_size": plan.micro_batch_size,
        "gradient_accumulation_steps": plan.grad_accum,
        "num_train_epochs": epochs,
        "max_length": sc["seq_len"],
        "packing": True,
        "bf16": prec.startswith("bf16") and not _upcast_off(sc, shard),
        "fp16": prec.startswith("fp16") and not _upcast_off(sc, shard),
        "optim": optim_name(plan),
    }
    # the plan's disk counts plan.disk.checkpoints_kept checkpoints (plan(checkpoints_kept=)); transformers keeps every
    # checkpoint where save_total_limit is 0 (5.24 trainer_utils.py rotate_checkpoints: "No deletion if None or <= 0"),
    # so a plan that keeps none saves none
    kept = plan.disk.checkpoints_kept
    out.update({"save_total_limit": kept} if kept else {"save_strategy": "no"})
    ck = plan.gradient_checkpointing
    # Written either way: SFTConfig turns it on by default (TRL 1.16). Under FSDP, accelerate.yaml's
    # fsdp_activation_checkpointing does it instead. transformers 5.24 names (gradient_checkpointing* are
    # deprecated aliases, training_args.py).
    out["activation_checkpointing"] = ck != "none" and shard != "fsdp"
    if out["activation_checkpointing"]:
        # TRL forces reentrant checkpointing for PEFT + ZeRO-3 (trl/trainer/sft_trainer.py, TRL issue #2514); a
        # use_reentrant the scenario sets is written as set
        forced = shard == "deepspeed" and _zero_stage(plan) == 3 and sc["method"] != "full"
        reentrant = {"yes": True, "no": False}.get(str(sc.get("use_reentrant", "auto")), forced)
        out["activation_checkpointing_kwargs"] = {"use_reentrant": reentrant}
    if ck in ("selective", "selective-op"):
        notes.append(f"{ck} recompute is not in transformers: full gradient checkpointing is written")
    if ck == "offload":
        out["activation_offloading"] = True
    if plan.loss == "fused":
        out["use_liger_kernel"] = True
        notes.append("use_liger_kernel needs `pip install liger-kernel` (the fused cross-entropy the plan assumes)")
    if plan.loss == "chunked":
        # torchtune's chunked loss still holds the whole bf16 logits (torchtune v0.6 modules/transformer.py
        # chunked_output projects every chunk in the forward and returns the list, which
        # modules/loss/ce_chunked_output_loss.py upcasts chunk by chunk); Liger's fused linear cross-entropy holds none
        out["use_liger_kernel"] = True
        notes.append("chunked cross-entropy is torchtune's: use_liger_kernel: true (TRL's fused cross-entropy, which "
                     "holds less) is written instead; it needs `pip install liger-kernel`")
    if sc.get("eval_batch_size"):
        notes.append(f"the plan holds an evaluation pass at micro-batch {sc['eval_batch_size']}; train.py passes no "
                     "eval_dataset: add one, with eval_strategy and per_device_eval_batch_size, for that peak")
    if plan.optimizer == "sgd-momentum":  # transformers' "sgd" reads momentum from optim_args (trainer_optimizer.py _get_sgd)
        out["optim_args"] = "momentum=0.9"
    if plan.optimizer in ("adamw-4bit", "adamw-8bit-torchao"):
        notes.append(f"{'adamw_torch_4bit' if plan.optimizer == 'adamw-4bit' else 'adamw_torch_8bit'} needs "
                     "`pip install torchao`")
    if sc.get("compile"):
        out["torch_compile"] = True
    if sc.get("optimizer_in_backward"):
        notes.append("the HF Trainer has no optimizer-in-backward: gradients stay resident until the step (more memory)")
    if sc.get("framework", "hf") != "hf":
        notes.append(f"the plan was sized for {sc['framework']}; this script runs transformers + PEFT + TRL, whose"
                     " memory differs (estimate again with framework hf)")
    if shard == "deepspeed":
        out["deepspeed"] = DS_FILE
    return out


def trl_files(plan: Plan, shard: str, epochs: float, notes: list[str], batching: dict | None = None) -> dict[str, str]:
    """``train_config.yaml`` (model fields, then SFTConfig fields, the dataset's batching where given) and ``train.py``."""
    from vramfit.plan.export_stages import CONFIG_CLASS, stage_args

    config = CONFIG_CLASS.get(plan.scenario.get("stage", "sft"), "SFTConfig")
    head = (f"# vramfit plan: {plan.label}, micro-batch {plan.micro_batch_size} x {plan.grad_accum} accumulation"
            f" -> {gib(plan.required_bytes or plan.device_bytes, 1)} GiB needed of {gib(plan.usable_bytes, 1)} GiB per GPU"
            " (estimated, as the plan's table)\n"
            f"# TRL --config file for {SCRIPT}: trl.ModelConfig fields, then trl.{config} fields\n"
            f"# (spellings of TRL {_TESTED['trl']} / transformers {_TESTED['transformers']}, the versions it was tested with)\n")
    sft = {**_sft_args(plan, shard, epochs, notes), **_batching(batching, notes)}
    body = _yaml(_model_args(plan, notes)) + _yaml(stage_args(plan, sft, notes))
    return {TRL_CONFIG_FILE: head + body, SCRIPT: script_text()}
