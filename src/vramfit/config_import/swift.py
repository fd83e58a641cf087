"""ms-swift ``swift sft`` / ``swift rlhf`` arguments -> scenario keys (framework ``hf``: ms-swift runs the HF Trainer,
PEFT and TRL). Read from a config file (``swift sft config.yaml``, an ``args.json`` that ms-swift writes into every
output folder) or from a shell script (:mod:`.swift_shell`).

Defaults are modelscope/ms-swift v4.5.2 (ff5128777), the same at 3602360a5 for every key read here;
``train_type`` is ``tuner_type``'s name before d0c71e48c (2026-01-17), still in args.json files of older runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vramfit.config_import import hf_common as hf
from vramfit.config_import.report import Entry, Imported, KeyReader
from vramfit.config_import.swift_keys import DS_PRESETS, FSDP_PRESETS, IGNORED, NOT_MODELLED, UNKNOWN

_R = "ms-swift v4.5.2"
MODEL_SRC = f"{_R} swift/arguments/base_args/model_args.py"
QUANT_SRC = f"{_R} swift/arguments/base_args/quant_args.py"
TUNER_SRC = f"{_R} swift/arguments/tuner_args.py"
TEMPLATE_SRC = f"{_R} swift/arguments/base_args/template_args.py"
TRAIN_SRC = f"{_R} swift/trainers/arguments.py"
RLHF_SRC = f"{_R} swift/arguments/rlhf_args.py"
SOURCE = f"{_R} (ff5128777) swift/arguments/*.py, swift/trainers/arguments.py"

WRITE_KEYS = {"micro_batch_size": "per_device_train_batch_size", "grad_accum": "gradient_accumulation_steps",
              "seq_len": "max_length", "lora_rank": "lora_rank", "gradient_checkpointing": "gradient_checkpointing",
              "loss": "use_liger_kernel", "eval_batch_size": "per_device_eval_batch_size"}

#: swift --attn_impl (model_args.py: 'flash_attn' is kept for flash_attention_2); None: config.json, then
#: transformers' own choice, SDPA (transformers 5.24.0 modeling_utils.py _check_and_adjust_attn_implementation)
ATTN = {"sdpa": "sdpa", "eager": "eager", "flash_attn": "flash", "flash_attention_2": "flash",
        "flash_attention_3": "flash", "flash_attention_4": "flash"}
#: rlhf_type -> stage (rlhf_args.py l. 232 Literal; simpo runs TRL's CPOTrainer with loss_type simpo, l. 482-490)
RLHF = {"dpo": "dpo", "orpo": "orpo", "simpo": "simpo", "kto": "kto", "grpo": "grpo", "ppo": "ppo"}
#: ms-swift v4.5.2 requirements/framework.txt: trl>=0.15,<1.0 -> the per-row selective_log_softmax (trl-0.29)
RLHF_TRL = "trl-0.29"


def _catalog_config(model: str) -> dict[str, Any]:
    """The catalog's config.json of ``model`` (what ms-swift reads when torch_dtype/max_length are unset), or {}."""
    from vramfit.models import catalog

    entry = catalog._index().get(model.lower()) or catalog._match_by_name(model)  # noqa: SLF001 - same package
    return dict(entry.get("config") or {}) if entry else {}


