"""TRL ``trl sft --config`` YAML/JSON (SFTConfig + ModelConfig keys), or a transformers TrainingArguments
file, -> scenario keys (framework ``hf``). Defaults: TRL 1.16.0 and transformers 5.24.0."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from vramfit.config_import import hf_common as hf
from vramfit.config_import import trainer_layout
from vramfit.config_import.report import Imported, KeyReader
from vramfit.config_import.stages import trl_stage
from vramfit.models.catalog import catalog_entry

SFT_SRC = "trl 1.16.0 trl/trainer/sft_config.py"
MODEL_SRC = "trl 1.16.0 trl/trainer/model_config.py"
ARGS_SRC = hf.TRAINING_ARGS_SRC
#: PEFT's per-architecture default targets for Llama-style decoders when target_modules is None.
PEFT_TARGETS_SRC = "peft 0.21.2 src/peft/utils/constants.py TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING"
#: LoraConfig(target_modules=None) takes the modules PEFT lists for the model's config.model_type (PEFT_TARGETS_SRC;
#: peft 0.21.2 tuners/lora/model.py LoraModel._prepare_adapter_config raises "Please specify `target_modules` or
#: `target_parameters`" for a type it does not list): the entries for the catalog's model types
PEFT_DEFAULT_TARGETS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("llama", "llama4", "mistral", "mixtral", "gemma", "gemma2", "gemma3_text", "qwen2", "qwen3"),
                    ("q_proj", "v_proj")),
    **dict.fromkeys(("falcon", "bloom", "gpt_neox"), ("query_key_value",)),
    "phi": ("q_proj", "v_proj", "fc1", "fc2"),
}
SOURCE = f"{SFT_SRC}; {MODEL_SRC}; {ARGS_SRC}"

WRITE_KEYS = {"micro_batch_size": "per_device_train_batch_size", "grad_accum": "gradient_accumulation_steps",
              "seq_len": "max_length", "lora_rank": "lora_r", "optimizer": "optim",
              "gradient_checkpointing": "gradient_checkpointing", "loss": "use_liger_kernel",
              "eval_batch_size": "per_device_eval_batch_size"}

#: SFTConfig and ModelConfig keys with no memory effect; then the TrainingArguments ones (hf_common).
IGNORED = [
    ("dataset_*", "data"), ("completion_only_loss", "which tokens carry loss"),
    ("assistant_only_loss", "which tokens carry loss"), ("chat_template_path", "data"), ("eos_token", "tokenizer"),
    ("pad_token", "tokenizer"), ("model_revision", "download"), ("trust_remote_code", "loading"),
    ("lora_task_type", "adapter head type"), ("packing_strategy", "data layout"),
    *hf.TRAINING_ARGS_IGNORED,
]


def _model(r: KeyReader) -> str:
    model = r.required("model_name_or_path")
    placeholder = re.fullmatch(r"<a ([\d,]+)-parameter model>", model.strip()) if isinstance(model, str) else None
    if placeholder:  # what vramfit's TRL export of a params-only plan writes (plan/export_trl.py): the size, no model
        r.set("model_name_or_path", "params", int(placeholder.group(1).replace(",", "")))
    else:
        r.set("model_name_or_path", "model", model)
    in4 = hf.boolean(r, "load_in_4bit", False, MODEL_SRC, spellings=hf.ARGPARSE_BOOL)
    in8 = hf.boolean(r, "load_in_8bit", False, MODEL_SRC, spellings=hf.ARGPARSE_BOOL)
    peft = hf.boolean(r, "use_peft", False, MODEL_SRC, spellings=hf.ARGPARSE_BOOL)
    if in4 and in8:
        raise r.error("load_in_4bit and load_in_8bit are both true; choose one")
    if (in4 or in8) and not peft:
        raise r.error("load_in_4bit/load_in_8bit without use_peft: a quantized base cannot be fully fine-tuned")
    method = "qlora" if in4 or in8 else "lora" if peft else "full"
    r.set("use_peft", "method", method)
    if in4:
        kind = r.get("bnb_4bit_quant_type", "nf4", MODEL_SRC)
        nested = hf.boolean(r, "use_bnb_nested_quant", False, MODEL_SRC, spellings=hf.ARGPARSE_BOOL)
        if kind not in ("nf4", "fp4"):
            raise r.error(f"bnb_4bit_quant_type '{kind}' is unknown (valid values: nf4, fp4)")
        r.set("bnb_4bit_quant_type", "quantize", kind + ("-dq" if nested else ""))
        r.set("use_bnb_nested_quant", "quantize", kind + ("-dq" if nested else ""))
        # the dtype of the tensor that packs the 4-bit values (bitsandbytes Params4bit quant_storage): the same bytes,
        # which FSDP/ZeRO-3 can then shard with the 16-bit parameters (TRL ModelConfig -> BitsAndBytesConfig)
        r.ignore("bnb_4bit_quant_storage", "the container dtype of the packed 4-bit weights: the same bytes")
    elif in8:
        r.set("load_in_8bit", "quantize", "int8")
    if not in4:
        r.ignore("bnb_4bit_*", "load_in_4bit is off"), r.ignore("use_bnb_nested_quant", "load_in_4bit is off")
    if not peft:
        r.ignore("lora_*", "use_peft is off: no adapter")
    if peft:
        r.set("lora_r", "lora_rank", r.get("lora_r", 16, MODEL_SRC))
        r.set("lora_alpha", "lora_alpha", r.get("lora_alpha", 32, MODEL_SRC))
        r.set("lora_dropout", "lora_dropout", r.get("lora_dropout", 0.05, MODEL_SRC))
        targets = hf.names(r, "lora_target_modules", r.get("lora_target_modules", *_peft_default(r)),
                           "all-linear, or module names such as q_proj, v_proj")
        r.set("lora_target_modules", "lora_targets", ["all-linear" if t == "all-linear" else t for t in targets])
        hf.dora(r, "use_dora", MODEL_SRC)  # trl get_peft_config: LoraConfig(use_dora=...)
        hf.saved_modules(r, "lora_modules_to_save")  # trl get_peft_config: LoraConfig(modules_to_save=...)
        for k in ("use_rslora", "lora_target_parameters"):
            if r.get(k):
                r.mark(k, "rsLoRA/parameter targets: counted as plain LoRA")
    return method


def _peft_default(r: KeyReader) -> tuple[list[str], str]:
    """(targets, source) PEFT picks when the config names no lora_target_modules, by the catalog model's type; a model
    the catalog lacks (read later from its config.json or the Hub) is taken as Llama-like, which the note says."""
    if r.flat.get("lora_target_modules") is not None:
        return [], PEFT_TARGETS_SRC
    entry = catalog_entry(str(r.out.get("model", "")))
    kind = (entry or {}).get("config", {}).get("model_type")
    if kind is None or (kind not in PEFT_DEFAULT_TARGETS and r.flat.get("lora_target_parameters")):
        return ["q_proj", "v_proj"], f"{PEFT_TARGETS_SRC} (llama's; give lora_target_modules for another architecture)"
    if kind not in PEFT_DEFAULT_TARGETS:
        raise r.error(f"lora_target_modules: PEFT has no default target modules for model type {kind!r} (it raises "
                      f"'Please specify `target_modules` or `target_parameters`'); give lora_target_modules, e.g. all-linear")
    return list(PEFT_DEFAULT_TARGETS[kind]), f"{PEFT_TARGETS_SRC} ({kind})"


def _precision(r: KeyReader, method: str) -> str:
    dtype = r.get("model_init_kwargs.dtype") or r.get("model_init_kwargs.torch_dtype")
    if dtype is None:
        dtype = r.get("dtype") or r.get("torch_dtype") or r.get("dtype", "float32", MODEL_SRC)
    fp16 = hf.boolean(r, "fp16", False, ARGS_SRC, spellings=hf.ARGPARSE_BOOL)
    bf16 = hf.boolean(r, "bf16", not fp16, f"{SFT_SRC}: True unless fp16", spellings=hf.ARGPARSE_BOOL)
    if bf16 and fp16:
        raise r.error("bf16 and fp16 are both on; choose one")
    r.trainer_mixed = bf16 or fp16  # TrainingArguments sets accelerate's mixed precision (training_args.py)
    weights = str(dtype).replace("torch.", "")
    if weights in ("auto", "bfloat16"):
        return "bf16-true" if bf16 or not fp16 else "fp16-mixed"
    if weights == "float16":
        return "fp16-true"
    if weights != "float32":
        raise r.error(f"dtype '{dtype}' is unknown (valid values: float32, bfloat16, float16, auto)")
    return "bf16-mixed" if bf16 else "fp16-mixed" if fp16 else "fp32"


def _grpo_length(r: KeyReader) -> None:
    """GRPO's sequence is the prompt plus the completion: ``max_prompt_length`` (GRPOConfig before TRL 0.26; 1.16
    has none and leaves the prompt to the data) + ``max_completion_length``; without it the scenario's default."""
    from vramfit.stage_keys import GRPO_COMPLETION_LEN

    if r.has("max_length"):
        raise r.error("max_length: GRPOConfig has none (TRL rejects it); GRPO's sequence is max_prompt_length + "
                      "max_completion_length (valid keys: max_prompt_length, max_completion_length)")
    prompt = r.get("max_prompt_length")
    if prompt is not None:
        prompt = hf.whole(r, "max_prompt_length", prompt)
        r.set("max_prompt_length", "seq_len", prompt + r.out.get("completion_len", GRPO_COMPLETION_LEN))
        return
    _seq_len_default(r, "not in the file: GRPOConfig (TRL 1.16) has no prompt limit, the data's prompts set it; "
                        "pass --seq-len (prompt + completion)")


