"""LLaMA-Factory YAML -> scenario keys (framework ``hf``: LLaMA-Factory runs transformers + PEFT)."""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Any

from vramfit.config_import import hf_common as hf
from vramfit.config_import import trainer_layout
from vramfit.config_import.llamafactory_rlhf import read_rlhf
from vramfit.config_import.report import Imported, KeyReader
from vramfit.config_import.stages import llamafactory_stage
from vramfit.safe_input import shown

_R = "hiyouga/LLaMA-Factory@ff6d4d1"
FT_SRC = f"{_R} src/llamafactory/hparams/finetuning_args.py"
DATA_SRC = f"{_R} src/llamafactory/hparams/data_args.py"
MODEL_SRC = f"{_R} src/llamafactory/hparams/model_args.py"
CKPT_SRC = "hiyouga/LLaMA-Factory@06d78ff src/llamafactory/model/model_utils/checkpointing.py prepare_model_for_training"
ARGS_SRC = hf.TRAINING_ARGS_SRC
SOURCE = f"{FT_SRC}; {DATA_SRC}; {MODEL_SRC}"

WRITE_KEYS = {"micro_batch_size": "per_device_train_batch_size", "grad_accum": "gradient_accumulation_steps",
              "seq_len": "cutoff_len", "lora_rank": "lora_rank", "optimizer": "optim",
              "gradient_checkpointing": "disable_gradient_checkpointing", "loss": "enable_liger_kernel",
              "eval_batch_size": "per_device_eval_batch_size"}

#: LLaMA-Factory's own keys with no memory effect; then the TrainingArguments ones (hf_common).
IGNORED = [
    ("template", "data"), ("dataset", "data"), ("dataset_dir", "data"),
    ("overwrite_cache", "data"), ("preprocessing_num_workers", "data"),
    ("max_samples", "data"), ("tokenized_path", "path"), ("mix_strategy", "data"),
    ("plot_loss", "logging"), ("trust_remote_code", "loading"), ("image_*", "multimodal inputs"),
    ("video_*", "multimodal inputs"), ("enable_thinking", "data"), ("pref_beta", "loss weight"),
    ("pref_ftx", "SFT term on the per-token log-probs the loss already holds: no tensor of its own"),
    ("pref_loss", "loss choice of a preference stage"), ("adapter_name_or_path", "path"), ("export_*", "export"),
    ("train_on_prompt", "which tokens carry loss"), ("streaming", "data loading"), ("buffer_size", "data loading"),
    ("infer_backend", "inference"), ("predict_with_generate", "inference"),
    ("loraplus_lr_ratio", "learning-rate ratio: no memory effect"),
    ("ray_*", "launcher"), ("use_dft_loss", "loss weighting: no memory effect"), ("use_eaft_loss", "loss weighting"),
    ("fsdp_transformer_layer_cls_to_wrap", hf.FSDP_CONFIG_IGNORED),
    ("use_asft_loss", "loss weighting"), ("asft_*", "loss weighting"),
    ("gradient_checkpointing", "LLaMA-Factory turns checkpointing on unless disable_gradient_checkpointing"),
    ("media_dir", "data"), ("interleave_probs", "data"), ("neat_packing", "read with packing"),
    *hf.TRAINING_ARGS_IGNORED,
]

