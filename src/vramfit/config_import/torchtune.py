"""torchtune recipe YAML -> scenario keys (framework ``torchtune``). ``_component_`` builders name the
model, its LoRA layers, the optimizer and the loss."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from vramfit.config_import import hf_common as hf
from vramfit.config_import.report import Imported, KeyReader

_R = "pytorch/torchtune@bd2a0fc"
SOURCE = f"{_R} recipes/lora_finetune_single_device.py, recipes/full_finetune_single_device.py"

#: torchtune model builder (after the lora_/qlora_ prefix) -> Hugging Face id in vramfit's catalog.
BUILDERS: dict[str, str] = {
    "llama2_7b": "meta-llama/Llama-2-7b-hf", "llama2_13b": "meta-llama/Llama-2-13b-hf",
    "llama2_70b": "meta-llama/Llama-2-70b-hf", "llama3_8b": "meta-llama/Meta-Llama-3-8B",
    "llama3_70b": "meta-llama/Meta-Llama-3-70B", "llama3_1_8b": "meta-llama/Llama-3.1-8B",
    "llama3_1_70b": "meta-llama/Llama-3.1-70B", "llama3_1_405b": "meta-llama/Llama-3.1-405B",
    "llama3_2_1b": "meta-llama/Llama-3.2-1B", "llama3_2_3b": "meta-llama/Llama-3.2-3B",
    "mistral_7b": "mistralai/Mistral-7B-v0.1", "gemma_2b": "google/gemma-2b", "gemma_7b": "google/gemma-7b",
    "gemma2_2b": "google/gemma-2-2b", "gemma2_9b": "google/gemma-2-9b", "gemma2_27b": "google/gemma-2-27b",
    "phi3_mini": "microsoft/Phi-3-mini-4k-instruct", "phi4_14b": "microsoft/phi-4",
    **{f"qwen2_5_{s}": f"Qwen/Qwen2.5-{s.replace('_', '.').upper()}" for s in
       ("0_5b", "1_5b", "3b", "7b", "14b", "32b", "72b")},
    "llama3_3_70b": "meta-llama/Llama-3.3-70B-Instruct",
    **{f"qwen2_{s}": f"Qwen/Qwen2-{s.replace('_', '.').upper()}" for s in ("0_5b", "1_5b", "7b")},
    **{f"qwen3_{s}": f"Qwen/Qwen3-{s.replace('_', '.').upper()}" for s in ("0_6b", "1_7b", "4b", "8b", "14b", "32b")},
}

#: torchtune attention/MLP projection names -> Hugging Face names (torchtune/modules/attention.py, feed_forward.py).
LORA_ATTN = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj", "output_proj": "o_proj"}
OPTIMIZERS = {"torch.optim.AdamW": "adamw", "torch.optim.Adam": "adamw", "bitsandbytes.optim.AdamW8bit": "adamw-8bit",
              "bitsandbytes.optim.PagedAdamW8bit": "paged-adamw-8bit", "bitsandbytes.optim.PagedAdamW": "paged-adamw",
              "torchao.optim.AdamW8bit": "adamw-8bit-torchao", "torchao.optim.AdamW4bit": "adamw-4bit",
              "torchao.prototype.low_bit_optim.AdamW8bit": "adamw-8bit-torchao",
              "torchao.prototype.low_bit_optim.AdamW4bit": "adamw-4bit",
              "torch.optim.SGD": "sgd", "bitsandbytes.optim.Lion8bit": "lion-8bit"}
#: CEWithChunkedOutputLoss chunks the logits' upcast (v0.4.0 torchtune/modules/loss/ce_chunked_output_loss.py).
#: LinearCrossEntropyLoss (after v0.6.1: #2531, 2025-04-30; torchtune@bd2a0fc7c torchtune/modules/loss/
#: cross_entropy_loss.py) calls the output projection per token chunk inside compute_cross_entropy, then
#: ``F.cross_entropy(logits.float(), ...)`` with no backward of its own, so autograd keeps every chunk's logits (the
#: compiled chunk's 16-bit logits and logsumexp, eager log_softmax's fp32 output) until the loss's backward: the
#: chunked loss's saved tensors, not a fused kernel's (Liger computes the logit gradients in its forward and keeps none)
LOSSES = {"torchtune.modules.loss.CEWithChunkedOutputLoss": "chunked",
          "torchtune.modules.loss.LinearCrossEntropyLoss": "chunked", "torch.nn.CrossEntropyLoss": "standard"}
#: the component each loss is written back as (config_import/writeback.py): the one torchtune 0.4, the profile's
#: release, builds
LOSS_COMPONENTS = {"chunked": "torchtune.modules.loss.CEWithChunkedOutputLoss", "standard": "torch.nn.CrossEntropyLoss"}
LINEAR_CE_NOTE = ("LinearCrossEntropyLoss keeps each token chunk's logits for backward, as CEWithChunkedOutputLoss "
                  "does: read as the chunked loss; it masks ignored tokens before the projection, which seq_len does "
                  "not count")

WRITE_KEYS = {"micro_batch_size": "batch_size", "grad_accum": "gradient_accumulation_steps",
              "seq_len": "tokenizer.max_seq_len", "lora_rank": "model.lora_rank",
              "gradient_checkpointing": "enable_activation_checkpointing", "optimizer": "optimizer._component_",
              "loss": "loss._component_",
              "eval_batch_size": "batch_size_val"}

IGNORED = [("output_dir", "path"), ("tokenizer._component_", "tokenizer"), ("tokenizer.path", "path"),
           ("tokenizer.*", "tokenizer"), ("checkpointer.*", "checkpoint loading/saving"), ("resume_from_checkpoint", "path"),
           ("save_adapter_weights_only", "checkpoint saving"), ("dataset.*", "data"), ("seed", "randomness"),
           ("shuffle", "data order"), ("lr_scheduler.*", "schedule"), ("epochs", "schedule"),
           ("max_steps_per_epoch", "schedule"), ("clip_grad_norm", "no memory effect"), ("device", "always cuda here"),
           ("metric_logger.*", "logging"), ("log_*", "logging"), ("profiler.*", "profiling"), ("optimizer.*",
           "optimizer hyperparameters"), ("collate_fn", "data"), ("cudnn_deterministic_mode", "determinism"),
           ("fsdp_cpu_offload", "read with the FSDP keys"), ("custom_sharded_layers", "FSDP wrapping detail"),
           ("run_val_every_n_steps", "evaluation"), ("dataset_val.*", "evaluation"), ("batch_size_val", "evaluation"),
           ("low_cpu_ram", "loading"), ("name", "label"), ("memory_efficient_fsdp_wrap", "FSDP wrapping detail"),
           ("enable_async_checkpointing", "checkpoint saving"), ("save_every_n_steps", "checkpoint saving"),
           ("keep_last_n_checkpoints", "checkpoint saving")]

#: Keys that change memory in ways vramfit does not model yet: reported, never dropped.
NOT_MODELLED = {"quantizer": "quantization-aware training / quantization", "teacher_model": "knowledge distillation "
                "(a second, frozen model)", "teacher_checkpointer": "knowledge distillation", "kd_loss": "knowledge distillation",
                "kd_ratio": "knowledge distillation", "tensor_parallel_plan": "tensor parallelism",
                "ac_mode": "every-k-layers activation checkpointing", "ac_option": "every-k-layers activation checkpointing",
                "fsdp": "FSDP options given as a mapping"}


def _model(r: KeyReader) -> tuple[str, str]:
    comp = r.get("model._component_")
    if not comp:
        raise r.error("model._component_ is required (a torchtune model builder)")
    name = str(comp).rsplit(".", 1)[-1]
    m = re.fullmatch(r"(lora_|qlora_)?(.+?)(_instruct|_base)?", name)
    prefix, base = m.group(1) or "", m.group(2)
    if base in BUILDERS:
        r.set("model._component_", "model", BUILDERS[base])
    else:
        r.mark("model._component_", f"builder {base}: no Hugging Face id in vramfit's table; pass --model")
    quant = prefix == "qlora_" or hf.switch_value(r, "model.quantize_base", r.get("model.quantize_base"))
    method = "qlora" if quant else "lora" if prefix else "full"
    r.set("model._component_", "method", method)
    if quant:  # torchtune's NF4 base: torchao NF4Tensor with quantized block scales (torchtune/modules/peft/lora.py)
        r.set("model._component_", "quantize", "nf4-dq")
        r.out["quantize"] = "nf4-dq"
    return method, base


def _adapter(r: KeyReader) -> None:
    attn = r.get("model.lora_attn_modules")
    if not attn:
        raise r.error("model.lora_attn_modules is required for a LoRA builder")
    attn = hf.names(r, "model.lora_attn_modules", attn, f"a list of {', '.join(LORA_ATTN)}")
    bad = [a for a in attn if a not in LORA_ATTN]
    if bad:
        raise r.error(f"model.lora_attn_modules: unknown {bad[0]!r} (valid values: {', '.join(LORA_ATTN)})")
    targets = [LORA_ATTN[a] for a in attn]
    if hf.boolean(r, "model.apply_lora_to_mlp", False, "torchtune model builders (lora_llama3_1_8b etc.)"):
        targets += ["gate_proj", "up_proj", "down_proj"]
    if hf.boolean(r, "model.apply_lora_to_output", False, "torchtune model builders (lora_llama3_1_8b etc.)"):
        targets.append("lm_head")
    r.set("model.lora_attn_modules", "lora_targets", targets)
    r.set("model.lora_rank", "lora_rank", r.get("model.lora_rank"))
    r.set("model.lora_alpha", "lora_alpha", r.get("model.lora_alpha"))
    r.set("model.lora_dropout", "lora_dropout", r.get("model.lora_dropout", 0.0, "torchtune model builders"))
    if r.has("model.use_dora") and hf.boolean(r, "model.use_dora"):  # v0.4.0 modules/peft/dora.py DoRALinear
        r.set("model.use_dora", "dora", True)
    r.ignore("model.quantize_base", "read with the builder")


def _step(r: KeyReader) -> None:
    for key, skey in (("batch_size", "micro_batch_size"), ("gradient_accumulation_steps", "grad_accum")):
        v = r.get(key)
        if v is None:
            raise r.error(f"{key} is required by the torchtune fine-tuning recipes (an evaluation or generation config?)")
        r.set(key, skey, v)
    if r.flat.get("dataset.packed") and r.flat.get("tokenizer.max_seq_len") is None:
        raise r.error("dataset.packed: true needs tokenizer.max_seq_len")
    seq = r.get("tokenizer.max_seq_len", 2048, "vramfit's default: unset, torchtune pads each batch to its longest sample")
    r.set("tokenizer.max_seq_len", "seq_len", seq)
    dtype = r.get("dtype")
    if dtype is None:
        raise r.error("dtype is required by the torchtune recipes (bf16 or fp32)")
    if dtype not in ("bf16", "fp32"):
        raise r.error(f"dtype '{dtype}' is not supported by torchtune (valid values: bf16, fp32)")
    r.set("dtype", "precision", "bf16-true" if dtype == "bf16" else "fp32")
    ac = hf.boolean(r, "enable_activation_checkpointing", False, SOURCE)
    off = hf.boolean(r, "enable_activation_offloading", False, SOURCE)
    r.set("enable_activation_offloading" if off else "enable_activation_checkpointing", "gradient_checkpointing",
          "offload" if off else "full" if ac else "none")
    r.set("compile", "compile", hf.boolean(r, "compile", False, SOURCE))
    if r.out.get("method") == "full":  # v0.4.0 full_finetune_*.py and ppo_*.py read it; the LoRA recipes never do
        r.set("optimizer_in_bwd", "optimizer_in_backward", hf.boolean(r, "optimizer_in_bwd", False, SOURCE))
    else:
        r.ignore("optimizer_in_bwd", "torchtune v0.4.0's LoRA and QLoRA recipes do not read it (full recipes only)")
    opt = r.get("optimizer._component_", "torch.optim.AdamW", SOURCE)
    if hf.scalar(r, "optimizer._component_", opt, list(OPTIMIZERS)) not in OPTIMIZERS:
        raise r.error(f"optimizer '{opt}' is not modelled yet (valid values: {', '.join(OPTIMIZERS)})")
    name = "sgd-momentum" if OPTIMIZERS[opt] == "sgd" and r.flat.get("optimizer.momentum") else OPTIMIZERS[opt]
    r.set("optimizer._component_", "optimizer", name)
    torch_only = [k for k in ("optimizer.fused", "optimizer.foreach") if r.has(k)]
    if not opt.startswith("torch.") and torch_only:  # instantiate passes it on: their constructors take none
        raise r.error(f"{torch_only[0]}: {opt} takes no {torch_only[0].split('.')[1]} argument (torch.optim's own; "
                      "torchtune's instantiate would raise TypeError); remove it")
    if opt in ("torch.optim.AdamW", "torch.optim.Adam"):  # torch picks foreach on CUDA unless fused=True is passed
        fused = hf.boolean(r, "optimizer.fused", False, "torch v2.13.0 torch/optim/optimizer.py _default_to_fused_or_foreach")
        foreach = hf.boolean(r, "optimizer.foreach") if r.has("optimizer.foreach") else None
        if fused and foreach:  # torch v2.13.0 torch/optim/adam.py l. 113
            raise r.error("optimizer.fused and optimizer.foreach are both True; torch.optim refuses them together "
                          "(RuntimeError): keep one")
        loop = not fused and foreach is False
        r.set("optimizer.fused", "optimizer_impl", "foreach" if not (fused or loop) else "fused")
        if loop:  # _single_tensor_adamw: one parameter's temporaries at a time, none the model's size (as fused)
            r.set("optimizer.foreach", "optimizer_impl", "fused")
    loss = r.get("loss._component_", "torch.nn.CrossEntropyLoss", SOURCE)
    if hf.scalar(r, "loss._component_", loss, list(LOSSES)) not in LOSSES:
        raise r.error(f"loss '{loss}' is not modelled yet (valid values: {', '.join(LOSSES)})")
    r.set("loss._component_", "loss", LOSSES[loss])
    if loss == "torchtune.modules.loss.LinearCrossEntropyLoss":
        r.entries["loss._component_"].note = LINEAR_CE_NOTE
    r.ignore("loss.*", "loss options")


#: Keys only the distributed recipes read (lora_finetune_distributed.py, full_finetune_distributed.py at
#: pytorch/torchtune@bd2a0fc: FSDP options, custom_sharded_layers, the validation set below); no single-device config
#: under recipes/configs has one, each of the 69 distributed ones has dataset_val: the file is a distributed run.
DISTRIBUTED_KEYS = ("fsdp_cpu_offload", "fsdp_reshard_after_forward", "custom_sharded_layers", "run_val_every_n_steps",
                    "dataset_val", "batch_size_val")


#: The distributed recipes validate every run_val_every_n_steps on dataset_val at batch_size_val (default batch_size)
#: under torch.no_grad(): recipes/lora_finetune_distributed.py l. 223-227, 394-398, 866-867, 906-915 and
#: full_finetune_distributed.py l. 215-219, 453-457, 873-891, 1133-1134; the single-device recipes have no validation.
VAL_SRC = f"{_R} recipes/lora_finetune_distributed.py l. 395: batch_size_val defaults to batch_size"


def _eval(r: KeyReader) -> None:
    if r.get("run_val_every_n_steps") is None or not r.has("dataset_val"):
        r.out["eval_batch_size"] = 0
        return
    batch = r.get("batch_size_val", r.out["micro_batch_size"], VAL_SRC)
    r.eval_follows_micro = not r.has("batch_size_val")
    r.set("run_val_every_n_steps", "eval_batch_size", batch)
    r.set("batch_size_val", "eval_batch_size", batch)
    r.entries["run_val_every_n_steps"].note = "read by the distributed recipes (the single-device ones never validate)"


def read(path: Path, data: dict[str, Any]) -> Imported:
    r = KeyReader(path, "torchtune", data, SOURCE)
    method, _ = _model(r)
    if method != "full":
        _adapter(r)
    _step(r)
    _eval(r)
    marker = next((k for k in DISTRIBUTED_KEYS if r.has(k)), None)
    if marker is not None:
        off = hf.boolean(r, "fsdp_cpu_offload", False, SOURCE)
        grad_op = r.get("fsdp_reshard_after_forward", True, SOURCE) is False
        shown_by = "fsdp_cpu_offload" if r.has("fsdp_cpu_offload") else marker
        if shown_by in r.flat:
            r.get(shown_by)  # a leaf: read here, so its line says what it made
        r.set(shown_by, "parallelism", "fsdp-grad-op" if grad_op else "fsdp")
        r.set(shown_by, "offload", "optimizer+params" if off else "none")
        if shown_by in r.entries and shown_by != "fsdp_cpu_offload":
            r.entries[shown_by].note = "a key only the distributed recipes read: the run shards with FSDP"
        r.out.update(parallelism="fsdp-grad-op" if grad_op else "fsdp", offload="optimizer+params" if off else "none")
        from vramfit.config_import.hf_common import launcher_gpus

        launcher_gpus(r)
    for key, what in NOT_MODELLED.items():
        r.not_modelled(key, what)
    for k in ("tensor_parallel_dim", "data_parallel_shard_dim", "data_parallel_replicate_dim", "context_parallel_dim"):
        r.not_modelled(k, "tensor/context/hybrid parallel layouts")
    r.out["framework"] = "torchtune"
    return r.finish(IGNORED, WRITE_KEYS)
