"""Which project a training config is written for, from the keys only that project uses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vramfit.config_import.loader import fail

DIALECTS = ("axolotl", "llamafactory", "trl", "torchtune", "litgpt", "swift", "torchtitan")

#: Keys that only one dialect uses at the top level (a config with any of them is that dialect's).
SIGNATURES: dict[str, tuple[str, ...]] = {
    "axolotl": ("base_model", "sequence_len", "micro_batch_size", "adapter", "lora_target_linear", "sample_packing"),
    "llamafactory": ("stage", "finetuning_type", "cutoff_len", "template", "lora_target", "quantization_bit"),
    "litgpt": ("checkpoint_dir", "out_dir", "lora_r", "lora_query", "devices", "train"),
    "trl": ("model_name_or_path", "per_device_train_batch_size", "output_dir", "max_length", "use_peft", "optim"),
    # ms-swift (v4.5.2 swift/arguments): a shell script's mapping carries "swift" (the subcommand) and "ENV"
    "swift": ("swift", "ENV", "tuner_type", "train_type", "attn_impl", "quant_bits", "rlhf_type", "target_modules",
              "split_dataset_ratio", "model_author", "freeze_vit", "torch_dtype"),
    # torchtitan job config TOML tables (9dec370 config_manager.py; v0.2.2 torchtitan/config/job_config.py)
    "torchtitan": ("job", "activation_checkpoint", "parallelism", "experimental", "float8", "metrics", "comm"),
}

#: Keys of TRL's configs LLaMA-Factory has not (trl 1.16.0 model_config.py, sft/dpo/grpo_config.py;
#: LLaMA-Factory@ff6d4d1 hparams says lora_rank, cutoff_len, pref_loss)
TRL_ONLY = ("use_peft", "lora_r", "lora_target_modules", "max_length", "loss_type", "precompute_ref_log_probs",
            "num_generations", "max_completion_length")

#: Files that are companions of a training config, never one themselves.
COMPANIONS = {"zero_optimization": "a DeepSpeed config", "peft_type": "a PEFT adapter config",
              "compute_environment": "an accelerate config", "bnb_4bit_quant_type": "a BitsAndBytesConfig",
              "quant_method": "a quantization config"}


def _has_component(data: Any) -> bool:
    if isinstance(data, dict):
        return "_component_" in data or any(_has_component(v) for v in data.values())
    if isinstance(data, list):
        return any(_has_component(v) for v in data)
    return False


def scores(data: dict[str, Any]) -> dict[str, int]:
    out = {d: sum(k in data for k in keys) for d, keys in SIGNATURES.items()}
    out["torchtune"] = 10 if _has_component(data) else 0
    out["swift"] += isinstance(data.get("model"), str)  # ms-swift's --model; the others say base_model/model_name_or_path
    # LLaMA-Factory and ms-swift configs also hold TrainingArguments keys; a TRL file vramfit's trl export wrote for a
    # preference or RL stage names its trainer with `stage` (plan/export_stages.py): LLaMA-Factory's one key there,
    # beside keys of TRL's own configs that LLaMA-Factory does not take (it says lora_rank, cutoff_len, pref_loss)
    lf_only_stage = out["llamafactory"] == 1 and "stage" in data and any(k in data for k in TRL_ONLY)
    if (out["llamafactory"] and not lf_only_stage) or out["swift"] > 1:
        out["trl"] = 0
    if lf_only_stage:
        out["llamafactory"] = 0
    if out["swift"] == 1 and "torch_dtype" in data:  # TRL's ModelConfig has torch_dtype too
        out["swift"] = 0
    return out


def detect(path: Path, data: dict[str, Any], dialect: str | None = None) -> str:
    """The dialect named (checked against the file) or the one the keys point to; else one clear error."""
    if "model_class" in data or "dist_config" in data or "peft_config" in data:
        raise fail(path, "is a LLaMA-Factory v1 config (model_class/peft_config/dist_config), which vramfit "
                         "does not read yet; use the v0 format (finetuning_type, lora_rank, deepspeed)")
    s = scores(data)
    best = max(s, key=lambda d: s[d])
    kind = next((what for key, what in COMPANIONS.items() if key in data), None) if s[best] == 0 else None
    if "peft_type" in data:  # peft's adapter_config.json, whose lora_alpha/target_modules are ms-swift's keys too
        kind = COMPANIONS["peft_type"]
    if dialect is not None:
        name = dialect.strip().lower().replace("-", "").replace("_", "")
        name = {"transformers": "trl", "hf": "trl", "llamafactory": "llamafactory", "msswift": "swift"}.get(name, name)
        if name not in DIALECTS:
            raise fail(path, f"--dialect '{dialect}' is unknown (valid values: {', '.join(DIALECTS)})")
        if kind is None and s[name] == 0 and s[best] > 0:
            raise fail(path, f"does not look like a {name} config (its keys are {best}'s); "
                             f"pass --dialect {best} or drop --dialect")
        if kind is None and (s[name] > 0 or s[best] == 0):  # named, and no dialect's keys say otherwise
            return name
    if kind is not None:
        raise fail(path, f"is {kind}, not a training config; pass the training config first and this file "
                         "as a second --from (or name it in the config)")
    if s[best] == 0:
        raise fail(path, f"is not a training config vramfit knows (no keys of {', '.join(DIALECTS)}); "
                         "pass --dialect to say which")
    tied = [d for d in s if s[d] == s[best]]
    if len(tied) > 1:
        raise fail(path, f"could be {' or '.join(tied)}; pass --dialect")
    return best
