"""ms-swift's keys that :mod:`.swift` does not turn into scenario keys: the ones without a memory effect, the ones
that have one vramfit does not model yet, and its DeepSpeed/FSDP presets (modelscope/ms-swift v4.5.2 swift/config/)."""

from __future__ import annotations

from vramfit.config_import import hf_common as hf

#: swift/config/{name}.json at v4.5.2, their ``zero_optimization`` (the rest, fp16/bf16 "auto" and the batch keys,
#: follow the training arguments: sft_args.py _init_deepspeed l. 259-269 maps the name to the file)
_STAGE2 = {"allgather_partitions": True, "allgather_bucket_size": 2e8, "overlap_comm": False, "reduce_scatter": True,
           "reduce_bucket_size": 2e8, "contiguous_gradients": True}
_STAGE3 = {"overlap_comm": False, "contiguous_gradients": True, "sub_group_size": 1e9, "reduce_bucket_size": "auto",
           "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto",
           "stage3_max_live_parameters": 1e9, "stage3_max_reuse_distance": 1e9}
_NONE, _CPU = {"device": "none", "pin_memory": True}, {"device": "cpu", "pin_memory": True}
DS_PRESETS: dict[str, dict] = {
    "zero0": {"stage": 0, **_STAGE2},
    "zero1": {"stage": 1, "offload_optimizer": _NONE, **_STAGE2},
    "zero2": {"stage": 2, "offload_optimizer": _NONE, **_STAGE2},
    "zero2_offload": {"stage": 2, "offload_optimizer": _CPU, **_STAGE2},
    "zero3": {"stage": 3, "offload_optimizer": _NONE, "offload_param": _NONE, **_STAGE3},
    "zero3_offload": {"stage": 3, "offload_optimizer": _CPU, "offload_param": _CPU, **_STAGE3},
}
#: swift/config/fsdp2.json at v4.5.2: its "fsdp" words and the fsdp_config keys that decide the layout
FSDP_PRESETS: dict[str, tuple[str, dict]] = {
    "fsdp2": ("full_shard auto_wrap", {"fsdp_version": 2, "reshard_after_forward": True,
                                        "activation_checkpointing": True}),
}

#: Keys ms-swift reads that change memory in ways vramfit does not model yet (off values are reported as ignored).
NOT_MODELLED = {
    "sequence_parallel_size": "Ulysses/ring sequence parallelism", "deepspeed_autotp_size": "DeepSpeed AutoTP",
    "zero_hpz_partition_size": "ZeRO++ hierarchical partitioning", "tuner_backend": "the tuner library (peft assumed)",
"lora_dtype": "LoRA weights' dtype (PEFT's kept)",
    "freeze_llm": "a frozen language model (multimodal)", "freeze_parameters": "frozen parameter lists",
    "freeze_parameters_ratio": "frozen parameter share", "trainable_parameters": "trainable parameter lists",
    "max_pixels": "image size (multimodal)", "vit_gradient_checkpointing": "the vision tower's checkpointing",
    "experts_impl": "the MoE expert kernels", "ENV.PYTORCH_CUDA_ALLOC_CONF": "allocator settings (expandable "
    "segments change the reserved figure)", "ref_model": "a separate reference model", "reward_model": "reward models "
    "held in memory", "teacher_model": "a teacher model (GKD)",
    "use_galore": "GaLore", "lisa_activated_layers": "LISA", "neftune_noise_alpha": "NEFTune noise",
    "async_generate": "asynchronous generation", "vllm_tensor_parallel_size": "vLLM tensor parallelism",
    "offload_model": "model offload during generation", "offload_optimizer": "optimizer offload during generation",
    "move_model_batches": "weight sync batches", "vllm_max_model_len": "vLLM's KV cache size",
}

#: What a key left unread at the end is reported as (ms-swift itself refuses unknown arguments: HfArgumentParser).
UNKNOWN = ("not read by vramfit: no memory effect it models in ms-swift v4.5.2's arguments (if it is a typo, "
           "ms-swift refuses it)")

