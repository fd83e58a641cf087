"""Axolotl YAML -> scenario keys (framework ``hf``: Axolotl runs transformers + PEFT)."""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Any

from vramfit.config_import import axolotl_dtype as dtype
from vramfit.config_import import hf_common as hf
from vramfit.config_import import trainer_layout
from vramfit.config_import.axolotl_dtype import switch, word_or_switch
from vramfit.config_import.report import Imported, KeyReader
from vramfit.config_import.stages import axolotl_stage

_SRC = "axolotl-ai-cloud/axolotl@067b021"
SOURCE = f"{_SRC} src/axolotl/utils/schemas/config.py"
#: micro_batch_size, gradient_accumulation_steps and optimizer defaults live in the training schema.
TRAINING_SRC = f"{_SRC} src/axolotl/utils/schemas/training.py"
#: listing CutCrossEntropyPlugin turns it on: its args default ``cut_cross_entropy`` to True
CCE_SRC = f"{_SRC} src/axolotl/integrations/cut_cross_entropy/args.py: cut_cross_entropy defaults to True"
#: Axolotl builds its BitsAndBytesConfig with nf4 and double quantization for adapter: qlora.
#: The Axolotl release vramfit models (estimate/framework.py, framework_version axolotl-0.12: axolotl@ba3dba3e4's own
#: FSDP2 fsdp2_prepare_model, no fp32 upcast, and weights loaded to the host). Unchanged through axolotl@067b021,
#: whose schema this reader follows: monkeypatch/accelerate/fsdp2.py fsdp2_prepare_model (l. 539) still upcasts
#: nothing, loaders/model.py l. 616-617 sets no device_map under FSDP, utils/config/__init__.py l. 149-152 drops it
#: under `accelerate launch`. Which transformers runs is the user's install, so no transformers release is named.
AXOLOTL_RELEASE = "axolotl-0.12"
QLORA_SRC = f"{_SRC} src/axolotl/loaders/model.py: bnb_4bit_quant_type nf4, bnb_4bit_use_double_quant True"

#: attn_implementation values (src/axolotl/utils/schemas/enums.py CANONICAL_ATTN_IMPLS, short forms, the
#: legacy boolean flags) -> vramfit attention. xformers' memory-efficient kernel is linear in seq_len like SDPA's.
ATTENTION = {"flash_attention_2": "flash", "flash_attention_3": "flash", "flash": "flash", "sdpa": "sdpa", "sdp": "sdpa",
             "eager": "eager", "xformers": "sdpa", "kernels-community/flash-attn2": "flash",
             "kernels-community/flash-attn3": "flash", "kernels-community/vllm-flash-attn3": "flash"}
ATTENTION_NOT_MODELLED = {"flex_attention", "flex", "sage", "kernels-community/sage-attention", "fp8"}
LEGACY_ATTENTION = {"flash_attention": "flash_attention_2", "sdp_attention": "sdpa", "xformers_attention": "xformers",
                    "eager_attention": "eager", "flex_attention": "flex_attention", "sage_attention": "sage"}

WRITE_KEYS = {"micro_batch_size": "micro_batch_size", "grad_accum": "gradient_accumulation_steps",
              "seq_len": "sequence_len", "lora_rank": "lora_r", "optimizer": "optimizer",
              "gradient_checkpointing": "gradient_checkpointing",
              "eval_batch_size": "eval_batch_size"}