def _seq_len_default(r: KeyReader, why: str) -> None:
    """No length in the file: the scenario's default ``seq_len``, said as such with ``why``."""
    from vramfit.config_import.report import Entry
    from vramfit.scenario import Scenario

    seq = Scenario.__dataclass_fields__["seq_len"].default
    r.entries["seq_len"] = Entry("default", "seq_len", seq, why, [f"seq_len={seq}"])


def _untruncated(r: KeyReader) -> None:
    """``max_length: null``: SFTConfig truncates nothing (trl 1.16.0 trl/trainer/sft_config.py), so the data's
    longest sample sets the length, not the 1024 default; packing refuses it (sft_trainer.py l. 1467)."""
    if hf.boolean(r, "packing", False, spellings=hf.ARGPARSE_BOOL):
        raise r.error("max_length: null (no truncation) with packing: true; TRL refuses it (\"When packing is "
                      "enabled, `max_length` can't be `None`\"); set max_length")
    r.get("max_length")
    r.entries["max_length"].note = "no truncation"
    _seq_len_default(r, "max_length is null: TRL truncates nothing, the data's longest sample sets the length; "
                        "pass --seq-len, or --dataset FILE --max-length none to read it")


def _null(r: KeyReader, key: str) -> bool:
    """``key: null`` itself (a mapping under ``key`` flattens to ``key.x`` and is not null: refused as a length)."""
    return key in r.flat and r.flat[key] is None


