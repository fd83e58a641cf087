"""Axolotl YAML -> scenario keys (framework ``hf``: Axolotl runs transformers + PEFT)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vramfit.config_import import hf_common as hf
from vramfit.config_import.report import Imported, KeyReader

_SRC = "axolotl-ai-cloud/axolotl@70be546"
SOURCE = f"{_SRC} src/axolotl/utils/schemas/config.py"
#: micro_batch_size, gradient_accumulation_steps and optimizer defaults live in the training schema.
TRAINING_SRC = "axolotl-ai-cloud/axolotl@94c00c1 src/axolotl/utils/schemas/training.py"
#: Axolotl builds its BitsAndBytesConfig with nf4 and double quantization (src/axolotl/loaders/model.py).
QLORA_SRC = "axolotl src/axolotl/loaders/model.py: bnb_4bit_quant_type nf4, bnb_4bit_use_double_quant True"

WRITE_KEYS = {"micro_batch_size": "micro_batch_size", "grad_accum": "gradient_accumulation_steps",
              "seq_len": "sequence_len", "lora_rank": "lora_r", "optimizer": "optimizer",
              "gradient_checkpointing": "gradient_checkpointing"}

LIGER_NOT_MODELLED = "Liger RoPE/RMSNorm/SwiGLU/LayerNorm kernels: vramfit models the fused loss only"
UNSLOTH = "Unsloth kernels: vramfit estimates the plain transformers + PEFT step"
IGNORED = [
    ("datasets", "data"), ("test_datasets", "data"), ("dataset_prepared_path", "path"), ("val_set_size", "data"),
    ("dataset_processes", "data preprocessing"), ("shuffle_merged_datasets", "data"), ("chat_template", "data"),
    ("train_on_inputs", "which tokens carry loss: no memory effect"), ("group_by_length", "data order"),
    ("output_dir", "path"), ("hub_model_id", "upload"), ("hub_strategy", "upload"), ("push_dataset_to_hub", "upload"),
    ("wandb_*", "logging"), ("mlflow_*", "logging"), ("comet_*", "logging"), ("use_tensorboard", "logging"),
    ("logging_steps", "logging"), ("num_epochs", "schedule: no memory effect"), ("max_steps", "schedule"),
    ("learning_rate", "schedule"), ("lr_scheduler", "schedule"), ("cosine_min_lr_ratio", "schedule"),
    ("warmup_steps", "schedule"), ("warmup_ratio", "schedule"), ("weight_decay", "optimizer hyperparameter"),
    ("adam_beta*", "optimizer hyperparameter"), ("adam_epsilon", "optimizer hyperparameter"), ("max_grad_norm", "no memory effect"),
    ("evals_per_epoch", "evaluation"), ("eval_*", "evaluation"), ("saves_per_epoch", "checkpoint saving"),
    ("save_*", "checkpoint saving"), ("resume_from_checkpoint", "path"), ("auto_resume_from_checkpoints", "checkpoint saving"),
    ("local_rank", "launcher"), ("seed", "randomness"), ("special_tokens.*", "tokenizer"), ("tokens", "tokenizer"),
    ("tokenizer_*", "tokenizer"), ("strict", "config checking"), ("early_stopping_patience", "schedule"),
    ("debug", "logging"), ("model_type", "model class: the architecture comes from base_model"),
    ("tokenizer_type", "tokenizer"), ("trust_remote_code", "loading"), ("base_model_config", "path"),
    ("is_*_derived_model", "model family hint"), ("lora_model_dir", "path"), ("lora_fan_in_fan_out", "adapter layout"),
    ("tf32", "matmul precision: no memory effect"), ("gradient_checkpointing_kwargs.*", "recompute style (use_reentrant)"),
    ("ddp_*", "launcher"), ("dataloader_*", "data loading"), ("remove_unused_columns", "data"),
    ("fsdp_config.*", hf.FSDP_CONFIG_IGNORED), ("fsdp_version", hf.FSDP_CONFIG_IGNORED),
    ("plugins", "plugins: their settings are read below"), ("xformers_attention", "read with the attention keys"),
]


def _method(r: KeyReader) -> tuple[str, str]:
    adapter = r.get("adapter", None, f"{SOURCE}: no adapter = full fine-tuning")
    in4, in8 = bool(r.get("load_in_4bit", False, SOURCE)), bool(r.get("load_in_8bit", False, SOURCE))
    if in4 and in8:
        raise r.error("load_in_4bit and load_in_8bit are both true; choose one")
    if adapter in (None, "", "none"):
        if in4 or in8:
            raise r.error("load_in_4bit/load_in_8bit without an adapter: a quantized base cannot be fully fine-tuned")
        return "full", "none"
    if adapter not in ("lora", "qlora"):
        raise r.error(f"adapter '{adapter}' is not modelled yet (valid values: lora, qlora)")
    if adapter == "qlora" and not in4:
        raise r.error("adapter: qlora needs load_in_4bit: true (Axolotl refuses it otherwise)")
    if in4:
        return "qlora", "nf4-dq"
    return ("qlora", "int8") if in8 else ("lora", "none")


def _adapter(r: KeyReader, method: str) -> None:
    rank = r.get("lora_r", 8, f"{_SRC} src/axolotl/utils/schemas/peft.py")
    r.set("lora_r", "lora_rank", rank)
    alpha = r.get("lora_alpha")
    if alpha is not None:
        r.set("lora_alpha", "lora_alpha", alpha)
    dropout = r.get("lora_dropout")
    if dropout is not None:
        r.set("lora_dropout", "lora_dropout", dropout)
    linear = r.get("lora_target_linear")
    modules = r.get("lora_target_modules")
    if linear:
        r.set("lora_target_linear", "lora_targets", ["all-linear"])
    elif modules:
        r.set("lora_target_modules", "lora_targets", modules if isinstance(modules, list) else [modules])
    else:
        raise r.error("an adapter needs lora_target_modules or lora_target_linear: true")
    if r.has("lora_modules_to_save"):
        r.not_modelled("lora_modules_to_save", "fully trained copies of embed_tokens/lm_head are not counted")


def _precision(r: KeyReader, method: str) -> str:
    bf16 = r.get("bf16", "auto", f"{SOURCE}: 'auto' = bf16 on Ampere and newer")
    fp16 = bool(r.get("fp16", False, SOURCE))
    if bf16 and fp16:
        raise r.error("bf16 and fp16 are both on; choose one")
    if bf16:
        return "bf16-true"  # Axolotl loads the weights in bf16 (torch_dtype) and trains them in place
    if fp16:
        return "fp16-true" if method != "full" else "fp16-mixed"
    return "fp32"


def _checkpointing(r: KeyReader) -> str:
    gc = r.get("gradient_checkpointing", False, SOURCE)
    off = r.get("activation_offloading")
    if gc in ("offload", "unsloth") or off:
        key = "activation_offloading" if off else "gradient_checkpointing"
        r.set(key, "gradient_checkpointing", "offload")
        if gc == "unsloth":
            r.not_modelled("gradient_checkpointing", UNSLOTH + " (counted as checkpoint offload)")
        return "offload"
    if gc not in (True, False, None):
        raise r.error(f"gradient_checkpointing: unknown value {gc!r} (valid values: true, false, offload)")
    r.set("gradient_checkpointing", "gradient_checkpointing", "full" if gc else "none")
    return "full" if gc else "none"


def _attention_and_loss(r: KeyReader) -> None:
    flags = {k: r.get(k) for k in ("flash_attention", "sdp_attention", "xformers_attention", "eager_attention")}
    on = [k for k, v in flags.items() if v]
    if len(on) > 1:
        raise r.error(f"{' and '.join(on)} are all on; choose one attention kernel")
    attention = {"flash_attention": "flash", "eager_attention": "eager"}.get(on[0], "sdpa") if on else "sdpa"
    if not on:
        r.get("attention", "sdpa", "vramfit: transformers' default attention is SDPA")
    r.set(on[0] if on else "attention", "attention", attention)
    plugins = r.get("plugins") or []
    fused = r.get("liger_fused_linear_cross_entropy") or r.get("cut_cross_entropy")
    if fused:
        need = "LigerPlugin" if r.has("liger_fused_linear_cross_entropy") else "CutCrossEntropyPlugin"
        if not any(str(p).endswith(need) for p in plugins):
            raise r.error(f"a fused loss is turned on but plugins does not list {need}; Axolotl would ignore it")
        r.set("liger_fused_linear_cross_entropy" if r.has("liger_fused_linear_cross_entropy") else "cut_cross_entropy",
              "loss", "fused")
    else:
        r.set("loss", "loss", "standard")
    for k in ("liger_rope", "liger_rms_norm", "liger_glu_activation", "liger_layer_norm", "liger_swiglu"):
        r.not_modelled(k, LIGER_NOT_MODELLED)


def _parallelism(r: KeyReader) -> tuple[dict[str, Any], list, tuple[Path, ...]]:
    ds, fsdp = r.get("deepspeed"), r.get("fsdp")
    fsdp_cfg = r.sub("fsdp_config")
    if ds and (fsdp or fsdp_cfg):
        raise r.error("deepspeed and fsdp are both set; choose one")
    if ds:
        path = hf.resolve_path(r, "deepspeed", ds)
        out, entries = hf.read_deepspeed(r, "deepspeed", path)
        return out, entries, (path,)
    if fsdp or fsdp_cfg:
        layout = hf.fsdp_layout(r, "fsdp", fsdp, fsdp_cfg)
        hf.mark_fsdp(r, "fsdp_config", fsdp_cfg, layout)
        if fsdp:
            r.set("fsdp", "parallelism", layout["parallelism"])
        return layout, [], ()
    return {}, [], ()


def read(path: Path, data: dict[str, Any]) -> Imported:
    r = KeyReader(path, "axolotl", data, SOURCE)
    model = r.get("base_model")
    if not model:
        raise r.error("base_model is required")
    r.set("base_model", "model", model)
    method, quantize = _method(r)
    r.set("adapter", "method", method)
    r.out["quantize"] = quantize
    if quantize != "none":
        r.set("load_in_4bit" if quantize != "int8" else "load_in_8bit", "quantize", quantize)
    if method == "qlora" and quantize == "nf4-dq":
        r.get("bnb_4bit_quant_type", "nf4-dq", QLORA_SRC)
        r.set("bnb_4bit_quant_type", "quantize", quantize)
    if method != "full":
        _adapter(r, method)
    r.set("sequence_len", "seq_len", r.get("sequence_len", 512, SOURCE))
    for k in ("sample_packing", "pad_to_sequence_len"):  # packed or padded: every row is sequence_len long
        if r.get(k):
            r.set(k, "seq_len", r.out["seq_len"])
    r.set("micro_batch_size", "micro_batch_size", r.get("micro_batch_size", 1, TRAINING_SRC))
    r.set("gradient_accumulation_steps", "grad_accum", r.get("gradient_accumulation_steps", 1, TRAINING_SRC))
    hf.optimizer(r, "optimizer", r.get("optimizer", "adamw_torch_fused", TRAINING_SRC))
    r.set("bf16", "precision", _precision(r, method))
    _checkpointing(r)
    _attention_and_loss(r)
    compile_ = r.get("torch_compile")
    if compile_ is not None:
        r.set("torch_compile", "compile", compile_ is True)
    r.not_modelled("rl", "preference/RL training (its reference and reward models) — estimated as supervised fine-tuning")
    for k in ("unsloth_cross_entropy_loss", "unsloth_lora_mlp", "unsloth_lora_qkv", "unsloth_lora_o",
              "unsloth_rms_norm", "unsloth_rope"):
        r.not_modelled(k, UNSLOTH)
    layout, extra, companions = _parallelism(r)
    r.out.update(layout)
    if layout:
        hf.launcher_gpus(r)
    r.out["framework"] = "hf"
    return r.finish(IGNORED, WRITE_KEYS, companions, extra)