LIGER_NOT_MODELLED = "Liger RoPE/RMSNorm/SwiGLU/LayerNorm kernels: vramfit models the fused loss only"
UNSLOTH = "Unsloth kernels: vramfit estimates the plain transformers + PEFT step"
GC_NOTE = "gc.collect() and torch.cuda.empty_cache() every N steps: cached segments freed, the allocated peak the same"
IGNORED = [
    ("datasets", "data"), ("test_datasets", "data"), ("dataset_prepared_path", "path"),
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
    ("tf32", "matmul precision: no memory effect"), ("gradient_checkpointing_kwargs.*", "checkpoint function options"),
    ("ddp_*", "launcher"), ("dataloader_*", "data loading"), ("remove_unused_columns", "data"),
    ("fsdp_config.*", hf.FSDP_CONFIG_IGNORED), ("fsdp_version", "read with the FSDP keys (no FSDP: no effect)"),
    ("plugins", "plugins: their settings are read below"), ("eot_tokens", "tokenizer"), ("processor_type", "tokenizer"),
    ("skip_prepare_dataset", "data"), ("chat_template_*", "data"), ("loss_watchdog_*", "monitoring"),
    ("torchdistx_path", "loading"), ("gptq_groupsize", "GPTQ checkpoint detail"), ("gptq_model_v1", "GPTQ checkpoint detail"),
    ("gptq_disable_exllama", "GPTQ kernel choice"), ("flex_attn_compile_kwargs.*", "compile detail"),
    ("torch_compile_mode", "compile detail"), ("experimental_skip_move_to_device", "loading"),
    ("trackio_*", "logging"), ("swanlab_*", "logging"), ("use_swanlab", "logging"), ("use_wandb", "logging"),
    ("use_otel_metrics", "logging"), ("otel_*", "logging"), ("resize_token_embeddings_to_32x", "vocab rounding"),
    ("pretraining_dataset", "data"), ("streaming", "data loading"), ("streaming_*", "data loading"),
    ("dataset_exact_deduplication", "data"), ("curriculum_sampling", "data order"), ("sample_packing_*", "data layout"),
    ("total_num_tokens", "data"), ("min_sample_len", "data"), ("pretrain_multipack_*", "data layout"),
    ("cosine_*", "schedule"), ("eta_min", "schedule"), ("lr_quadratic_warmup", "schedule"), ("jagged_restart_*", "schedule"),
    ("adam_eps", "optimizer hyperparameter"), ("optim_args.*", "optimizer hyperparameters"), ("hf_use_auth_token", "download"),
    ("revision_of_model", "download"), ("base_model_ignore_patterns", "download"), ("device_map", "loading"),
    ("low_cpu_mem_usage", "loading"), ("accelerator_config.*", "launcher"), ("ddp", "launcher"),
    ("evaluation_strategy", "evaluation"), ("do_causal_lm_eval", "evaluation"), ("rl_beta", "loss weight of the rl stage"),
    ("kto_*", "loss weight of the rl stage"), ("orpo_alpha", "loss weight of the rl stage"), ("dpo_*", "loss weight of the rl stage"),
    ("lora_on_cpu", "loading"), ("quantize_moe_experts", "no quantized base: no effect"), ("use_ray", "launcher"), ("ray_*", "launcher"),
    ("center_rewards_coefficient", "loss weight of the rl stage"), ("simpo_gamma", "loss weight of the rl stage"),
    ("bnb_config_kwargs.*", "bitsandbytes compute/storage detail"), ("tf32", "no memory effect"),
    # gc_steps (deprecated) sets gc_collect_steps and torch_empty_cache_steps (schemas/config.py l. 2164-2187
    # migrate_gc_steps): GCCallback runs gc.collect() and torch.cuda.empty_cache() at step boundaries
    # (utils/callbacks/__init__.py l. 880-920), the Trainer empty_cache() between the loss and backward (transformers
    # 5.24.0 trainer.py l. 2093-2098): cached segments go back to the driver, nothing allocated is freed
    *[(k, GC_NOTE) for k in ("gc_steps", "gc_collect_steps", "torch_empty_cache_steps")],
]