#: Keys that change memory in ways vramfit does not model yet: reported, never dropped.
NOT_MODELLED = {
    "use_v1_kernels": "LLaMA-Factory's v1 fused kernels", "use_kt": "KTransformers CPU experts",
    "kt_*": "KTransformers CPU experts", "tensor_model_parallel_size": "Megatron parallelism",
    "pipeline_model_parallel_size": "Megatron parallelism", "expert_model_parallel_size": "Megatron parallelism",
    "sequence_parallel": "Megatron parallelism", "use_distributed_optimizer": "Megatron parallelism",
    "overlap_*": "Megatron parallelism", "bias_activation_fusion": "Megatron kernels", "apply_rope_fusion": "Megatron kernels",
    "moe_*": "Megatron MoE", "recompute_granularity": "Megatron recompute", "context_parallel_size": "context parallelism",
    "use_packed_sequences": "Megatron packing", "mixture_of_depths": "mixture of depths", "pissa_*": "PiSSA",
    "fp8": "FP8 training", "fp8_*": "FP8 training", "freeze_language_model": "multimodal freezing",
    "mixed_precision": "Megatron precision", "moe_aux_loss_coef": "MoE auxiliary loss",
    # hiyouga/LLaMA-Factory src/llamafactory/hparams/model_args.py ModelArguments: fp32 norms, fp32 lm_head outputs
    "upcast_layernorm": "layer norms upcast to fp32", "upcast_lmhead_output": "lm_head output upcast to fp32",
}

_ATTN = {"auto": "sdpa", "sdpa": "sdpa", "fa2": "flash", "disabled": "eager"}


def _method(r: KeyReader) -> str:
    stage = hf.scalar(r, "stage", r.get("stage", "sft", FT_SRC), "pt, sft, rm, ppo, dpo, kto")
    llamafactory_stage(r, stage, FT_SRC)
    ft = r.get("finetuning_type", "lora", FT_SRC)
    if ft not in ("lora", "full"):
        raise r.error(f"finetuning_type '{ft}' is not modelled yet (valid values: lora, full)")
    if hf.checkpoint_quantization(r, "model_name_or_path", ft, "LLaMA-Factory"):
        r.ignore("quantization_bit", "a pre-quantized checkpoint keeps its own quantization (LLaMA-Factory: "
                 "'`quantization_bit` will not affect on the PTQ-quantized models')")
        return "qlora"
    bits = r.get("quantization_bit")
    if bits is not None and ft == "full":
        raise r.error("quantization_bit with finetuning_type: full: a quantized base cannot be fully fine-tuned")
    if bits is None:
        r.set("finetuning_type", "method", ft)
        return ft
    how = r.get("quantization_method", "bnb", MODEL_SRC)
    if how != "bnb" or bits not in (4, 8):
        raise r.error(f"quantization_method '{how}' with {bits} bits is not modelled yet (valid: bnb with 4 or 8 bits)")
    if bits == 8:
        quant = "int8"
    else:
        kind = r.get("quantization_type", "nf4", MODEL_SRC)
        if kind not in ("nf4", "fp4"):
            raise r.error(f"quantization_type: {shown(kind)} is unknown (valid values: nf4, fp4)")
        quant = kind + ("-dq" if hf.boolean(r, "double_quantization", True, MODEL_SRC) else "")
    r.set("quantization_bit", "method", "qlora")
    r.set("quantization_bit", "quantize", quant)
    r.out["quantize"] = quant
    # LLaMA-Factory never calls peft's prepare_model_for_kbit_training (no call under src/ at ff6d4d1): the norms stay in
    # the compute dtype unless upcast_layernorm (model/model_utils/checkpointing.py prepare_model_for_training), and only
    # the trainable parameters are cast to fp32 (model/adapter.py init_adapter, cast_trainable_params_to_fp32)
    r.set("quantization_bit", "kbit_prepare", "no")
    return "qlora"