def _whole(v: Any) -> bool:
    """A whole number ≥ 1 (bool is not one: ``--flag`` alone reads as True)."""
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def _gpus(r: KeyReader) -> tuple[int, int]:
    """(GPUs, nodes): torchrun's NPROC_PER_NODE x NNODES (swift/cli/main.py get_torchrun_args), or args.json's
    global_world_size; neither: one process, as ``swift sft`` runs without them."""
    if r.has("global_world_size"):
        world = r.get("global_world_size")
        if not _whole(world):
            raise r.error(f"global_world_size must be a whole number ≥ 1, got {world!r}")
        r.set("global_world_size", "num_gpus", world)
        return world, 1
    per = r.get("ENV.NPROC_PER_NODE", 1, f"{_R} swift/cli/main.py: no NPROC_PER_NODE, no torchrun: one process")
    nodes = r.get("ENV.NNODES", 1, f"{_R} swift/cli/main.py: no NNODES, one node")
    if not all(_whole(v) for v in (per, nodes)):
        raise r.error(f"NPROC_PER_NODE and NNODES must be whole numbers ≥ 1, got {per!r} and {nodes!r}")
    r.set("ENV.NPROC_PER_NODE", "num_gpus", per * nodes)
    if nodes > 1:
        r.set("ENV.NNODES", "num_nodes", nodes)
    devices = str(r.get("ENV.CUDA_VISIBLE_DEVICES") or "").split(",")
    if per == 1 and nodes == 1 and len(devices) > 1:
        r.mark("ENV.CUDA_VISIBLE_DEVICES", "several GPUs without NPROC_PER_NODE: ms-swift splits the model over them "
                                           "with device_map (swift/utils is_mp); estimated as one GPU holding it all")
    return per * nodes, nodes


def _method(r: KeyReader) -> str:
    key = "train_type" if r.has("train_type") and not r.has("tuner_type") else "tuner_type"
    tuner = str(r.get(key, "lora", f"{_R} swift/arguments/base_args/base_args.py l. 93")).lower()
    if tuner not in ("lora", "full"):
        raise r.error(f"{key} '{tuner}' is not modelled yet (valid values: lora, full)")
    if hf.checkpoint_quantization(r, "model", tuner, "ms-swift"):
        r.ignore("quant_*", "a pre-quantized checkpoint keeps its own quantization")
        return "qlora"
    bits, how = r.get("quant_bits"), r.get("quant_method")
    if bits is None and how is None:
        r.set(key, "method", tuner)
        return tuner
    if how != "bnb" or bits not in (4, 8):
        raise r.error(f"quant_method '{how}' with quant_bits {bits!r} is not modelled yet (valid: quant_method bnb "
                      "with quant_bits 4 or 8)")
    if tuner == "full":
        raise r.error(f"quant_bits with {key} full: a quantized base cannot be fully fine-tuned")
    if bits == 8:
        quant = "int8"
    else:
        kind = r.get("bnb_4bit_quant_type", "nf4", QUANT_SRC)
        if kind not in ("nf4", "fp4"):
            raise r.error(f"bnb_4bit_quant_type '{kind}' is unknown (valid values: nf4, fp4)")
        quant = kind + ("-dq" if r.get("bnb_4bit_use_double_quant", True, QUANT_SRC) else "")
    r.set("quant_bits", "method", "qlora")
    r.set("quant_method", "quantize", quant)
    # ms-swift never calls peft's prepare_model_for_kbit_training (no call under swift/ at v4.5.2 nor 3602360a5):
    # norms, embeddings and head stay in torch_dtype
    r.set("quant_method", "kbit_prepare", "no")
    return "qlora"


def _adapter(r: KeyReader) -> None:
    r.set("lora_rank", "lora_rank", r.get("lora_rank", 8, TUNER_SRC))
    r.set("lora_alpha", "lora_alpha", r.get("lora_alpha", 32, TUNER_SRC))
    r.set("lora_dropout", "lora_dropout", r.get("lora_dropout", 0.05, TUNER_SRC))
    target = r.get("target_modules", ["all-linear"], TUNER_SRC)
    names = [target] if isinstance(target, str) else target
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise r.error(f"target_modules must be module names or all-linear, got {target!r}")
    r.set("target_modules", "lora_targets", names)
    hf.dora(r, "use_dora", TUNER_SRC), hf.saved_modules(r, "modules_to_save")  # LoraConfig(modules_to_save=...)
    for k in ("use_rslora", "target_regex", "target_parameters"):
        if r.flat.get(k):
            r.get(k)
            r.mark(k, "rsLoRA/regex or parameter targets: counted as plain LoRA")