#: Keys that change memory in ways vramfit does not model yet: reported, never dropped.
NOT_MODELLED = {
    "lora_mlp_kernel": "Axolotl's fused LoRA Triton kernels", "lora_qkv_kernel": "Axolotl's fused LoRA Triton kernels",
    "lora_o_kernel": "Axolotl's fused LoRA Triton kernels", "ebft": "EBFT training", "trl": "settings of the rl stage not read (GRPO sizes are)",
    "qat": "quantization-aware training", "diffusion": "diffusion-LM training", "vllm": "the vLLM generation server of GRPO",
    "use_scattermoe": "MoE expert kernels",
    "use_sonicmoe": "MoE expert kernels", "experts_implementation": "MoE expert kernels",
    "llama4_linearized_experts": "MoE expert kernels", "max_packed_sequence_len": "legacy packing length",
    "dp_shard_size": "N-D parallel layouts", "dp_replicate_size": "N-D parallel layouts",
    "context_parallel_size": "context parallelism", "tensor_parallel_size": "tensor parallelism",
    "expert_parallel_size": "expert parallelism", "expert_parallel_*": "expert parallelism",
    "lora_target_parameters": "LoRA on MoE expert parameters", "unfrozen_parameters": "partial full fine-tuning",
    "gemma4_hybrid_attn_impl": "attention kernel variants", "fused_attn_kernel": "attention kernel variants",
    "flash_attn_cross_entropy": "flash-attn fused kernels", "flash_attn_rms_norm": "flash-attn fused kernels",
    "flash_attn_fuse_mlp": "flash-attn fused kernels", "flash_optimum": "BetterTransformer",
    "model_quantization_config": "other quantization schemes", "model_quantization_config_kwargs": "other quantization schemes",
    "llmcompressor": "other quantization schemes", "fp8": "FP8 training", "fp8_*": "FP8 training", "nvfp4_*": "NVFP4",
    "dsv4_*": "model-specific kernels", "use_glm_dsa_kernels": "model-specific kernels", "num_labels": "reward-model heads",
    "reward_model": "reward-model training", "process_reward_model": "reward-model training",
    "cls_model_config": "classification heads", "model_config": "model config overrides", "freeze_mm_modules": "multimodal",
    "tiled_mlp": "tiled MLP", "use_eaft": "EAFT loss", "eaft_*": "EAFT loss", "lisa_*": "LISA layer freezing",
    "relora*": "ReLoRA", "peft": "PEFT extra options", "peft_use_*": "PEFT extra options", "reinit_weights": "re-initialised weights",
    "use_onebitllms": "1-bit models", "liger_cross_entropy": "Liger's non-fused cross-entropy",
    "chunked_cross_entropy": "chunked cross-entropy", "tiled_*": "tiling", "liger_*": LIGER_NOT_MODELLED,
    "torch_dtype": "weights dtype override: precision is taken from bf16/fp16",
}


def _fsdp1_upcast(r: KeyReader) -> None:
    """Axolotl's FSDP1 is accelerate's prepare_model (its own fsdp2_prepare_model patch only replaces FSDP2:
    loaders/patch_manager.py l. 337-344), which upcasts every trainable FlatParameter to fp32 once the Trainer's
    bf16/fp16 turns mixed precision on (core/builders/base.py l. 271-278): a 16-bit full fine-tuning there runs
    -mixed (:data:`trainer_layout.FSDP_UPCAST`)."""
    mixed_on = str(r.out.get("precision", "fp32")) != "fp32"
    if r.out.get("fsdp_version", "1") == "1" and (note := trainer_layout.fsdp_upcast(r.out, mixed_on)):
        e = r.entries.get("bf16") or r.entries.get("bfloat16")
        if e:
            e.becomes, e.note = [f"precision={r.out['precision']}"], note


def _fsdp_version(r: KeyReader, layout: dict) -> None:
    """Axolotl's top-level ``fsdp_version`` under FSDP. Its FSDP2 is its own patched fsdp2_prepare_model (axolotl
    monkeypatch/accelerate/fsdp2.py), modelled as accelerate's: fully_shard units, no flat parameters."""
    if layout.get("parallelism", "").startswith("fsdp") and r.has("fsdp_version"):
        layout.update(hf.fsdp_version(r, "fsdp_version", r.get("fsdp_version")))
        if "fsdp_version" in layout:
            r.set("fsdp_version", "fsdp_version", layout["fsdp_version"])