def _adapter(r: KeyReader) -> None:
    rank = hf.whole(r, "lora_rank", r.get("lora_rank", 8, FT_SRC))  # the default alpha doubles it
    r.set("lora_rank", "lora_rank", rank)
    r.set("lora_alpha", "lora_alpha", r.get("lora_alpha", rank * 2, f"{FT_SRC}: lora_rank * 2"))
    r.set("lora_dropout", "lora_dropout", r.get("lora_dropout", 0.0, FT_SRC))
    target = r.get("lora_target", "all", FT_SRC)
    valid = "all, or module names such as q_proj,v_proj (a comma-separated string or a list)"
    names = [t.strip() for t in target.split(",")] if isinstance(target, str) else hf.names(r, "lora_target", target, valid)
    r.set("lora_target", "lora_targets", ["all-linear"] if names == ["all"] else names)
    hf.dora(r, "use_dora", FT_SRC)  # src/llamafactory/model/adapter.py: LoraConfig(use_dora=...)
    hf.saved_modules(r, "additional_target")  # src/llamafactory/model/adapter.py: LoraConfig(modules_to_save=...)
    # resize_vocab (MODEL_SRC): with no additional_target, src/llamafactory/model/adapter.py _setup_lora_tuning makes
    # the input and output embeddings' module names the additional_target ("Vocab has been resized, add ... to
    # trainable params"): both become trained copies
    resized = r.flat.get("resize_vocab") not in (None, False) and hf.boolean(r, "resize_vocab")
    if resized and r.flat.get("additional_target") is None:
        r.set("resize_vocab", "modules_to_save", ["embed_tokens", "lm_head"])
    for k in ("use_rslora", "pissa_init"):
        if r.flat.get(k) not in (None, False) and hf.boolean(r, k):
            r.get(k)
            r.mark(k, "rsLoRA/PiSSA: counted as plain LoRA")
    r.ignore("use_dora", "off"), r.ignore("use_rslora", "off")


def _lora_keys_under_full(r: KeyReader) -> None:
    """LoraArguments left in a full fine-tune's file: LLaMA-Factory parses them and builds no adapter (FT_SRC
    FinetuningArguments; model/adapter.py init_adapter l. 352-357 sets LoRA up under finetuning_type lora only), and refuses only
    these four switches on under another finetuning_type (FinetuningArguments.__post_init__ l. 624-635)."""
    for key in ("use_dora", "use_rslora", "pissa_init", "loraplus_lr_ratio"):
        if r.flat.get(key) not in (None, False):
            raise r.error(f"{key}: LLaMA-Factory accepts it with finetuning_type lora only (valid values with full: "
                          "false or unset)")
        r.ignore(key, "off")
    for pattern in ("lora_*", "additional_target", "create_new_adapter", "loraplus_lr_embedding", "pissa_*"):
        r.ignore(pattern, "a LoRA setting: LLaMA-Factory ignores it under finetuning_type full")


def _precision(r: KeyReader, method: str) -> str:
    bf16, fp16 = hf.boolean(r, "bf16", False, ARGS_SRC), hf.boolean(r, "fp16", False, ARGS_SRC)
    pure = hf.boolean(r, "pure_bf16", False, FT_SRC)
    if bf16 + fp16 + pure > 1:
        raise r.error("more than one of bf16, fp16 and pure_bf16 is on; choose one")
    if pure:
        return "bf16-true"
    if method == "full":  # trainable weights are cast to fp32 unless pure_bf16 (llamafactory/model/adapter.py)
        return "bf16-mixed" if bf16 else "fp16-mixed" if fp16 else "fp32"
    return "fp16-true" if fp16 else "bf16-true"  # frozen base in the compute dtype (bf16 where supported)