def _older_null_length(r: KeyReader) -> None:
    """``max_seq_length: null``, the name TRL used before 0.20: TRL <= 0.14 trains at min(tokenizer.model_max_length,
    1024) (v0.14.0 trl/trainer/sft_trainer.py l. 240-242), 0.15-0.19 truncate nothing and refuse it with packing
    (v0.15.0 sft_trainer.py l. 415-416). With packing only TRL <= 0.14 runs it: 1024, unless the tokenizer's
    model_max_length is shorter (not in the file); without packing, which release ran is not in the file."""
    r.get("max_seq_length")
    if hf.boolean(r, "packing", False, spellings=hf.ARGPARSE_BOOL):
        r.entries["max_seq_length"].note = "null with packing: TRL <= 0.14's min(model_max_length, 1024)"
        r.out["seq_len"] = 1024
        return
    r.entries["max_seq_length"].note = "null: 1024 on TRL <= 0.14, no truncation on 0.15-0.19"
    _seq_len_default(r, "max_seq_length is null: TRL <= 0.14 trains at 1024 tokens, 0.15-0.19 truncate nothing "
                        "(the data's longest sample); pass --seq-len")


def _step(r: KeyReader) -> None:
    r.set("per_device_train_batch_size", "micro_batch_size", r.get("per_device_train_batch_size", 8, ARGS_SRC))
    r.set("gradient_accumulation_steps", "grad_accum", r.get("gradient_accumulation_steps", 1, ARGS_SRC))
    if r.out.get("stage") == "grpo":
        _grpo_length(r)
    elif r.has("max_seq_length"):
        if r.has("max_length"):
            raise r.error("max_length and max_seq_length are both set (max_seq_length is the older name); keep one")
        if _null(r, "max_seq_length"):
            _older_null_length(r)
        else:
            r.set("max_seq_length", "seq_len", r.get("max_seq_length"))
    elif _null(r, "max_length"):
        _untruncated(r)
    else:
        r.set("max_length", "seq_len", r.get("max_length", 1024, SFT_SRC))
    for k in ("packing", "padding_free"):
        if hf.boolean(r, k, False, spellings=hf.ARGPARSE_BOOL) and "seq_len" in r.out:
            r.set(k, "seq_len", r.out["seq_len"])
    hf.optimizer(r, "optim", r.get("optim", "adamw_torch_fused", ARGS_SRC))
    # transformers 5.24 names it activation_checkpointing(_kwargs); gradient_checkpointing(_kwargs) are deprecated
    # aliases read only when the new name is unset (training_args.py TrainingArguments.__post_init__, v5.24.0)
    new = r.has("activation_checkpointing")
    name = "activation_checkpointing" if new else "gradient_checkpointing"
    gc = hf.boolean(r, name, True, SFT_SRC, spellings=hf.ARGPARSE_BOOL)
    off = hf.boolean(r, "activation_offloading", False, SFT_SRC, spellings=hf.ARGPARSE_BOOL)
    r.set("activation_offloading" if off else name, "gradient_checkpointing",
          "offload" if off else "full" if gc else "none")
    r.trainer_checkpointing = name if gc else ""  # on in TrainingArguments (hf_common.double_checkpointing)
    if new:
        r.ignore("gradient_checkpointing", "deprecated alias: activation_checkpointing is set (transformers 5.24)")
    kwargs = "activation_checkpointing_kwargs" if r.has("activation_checkpointing_kwargs") else "gradient_checkpointing_kwargs"
    hf.use_reentrant(r, kwargs_key=kwargs)
    # every_n_layers (transformers 5.24: checkpoint only every n-th layer) holds more: not modelled
    r.not_modelled(f"{kwargs}.every_n_layers", "checkpointing only every n-th layer (the estimate checkpoints each)")
    r.ignore(f"{kwargs}.*", "checkpoint function options")
    if kwargs == "activation_checkpointing_kwargs":
        r.ignore("gradient_checkpointing_kwargs*", "deprecated alias: activation_checkpointing_kwargs is set "
                 "(transformers 5.24)")
    liger = hf.boolean(r, "use_liger_kernel", False, ARGS_SRC, spellings=hf.ARGPARSE_BOOL)
    r.set("use_liger_kernel", "loss", "fused" if liger else "standard")
    attn = r.get("attn_implementation", "sdpa", f"{ARGS_SRC}: transformers picks SDPA when unset")
    table = {"flash_attention_2": "flash", "flash_attention_3": "flash", "sdpa": "sdpa", "eager": "eager",
             "kernels-community/flash-attn": "flash", "kernels-community/vllm-flash-attn3": "flash"}
    if hf.scalar(r, "attn_implementation", attn, list(table)) not in table:
        raise r.error(f"attn_implementation '{attn}' is not modelled yet (valid values: {', '.join(table)})")
    r.set("attn_implementation", "attention", table[attn])
    if hf.boolean(r, "torch_compile", False, spellings=hf.ARGPARSE_BOOL):
        r.set("torch_compile", "compile", True)