#: Axolotl evaluates between optimizer steps only with an eval set (val_set_size > 0 or test_datasets) and a cadence:
#: core/builders/base.py l. 515-524 (no set: "no"; eval_steps: "steps"; else the config's eval_strategy; none: the
#: Trainer's default "no"), utils/config/__init__.py l. 250-253 (evals_per_epoch -> eval_steps = 1 / (evals_per_epoch
#: x num_epochs), kept only when < 1), l. 208-209 (eval_batch_size defaults to micro_batch_size), builders/base.py
#: l. 671-674 (-> per_device_eval_batch_size); evaluation_strategy is copied to eval_strategy (schemas/validation.py
#: l. 471-479); num_epochs defaults to 1.0 (schemas/training.py l. 267)
EVAL_SRC = f"{_SRC} src/axolotl/utils/config/__init__.py l. 208-209: eval_batch_size defaults to micro_batch_size"
#: eval_batch_size 0 stays 0 (only None takes micro_batch_size, l. 208-209), and builders/base.py l. 671-674 passes it
#: only when truthy: TrainingArguments keeps per_device_eval_batch_size 8 (hf_common.EVAL_SRC)
EVAL_ZERO = ("0 is not passed to the Trainer (Axolotl passes a non-zero eval_batch_size only), which then evaluates "
             "8 per GPU (TrainingArguments.per_device_eval_batch_size)")


def _eval(r: KeyReader) -> None:
    has_set = hf.nonnegative(r, "val_set_size", 0.0, SOURCE) > 0 or bool(r.get("test_datasets"))
    key = "eval_strategy" if r.has("eval_strategy") else "evaluation_strategy"
    strategy, steps, per_epoch = r.get(key), r.get("eval_steps"), r.get("evals_per_epoch")
    per_epoch = None if per_epoch is None else hf.whole(r, "evals_per_epoch", per_epoch, least=0)
    epochs = hf.nonnegative(r, "num_epochs", 1.0, TRAINING_SRC, positive=True) if per_epoch and not steps else 0
    if epochs and per_epoch <= 1 / epochs:  # 1 / (evals_per_epoch x num_epochs) is not < 1 (compared so: no overflow)
        per_epoch = None  # one evaluation per epoch or fewer: Axolotl drops the cadence ("Skipping evaluations")
    by = next((k for k, v in (("eval_steps", steps), ("evals_per_epoch", per_epoch)) if v), None)
    by = by or (key if strategy not in (None, "", "no") else None)
    if not has_set or by is None:
        r.out["eval_batch_size"] = 0
        return
    batch = r.get("eval_batch_size", r.out["micro_batch_size"], EVAL_SRC)
    r.eval_follows_micro = not r.has("eval_batch_size")
    if batch == 0 and not isinstance(batch, bool):  # builders/base.py l. 671: a falsy eval_batch_size is not passed
        batch = 8
        r.entries["eval_batch_size"].note = EVAL_ZERO
    for k in (by, "val_set_size" if r.flat.get("val_set_size") else "test_datasets", "eval_batch_size"):
        r.set(k, "eval_batch_size", batch)


def _adapter(r: KeyReader) -> None:
    rank = r.get("lora_r")
    if rank is None:
        raise r.error("an adapter needs lora_r (Axolotl has no default rank)")
    r.set("lora_r", "lora_rank", rank)
    alpha = r.get("lora_alpha")
    if alpha is not None:
        r.set("lora_alpha", "lora_alpha", alpha)
    r.set("lora_dropout", "lora_dropout", r.get("lora_dropout", 0.0, f"{_SRC} src/axolotl/utils/schemas/peft.py"))
    linear = switch(r, "lora_target_linear")  # bool | None in schemas/peft.py: "false" is false
    modules = r.get("lora_target_modules")
    if linear:
        r.set("lora_target_linear", "lora_targets", ["all-linear"])
    elif isinstance(modules, str) and not modules.replace("_", "").isalnum():
        r.mark("lora_target_modules", "a regular expression of module paths: counted as all-linear (an upper bound)")
        r.out["lora_targets"] = ["all-linear"]
    elif modules:
        r.set("lora_target_modules", "lora_targets", hf.names(r, "lora_target_modules", modules, "module names such as "
                                                                "q_proj, v_proj, or lora_target_linear: true"))
    else:
        raise r.error("an adapter needs lora_target_modules or lora_target_linear: true")
    if switch(r, "peft_use_dora"):  # schemas/peft.py peft_use_dora -> LoraConfig(use_dora=True)
        r.set("peft_use_dora", "dora", True)
    hf.saved_modules(r, "lora_modules_to_save")  # schemas/peft.py -> LoraConfig(modules_to_save=...)