def _precision(r: KeyReader, model: str) -> str:
    """torch_dtype loads the weights; bf16/fp16 (unset: from torch_dtype, model_args.py _init_mixed_precision:
    float16 and float32 -> fp16, bfloat16 -> bf16) are the Trainer's autocast."""
    cfg = _catalog_config(model)
    known = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    note = f"{MODEL_SRC} l. 74: None reads config.json's torch_dtype" + ("" if cfg else " (model not in vramfit's "
                                                                          "catalog: bfloat16 assumed)")
    weights = str(r.get("torch_dtype", known, note)).replace("torch.", "")
    if weights not in ("bfloat16", "float16", "float32"):
        raise r.error(f"torch_dtype '{weights}' is unknown (valid values: bfloat16, float16, float32)")
    half = "bf16" if weights == "bfloat16" else "fp16"
    src = f"{MODEL_SRC} _init_mixed_precision: from torch_dtype {weights}"
    bf16 = r.get("bf16", half == "bf16", src)
    fp16 = r.get("fp16", half == "fp16", src)
    if bf16 and fp16:
        raise r.error("bf16 and fp16 are both on; choose one")
    if weights == "float32":
        return "bf16-mixed" if bf16 else "fp16-mixed" if fp16 else "fp32"
    return "bf16-true" if weights == "bfloat16" else "fp16-true"


def _seq_len(r: KeyReader, model: str) -> int:
    cfg = _catalog_config(model)
    longest = int(cfg.get("max_position_embeddings") or 0)
    if not r.has("max_length") and not longest:
        raise r.error(f"max_length is not set and {model} is not in vramfit's catalog (ms-swift then takes the "
                      "model's max_model_len); give max_length")
    seq = r.get("max_length", longest, f"{TEMPLATE_SRC} l. 130 / base_args.py l. 196: None is the model's "
                                       "max_model_len (config.json max_position_embeddings)")
    r.set("max_length", "seq_len", seq)
    for k in ("packing", "padding_free"):
        if r.get(k):
            r.set(k, "seq_len", seq)
    return seq