def _step(r: KeyReader) -> None:
    r.set("cutoff_len", "seq_len", r.get("cutoff_len", 2048, DATA_SRC))
    if r.out.get("stage") == "ppo":
        # PPO's prompt is cut to cutoff_len (data/processor/unsupervised.py l. 54-56 infer_seqlen) and its rollout adds
        # up to max_new_tokens (llamafactory_rlhf.py): the sequence the step scores and trains holds both
        seq = hf.whole(r, "cutoff_len", r.out["seq_len"]) + r.out["completion_len"]
        r.set("cutoff_len", "seq_len", seq)
        r.entries["cutoff_len"].becomes = [f"seq_len={seq}"]
        r.entries["cutoff_len"].note = "ppo: the prompt's length; the rollout adds max_new_tokens"
    for k in ("packing", "neat_packing"):
        if r.flat.get(k) not in (None, False) and hf.boolean(r, k):
            r.set(k, "seq_len", r.out["seq_len"])
    r.set("per_device_train_batch_size", "micro_batch_size", r.get("per_device_train_batch_size", 8, ARGS_SRC))
    r.set("gradient_accumulation_steps", "grad_accum", r.get("gradient_accumulation_steps", 1, ARGS_SRC))
    hf.optimizer(r, "optim", r.get("optim", "adamw_torch_fused", ARGS_SRC))
    off = hf.boolean(r, "disable_gradient_checkpointing", False, f"{MODEL_SRC}: checkpointing is on unless disabled")
    r.set("disable_gradient_checkpointing", "gradient_checkpointing", "none" if off else "full")
    if hf.boolean(r, "use_unsloth_gc", False, MODEL_SRC) and not off:
        # CKPT_SRC get_unsloth_gradient_checkpointing_func: each block's input goes to the host
        # (hidden_states.to("cpu", non_blocking=True)) and comes back in its backward for the recompute
        r.set("use_unsloth_gc", "gradient_checkpointing", "offload")
        r.mark("use_unsloth_gc", "counted as checkpoint offload: LLaMA-Factory's UnslothGradientCheckpointing holds dY, "
               "the recomputed output and the input's gradient in a block's backward and prefetches nothing (one "
               "block-input tensor more than transformers' offload, which the estimate runs)")
    attn = r.get("flash_attn", "auto", MODEL_SRC)
    if hf.scalar(r, "flash_attn", attn, list(_ATTN)) not in _ATTN:
        raise r.error(f"flash_attn '{attn}' is unknown (valid values: {', '.join(_ATTN)})")
    r.set("flash_attn", "attention", _ATTN[attn])
    liger = hf.boolean(r, "enable_liger_kernel", False, MODEL_SRC)
    r.set("enable_liger_kernel", "loss", "fused" if liger else "standard")
    r.not_modelled("use_unsloth", "Unsloth kernels: vramfit estimates the plain transformers + PEFT step")
    for k in ("use_galore", "use_apollo", "use_badam", "use_muon", "use_adam_mini"):
        if r.flat.get(k) not in (None, False) and hf.boolean(r, k):
            raise r.error(f"{k}: this optimizer is not modelled yet; turn it off or pass --optimizer")
        r.ignore(k, "off")


def _eval(r: KeyReader) -> None:
    """Evaluation between optimizer steps when eval_strategy is not "no" (the Trainer's), and once after training
    when do_eval (src/llamafactory/train/sft/workflow.py l. 146-147 ``trainer.evaluate()``), at
    per_device_eval_batch_size; either needs val_size > 0 or eval_dataset (hparams/parser.py l. 480-483, do_eval
    being set by any other strategy: transformers 5.24.0 training_args.py l. 1571-1572)."""
    has_set = hf.nonnegative(r, "val_size", 0.0, DATA_SRC) > 1e-6 or bool(r.get("eval_dataset"))
    batch = hf.trainer_eval(r, after="do_eval")
    if batch and not has_set:
        raise r.error("eval_strategy/do_eval needs val_size > 0 or eval_dataset (LLaMA-Factory refuses it otherwise)")
    for k in ("val_size", "eval_dataset"):
        if batch and r.flat.get(k):
            r.set(k, "eval_batch_size", batch)