#: use_kernels: true -> from_pretrained(use_kernels=True), which kernelizes on the device the model loaded to
#: (transformers v4.55.0 modeling_utils.py l. 5085-5093); the hub maps MegaBlocksMoeMLP for cuda and rocm only
#: (integrations/hub_kernels.py l. 63-80) and kernels v0.9.0 layer.py l. 880-888 keeps the model's own forward
#: elsewhere. Axolotl loads on the CPU under FSDP and ZeRO-3 (loaders/model.py _set_device_map_config sets no
#: device_map) and on one GPU under its accelerate launcher (utils/config/__init__.py choose_device: device_map None
#: once ACCELERATE_USE_* is set, which accelerate's launch always sets); the same at ba3dba3e4 and 067b021
KERNELS_ON_CPU = ("Axolotl loads the model on the CPU (FSDP, ZeRO-3, or one GPU under accelerate launch), where "
                  "kernelize finds no MegaBlocksMoeMLP, so the model's own experts forward runs; DDP on several GPUs "
                  "loads each copy on its GPU and the hub kernel runs there: pass --moe-kernel megablocks")


def _default_reentrant(r: KeyReader) -> None:
    """Axolotl's own default where the file sets no kwargs: reentrant checkpointing when checkpointing is on, no
    ``unfrozen_parameters`` and no ``rl`` (axolotl@067b021 src/axolotl/utils/config/__init__.py l. 377-383
    ``normalize_config``: ``gradient_checkpointing_kwargs = {"use_reentrant": True}``), not the transformers default.
    Read with checkpointing off too: the setting matters only with it on, where axolotl makes it so (a planned change
    that turns checkpointing on then uses it, and a file written back and read again keeps it)."""
    if "use_reentrant" in r.out or r.flat.get("rl"):
        return
    if r.flat.get("unfrozen_parameters") is None and not r.has("gradient_checkpointing_kwargs"):
        r.out["use_reentrant"] = "yes"
        if "gradient_checkpointing" in r.entries:
            r.entries["gradient_checkpointing"].becomes.append("use_reentrant=yes")  # axolotl's default kwargs


def _moe_kernel(r: KeyReader) -> None:
    if switch(r, "use_kernels", False):
        r.set("use_kernels", "moe_kernel", "none")
        r.entries["use_kernels"].note = KERNELS_ON_CPU


def _checkpointing(r: KeyReader) -> str:
    gc = word_or_switch(r, "gradient_checkpointing", ("offload", "offload_disk", "unsloth"), False)
    off = word_or_switch(r, "activation_offloading", ("legacy", "disk", "hidden_states"), False)
    if off == "hidden_states":
        raise r.error("activation_offloading: hidden_states is not modelled yet (valid values: true, legacy, disk, false)")
    if gc in ("offload", "offload_disk", "unsloth") or off:  # off: true/legacy/disk keep block inputs off the GPU
        key = "activation_offloading" if off else "gradient_checkpointing"
        r.set(key, "gradient_checkpointing", "offload")
        if gc == "unsloth":
            r.mark("gradient_checkpointing", UNSLOTH + " (counted as checkpoint offload)")
        return "offload"
    if gc not in (True, False, None):
        raise r.error(f"gradient_checkpointing: unknown value {gc!r} (valid values: true, false, offload, offload_disk)")
    r.set("gradient_checkpointing", "gradient_checkpointing", "full" if gc else "none")
    # passed to TrainingArguments (axolotl@067b021 core/builders/base.py _configure_gradient_checkpointing), so
    # transformers refuses it with FSDP's activation checkpointing (hf_common.double_checkpointing)
    r.trainer_checkpointing = "gradient_checkpointing" if gc else ""
    return "full" if gc else "none"