#: ms-swift's own keys with no memory effect; then the TrainingArguments ones (hf_common).
IGNORED = [
    ("swift", "the subcommand"), ("ENV.*", "launcher environment"), ("dataset", "data"), ("dataset_*", "data"),
    ("cached_dataset", "data"), ("system", "data"), ("model_author", "data"), ("model_name", "data"),
    ("template", "data"), ("template_*", "data"), ("truncation_strategy", "data"), ("loss_scale", "loss weights"),
    ("agent_template", "data"), ("columns", "data"), ("strict", "data"), ("streaming", "data loading"),
    ("lazy_tokenize", "data loading"), ("load_from_cache_file", "data loading"), ("shuffle_buffer_size", "data"),
    ("interleave_prob", "data"), ("stopping_strategy", "data"), ("download_mode", "download"), ("use_hf", "download"),
    ("model_type", "model registry name"), ("model_revision", "download"), ("model_kwargs", "loading"),
    ("task_type", "causal_lm is what vramfit models"), ("num_train_epochs", "schedule"), ("max_epochs", "schedule"),
    ("add_version", "path"), ("create_checkpoint_symlink", "path"), ("swanlab_*", "logging"), ("use_chat_template", "data"),
    ("padding_side", "data"), ("acc_strategy", "metrics"), ("eval_steps", "evaluation schedule"),
    ("eval_limit", "evaluation"), ("eval_use_evalscope", "evaluation"), ("metric", "evaluation"),
    ("predict_with_generate", "evaluation"), ("max_new_tokens", "generation at evaluation"),
    ("temperature", "sampling"), ("top_k", "sampling"), ("top_p", "sampling"), ("repetition_penalty", "sampling"),
    ("check_model", "loading"), ("train_dataloader_shuffle", "data order"), ("load_args", "loading"),
    ("load_data_args", "loading"), ("ignore_args_error", "argument checks"), ("external_plugins", "plugins"),
    ("custom_register_path", "plugins"), ("custom_dataset_info", "data"), ("init_weights", "adapter initialisation"),
    ("lorap_lr_ratio", "learning-rate ratio"), ("router_aux_loss_coef", "loss weight"), ("max_model_len", "inference"),
    ("beta", "loss weight"), ("label_smoothing", "loss"), ("loss_type", "loss choice"), ("reward_funcs", "reward "
    "functions (host)"), ("reward_weights", "loss weight"), ("desirable_weight", "loss weight"),
    ("undesirable_weight", "loss weight"), ("simpo_gamma", "loss"), ("num_iterations", "reuse of rollouts"),
    ("log_completions", "logging"), ("epsilon*", "clipping"), ("vllm_server_*", "vLLM server address"),
    ("adapters", "loading"), ("resume_only_model", "checkpoint"), ("ds3_gather_for_generation", "generation"),
    ("early_stop_interval", "schedule"), ("callbacks", "callbacks"), ("enable_dft_loss", "loss weighting"),
    ("enable_channel_loss", "loss weighting"), ("model_suffix", "args.json record"), ("model_info", "args.json record"),
    ("model_meta", "args.json record"), ("model_dir", "args.json record"), ("hub", "args.json record"),
    ("rank", "args.json record"), ("local_world_size", "args.json record"), ("training_args", "args.json record"),
    ("evaluation_strategy", "args.json record of transformers' old name (eval_strategy is read)"),
    ("ckpt_dir", "args.json record"), ("lora_modules", "inference"), ("stream", "inference"), ("stop_words", "inference"),
    ("logprobs", "inference"), ("top_logprobs", "inference"), ("num_beams", "inference"), ("packing_length", "read "
    "with packing"), ("hqq_axis", "HQQ quantization (not used)"), ("bnb_4bit_compute_dtype", "compute dtype: follows "
    "torch_dtype"), ("bnb_4bit_quant_storage", "storage dtype"), ("response_prefix", "data"), ("norm_bbox", "data"),
    ("sortish_sampler", "data order"), ("generation_*", "generation at evaluation"), ("fsdp_min_num_params", "FSDP wrapping"),
    ("accelerator_config.*", "launcher"), ("bnb_4bit_*", "read with quant_method bnb and quant_bits 4"), ("parallelism_config", "unset"), ("torch_compile_*", "compile options"),
    *hf.TRAINING_ARGS_IGNORED,
]