def _step(r: KeyReader, gpus: int, grpo: bool) -> None:
    bs = r.get("per_device_train_batch_size", 1, f"{TRAIN_SRC} l. 129")
    r.set("per_device_train_batch_size", "micro_batch_size", bs)
    if grpo:
        ga = r.get("gradient_accumulation_steps", 1, f"{RLHF_SRC} l. 527-530: 1 for GRPO")
    else:
        ga = r.get("gradient_accumulation_steps", max(1, -(-16 // (bs * gpus))) if _whole(bs) else 1,  # exact ceil
                   f"{TRAIN_SRC} l. 284-285: max(1, ceil(16 / per_device_train_batch_size / world size))")
    r.set("gradient_accumulation_steps", "grad_accum", ga)
    gc = r.get("gradient_checkpointing", True, f"{TRAIN_SRC} l. 134")
    r.set("gradient_checkpointing", "gradient_checkpointing", "full" if gc else "none")
    # TrainArgumentsMixin.gradient_checkpointing_kwargs (dict or JSON string, json_parse_to_dict in __post_init__) goes
    # to transformers' TrainingArguments, which passes it to gradient_checkpointing_enable as for TRL
    hf.use_reentrant(r)
    liger = r.get("use_liger_kernel", False, f"{TRAIN_SRC} l. 153")
    r.set("use_liger_kernel", "loss", "fused" if liger else "standard")
    attn = r.get("attn_impl", "sdpa", f"{MODEL_SRC} l. 79: None reads config.json, where transformers picks SDPA")
    if not isinstance(attn, str) or attn not in ATTN:
        raise r.error(f"attn_impl '{attn}' is not modelled yet (valid values: {', '.join(ATTN)})")
    r.set("attn_impl", "attention", ATTN[attn])
    hf.optimizer(r, "optim", r.get("optim", "adamw_torch", f"{TRAIN_SRC}: the HF Trainer's (transformers < 5)"))
    special = r.get("optimizer")
    if special:
        r.mark("optimizer", f"ms-swift's '{special}' optimizer (GaLore/LoRA+/Muon/multimodal): estimated as optim")
    if r.get("torch_compile"):
        r.set("torch_compile", "compile", True)


def _logits_to_keep(r: KeyReader, command: str) -> None:
    """use_logits_to_keep None is on where the forward takes logits_to_keep and sequence_parallel_size is 1
    (trainers/mixin.py l. 210-222, seq2seq_trainer.py l. 107-109); prepare_logits_to_keep (mixin.py l. 1199-1220)
    keeps the label positions of a batch of one row (packing and padding_free make one row of any batch), else
    every position from the batch's first label on (counted for every token, an upper bound)."""
    on = r.get("use_logits_to_keep", None, f"{TRAIN_SRC} l. 163") is not False
    one_row = any(r.flat.get(k) for k in ("packing", "padding_free")) or (
        r.flat.get("per_device_train_batch_size", 1) == 1 and r.flat.get("per_device_eval_batch_size", 1) == 1)
    if not on or r.flat.get("sequence_parallel_size", 1) != 1:
        return
    if command == "rlhf" or not one_row:
        r.mark("use_logits_to_keep", "logits from the batch's first label position on (ms-swift's default for text "
                                     "models): counted for every token, an upper bound on the logits and loss")
        return
    r.set("use_logits_to_keep", "logits_to_keep", "labels")
    if "use_logits_to_keep" in r.entries:
        r.entries["use_logits_to_keep"].note = (f"{TRAIN_SRC} l. 163; the label positions of one row: give "
                                                "label_share, the data set's share of label tokens (1: every token)")


def _layout(r: KeyReader, data: dict[str, Any], gpus: int) -> tuple[dict[str, Any], list[Entry]]:
    """deepspeed (a preset name, a path, or args.json's resolved mapping) or fsdp (the 'fsdp2' preset or a path);
    neither over several GPUs: DDP."""
    ds, fsdp = (_inline_json(r, k, data.get(k)) for k in ("deepspeed", "fsdp"))
    if ds and fsdp:
        raise r.error("deepspeed and fsdp are both set; ms-swift refuses that (sft_args.py l. 293-294)")
    if ds:
        return _deepspeed(r, ds)
    if fsdp:
        return _fsdp(r, fsdp, data.get("fsdp_config"))
    r.ignore("deepspeed", "off"), r.ignore("fsdp", "off"), r.ignore("fsdp_config.*", "no FSDP")
    return ({"parallelism": "ddp"} if gpus > 1 else {}), []


def _inline_json(r: KeyReader, key: str, value: Any) -> Any:
    """--deepspeed / --fsdp given as JSON text (sft_args.py l. 269 and 309: json_parse_to_dict takes a path or JSON)."""
    if not (isinstance(value, str) and value.strip().startswith("{")):
        return value
    import json

    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise r.error(f"{key} is not a preset name, a file or valid JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise r.error(f"{key} JSON must be a mapping, got {type(parsed).__name__}")
    return parsed


def _deepspeed(r: KeyReader, ds: Any) -> tuple[dict[str, Any], list[Entry]]:
    if isinstance(ds, dict):  # args.json: the config as ms-swift resolved it; or JSON text given to --deepspeed
        if "deepspeed" in r.flat:
            r.get("deepspeed")
        r.ignore("deepspeed.*", "the DeepSpeed config as ms-swift resolved it: read below")
        return hf.read_deepspeed(r, "deepspeed", r.path, ds)
    r.get("deepspeed")
    name = str(ds)
    if name in DS_PRESETS:
        r.entries["deepspeed"].note = f"{_R} swift/config/{name}.json (sft_args.py l. 259-267)"
        out, entries = hf.read_deepspeed(r, "deepspeed", Path(f"swift/config/{name}.json"),
                                         {"zero_optimization": DS_PRESETS[name]})
    else:
        path = hf.resolve_path(r, "deepspeed", ds)
        out, entries = hf.read_deepspeed(r, "deepspeed", path)
    r.set("deepspeed", "parallelism", out["parallelism"])
    return out, entries


def _fsdp(r: KeyReader, fsdp: Any, inline: Any) -> tuple[dict[str, Any], list[Entry]]:
    """ms-swift's --fsdp: 'fsdp2' (swift/config/fsdp2.json) or a JSON file with "fsdp" words and "fsdp_config"
    (sft_args.py _init_fsdp l. 284-329, fsdp_version defaulting to 2 there)."""
    r.get("fsdp")
    if isinstance(fsdp, dict):  # JSON text given to --fsdp: the file's shape
        words, options = fsdp.get("fsdp", "full_shard auto_wrap"), fsdp.get("fsdp_config") or {}
    elif isinstance(inline, dict) or isinstance(fsdp, list) or (isinstance(fsdp, str) and " " in fsdp.strip()):
        words, options = fsdp, inline or {}  # args.json: the words and fsdp_config as resolved
    else:
        if str(fsdp) in FSDP_PRESETS:
            words, options = FSDP_PRESETS[str(fsdp)][0], dict(FSDP_PRESETS[str(fsdp)][1])
            r.entries["fsdp"].note = f"{_R} swift/config/{fsdp}.json"
        else:
            from vramfit.config_import.loader import load_mapping

            preset = load_mapping(hf.resolve_path(r, "fsdp", fsdp))
            words, options = preset.get("fsdp", "full_shard auto_wrap"), preset.get("fsdp_config") or {}
    if not isinstance(words, str | list) or not isinstance(options, dict):
        raise r.error(f"fsdp must name FSDP words (full_shard auto_wrap ...) and an fsdp_config mapping, got "
                      f"{words!r} and {options!r}")
    options = {"fsdp_version": 2, **options}
    layout = hf.fsdp_layout(r, "fsdp", words, options)
    r.ignore("fsdp_config.*", hf.FSDP_CONFIG_IGNORED)
    for k, v in layout.items():
        r.set("fsdp", k, v)
    if options.get("activation_checkpointing"):  # sft_args.py l. 347-353: replaces gradient_checkpointing
        layout["gradient_checkpointing"] = "full"
        r.set("fsdp", "gradient_checkpointing", "full")
    return layout, []


def _rlhf(r: KeyReader, command: str, seq: int) -> None:
    if command != "rlhf" and not r.has("rlhf_type"):
        return
    kind = str(r.get("rlhf_type", "dpo", f"{RLHF_SRC} l. 232")).lower()
    if kind == "cpo" and str(r.flat.get("loss_type", "")).lower() == "simpo":  # args.json of a simpo run
        r.get("loss_type")
        kind = "simpo"
    if kind not in RLHF:
        r.mark("rlhf_type", f"rlhf_type '{kind}' is not modelled yet (modelled: {', '.join(RLHF)}): estimated as "
                            "supervised fine-tuning")
        return
    r.set("rlhf_type", "stage", RLHF[kind])
    r.set("rlhf_type", "framework_version", RLHF_TRL)
    if kind == "dpo" and r.get("rpo_alpha") is not None:
        r.set("rpo_alpha", "rpo_alpha", r.get("rpo_alpha"))
    if kind == "simpo":
        r.set("cpo_alpha", "cpo_alpha", r.get("cpo_alpha", 1.0, f"{RLHF_SRC} l. 250"))
    if kind in ("grpo", "ppo"):  # max_length is the prompt there (template_args.py l. 28-31)
        done = r.get("max_completion_length", 512, f"{RLHF_SRC} l. 241")
        for key, v in (("max_completion_length", done), ("max_length", seq)):
            if not _whole(v):
                raise r.error(f"{key} must be a whole number ≥ 1, got {v!r}")
        r.set("max_completion_length", "completion_len", done)
        r.set("max_completion_length", "seq_len", seq + done)
    if kind == "grpo":
        _grpo(r)


def _grpo(r: KeyReader) -> None:
    r.set("num_generations", "num_generations", r.get("num_generations", 8, f"{RLHF_SRC} l. 163"))
    mixin = f"{_R} swift/rlhf_trainers/args_mixin.py"
    if r.get("use_vllm", False, f"{mixin} l. 169"):
        mode = r.get("vllm_mode")
        if mode not in ("colocate", "server"):
            raise r.error(f"vllm_mode must be colocate or server with use_vllm (rlhf_args.py l. 446-447), got {mode!r}")
        r.set("vllm_mode", "generation", f"vllm-{mode}")
        if mode == "colocate":
            util = r.get("vllm_gpu_memory_utilization", 0.9, f"{mixin} l. 37")
            r.set("vllm_gpu_memory_utilization", "vllm_gpu_memory_utilization", util)
            if r.get("sleep_level", 0, f"{mixin} l. 188"):
                r.set("sleep_level", "vllm_sleep", True)
    beta = r.get("beta", 0.04, f"{RLHF_SRC} l. 355-356")
    r.set("beta", "reference", "auto" if beta else "none")


def _eval(r: KeyReader) -> None:
    """Evaluation between steps needs an eval set (sft_args.py l. 231-232: eval_strategy 'no' without one;
    data_args.py l. 123-125 _init_val_dataset_exists), then runs at per_device_eval_batch_size (default 1)."""
    ratio = r.get("split_dataset_ratio", 0.0, f"{_R} swift/arguments/base_args/data_args.py l. 79") or 0
    if not isinstance(ratio, int | float) or isinstance(ratio, bool) or not 0 <= ratio <= 1:
        raise r.error(f"split_dataset_ratio must be a number from 0 to 1, got {ratio!r}")
    has_set = any(r.flat.get(k) for k in ("val_dataset", "cached_val_dataset", "eval_dataset")) or ratio > 0
    strategy = str(r.get("eval_strategy", "steps", f"{_R} swift/arguments/sft_args.py l. 167: follows save_strategy "
                                                   "('steps')")).lower().removeprefix("intervalstrategy.")
    on = has_set and strategy != "no"
    batch = r.get("per_device_eval_batch_size", 1, f"{TRAIN_SRC} l. 130") if on else 0
    r.set("eval_strategy", "eval_batch_size", batch)
    if on:
        r.set("per_device_eval_batch_size", "eval_batch_size", batch)
    for k in ("val_dataset", "split_dataset_ratio", "cached_val_dataset", "eval_dataset"):
        if r.flat.get(k):
            r.get(k)
            r.set(k, "eval_batch_size", batch)


def _freeze(r: KeyReader) -> None:
    """freeze_vit / freeze_aligner (default True, tuner_args.py l. 123-124): a vision-language model's tower and
    projector stay frozen, LoRA or full (vramfit's freeze_vision: hf_common.freeze_tower)."""
    hf.freeze_tower(r, "freeze_vit", "freeze_aligner", f"{TUNER_SRC} l. 123", f"{TUNER_SRC} l. 124")


def read(path: Path, data: dict[str, Any]) -> Imported:
    r = KeyReader(path, "swift", data, SOURCE)
    command = r.get("swift") or ("rlhf" if r.has("rlhf_type") else "sft")
    model = r.get("model")
    if not model or not isinstance(model, str):
        raise r.error("model is required (the model id or folder ms-swift trains)")
    r.set("model", "model", model)
    gpus, _ = _gpus(r)
    method = _method(r)
    if method != "full":
        _adapter(r)
    else:
        for pattern in ("lora_*", "target_modules", "use_dora", "use_rslora"):
            r.ignore(pattern, "a LoRA setting: unused with full fine-tuning")
    r.set("torch_dtype", "precision", _precision(r, model))
    seq = _seq_len(r, model)
    _step(r, gpus, command == "rlhf" and str(r.flat.get("rlhf_type", "dpo")).lower() == "grpo")
    _rlhf(r, command, seq)
    _eval(r)
    _logits_to_keep(r, command)
    layout, extra = _layout(r, data, gpus)
    r.out.update(layout)
    r.out["framework"] = "hf"
    _freeze(r)
    for key, off in (("sequence_parallel_size", 1), ("tuner_backend", "peft")):
        if r.flat.get(key) == off:
            r.ignore(key, f"{off}: the default")
    for key, what in NOT_MODELLED.items():
        r.not_modelled(key, what)
    for pattern, reason in IGNORED:
        r.ignore(pattern, reason)
    for k in [k for k in r.flat if k not in r.entries and r.flat[k] in (None, False, "", [], {})]:
        r.entries[k] = Entry("ignored", k, r.flat[k], "unset or off")  # args.json lists every argument
    r.ignore("*", UNKNOWN)
    hf.check_trainer_match(r, extra)
    return r.finish([], WRITE_KEYS, (), extra)