def _reentrant(r: KeyReader) -> None:
    """``use_reentrant_gc`` -> ``use_reentrant``: LLaMA-Factory enables checkpointing itself and always passes the kwarg,
    ``gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": model_args.use_reentrant_gc})``
    (default True, hparams/model_args.py), and sets it False under FSDP2 (``FSDP_VERSION`` 2) before that call
    (:data:`CKPT_SRC`). So an unset key is ``yes``, not the transformers release's default (estimate/reentrant_fsdp1.py:
    it matters where transformers <= 4.51 wraps FSDP1 block units in the checkpoint). Read with checkpointing off too:
    the scenario keeps the file's setting, which a change that turns checkpointing on then uses."""
    value = hf.boolean(r, "use_reentrant_gc", True, f"{MODEL_SRC}; {CKPT_SRC}")
    r.reentrant_off_under_fsdp2 = True  # an accelerate config read after this file may select FSDP2 (companions.py)
    r.set("use_reentrant_gc", "use_reentrant", "yes" if value and not hf.is_fsdp2(r.out) else "no")


def _image_cap(r: KeyReader) -> None:
    """LLaMA-Factory scales every image down to at most ``image_max_pixels`` (default 768 * 768, model_args.py
    ProcessorArguments) before the model's processor sees it (data/mm_plugin.py ``_preprocess_image``): the scenario's
    image_height x image_width is the image as the processor gets it, so the cap is said, with the size to give."""
    cap = r.flat.get("image_max_pixels", 768 * 768)
    if "image_max_pixels" not in r.flat and hf.known_text_only(r):
        return
    if isinstance(cap, (int, float)) and not isinstance(cap, bool) and 0 < cap < float("inf"):
        side = int(cap ** 0.5)
        r.get("image_max_pixels", 768 * 768, f"{MODEL_SRC} ProcessorArguments")
        r.mark("image_max_pixels", f"each image is scaled to at most {int(cap):,} pixels before the processor: give "
                                   f"image_height and image_width at that size (a square image: {side} x {side})")


def read(path: Path, data: dict[str, Any]) -> Imported:
    r = KeyReader(path, "llamafactory", data, SOURCE)
    r.set("model_name_or_path", "model", r.required("model_name_or_path"))
    method = _method(r)
    if method != "full":
        _adapter(r)
    else:
        _lora_keys_under_full(r)
    read_rlhf(r, str(r.out.get("stage", "sft")), method)
    r.ignore("resize_vocab", "off" if not r.flat.get("resize_vocab") else "full fine-tuning trains the resized embedding "
             "and head as they are (the added rows are not counted)")
    r.set("bf16", "precision", _precision(r, method))
    _step(r)
    _eval(r)
    # finetuning_args.py FinetuningArguments freeze_vision_tower / freeze_multi_modal_projector (default True): a
    # vision-language model's tower (and projector) stay frozen, and find_all_linear_modules(model, freeze_vision_tower)
    # leaves the tower out of lora_target all (model/model_utils/misc.py l. 28-40, visual.py l. 178)
    # under LoRA find_all_linear_modules leaves the projector out whatever freeze_multi_modal_projector says (misc.py
    # l. 37-38); only freeze and full tuning unfreeze it (adapter.py l. 125, visual.py l. 173-190)
    hf.freeze_tower(r, "freeze_vision_tower", "freeze_multi_modal_projector", f"{FT_SRC} FinetuningArguments",
                    f"{FT_SRC} FinetuningArguments",
                    "" if method == "full" else "unused with adapters: lora_target all leaves the projector out")
    _image_cap(r)
    for pattern, what in NOT_MODELLED.items():
        for k in [k for k in r.flat if fnmatch.fnmatchcase(k.split(".")[0], pattern)]:
            r.not_modelled(k, what)
    layout, extra, companions = trainer_layout.trainer_parallelism(r)
    r.out.update(layout)
    if layout:
        hf.launcher_gpus(r)
    _reentrant(r)
    r.out["framework"] = "hf"
    hf.check_trainer_match(r, extra)
    ppo = r.out.get("stage") == "ppo"  # seq_len is cutoff_len + max_new_tokens there (_step): not one file key
    return r.finish(IGNORED, {k: v for k, v in WRITE_KEYS.items() if not (ppo and k == "seq_len")}, companions, extra)