def _attention(r: KeyReader) -> None:
    legacy = [k for k in LEGACY_ATTENTION if switch(r, k)]
    impl = hf.scalar(r, "attn_implementation", r.get("attn_implementation"),
                     sorted(ATTENTION) + sorted(ATTENTION_NOT_MODELLED))
    names = {LEGACY_ATTENTION[k] for k in legacy} | ({impl} if impl else set())
    if len(names) > 1:
        raise r.error(f"{', '.join(legacy + (['attn_implementation'] if impl else []))} name different attention kernels; "
                      "choose one")
    key = "attn_implementation" if impl else legacy[0] if legacy else None
    name = next(iter(names)) if names else None
    if name is None:
        r.get("attn_implementation", "sdpa", "vramfit: transformers picks SDPA when unset")
        key, name = "attn_implementation", "sdpa"
    if name in ATTENTION_NOT_MODELLED:
        r.mark(key, f"{name} attention: counted as SDPA (memory-efficient, linear in seq_len)")
        r.out["attention"] = "sdpa"
        return
    if name not in ATTENTION:
        raise r.error(f"attn_implementation '{name}' is unknown (valid values: "
                      f"{', '.join(sorted(ATTENTION) + sorted(ATTENTION_NOT_MODELLED))})")
    r.set(key, "attention", ATTENTION[name])


#: torch_compile: auto -> True where the installed torch is 2.5.1 or newer (schemas/config.py l. 2040-2056
#: check_torch_compile_auto, reading env_capabilities.torch_version, which cli/config.py l. 305-315 fills in unless
#: use_ray); Axolotl 067b021 requires torch >= 2.11.0 (pyproject.toml l. 15)
COMPILE_AUTO = ("auto: on, as Axolotl turns it on for torch 2.5.1 and newer (it requires 2.11); off under use_ray, "
                "whose driver reads no torch version")


def _compile(r: KeyReader) -> None:
    if not r.has("torch_compile"):
        return
    value = word_or_switch(r, "torch_compile", ("auto",))
    if value == "auto":
        value = not hf.switch_value(r, "use_ray", r.flat.get("use_ray"), hf.PYDANTIC_BOOL)
        r.entries["torch_compile"].note = COMPILE_AUTO
    r.set("torch_compile", "compile", value)


def _attention_and_loss(r: KeyReader) -> None:
    _attention(r)
    plugins = hf.names(r, "plugins", r.get("plugins") or [], "a list of plugin class paths, such as "
                       "axolotl.integrations.liger.LigerPlugin")
    # the plugin's own default: src/axolotl/integrations/cut_cross_entropy/args.py `cut_cross_entropy = True`
    cce_listed = any(str(p).endswith("CutCrossEntropyPlugin") for p in plugins)
    cce = hf.boolean(r, "cut_cross_entropy", True, CCE_SRC, spellings=hf.PYDANTIC_BOOL) if cce_listed else \
        switch(r, "cut_cross_entropy")
    fused = switch(r, "liger_fused_linear_cross_entropy") or cce
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