def read(path: Path, data: dict[str, Any]) -> Imported:
    r = KeyReader(path, "trl", data, SOURCE)
    method = _model(r)
    r.set("bf16", "precision", _precision(r, method))
    trl_stage(r)  # before the step: GRPO has no max_length
    if method == "qlora" and r.out.get("stage") not in ("orpo", "simpo"):
        # the SFT, DPO, KTO and GRPO trainers never call prepare_model_for_kbit_training and cast the adapters to bf16
        # (trl 1.16.0 trl/trainer/sft_trainer.py l. 902-911); the ORPO and CPO (SimPO) trainers prepare the model
        r.set("load_in_4bit" if r.has("load_in_4bit") else "load_in_8bit", "framework_version", "trl-1.16")
    _step(r)
    # `trl sft` passes dataset[dataset_test_split] as eval_dataset when eval_strategy is not "no" (trl 1.16.0
    # trl/scripts/sft.py l. 107), and the Trainer refuses such a strategy without one: the config says it all
    hf.trainer_eval(r)
    layout, extra, companions = trainer_layout.trainer_parallelism(r)
    r.out.update(layout)
    if layout:
        hf.launcher_gpus(r)
    if (note := trainer_layout.fsdp_upcast(r.out, r.trainer_mixed)) and (e := r.entries.get("bf16")):
        e.becomes, e.note = [f"precision={r.out['precision']}"], note
    r.out["framework"] = "hf"
    keys = {**WRITE_KEYS, "seq_len": "max_seq_length"} if r.has("max_seq_length") else dict(WRITE_KEYS)
    if r.has("activation_checkpointing"):
        keys["gradient_checkpointing"] = "activation_checkpointing"
    hf.check_trainer_match(r, extra)
    return r.finish(IGNORED, keys, companions, extra)
