"""litgpt ``finetune`` / ``finetune_lora`` / ``finetune_full`` YAML -> scenario keys (framework ``litgpt``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vramfit.config_import import hf_common as hf
from vramfit.config_import.report import Imported, KeyReader
from vramfit.estimate.framework import profile_for
from vramfit.safe_input import shown
from vramfit.scenario import Framework

_R = "Lightning-AI/litgpt@2685705"
LORA_SRC = f"{_R} litgpt/finetune/lora.py (setup defaults)"
FULL_SRC = f"{_R} litgpt/finetune/full.py (setup defaults)"

QUANTIZE = {"bnb.nf4": "nf4", "bnb.nf4-dq": "nf4-dq", "bnb.fp4": "fp4", "bnb.fp4-dq": "fp4-dq", "bnb.int8-training": "int8"}
PRECISION = {"bf16-true": "bf16-true", "bf16-mixed": "bf16-mixed", "16-mixed": "fp16-mixed", "16-true": "fp16-true",
             "32-true": "fp32"}
OPTIMIZERS = {"adamw": "adamw", "torch.optim.adamw": "adamw", "adam": "adamw", "torch.optim.adam": "adamw",
              "sgd": "sgd", "torch.optim.sgd": "sgd", "bitsandbytes.optim.pagedadamw": "paged-adamw",
              "bitsandbytes.optim.pagedadamw8bit": "paged-adamw-8bit", "bitsandbytes.optim.adamw8bit": "adamw-8bit"}
#: litgpt's LoRA switches -> Hugging Face module names (litgpt/lora.py: qkv, proj, mlp fc_1/fc_2/proj, lm_head).
SWITCHES = {"lora_query": ["q_proj"], "lora_key": ["k_proj"], "lora_value": ["v_proj"], "lora_projection": ["o_proj"],
            "lora_mlp": ["gate_proj", "up_proj", "down_proj"], "lora_head": ["lm_head"]}
SWITCH_DEFAULTS = {"lora_query": True, "lora_key": False, "lora_value": True, "lora_projection": False,
                   "lora_mlp": False, "lora_head": False}

WRITE_KEYS = {"micro_batch_size": "train.micro_batch_size", "grad_accum": "train.global_batch_size",
              "seq_len": "train.max_seq_length", "lora_rank": "lora_r", "num_gpus": "devices"}

IGNORED = [("out_dir", "path"), ("data.*", "data"), ("train.save_interval", "checkpoint saving"),
           ("train.log_interval", "logging"), ("train.lr_warmup_*", "schedule"), ("train.epochs", "schedule"),
           ("train.max_tokens", "schedule"), ("train.max_steps", "schedule"), ("train.tie_embeddings", "model detail"),
           ("train.max_norm", "no memory effect"), ("train.min_lr", "schedule"), ("eval.*", "evaluation cadence: validation runs at train.micro_batch_size"),
           ("optimizer.init_args.*", "optimizer hyperparameters"), ("logger_name", "logging"), ("seed", "randomness"),
           ("access_token", "download"), ("num_nodes", "read with devices"), ("resume", "checkpoint resume"),
           ("log.*", "logging")]


def _adapter(r: KeyReader, src: str) -> None:
    r.set("lora_r", "lora_rank", r.get("lora_r", 8, src))
    r.set("lora_alpha", "lora_alpha", r.get("lora_alpha", 16, src))
    r.set("lora_dropout", "lora_dropout", r.get("lora_dropout", 0.05, src))
    targets = [m for k, mods in SWITCHES.items() if r.get(k, SWITCH_DEFAULTS[k], src) for m in mods]
    if not targets:
        raise r.error("every lora_* switch is off: LoRA would train nothing")
    r.out["lora_targets"] = targets
    for k, mods in SWITCHES.items():
        if r.entries[k].value:
            r.entries[k].becomes = [f"lora_targets+={','.join(mods)}"]


def _devices(r: KeyReader, src: str, quant: bool) -> int:
    devices = r.get("devices", 1, src)
    if hf.whole(r, "num_nodes", r.get("num_nodes", 1, src)) > 1:
        raise r.error("num_nodes > 1: multi-node layouts are not modelled yet")
    if isinstance(devices, str) and devices.isascii() and devices.isdigit() and len(devices) < 20:  # int | str
        devices = int(devices)
    if isinstance(devices, str):
        raise r.error(f"devices: {shown(devices)} is not a number of GPUs (vramfit cannot know what 'auto' finds; "
                      "valid values: 1 or more)")
    devices = hf.whole(r, "devices", devices)
    if quant and devices > 1:
        raise r.error("quantize with devices > 1: litgpt refuses it (quantization is single-GPU only)")
    r.set("devices", "num_gpus", devices)
    # more than one device: FSDP full shard with activation checkpointing of every Block
    # (lora.py parallelize_fn: checkpoint_wrapper + fully_shard; full.py FSDPStrategy activation_checkpointing_policy;
    # the profile's checkpointing_by_devices)
    ckpt = profile_for(Framework.LITGPT).scripts_checkpointing(devices).value
    r.set("devices", "parallelism", "fsdp" if devices > 1 else "none")
    r.set("devices", "gradient_checkpointing", ckpt)
    r.out.update(parallelism="fsdp" if devices > 1 else "none")
    # left unset, so the scenario derives it from the GPU count as the scripts do: a change of count follows it
    r.out.pop("gradient_checkpointing")
    return devices


def read(path: Path, data: dict[str, Any]) -> Imported:
    lora = any(k.startswith("lora_") for k in data) or "quantize" in data  # only finetune_lora takes quantize
    src = LORA_SRC if lora else FULL_SRC
    r = KeyReader(path, "litgpt", data, src)
    ckpt = r.required("checkpoint_dir")
    parts = Path(str(ckpt)).parts
    r.set("checkpoint_dir", "model", "/".join(parts[-2:]) if len(parts) >= 2 else str(ckpt))
    quant = hf.scalar(r, "quantize", r.get("quantize"), list(QUANTIZE))
    if quant is not None and quant not in QUANTIZE:
        raise r.error(f"quantize '{quant}' is unknown (valid values: {', '.join(QUANTIZE)})")
    if quant and not lora:
        raise r.error("quantize without LoRA: a quantized base cannot be fully fine-tuned")
    method = "qlora" if quant else "lora" if lora else "full"
    r.set("quantize" if quant else "checkpoint_dir", "method", method)
    if quant:
        r.set("quantize", "quantize", QUANTIZE[quant])
        r.out["quantize"] = QUANTIZE[quant]
    # lora.py l. 131 / full.py l. 97 `precision = precision or get_default_supported_precision(training=True)`, which
    # returns "bf16-mixed" on bf16 cards when training (litgpt/utils.py l. 363-380)
    given = "precision" in data
    prec = r.get("precision", "bf16-mixed", f"{src}: get_default_supported_precision(training=True) on bf16 cards")
    if hf.scalar(r, "precision", prec, list(PRECISION)) not in PRECISION:
        raise r.error(f"precision '{prec}' is unknown (valid values: {', '.join(PRECISION)})")
    if quant and "mixed" in prec:
        raise r.error("quantize with a -mixed precision" + ("" if given else " (litgpt's default bf16-mixed: the file sets "
                      "no precision)") + ": litgpt refuses it ('Quantization and mixed precision is not supported', "
                      "finetune/lora.py l. 142-143 at 2685705); set precision: bf16-true")
    r.set("precision", "precision", PRECISION[prec])
    if lora:
        _adapter(r, src)
    devices = _devices(r, src, bool(quant))
    mb = hf.whole(r, "train.micro_batch_size", r.get("train.micro_batch_size", 1, src))
    gbs = hf.whole(r, "train.global_batch_size", r.get("train.global_batch_size", 16, src))
    # litgpt/args.py TrainArgs.batch_size and gradient_accumulation_iters (Lightning-AI/litgpt@02f2fca): floor
    # divisions, global_batch_size // devices // micro_batch_size, each asserted > 0
    accum = gbs // devices // mb
    if accum < 1:
        raise r.error(f"train.global_batch_size {gbs} leaves no micro-batch of {mb} on each of {devices} device(s) "
                      f"(litgpt asserts global_batch_size // devices // micro_batch_size > 0)")
    r.set("train.micro_batch_size", "micro_batch_size", mb)
    # validate() runs under torch.no_grad() on the val loader built at train.micro_batch_size (lora.py l. 443-456,
    # 504; full.py l. 362-375, 425): a sanity check before training, every eval.interval steps, and at the end
    # (EvalArgs.final_validation True, litgpt/args.py l. 89), unchunked (chunk_size=0)
    r.set("train.micro_batch_size", "eval_batch_size", mb)
    r.eval_follows_micro = True
    if r.get("eval.final_validation") is False:  # then only eval.interval passes follow an optimizer step
        r.entries["eval.final_validation"].note = ("assumed: training reaches eval.interval, so a validation "
                                                   "follows an optimizer step (else only the check before training runs)")
    r.set("train.global_batch_size", "grad_accum", accum)
    if accum * mb * devices != gbs:
        r.entries["train.global_batch_size"].note = (f"litgpt floors it: {gbs} // {devices} device(s) // {mb} = {accum} "
                                                     f"micro-batch(es) per step, {accum * mb * devices} samples")
    seq = r.get("train.max_seq_length", 2048, "vramfit's default: unset, litgpt trains to the longest sample")
    r.set("train.max_seq_length", "seq_len", seq)
    opt = r.get("optimizer.class_path") or r.get("optimizer", "AdamW", src)
    if str(opt).lower() not in OPTIMIZERS:
        raise r.error(f"optimizer '{opt}' is not modelled yet (valid values: AdamW, SGD, bitsandbytes AdamW variants)")
    r.set("optimizer.class_path" if r.has("optimizer.class_path") else "optimizer", "optimizer", OPTIMIZERS[str(opt).lower()])
    r.out["framework"] = "litgpt"
    return r.finish(IGNORED, WRITE_KEYS)