def _base(r: KeyReader) -> tuple[str, str, bool]:
    """method, quantize (and the adapter's keys); the third value: see axolotl_dtype.method."""
    method, quantize, upcast = dtype.method(r)
    r.set("adapter", "method", method)
    r.out["quantize"] = quantize
    key = "load_in_8bit" if quantize == "int8" else "load_in_4bit"
    if quantize != "none":
        r.set(key, "quantize", quantize)
    if quantize in ("nf4-dq", "int8"):  # a GPTQ base is never cast (peft skips it): nothing to undo
        r.set(key, "kbit_prepare", "no")
        r.entries[key].note = dtype.KBIT_16BIT
    if method == "qlora" and quantize == "nf4-dq":
        r.get("bnb_4bit_quant_type", "nf4-dq", QLORA_SRC)
        r.set("bnb_4bit_quant_type", "quantize", quantize)
    if method != "full":
        _adapter(r)
    if method == "qlora":  # experts stay 16-bit unless asked (transformers 5 fuses them into 3-D parameters)
        moe = hf.boolean(r, "quantize_moe_experts", False, SOURCE, spellings=hf.PYDANTIC_BOOL)
        r.set("quantize_moe_experts", "quantize_experts", "yes" if moe else "auto")
    else:
        if upcast:  # monkeypatch/moe_quant.py patch_moe_quantization_on_load quantizes experts for load_in_4bit
            r.not_modelled("quantize_moe_experts", "4-bit MoE experts on an unquantized base (adapter lora)")
        r.ignore("lora_*", "no adapter: LoRA settings have no effect")
    return method, quantize, upcast


def read(path: Path, data: dict[str, Any]) -> Imported:
    r = KeyReader(path, "axolotl", data, SOURCE)
    r.set("base_model", "model", r.required("base_model"))
    method, quantize, upcast = _base(r)
    r.set("sequence_len", "seq_len", r.get("sequence_len", 512, SOURCE))
    for k in ("sample_packing", "pad_to_sequence_len"):  # packed or padded: every row is sequence_len long
        if switch(r, k):
            r.set(k, "seq_len", r.out["seq_len"])
    r.set("micro_batch_size", "micro_batch_size", r.get("micro_batch_size", 1, TRAINING_SRC))
    total = r.get("batch_size")
    if total is not None and not r.has("gradient_accumulation_steps"):
        # batch_size is per optimizer step across GPUs: Axolotl derives the accumulation from it (training.py)
        micro = hf.whole(r, "micro_batch_size", r.out["micro_batch_size"])
        r.set("batch_size", "grad_accum", max(1, hf.whole(r, "batch_size", total) // micro))
    else:
        r.set("gradient_accumulation_steps", "grad_accum", r.get("gradient_accumulation_steps", 1, TRAINING_SRC))
        if total is not None:
            r.mark("batch_size", "given with gradient_accumulation_steps, which wins here")
    _eval(r)
    hf.optimizer(r, "optimizer", r.get("optimizer", "adamw_torch_fused", TRAINING_SRC))
    _checkpointing(r)
    hf.use_reentrant(r, json_string=False)  # axolotl passes gradient_checkpointing_kwargs to the Trainer's arguments
    _default_reentrant(r)
    _moe_kernel(r)
    _attention_and_loss(r)
    _compile(r)
    axolotl_stage(r)
    for pattern, what in NOT_MODELLED.items():
        for k in [k for k in r.flat if fnmatch.fnmatchcase(k.split(".")[0], pattern)]:
            r.not_modelled(k, what)
    for k in ("unsloth_cross_entropy_loss", "unsloth_lora_mlp", "unsloth_lora_qkv", "unsloth_lora_o",
              "unsloth_rms_norm", "unsloth_rope"):
        r.not_modelled(k, UNSLOTH)
    layout, extra, companions = trainer_layout.trainer_parallelism(r, config_alone=True)
    _fsdp_version(r, layout)
    dtype.set_precision(r, method, quantize, upcast, layout)  # after the layout: ZeRO-3 and FSDP change the upcast
    r.out.update(layout)
    _fsdp1_upcast(r)
    if layout:
        hf.launcher_gpus(r)
    r.out["framework"] = "hf"
    r.out["framework_version"] = AXOLOTL_RELEASE
    hf.check_trainer_match(r, extra)
    return r.finish(IGNORED, WRITE_KEYS, companions, extra)
