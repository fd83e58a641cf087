"""A plan written as ready configuration for the engine that runs it (multi-GPU is theirs, not ours).

- ``accelerate``: an Accelerate config YAML (``accelerate launch --config_file``), with the DeepSpeed
  JSON beside it when the plan shards with ZeRO (keys as in huggingface/accelerate
  ``examples/config_yaml_templates``);
- ``deepspeed``: a DeepSpeed config JSON (ZeRO stage, offload, batch sizes, bf16/fp16);
- ``fsdp``: an Accelerate FSDP config YAML (``fsdp_config`` keys; ZeRO-3 -> FULL_SHARD, ZeRO-2 ->
  SHARD_GRAD_OP);
- ``trl``: a Python file with TRL ``SFTConfig``, PEFT ``LoraConfig`` and, for QLoRA, the
  ``BitsAndBytesConfig``, pointing at the engine file for sharded plans.

``"auto"`` values in a DeepSpeed file are filled by the Hugging Face Trainer/Accelerate integration.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from vramfit.errors import ScenarioError
from vramfit.plan.report import Plan

ENGINES: tuple[str, ...] = ("accelerate", "deepspeed", "fsdp", "trl")
_OPTIM = {
    "adamw": "adamw_torch_fused", "adamw-8bit": "adamw_bnb_8bit", "paged-adamw": "paged_adamw_32bit",
    "paged-adamw-8bit": "paged_adamw_8bit", "adamw-4bit": "adamw_torch_4bit", "adafactor": "adafactor",
    "sgd": "sgd", "sgd-momentum": "sgd", "lion": "lion_32bit", "lion-8bit": "lion_8bit",
}
_QUANT = {"nf4": ("nf4", False), "nf4-dq": ("nf4", True), "fp4": ("fp4", False), "fp4-dq": ("fp4", True)}


@dataclass(frozen=True)
class Export:
    engine: str
    files: dict[str, str]  # file name -> text
    command: str  # how to launch with these files
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "files": dict(self.files), "command": self.command, "notes": list(self.notes)}


def _engine_of(plan: Plan) -> str:
    p = plan.parallelism
    if p in ("zero1", "zero2", "zero3"):
        return "deepspeed"
    if p in ("fsdp", "fsdp-grad-op"):
        return "fsdp"
    return "ddp" if plan.num_gpus > 1 else "single"


def _mixed(sc: dict[str, Any]) -> str:
    prec = sc["precision"]
    return "bf16" if prec.startswith("bf16") else "fp16" if prec.startswith("fp16") else "no"


def deepspeed_config(plan: Plan, notes: list[str]) -> dict[str, Any]:
    sc = plan.scenario
    stage = {"zero1": 1, "zero2": 2, "zero3": 3, "fsdp": 3, "fsdp-grad-op": 2}.get(plan.parallelism, 0)
    zero: dict[str, Any] = {"stage": stage, "overlap_comm": True, "contiguous_gradients": True}
    if plan.offload != "none":
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if plan.offload == "optimizer+params":
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    if stage == 3:
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    cfg: dict[str, Any] = {
        "train_batch_size": plan.effective_batch,
        "train_micro_batch_size_per_gpu": plan.micro_batch_size,
        "gradient_accumulation_steps": plan.grad_accum,
        "gradient_clipping": 1.0,
        "zero_optimization": zero,
    }
    mp = _mixed(sc)
    if mp == "bf16":
        cfg["bf16"] = {"enabled": True}
    elif mp == "fp16":
        cfg["fp16"] = {"enabled": True, "loss_scale": 0}
    if plan.offload != "none":
        cfg["optimizer"] = {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}}
        notes.append("offload runs DeepSpeed's CPU Adam: the optimizer section replaces the Trainer's optim")
    elif plan.optimizer != "adamw":
        cfg["zero_allow_untested_optimizer"] = True
        notes.append(f"{plan.optimizer} is created by the Trainer (optim={_OPTIM[plan.optimizer]!r}) and wrapped by ZeRO")
    return cfg


def _fsdp_block(plan: Plan, notes: list[str]) -> dict[str, Any]:
    shard = "SHARD_GRAD_OP" if plan.parallelism in ("zero2", "fsdp-grad-op", "zero1") else "FULL_SHARD"
    if plan.offload == "optimizer":
        notes.append("FSDP offloads parameters together with the optimizer state (CPUOffload(offload_params=True))")
    return {
        "fsdp_activation_checkpointing": plan.gradient_checkpointing in ("full", "offload", "selective"),
        "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "fsdp_backward_prefetch": "BACKWARD_PRE",
        "fsdp_cpu_ram_efficient_loading": True,
        "fsdp_forward_prefetch": False,
        "fsdp_offload_params": plan.offload != "none",
        "fsdp_sharding_strategy": shard,
        "fsdp_state_dict_type": "SHARDED_STATE_DICT",
        "fsdp_sync_module_states": True,
        "fsdp_use_orig_params": True,
    }


def _yaml(data: dict[str, Any], indent: int = 0) -> str:
    lines = []
    for k, v in data.items():
        pad = " " * indent
        if isinstance(v, dict):
            lines.append(f"{pad}{k}:")
            lines.append(_yaml(v, indent + 2))
        elif isinstance(v, bool):
            lines.append(f"{pad}{k}: {'true' if v else 'false'}")
        elif isinstance(v, str):
            lines.append(f"{pad}{k}: {v}")
        else:
            lines.append(f"{pad}{k}: {v}")
    return "\n".join(lines)


def _accelerate(plan: Plan, engine: str, notes: list[str]) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": {"deepspeed": "DEEPSPEED", "fsdp": "FSDP", "ddp": "MULTI_GPU", "single": "NO"}[engine],
        "mixed_precision": _mixed(plan.scenario),
        "num_machines": 1,
        "machine_rank": 0,
        "num_processes": plan.num_gpus,
        "gpu_ids": "all",
        "rdzv_backend": "static",
        "same_network": True,
        "use_cpu": False,
    }
    if engine == "deepspeed":
        cfg["deepspeed_config"] = {"deepspeed_config_file": "ds_config.json",
                                   "zero3_init_flag": plan.parallelism == "zero3" and plan.scenario["method"] == "full"}
    if engine == "fsdp":
        cfg["fsdp_config"] = _fsdp_block(plan, notes)
    return cfg


def _trl(plan: Plan, engine: str, epochs: float, notes: list[str]) -> str:
    sc = plan.scenario
    method, prec = sc["method"], sc["precision"]
    dtype = "torch.bfloat16" if prec.startswith("bf16") else "torch.float16" if prec.startswith("fp16") else "torch.float32"
    model = sc["model"] or f"<a {sc['params']:,}-parameter model>"
    lines = [
        f"# vramfit plan: {plan.label}, micro-batch {plan.micro_batch_size} x {plan.grad_accum} accumulation"
        f" -> {plan.device_bytes / 2**30:,.1f} GiB of {plan.usable_bytes / 2**30:,.1f} GiB per GPU (estimated)",
        "import torch",
    ]
    if method != "full":
        lines.append("from peft import LoraConfig")
    if method == "qlora":
        lines.append("from transformers import BitsAndBytesConfig")
    lines += ["from trl import SFTConfig", "", f"model_id = {model!r}"]
    kw = [f"torch_dtype={dtype if not prec.endswith('mixed') else 'torch.float32'}",
          f"attn_implementation={'eager' if sc['attention'] == 'eager' else 'flash_attention_2' if sc['attention'] == 'flash' else 'sdpa'!r}"]
    if method == "qlora":
        qtype, dq = _QUANT.get(sc["quantize"], ("nf4", True))
        if sc["quantize"] not in _QUANT:
            notes.append(f"quantize {sc['quantize']} is not a bitsandbytes 4-bit type: nf4 written instead")
        lines += ["quantization_config = BitsAndBytesConfig(", "    load_in_4bit=True,", f"    bnb_4bit_quant_type={qtype!r},",
                  f"    bnb_4bit_use_double_quant={dq},", f"    bnb_4bit_compute_dtype={dtype},",
                  f"    bnb_4bit_quant_storage={dtype},  # lets FSDP/ZeRO-3 shard the 4-bit weights", ")"]
        kw.append("quantization_config=quantization_config")
    lines.append(f"model_init_kwargs = dict({', '.join(kw)})")
    if method != "full":
        targets = sc["lora_targets"]
        tm = repr("all-linear") if targets == ["all-linear"] else repr(targets)
        dropout = sc.get("lora_dropout") or 0.0
        lines += ["peft_config = LoraConfig(", f"    r={sc['lora_rank']},", f"    lora_alpha={sc['lora_alpha']:g},",
                  f"    lora_dropout={dropout},", f"    target_modules={tm},", "    task_type='CAUSAL_LM',", ")"]
    args = [
        "output_dir='out'",
        f"per_device_train_batch_size={plan.micro_batch_size}",
        f"gradient_accumulation_steps={plan.grad_accum}",
        f"num_train_epochs={epochs:g}",
        f"max_length={sc['seq_len']}",
        "packing=True",
        f"bf16={prec.startswith('bf16')}",
        f"fp16={prec.startswith('fp16')}",
        f"optim={_OPTIM[plan.optimizer]!r}",
        "save_total_limit=1",
        "model_init_kwargs=model_init_kwargs",
    ]
    ck = plan.gradient_checkpointing
    if ck != "none" and engine != "fsdp":
        args += ["gradient_checkpointing=True", "gradient_checkpointing_kwargs={'use_reentrant': False}"]
    if ck == "selective":
        notes.append("selective recompute is not in transformers: full gradient checkpointing is written")
    if ck == "offload":
        args.append("activation_offloading=True")
    if plan.loss == "fused":
        args.append("use_liger_kernel=True")
    if plan.loss == "chunked":
        notes.append("chunked cross-entropy is torchtune's; with TRL use use_liger_kernel=True (fused) instead")
    if engine == "deepspeed":
        args.append("deepspeed='ds_config.json'")
    lines += ["training_args = SFTConfig("] + [f"    {a}," for a in args] + [")"]
    lines += ["", "# trainer = SFTTrainer(model=model_id, args=training_args, train_dataset=dataset"
              + (", peft_config=peft_config" if method != "full" else "") + ")"]
    return "\n".join(lines) + "\n"


def export_plan(plan: Plan, engine: str, *, epochs: float = 1.0) -> Export:
    """Configuration files for ``engine`` (one of :data:`ENGINES`) that run ``plan``."""
    if engine not in ENGINES:
        raise ScenarioError("export", f"unknown engine {engine!r}", ENGINES)
    notes: list[str] = []
    own = _engine_of(plan)
    files: dict[str, str] = {}
    if engine == "deepspeed" or (engine in ("accelerate", "trl") and own == "deepspeed"):
        files["ds_config.json"] = json.dumps(deepspeed_config(plan, notes), indent=2) + "\n"
        shard = "deepspeed"
    elif engine == "fsdp" or (engine in ("accelerate", "trl") and own == "fsdp"):
        shard = "fsdp"
    else:
        shard = own
    if engine == "deepspeed" and own == "fsdp":
        notes.append(f"the plan was sized for {plan.parallelism}; written as the matching ZeRO stage")
    if engine == "deepspeed" and own in ("ddp", "single"):
        notes.append("the plan needs no sharding: ZeRO stage 0 is plain data parallelism")
    if engine == "fsdp" and own in ("ddp", "single"):
        notes.append("the plan needs no sharding: FULL_SHARD written anyway (uses less memory, more traffic)")
    if engine == "fsdp" and own == "deepspeed":
        notes.append(f"the plan was sized for {plan.parallelism}; written as the matching FSDP sharding")
    if engine != "deepspeed":
        acc = _accelerate(plan, shard if shard in ("deepspeed", "fsdp") else own, notes)
        files["accelerate.yaml"] = f"# vramfit plan: {plan.label}\n" + _yaml(acc) + "\n"
    if engine == "trl":
        files["train_config.py"] = _trl(plan, shard, epochs, notes)
    launch = "train.py" if engine == "trl" else "your_training_script.py"
    if engine == "deepspeed":
        command = f"deepspeed --num_gpus {plan.num_gpus} {launch} --deepspeed ds_config.json"
    else:
        command = f"accelerate launch --config_file accelerate.yaml {launch}"
    return Export(engine, files, command, tuple(notes))
