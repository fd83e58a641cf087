"""The framework profiles as data: transformers + PEFT (with its older releases), torchtune, litgpt, torchtitan
and Unsloth (estimate/unsloth.py). Each value cites the code (file and version) it models; estimate/framework.py
picks and adjusts them for a scenario."""

from __future__ import annotations

from vramfit.choices import FSDP_FAMILY
from vramfit.estimate.constants import BNB_GEMM_4BIT_FUSED_MAX_TOKENS
from vramfit.estimate.nccl import NCCL_2_18_TO_2_20
from vramfit.estimate.profile_fields import (
    CompileScope,
    DoraBase,
    FrameworkProfile,
    FrameworkVersion,
    LoopCarry,
    LossLayout,
    OptimizerImpl,
    StageRecipe,
)
from vramfit.estimate.rope_v4 import ROPE_V4_40, ROPE_V4_45, ROPE_V4_48, ROPE_V4_SOURCE
from vramfit.estimate.stages.profiles import LogProbs
from vramfit.scenario import Checkpointing, Framework, Method, Parallelism, Precision, Stage

# torchtune's recipes for the stages beyond SFT (profile_fields.py stage_recipes: v0.4.0 _recipe_registry.py l. 270-302)
_TUNE_DPO = ("lora_dpo_single_device", "lora_dpo_distributed")
_TUNE_STAGE_RECIPES = (StageRecipe(Stage.DPO, (Method.LORA, Method.QLORA), True, _TUNE_DPO),
                       StageRecipe(Stage.SIMPO, (Method.LORA, Method.QLORA), True, _TUNE_DPO),
                       # v0.4.0 (03a4b1e41) recipes/configs/mistral/7B_full_ppo_low_memory.yaml (its one PPO config)
                       # l. 128 ppo_epochs: 2, l. 145 forward_batch_size: 16; recipes/ppo_full_finetune_single_device.py
                       # l. 872-882 trains the batch ppo_epochs times in ppo_batch_size mini-batches
                       StageRecipe(Stage.PPO, (Method.FULL,), False, ("ppo_full_finetune_single_device",),
                                   ppo_epochs=2, forward_chunk=16))

# what any FSDP2 fully_shard wrapping changes against FSDP1's host wrap (estimate/fsdp2.py): no flat parameters, no
# host-wrap residue or sync buckets, no nested LoRA units
_FSDP2_UNITS = (("fsdp2", True), ("fsdp1_host_wrap", False), ("fsdp1_sync_module_states", False),
                ("fsdp_lora_units_nested", False))

# HF Trainer before the fused default (transformers PR #37358, merged 2025-07, and only on torch >= 2.8):
# transformers v4.46.3 training_args.py l. 1271 `default_optim = "adamw_torch"`; trainer.py l. 1271-1277 builds
# torch.optim.AdamW(**adam_kwargs) with no `fused`/`foreach`, which torch defaults to foreach on CUDA
# (torch v2.5.1 torch/optim/adamw.py adamw(): _default_to_fused_or_foreach(..., use_fused=False))
_ADAMW_TORCH_FOREACH = ("torch_optimizer_impl", OptimizerImpl.FOREACH)
# transformers before v4.53.0 (the first wheel with masking_utils.py; v4.52.4 has none): the model's own
# _update_causal_mask, one shared float mask (v4.44.2 models/mistral/modeling_mistral.py l. 845-951,
# models/gemma2/modeling_gemma2.py l. 568-580 and 875-909; v4.52.4 alike)
_MODEL_MASKS = ("masks_per_layer_type", False)
# transformers <= v4.57.1 modeling_utils.py enable_input_require_grads hooks the model's own input embeddings only
_OWN_EMBEDDINGS_HOOKED = ("hooks_sub_model_embeddings", False)
# transformers 4.x: the Trainer's gradient checkpointing is reentrant (profile_fields.py ckpt_reentrant)
_REENTRANT_CKPT = ("ckpt_reentrant", True)
# transformers <= v4.51: the model loop checkpoints the FSDP-wrapped layer (profile_fields.py ckpt_around_fsdp_units)
_CKPT_AROUND_UNITS = ("ckpt_around_fsdp_units", True)
# transformers before v4.54 repeats k and v to every query head before SDPA, mask or not (v4.44.2
# models/llama/modeling_llama.py LlamaSdpaAttention.forward l. 642-643; v4.52.4 and v4.53.0
# integrations/sdpa_attention.py sdpa_attention_forward); v4.54.1 added use_gqa_in_sdpa (enable_gqa without a mask)
_SDPA_REPEATS_KV = ("expands_kv_for_sdpa", True)
# DeepSpeed before v0.17.2's ZeRO-1/2 (profile_fields.py: both fields' sources): host flatten, IPG buckets at backward()
_DS_BEFORE_0_17_2 = (("ds_flattens_on_host", True), ("ds_ipg_at_backward_start", True))
# transformers 4's bitsandbytes quantizer converts every module that is an nn.Linear, subclasses included
# (v4.53.1 integrations/bitsandbytes.py _replace_with_bnb_linear: ``isinstance(module, nn.Linear) or
# isinstance(module, Conv1D)``, lm_head left out by get_keys_to_not_convert), and builds each MoE expert's projections
# as nn.Linear modules (v4.53.1 models/mixtral/modeling_mixtral.py MixtralBlockSparseTop2MLP w1/w2/w3 and the router
# ``gate = nn.Linear``; models/qwen3_moe/modeling_qwen3_moe.py Qwen3MoeMLP): QLoRA quantizes the experts, routers and
# FalconLinear; 3-D expert banks came with v5 (today's quantizes_exact_linear_only). Not in transformers-4.55, the
# release modelled for gpt-oss, whose v4 experts are 3-D banks already (ModelSpec.experts_v4_indexed_loop)
_V4_BNB_LINEARS = ("quantizes_exact_linear_only", False)
_T4_44 = (("standard_loss", LossLayout.HF_UPCAST_IN_MODEL), _ADAMW_TORCH_FOREACH, _MODEL_MASKS, _SDPA_REPEATS_KV,
          _OWN_EMBEDDINGS_HOOKED, _REENTRANT_CKPT, _CKPT_AROUND_UNITS, _V4_BNB_LINEARS)

#: peft v0.13.2 tuners/lora/dora.py DoraLinearLayer.forward: ``base_result`` is always F.linear(x, weight) of its own
#: weight (v0.14.0 reuses the base layer's output where dropout is 0)
_DORA_RECOMPUTES = ("dora_base_output", DoraBase.RECOMPUTED)

PROFILES: dict[Framework, FrameworkProfile] = {
    Framework.HF: FrameworkProfile(
        name="transformers + PEFT",
        adapters_fp32=True,
        lora_casts_input=True,
        autocast_caches_adapters=True,  # PEFT's nn.Linear lora_A / lora_B (profile_fields.py)
        lora_dropout_default=0.0,  # peft v0.21.2 tuners/lora/config.py LoraConfig.lora_dropout default
        fused_qkv_lora=False,
        runs_dora=True,  # peft v0.21.2 LoraConfig(use_dora=True)
        runs_modules_to_save=True,  # peft@5d602fdbf LoraConfig(modules_to_save=[...])
        rmsnorm_upcast=True,
        expands_kv_for_sdpa=False,
        qlora_unquantized_fp32=True,
        qlora_saves_input=False,
        qlora_quantizes_lm_head=False,
        # transformers >= 4.46 (PR #33902): logits stay in the model dtype, ForCausalLMLoss upcasts
        standard_loss=LossLayout.HF_UPCAST_IN_LOSS,
        fused_loss_trains_only=True,  # the HF Trainer's use_liger_kernel: Liger's lce_forward (profile_fields.py)
        fused_loss_head_external=True,  # Liger's lce_forward reads lm_head.weight (profile_fields.py)
        # HF Trainer default optim "adamw_torch_fused" for torch >= 2.8 (transformers v5.24.0
        # training_args.py default_optim; PR #37358)
        torch_optimizer_impl=OptimizerImpl.FUSED,
        qlora_fused_max_tokens=BNB_GEMM_4BIT_FUSED_MAX_TOKENS.value,
        lora_4bit_clones_output=True,
        qlora_module_quant_state=True,
        runs_transformers_modeling=True,
        flash_attention_is_fa2=True,  # attn_implementation="flash_attention_2" (profile_fields.py)
        masks_per_layer_type=True,  # transformers v5.24.0 masking_utils.py (profile_fields.py)
        hooks_sub_model_embeddings=True,  # transformers v5.24.0 modeling_utils.py enable_input_require_grads
        quantizes_exact_linear_only=True,
        mxfp4_index_bytes=4,  # transformers v5.24.0 integrations/mxfp4.py l. 270: .to(torch.int)
        fsdp_mixed_casts_params=True,
        fsdp_reduce_in_param_dtype=True,
        fsdp1_host_wrap=True,
        fsdp1_sync_module_states=True,
        fsdp_lora_units_nested=True,
        # FSDP1 gradients synced on the last micro-batch only: the Trainer enters accelerator.no_sync(model) for the
        # others (transformers v5.24.0 trainer.py l. 1904-1915; accelerate v1.15.0 accelerator.py l. 1172-1176 calls
        # the FSDP1 module's no_sync), so each GPU holds the whole unsharded gradients in between (estimate/step_grads.py
        # _fsdp1_no_sync_grads); the FSDP2 variant below keeps them whole too
        fsdp_unsharded_accum_grads=True,
        # `accelerate launch` (the Trainer's multi-GPU launcher) exports OMP_NUM_THREADS =
        # --num_cpu_threads_per_process, default the variable's value or 1 (accelerate v1.14.0 commands/launch.py
        # l. 1359, utils/launch.py l. 392 prepare_multi_gpu_env); `torchrun` sets 1 too (profile_fields.py)
        ranks_single_threaded=True,
        loss_in_model_forward=True,
        amp_outputs_fp32=True,  # the HF Trainer prepares the model with accelerate (profile_fields.py)
        fsdp2_variant=FrameworkVersion(
            "accelerate 1.15's fsdp2_prepare_model",
            "accelerate v1.15.0 utils/fsdp_utils.py fsdp2_prepare_model (fsdp_version: 2): fully_shard on each "
            "decoder layer (transformer auto wrap policy, l. 850-855), the tail and the root (l. 857-885), "
            "MixedPrecisionPolicy from the Trainer's mixed precision (l. 779), trainable weights upcast to fp32 under "
            "it (l. 815-820, = bf16-mixed); with cpu_ram_efficient_loading the model is sharded on the meta device "
            "(l. 830-848), no flat parameters and no host-wrap residue. LoRA: one unit per layer, no nested adapter "
            "units: the Trainer builds the optimizer before prepare under FSDP2 (transformers v5.24.0 trainer.py "
            "l. 1719-1721), so update_fsdp_plugin_peft (l. 1760-1762) never swaps in peft's policy",
            # accelerate >= v1.11.0 (PR #3762) no_sync -> model.set_requires_gradient_sync(False) (v1.11.0
            # accelerator.py l. 1165), entered by the Trainer for every micro-batch but the last: FSDP2 then keeps
            # each unit's whole gradients until the last one reduce-scatters (estimate/fsdp2.py, 6)
            (*_FSDP2_UNITS, ("fsdp2_tail_unit", True), ("fsdp_unsharded_accum_grads", True)),
        ),
        # bf16-true for every method: transformers 5.24.0 modeling_utils.py from_pretrained sets
        # `dtype = "auto"` when none is given, i.e. the checkpoint's config dtype (bf16 for the catalog's
        # Llama/Mistral/Qwen checkpoints); Trainer(bf16=True) then autocasts over bf16 parameters and
        # AdamW keeps its states in the parameter dtype. transformers 4 loaded fp32 (= bf16-mixed).
        default_precision=((Method.FULL, Precision.BF16_TRUE), (Method.LORA, Precision.BF16_TRUE),
                           (Method.QLORA, Precision.BF16_TRUE)),
        version="transformers-5.24+peft-0.21",
        older_versions=(
            FrameworkVersion(
                "transformers-4.44",
                "transformers v4.44.2 models/*/modeling_*.py ForCausalLM.forward: logits.float() in the model "
                "(moved into ForCausalLMLoss by PR #33902, v4.46.0); Trainer optim default adamw_torch (foreach); one "
                "attention mask per model (_update_causal_mask, before masking_utils); SDPA gets k and v repeated to "
                "every head (no enable_gqa before v4.54); Mixtral's attention layers still hold RoPE cos/sin buffers "
                "of max_position_embeddings rows (v4.45.2 models/mixtral/modeling_mixtral.py l. 233-248, 351; "
                "estimate/rope_v4.py)", (*_T4_44, ROPE_V4_45)),
            FrameworkVersion("transformers-4.40", ROPE_V4_SOURCE, (*_T4_44, ROPE_V4_40)),
            FrameworkVersion(
                "transformers-4.47",
                "transformers v4.46.0-v4.48 loss/loss_utils.py ForCausalLMLoss: logits.float() and a shifted "
                "`.contiguous()` fp32 copy (removed by PR #35646, 2025-01-13); Trainer optim default adamw_torch "
                "(foreach); one attention mask per model (_update_causal_mask, before masking_utils); SDPA gets k and v "
                "repeated to every head (no enable_gqa before v4.54); at v4.48, its newest release, no family keeps "
                "per-layer RoPE buffers (Mixtral's went in v4.48.0)",
                (("standard_loss", LossLayout.HF_UPCAST_SHIFTED_IN_LOSS), _ADAMW_TORCH_FOREACH, _MODEL_MASKS,
                 _SDPA_REPEATS_KV, _OWN_EMBEDDINGS_HOOKED, _REENTRANT_CKPT, _CKPT_AROUND_UNITS, _V4_BNB_LINEARS,
                 ROPE_V4_48),
            ),
            # split at v4.53.0, masking_utils.py's first release (_MODEL_MASKS): v4.49-v4.52 keep one model-level mask
            FrameworkVersion(
                "transformers-4.52",
                "transformers v4.49.0-v4.52.x: ForCausalLMLoss as the default (no shifted copy since PR #35646); "
                "Trainer optim default adamw_torch (foreach, as transformers-4.53); one attention mask per model "
                "(_update_causal_mask: masking_utils.py first ships in v4.53.0); SDPA gets k and v repeated to every "
                "head (no enable_gqa before v4.54)",
                (_ADAMW_TORCH_FOREACH, _MODEL_MASKS, _SDPA_REPEATS_KV, _OWN_EMBEDDINGS_HOOKED, _REENTRANT_CKPT,
                 _V4_BNB_LINEARS),
            ),
            FrameworkVersion(
                "transformers-4.53",
                "transformers v4.53.x: ForCausalLMLoss as the default (no shifted copy since PR #35646); masking_utils "
                "(one mask per attention type); Trainer optim default adamw_torch (v4.53.1 training_args.py l. 1281 "
                "`default_optim = \"adamw_torch\"`, trainer.py l. 1413-1419: torch.optim.AdamW, `fused` only for "
                "adamw_torch_fused), i.e. foreach; SDPA gets k and v repeated to every head (no enable_gqa before v4.54)",
                (_ADAMW_TORCH_FOREACH, _SDPA_REPEATS_KV, _OWN_EMBEDDINGS_HOOKED, _REENTRANT_CKPT, _V4_BNB_LINEARS),
            ),
            FrameworkVersion(
                "peft-0.11",
                "peft v0.11.1 tuners/lora/layer.py update_layer: adapters created in the base layer's dtype "
                "(autocast_adapter_dtype=True, fp32 adapters, arrived in peft v0.12.0); from v0.6.0 on (b786b884f, "
                "2023-09-12: `self.to(weight.device, dtype=weight.dtype)`); peft <= v0.5.0 moved its fp32 nn.Linear "
                "adapters to the device only (v0.4.0 tuners/lora.py l. 691, 716) and cast the input to them (l. 819): the "
                "default's tensors",
                (("adapters_fp32", False), ("lora_casts_input", False), _DORA_RECOMPUTES, ("dora_eye", False)),
            ),
            FrameworkVersion("peft-0.13", "peft v0.9.0-v0.13.x tuners/lora/dora.py DoraLinearLayer.forward: the base "
                             "output recomputed with F.linear(x, weight) whatever the dropout (reused from v0.14.0, "
                             "338aeff38)", (_DORA_RECOMPUTES,)),
            FrameworkVersion("torch-2.2", "torch 2.1.x-2.4.x wheels (requires_dist nvidia-nccl-cu12 2.18.1, 2.19.3, 2.20.5): "
                             "NCCL sets NVLS buffers up with each communicator (estimate/nccl.py)",
                             (("nccl_nvls", NCCL_2_18_TO_2_20),)),
            # bitsandbytes 0.39.0-0.43.1 autograd/_functions.py MatMul4Bit.forward `ctx.tensors = (A, B)` (0.42.0 l. 522-523;
            # added 13c0a4dc, removed by PR #1270 = 9e753741, 2024-07-16, first released in 0.43.2): the 4-bit matmul keeps
            # its input outside save_for_backward (estimate/activations.py q_saves, retained_graph.py)
            FrameworkVersion("bitsandbytes-0.43", "bitsandbytes <= 0.43.1 MatMul4Bit keeps its input (ctx.tensors)",
                             (("qlora_saves_input", True),)),
            FrameworkVersion("transformers-4.55", "transformers v4.55.0 integrations/mxfp4.py l. 93-127 "
                             "convert_moe_packed_tensors: blocks moved to the GPU, int64 idx_lo and idx_hi alive "
                             "together (v5.24.0: int32, one at a time); models/gpt_oss/modeling_gpt_oss.py "
                             "GptOssExperts.forward: the per-expert training loop (v5.24.0: grouped_mm); modeling_utils.py "
                             "has no activation_checkpointing_enable(offload=True) (v5.24.0 save_on_cpu), so offload is "
                             "TRL's OffloadActivations (trl v0.20.0 models/activation_offloading.py, Axolotl's "
                             "activation_offloading: true): a block's input comes back when its backward unpacks it, no "
                             "prefetch, the block above's dropped once the node that unpacked it has run",
                             (("mxfp4_index_bytes", 8), ("mxfp4_indices_together", True), ("experts_v4_forward", True),
                              ("mxfp4_host_dequant_on_gpu", True),
                              ("offload_ckpt_block_tensors", 1), ("offload_ckpt_prefetched", 0), _OWN_EMBEDDINGS_HOOKED, _REENTRANT_CKPT)),
            FrameworkVersion("axolotl-0.12", "axolotl-ai-cloud/axolotl@ba3dba3e4 (0.12.0.dev) "
                             "monkeypatch/accelerate/fsdp2.py fsdp2_prepare_model, patched over accelerate's for "
                             "fsdp_version: 2: fully_shard on each decoder layer and on the root only (no embedding or "
                             "tail unit: the root gathered whole, as torchtitan's), no fp32 upcast of trainable weights; "
                             "from_pretrained gets no device_map except under plain multi-GPU DDP, so the weights load "
                             "to the host",
                             # its accelerate@9359a0194 no_sync is getattr(model, "no_sync") (accelerator.py l. 1131),
                             # which FSDP2 modules lack: the shards accumulate (estimate/fsdp2.py, 6)
                             (("fsdp2_variant", FrameworkVersion("axolotl@ba3dba3e4's fsdp2_prepare_model", "see axolotl-0.12",
                                                                (*_FSDP2_UNITS, ("fsdp_unsharded_accum_grads", False)))),
                              # axolotl@ba3dba3e4 cli/config.py l. 231-233: prepare_optim_env (utils/trainer.py l. 541,
                              # 573: ACCELERATE_USE_DEEPSPEED / _FSDP) runs before normalize_config, whose choose_device
                              # (utils/config/__init__.py l. 54-58) drops device_map once any ACCELERATE_USE_* is set;
                              # the CLI's default launcher is `accelerate launch` (cli/main.py l. 38, 84-86), whose
                              # one-process launcher always sets ACCELERATE_USE_CPU (accelerate@9359a0194
                              # utils/launch.py l. 133) and whose multi-GPU one sets none without FSDP; FSDP itself sets
                              # no device_map (loaders/model.py l. 540-549; QLoRA+FSDP excepted, l. 543-546)
                              ("weights_load_host", (Parallelism.NONE, *FSDP_FAMILY, Parallelism.ZERO1, Parallelism.ZERO2,
                                                     Parallelism.ZERO3)))),
            FrameworkVersion("deepspeed-0.8", "DeepSpeed v0.8.3 zero/partition_parameters.py all_gather_coalesced: a "
                             "one-GPU ZeRO-3 fetch copies, then gathers (NoGatherHandle, v0.9.0 #2953); ZeRO-1/2 "
                             "flatten on the host and make their IPG buckets at backward() start (as deepspeed-0.16)",
                             (("ds_gathers_on_one_gpu", True), *_DS_BEFORE_0_17_2)),
            FrameworkVersion("deepspeed-0.16", "DeepSpeed v0.9.0-v0.17.1 runtime/zero/stage_1_and_2.py: backward() "
                             "allocates the IPG buckets before the loss's backward (v0.16.2 l. 2029-2052; the hook's "
                             "allocation only since PR #6993, v0.17.2), and __init__ flattens each parameter group on "
                             "the host (as deepspeed-0.18)",
                             _DS_BEFORE_0_17_2),
            FrameworkVersion("deepspeed-0.18", "DeepSpeed v0.17.2-v0.18.6 runtime/zero/stage_1_and_2.py __init__ (v0.16.2 "
                             "l. 320-329, v0.18.6 the same): each parameter group moved to the host and empty_cache() "
                             "before the flatten, no flat copy beside the parameters on the GPU (flatten_on_gpu arrived "
                             "in v0.18.7, PR #7828); IPG buckets from the first gradient hook on (PR #6993, v0.17.2)",
                             (("ds_flattens_on_host", True),)),
            FrameworkVersion("trl-0.29", "trl v0.15.0-v0.29.1 trainer/utils.py selective_log_softmax: the per-row loop, "
                             "no Triton kernel (ms-swift 3602360a5 requirements/framework.txt: trl>=0.15,<1.0); with "
                             "use_liger_kernel, Liger's fused DPO, KTO and GRPO losses (v0.29.1 trainer/dpo_trainer.py:"
                             "636-648 LigerFusedLinearDPOLoss, experimental/kto/kto_trainer.py:716-737, "
                             "trainer/grpo_trainer.py:102, 538)",
                             (("trl_logits_logprobs", LogProbs.ROW_LOOP),
                              ("fused_stage_losses", (Stage.DPO, Stage.KTO, Stage.GRPO)))),
            FrameworkVersion("trl-0.21", "trl v0.7.6-v0.21.x SFTTrainer: a bf16 4-bit model's embeddings and head go "
                             "back to bf16 after prepare_model_for_kbit_training (peft_module_casting_to_bf16)",
                             (("qlora_16bit_embeddings", True),)),
            FrameworkVersion("trl-1.16", "trl 1.16.0 SFT, DPO, KTO and GRPO trainers on a quantized model: no "
                             "prepare_model_for_kbit_training, the adapters cast to bf16 (trainer/sft_trainer.py "
                             "l. 902-911)", (("qlora_unquantized_fp32", False), ("qlora_adapters_16bit", True))),
            FrameworkVersion("trl-0.14", "trl v0.11.4-v0.14.0 trainer/cpo_trainer.py, orpo_trainer.py get_batch_logps: "
                             "torch.gather(logits.log_softmax(-1), ...) over all the logits at once",
                             (("trl_logits_logprobs", LogProbs.FULL_LOG_SOFTMAX),)),
            FrameworkVersion("fsdp-qlora", "AnswerDotAI/fsdp_qlora@4cd6923 train.py l. 1072: its ranks are started by "
                             "torch.multiprocessing.spawn, which sets no OMP_NUM_THREADS (nor does the script: no "
                             "set_num_threads), so each rank keeps torch's default threads and an offloaded optimizer step "
                             "is memory-bound (plan/kernels.py HOST_DRAM_BYTES_PER_GPU), not single-threaded; its loop "
                             "enters model.no_sync() only with --no_sync (default False, l. 821, 1012), so the sharded "
                             "gradients accumulate; l. 576-577 build the QLoRA model by AutoModelForCausalLM.from_config(cfg) "
                             "with no torch_dtype under init_empty_weights, so the buffers transformers 4 gives every "
                             "attention layer (the RoPE cos/sin caches, transformers-4.40) are fp32 on the host and FSDP's "
                             "device_id moves them whole (the LoRA path loads with torch_dtype, l. 542-557)",
                             # l. 1063-1064 turn no_sync on for --use_cpu_offload with gradient accumulation
                             (("ranks_single_threaded", False), ("fsdp_unsharded_accum_grads", False),
                              ("fsdp_no_sync_when_offloaded", True), ("rope_cache_v4_fp32_methods", (Method.QLORA,)),
                              # l. 779-791: its own checkpoint_wrapper, CheckpointImpl.NO_REENTRANT unless
                              # --reentrant_checkpointing (default False, l. 1049)
                              ("ckpt_reentrant", False))),
            FrameworkVersion("llamafactory-0.9", "hiyouga/LLaMA-Factory@ff6d4d1 (0.9.6.dev0) train/dpo/trainer.py "
                             "concatenated_forward :219-253, kto/trainer.py forward :179-181: its own trainers, fp32 logits, "
                             "trainer_utils.py:592-612 get_batch_logps torch.gather(logits.log_softmax(-1), ...), the SFT "
                             "terms from those log-probs; the full fine-tune's reference in the compute dtype",
                             (("trl_logits_logprobs", LogProbs.FULL_LOG_SOFTMAX), ("stage_logits_fp32", True),
                              ("chosen_nll_in_logps", True), ("reference_compute_dtype", True),
                              ("keeps_policy_logits", True),
                              # kto/trainer.py:89 CustomKTOTrainer calls Trainer.__init__, not KTOTrainer's (whose
                              # batch-size check it skips); data/processor/feedback.py:81, 87 build kl_input_ids from
                              # another example's response at preprocessing, so one example per GPU batch runs
                              ("kto_min_micro_batch", 1))),
            FrameworkVersion("llama-recipes-2023", "meta-llama/llama-recipes@e5970e2e (2023-07-25) llama_finetuning.py "
                             "l. 93-97: LlamaForCausalLM.from_pretrained without use_cache (config.use_cache stays True), "
                             "policies/activation_checkpointing_functions.py: torch's checkpoint_wrapper (NO_REENTRANT) on "
                             "every LlamaDecoderLayer, so transformers builds and returns the KV cache (profile_fields.py "
                             "returns_kv_cache); use_cache=False arrived in 353dfcdc (2023-09-05, 'Pass use_cache=False "
                             "when training with FSDP'); utils/train_utils.py before PR #41 (1e0f8a1f l. 88) rebinds "
                             "`outputs = model(**batch)` each step, so a kept output lives into the next forward "
                             "(profile_fields.py LoopCarry.OUTPUTS); l. 131-138 FSDP(model, auto_wrap_policy, "
                             "mixed_precision, sharding_strategy, device_id, limit_all_gathers=True): no "
                             "sync_module_states (torch FSDP1's default False), every rank loads the model itself",
                             (("returns_kv_cache", True), ("loop_carry", LoopCarry.OUTPUTS),
                              ("fsdp1_sync_module_states", False), ("ckpt_reentrant", False))),
            FrameworkVersion("peft-method-comparison", "huggingface/peft@51c2ff666 method_comparison/MetaMathQA: run.py "
                             "train() is a plain loop over transformers + PEFT (no Trainer), and utils.py "
                             "get_optimizer_and_scheduler builds getattr(torch.optim, 'AdamW')(model.parameters(), lr, "
                             "weight_decay) with no fused or foreach argument: torch v2.13.0 torch/optim/adamw.py "
                             "(_default_to_fused_or_foreach) runs _multi_tensor_adamw on CUDA, whose "
                             "torch._foreach_sqrt(exp_avg_sqs) copies the second moment",
                             (("torch_optimizer_impl", OptimizerImpl.FOREACH),)),
        ),
    ),
    Framework.TORCHTUNE: FrameworkProfile(
        name="torchtune",
        # v0.4.0 modules/peft/dora.py DoRALinear (use_dora in the lora builders): base_out of the undropped input, kept
        runs_dora=True,
        dora_base_output=DoraBase.REUSED,
        # FSDP only (FULL_SHARD, or SHARD_GRAD_OP with fsdp_reshard_after_forward False): profile_fields.py parallelisms
        parallelisms=(Parallelism.NONE, Parallelism.FSDP, Parallelism.FSDP_GRAD_OP),
        # v0.4.0 recipes/lora_dpo_*.py (DPOLoss, SimPOLoss), ppo_full_finetune_single_device.py (profile_fields.py)
        stages=(Stage.SFT, Stage.DPO, Stage.SIMPO, Stage.PPO),
        stage_recipes=_TUNE_STAGE_RECIPES,
        # v0.4.0 torchtune/modules/loss/ holds CEWithChunkedOutputLoss and the KD losses only (as v0.6.1): no fused
        # linear + cross-entropy. LinearCrossEntropyLoss (after v0.6.1) keeps each chunk's logits for backward and
        # imports as the chunked loss (config_import/torchtune.py LOSSES)
        runs_fused_loss=False,
        adapters_fp32=False,
        lora_casts_input=False,
        lora_dropout_default=0.0,  # torchtune v0.4.0 modules/peft/lora.py LoRALinear(dropout=0.0)
        fused_qkv_lora=False,
        rmsnorm_upcast=True,
        expands_kv_for_sdpa=True,
        qlora_unquantized_fp32=False,
        qlora_saves_input=False,  # torchao linear_nf4 saves only the NF4 weight
        qlora_quantizes_lm_head=False,
        # torchtune v0.4.0: TransformerDecoder returns self.output(h).float(); recipes shift the
        # labels (not the logits) and `del logits` before backward
        standard_loss=LossLayout.TORCHTUNE_UPCAST_IN_MODEL,
        # DPO/SimPO (recipes/lora_dpo_single_device.py l. 454-461, lora_dpo_distributed.py l. 585-592) take their
        # log-probs with torchtune's own code, not TRL's fused head: v0.4.0 (03a4b1e41) torchtune/rlhf/
        # sequence_processing.py l. 133-139 get_batch_log_probs over the shifted view logits[:, :-1, :], l. 97-101
        # torch.gather(F.log_softmax(logits / temperature, dim=-1), 2, ...): the division's contiguous copy (F; div by
        # a Python scalar saves nothing, freed when log_softmax returns) next to the logits and log_softmax's output
        # (F, saved; gather saves the same tensor): TRL <= 0.14's get_batch_logps tensors, whose copy is
        # host_softmax's .contiguous() (3F forward, F saved, 3F backward: stages/preference.py full_log_softmax)
        trl_logits_logprobs=LogProbs.FULL_LOG_SOFTMAX,
        # ... over fp32 logits: modules/transformer.py l. 652 `output = self.output(h).float()` (the DPO recipes never
        # call set_num_output_chunks), in the reference pass too
        stage_logits_fp32=True,
        # rlhf/loss/dpo.py l. 47-94 DPOLoss, l. 199-233 SimPOLoss: functions of the summed/averaged log-probs only,
        # no cross-entropy over the chosen half's logits (no cpo_alpha/rpo_alpha term)
        chosen_nll_in_logps=True,
        # keeps_policy_logits stays False: lora_dpo_single_device.py l. 508-512 take the logits' means and
        # `del policy_chosen_logits, policy_rejected_logits` before the reference pass, l. 521-527 torch.no_grad(),
        # disable_adapter(self._model), the same concatenated_forward (lora_dpo_distributed.py l. 649 and 658)
        # torchtune v0.4.0 recipes/configs/*/lora_finetune_single_device.yaml: AdamW with fused: True
        torch_optimizer_impl=OptimizerImpl.FUSED,
        fsdp_root_gathered=False,
        fsdp_root_unit_methods=(Method.LORA, Method.QLORA),  # no custom_sharded_layers in their configs
        attn_output_copied=True,
        ranks_single_threaded=True,  # `tune run` = torchrun: OMP_NUM_THREADS=1 per rank (profile_fields.py)
        compiled_loss_recipes=((Method.LORA, False), (Method.QLORA, False)),
        fsdp2=True,
        # recipes' configs set `dtype: bf16` (recipes/configs/*/*_full*.yaml, *_lora*.yaml); the recipes
        # build the model in that dtype (training.set_default_dtype) with no fp32 master copy
        default_precision=((Method.FULL, Precision.BF16_TRUE), (Method.LORA, Precision.BF16_TRUE),
                           (Method.QLORA, Precision.BF16_TRUE)),
        version="torchtune-0.4",
        image_model_types=("mllama",),  # v0.4.0 torchtune/models/llama3_2_vision: profile_fields.py image_model_types
        older_versions=(
            FrameworkVersion(
                "torchtune-0.1",
                "torchtune@c69fba18b (2024-04, v0.1) recipes/*_finetune_distributed.py: FSDP1 "
                "FullyShardedDataParallel(model, auto_wrap_policy=TransformerDecoderLayer (+ each LoRA A/B: "
                "utils.lora_fsdp_wrap_policy), device_id=..., sync_module_states=True) over the model rank 0 loaded on "
                "the CPU; the root unit (tok_embeddings, norm, output) gathered through forward and backward; one-GPU QLoRA "
                "built and quantized on the GPU by torchao 0.1 (estimate/nf4_load.py); lora_dropout 0.05; foreach AdamW",
                (("fsdp2", False), ("fsdp1_host_wrap", True), ("fsdp1_sync_module_states", True),
                 ("runs_dora", False),  # DoRALinear came in v0.3.0 (modules/peft/dora.py)
                 ("image_model_types", ()),  # no llama3_2_vision before v0.3.1 (2024-09): text decoders only
                 ("fsdp1_empty_cache_after_wrap", True),  # train(): utils.cleanup_before_training()
                 ("fsdp_root_gathered", True),
                 # torchtune@0217d44c2 recipes/lora_finetune_distributed.py l. 332-351: FSDP(..., auto_wrap_policy=
                 # utils.lora_fsdp_wrap_policy(...)) wraps every LoRA A and B as a unit of its own inside its decoder
                 # layer's (torchtune/utils/_distributed.py l. 229-240) and leaves limit_all_gathers at FSDP's default
                 # True (torch v2.13.0 distributed/fsdp/fully_sharded_data_parallel.py l. 411): plan/traffic.py
                 # fsdp_serial_gather_bytes
                 ("fsdp_lora_units_nested", True),
                 # torchtune@0914d5cfb recipes/lora_finetune_single_device.py builds the model on the GPU; torchao
                 # 0.1 (pyproject.toml torchao==0.1) quantizes un-chunked: estimate/nf4_load.py
                 ("nf4_load_on_gpu", True),
                 # torchtune@c69fba18b torchtune/models/llama2/_model_builders.py lora_llama2_7b(lora_dropout=0.05)
                 ("lora_dropout_default", 0.05),
                 # recipes/configs/llama2/*.yaml `_component_: torch.optim.AdamW` with no `fused` (0.4 sets fused: True):
                 # torch v2.2.2 torch/optim/adamw.py defaults to foreach on CUDA (_default_to_fused_or_foreach)
                 ("torch_optimizer_impl", OptimizerImpl.FOREACH),
                 # recipes/*_finetune_*.py @c69fba18b shift the fp32 logits and keep them (estimate/loss.py) until
                 # the next micro-batch's `logits = self._model(input_ids)` returns (l. 447 of the LoRA recipe)
                 ("standard_loss", LossLayout.TORCHTUNE_SHIFTED_LOGITS_KEPT), ("loop_carry", LoopCarry.LOGITS),
                 # compile: True is utils.wrap_compile(model) = torch.compile(model) only (torchtune@c69fba18b and
                 # @0217d44c2 recipes/lora_finetune_single_device.py _setup_model); the loss stays eager in the loop
                 ("compiled_loss_recipes", ()),
                 # recipes/ @c69fba18b: lora_dpo_single_device.py (DPOLoss only, LoRA adapters on the config's
                 # builder, qlora_* included: torchtune/models/llama2 qlora_llama2_7b) beside the SFT recipes; no
                 # distributed DPO recipe, no PPO
                 ("stages", (Stage.SFT, Stage.DPO)),
                 # recipes/lora_dpo_single_device.py @c69fba18b l. 439-441 torch.gather(logits.log_softmax(-1), ...)
                 # (the v0.4.0 path's tensors, the copy host_softmax's own), but no `del`: l. 463-468 bind the
                 # policy's logits views through the reference pass (l. 470-476) and backward (l. 513)
                 ("keeps_policy_logits", True),
                 ("stage_recipes", (StageRecipe(Stage.DPO, (Method.LORA, Method.QLORA), False,
                                                ("lora_dpo_single_device",)),))),
            ),
        ),
    ),
    Framework.LITGPT: FrameworkProfile(
        name="litgpt",
        # lit-gpt@8641822 finetune/lora.py l. 78-90 (full.py, adapter.py alike): several devices -> FSDPStrategy
        # (FULL_SHARD), else one device; litgpt@26857050 the same (lora.py ModelParallelStrategy = FSDP2): no DDP, no
        # DeepSpeed (profile_fields.py parallelisms)
        parallelisms=(Parallelism.NONE, Parallelism.FSDP),
        stages=(Stage.SFT,),  # lit-gpt@8641822 finetune/: adapter, adapter_v2, full, lora (profile_fields.py)
        runs_offload=False,  # lit-gpt@8641822 finetune/lora.py l. 88 FSDPStrategy(cpu_offload=False): profile_fields.py
        runs_compile=False,  # no torch.compile in litgpt/finetune/ (litgpt@26857050): profile_fields.py
        runs_chunked_loss=False,  # its standard loss is already chunked_cross_entropy (profile_fields.py)
        # lit-gpt@8641822 finetune/lora.py and litgpt@01fe959c litgpt/finetune/lora.py fit(): ``logits = model(input_ids,
        # lm_head_chunk_size=128)`` then utils.chunked_cross_entropy, in every script; no Liger or Cut Cross-Entropy
        runs_fused_loss=False,
        # lit-gpt@8641822 finetune/lora.py l. 83-90: checkpointing is FSDPStrategy's {Block} policy only (profile_fields)
        checkpointing_by_devices=(Checkpointing.NONE, Checkpointing.FULL),
        runs_activation_offload=False,  # no script keeps block inputs on the host (the same setup() code)
        quantized_on_one_device=True,  # lit-gpt@8641822 finetune/lora.py l. 78-82: profile_fields.py
        quantized_refuses_mixed=True,  # lit-gpt@8641822 finetune/lora.py: "Quantization and mixed precision ..."
        runs_hybrid_shard=False,  # litgpt@26857050 finetune/full.py l. 108-114, lora.py l. 158-162: profile_fields.py
        image_model_types=(),  # lit-gpt@8641822 lit_gpt/config.py: text decoders only (profile_fields.py)
        adapters_fp32=False,
        lora_casts_input=False,
        lora_dropout_default=0.05,  # lit-gpt@8641822 finetune/lora.py lora_dropout = 0.05
        fused_qkv_lora=True,
        rmsnorm_upcast=False,
        expands_kv_for_sdpa=True,
        qlora_unquantized_fp32=False,
        qlora_saves_input=True,
        qlora_quantizes_lm_head=True,
        qlora_dequant_via_fp16=True,
        standard_loss=LossLayout.LITGPT_CHUNKED_HEAD,
        torch_optimizer_impl=OptimizerImpl.FOREACH,  # torch v2.1.0 torch/optim/adamw.py: foreach default on CUDA
        # lit-gpt@8641822 finetune/lora.py l. 214-215 runs every micro-batch but the last in
        # `fabric.no_backward_sync(model, enabled=is_accumulating)`, which Lightning 2.1 (pytorch-lightning@71aed75
        # src/lightning/fabric/strategies/fsdp.py l. 760-773 _FSDPBackwardSyncControl) turns into FSDP1's no_sync()
        fsdp_unsharded_accum_grads=True,
        fsdp_lora_block_units=True,  # Lightning's use_orig_params=True + lit-gpt's {Block} units (profile_fields)
        longest_sample_first=True,  # finetune/lora.py get_batch forces the longest sample at iter 0 (profile_fields)
        loop_carry=LoopCarry.LOGITS,  # finetune/lora.py `logits = model(...)` lives into the next forward (profile_fields)
        # validate()'s generate_example (lit-gpt@8641822 finetune/lora.py l. 258-285: KV cache of n_head x the longest
        # sample, its square bool mask) stays under the step's peak: not modelled (tests/estimate/test_litgpt_generate_example.py)
        # Lightning gives each launched process cpus / processes threads when OMP_NUM_THREADS is unset
        # (Lightning-AI/pytorch-lightning@7f0c343 src/lightning/fabric/utilities/distributed.py l. 390-394)
        ranks_single_threaded=False,
        # litgpt finetune/full.py and lora.py (Lightning-AI/litgpt@29ece59): `precision = precision or
        # get_default_supported_precision(training=True)` = "bf16-mixed" on bf16 GPUs (litgpt/utils.py);
        # lora.py refuses "mixed" with --quantize bnb.*, so QLoRA runs with --precision bf16-true
        default_precision=((Method.FULL, Precision.BF16_MIXED), (Method.LORA, Precision.BF16_MIXED),
                           (Method.QLORA, Precision.BF16_TRUE)),
        version="lit-gpt@8641822",
        older_versions=(
            # named for its year: a later release than the default, kept because users run it
            FrameworkVersion(
                "litgpt-2024",
                "Lightning-AI/litgpt@0077627 (2024) finetune/full.py: untied lm_head copy, unchunked logits in full "
                "fine-tuning (unsharded gradients under no_backward_sync as in lit-gpt@8641822); batches from a "
                "shuffled DataLoader, the longest sample not forced first",
                # litgpt@0077627 litgpt/finetune/lora.py fit(): `batch = next(train_iterator)` (CycleIterator over
                # the DataLoader); get_longest_seq_length only sets model.max_seq_length
                (("untied_head_copy", True), ("full_unchunked_logits", True), ("longest_sample_first", False),
                 # litgpt@0077627 and @5895df10 litgpt/model.py RMSNorm.forward: `x = x.float()`, then
                 # `x_normed = x * torch.rsqrt(norm_x + self.eps)` and `.to(dtype=dtype)` (lit-gpt@8641822
                 # lit_gpt/rmsnorm.py computes in the input dtype): the fp32 input is saved (estimate/norms.py)
                 ("rmsnorm_upcast", True)),
            ),
        ),
    ),
}


# torchtitan v0.2.2 (2026-01) and before: models/llama3/model/model.py returns self.output(h) (bf16), train.py
# loss_fn cross_entropy(pred.flatten(0, 1).float(), ...) and `del pred` before backward; 9dec370 parallelize_llama.py
# and v0.2.2 models/llama3/infra/parallelize.py apply_fsdp: every block a unit, the last one not resharded after
# forward (`reshard_after_forward = int(layer_id) < len(model.layers) - 1`, "FSDP would prefetch it immediately"),
# then fully_shard(model) holding tok_embeddings, norm and output: FSDP2 never reshards the root after forward
_TITAN_0_2_2_SOURCE = ("torchtitan v0.2.2 models/llama3/model/model.py returns self.output(h) and train.py's loss_fn "
                       "runs cross_entropy on the whole pred.float(); infra/parallelize.py apply_fsdp keeps the last "
                       "block gathered after forward and tok_embeddings, norm and output in the root unit")
_TITAN_0_2_2 = (("standard_loss", LossLayout.HF_UPCAST_IN_LOSS),
                ("standard_loss_site", "torchtitan's loss_fn (cross_entropy of pred.float())"),
                ("fsdp2_tail_unit", False), ("fsdp2_last_block_kept", True), ("release_note", ""))


PROFILES[Framework.TORCHTITAN] = FrameworkProfile(
    name="torchtitan",
    # torchtitan v0.3.0 components/optimizer/optimizer.py: Adam, AdamW, DistMuon only (9dec370 optimizer.py l. 33-39:
    # Adam, AdamW): bitsandbytes' optimizers refused (profile_fields.py)
    runs_bnb_optimizers=False,
    # torchtitan v0.3.0 components/loss.py: no fused linear cross-entropy kernel, and its ChunkedLossWrapper is the
    # recipes' standard loss (standard_loss below), not torchtune's chunked-output loss (profile_fields.py)
    runs_fused_loss=False,
    runs_chunked_loss=False,
    image_model_types=(),  # torchtitan v0.3.0 models/: text decoders only, no tower trained (profile_fields.py)
    offload_moves_params=True,  # enable_cpu_offload = FSDP2 CPUOffloadPolicy: parameters, gradients and states
    runs_activation_offload=False,  # v0.3.0 distributed/activation_checkpoint.py: selective, full, memory-budget, none
    # v0.3.0 models/llama3/parallelize.py (FSDP2 at every degree) vs 9dec370 parallelize_llama.py l. 80 and v0.2.2
    # models/llama3/infra/parallelize.py l. 125 (FSDP only over more than one shard): profile_fields.py
    # FSDP2 (FULL_SHARD, or reshard_after_forward "never"), HSDP, DDP over replicas; no DeepSpeed (profile_fields.py)
    parallelisms=(Parallelism.NONE, Parallelism.DDP, Parallelism.FSDP, Parallelism.FSDP_GRAD_OP),
    # data_parallel_shard_degree -1 by default: FSDP over the ranks left (9dec370 config_manager.py l. 256-268)
    default_parallelism=Parallelism.FSDP,
    ddp_beside_model_parallel=False,  # 9dec370 parallelize_llama.py l. 106-108 (profile_fields.py)
    stages=(Stage.SFT,),  # 9dec370 train.py: next-token cross-entropy only (profile_fields.py)
    methods=(Method.FULL, Method.LORA),  # no 4-bit base in torchtitan v0.3.0 (profile_fields.py)
    one_shard_note=("torchtitan with one rank per shard: counted with FSDP2's bf16 cast, as torchtitan 0.3 runs it "
                    "(FSDP2 at every degree; its gathered copies counted under parallelism fsdp only). Releases "
                    "before 0.3 (those that read a TOML) apply no FSDP there: fp32 throughout at 9dec370, autocast "
                    "in v0.1-v0.2.2 (none under tensor or pipeline parallelism), and no CPU offload."),
    expert_parallel=True,
    adapters_fp32=False,  # torchtitan trains every weight: no adapters
    lora_casts_input=False,
    lora_dropout_default=0.0,
    fused_qkv_lora=False,
    # torchtitan@9dec370 models/norms.py build_norm("rmsnorm") = nn.RMSNorm; torch v2.13.0
    # aten/src/ATen/native/layer_norm.cpp rms_norm upcasts the input to fp32 (opmath)
    rmsnorm_upcast=True,
    # torchtitan ff0829c10 (2026-01-27, 'GQA without kv repeats'), v0.2.2 models/llama3/model/model.py l. 201, 285-297:
    # SDPA gets the grouped k and v with enable_gqa (9dec370 to v0.2.1: repeat_kv; 0.3.0 runs flex: release_note)
    expands_kv_for_sdpa=False,
    qlora_unquantized_fp32=False,
    qlora_saves_input=False,
    qlora_quantizes_lm_head=False,
    # torchtitan v0.3.0 models/llama3/config_registry.py llama3_8b (and every llama3 recipe): loss=
    # ChunkedLossWrapper.Config; trainer.py l. 513-535 sets the model's _skip_lm_head and hands lm_head to the loss
    # (estimate/titan_loss.py). v0.2.2 and before: model.py returns self.output(h) (bf16), loss_fn
    # cross_entropy(pred.flatten(0, 1).float(), ...) and `del pred` before backward (_TITAN_0_2_2)
    standard_loss=LossLayout.TORCHTITAN_CHUNKED_LOSS,
    standard_loss_site="torchtitan's ChunkedLossWrapper (lm_head and cross_entropy of pred.float() per chunk)",
    # torchtitan 6e4988550 (2025-02-24, 'use Fused AdamW as default'): optimizer.implementation "fused" (v0.1.0
    # config_manager.py l. 139, v0.2.2 config/job_config.py l. 151, v0.3.0 components/optimizer/optimizer.py l. 109);
    # 9dec370 optimizer.py: {"fused": fused, "foreach": not fused}, --optimizer.fused off by default (torchtitan-2024)
    torch_optimizer_impl=OptimizerImpl.FUSED,
    # torchtitan v0.3.0 distributed/fsdp.py apply_fsdp_to_decoder l. 180-207: an untied tok_embeddings is a unit of
    # its own (resharded after forward), [norm, lm_head] one unit with reshard_after_forward only under the "always"
    # policy, tied [tok_embeddings, norm, lm_head] one unit alike; every block resharded (l. 209-291), then
    # fully_shard(model) over nothing left: accelerate's layout (profile_fields.py fsdp2_tail_unit). v0.2.2 and
    # before: blocks are units, fully_shard(model) holds tok_embeddings, norm, output, the last block kept (_TITAN_0_2_2)
    fsdp_root_gathered=True,
    mixed_casts_params=True,
    fsdp2=True,
    fsdp2_tail_unit=True,
    # the loss compiled too from bbb1b616e (2025-04-02; v0.2.2 components/loss.py l. 33-35, compile.components
    # ["model", "loss"]; v0.3.0 ChunkedLossWrapper builds its inner loss with the compile config: each chunk's
    # cross-entropy compiled, lm_head not): profile_enums.py
    compile_scope=CompileScope.BLOCKS_AND_LOSS,
    # torchtitan@9dec370 config_manager.py --training.mixed_precision_param bfloat16 over fp32 weights (v0.2.2
    # config/job_config.py l. 282 the same)
    default_precision=((Method.FULL, Precision.BF16_MIXED), (Method.LORA, Precision.BF16_MIXED),
                       (Method.QLORA, Precision.BF16_TRUE)),
    version="torchtitan-0.3",
    # torchtitan 0.3.0 (PyPI, 2026-09) models/llama3/__init__.py attn_backend flex (common/config_utils.py: "sdpa is no
    # longer supported for language models"): torch v2.13.0 _higher_order_ops/flex_attention.py
    # FlexAttentionAutogradOp saves q, k, v, out and logsumexp as flash does, plus max_scores ([B, H, S] fp32, 1 MiB a
    # layer at 8k tokens and 32 heads) and the BlockMask's int32 block indices; the op policy saves the flex op's
    # outputs as it saved SDPA's (v0.3.0 distributed/activation_checkpoint.py _get_default_save_ops): counted as flash
    release_note=("Release: torchtitan v0.3.0 (output layer and loss over 8 sequence chunks, each chunk's backward "
                  "inside the loss; the embedding and [norm, lm_head] FSDP units of their own; fused AdamW; flex "
                  "attention counted as flash, its max_scores left out). framework_version torchtitan-0.2.2, "
                  "torchtitan-0.2.1 and torchtitan-2024 name older releases."),
    older_versions=(
        FrameworkVersion("torchtitan-0.2.2", _TITAN_0_2_2_SOURCE, _TITAN_0_2_2),
        FrameworkVersion(
            "torchtitan-0.2.1",
            "torchtitan v0.1.0-v0.2.1 (2025-06 to 2026-01) models/llama3/model/model.py Attention.forward: "
            "repeat_kv(xk), repeat_kv(xv) before SDPA (GQA without repeats came in ff0829c10, 2026-01-27); "
            "otherwise as torchtitan-0.2.2: " + _TITAN_0_2_2_SOURCE,
            (*_TITAN_0_2_2, _SDPA_REPEATS_KV)),
        FrameworkVersion(
            "torchtitan-2024",
            "torchtitan@9dec370 (2024-12): train.py keeps loss_fn eager under --training.compile ('compiling loss "
            "function causes CUDA errors'; compiled from bbb1b616e, 2025-04-02), optimizer.py foreach AdamW "
            "(--optimizer.fused off; fused by default from 6e4988550, 2025-02-24), repeat_kv before SDPA; "
            "otherwise as torchtitan-0.2.2: " + _TITAN_0_2_2_SOURCE,
            (*_TITAN_0_2_2, ("compile_scope", CompileScope.BLOCKS), ("torch_optimizer_impl", OptimizerImpl.FOREACH),
             _SDPA_REPEATS_KV)),
    ),
)
# the Unsloth profile and its 2024.12 release live in estimate/unsloth.py (imported here, after the classes it uses)
from vramfit.estimate.unsloth import UNSLOTH_PROFILE  # noqa: E402

PROFILES[Framework.UNSLOTH] = UNSLOTH_PROFILE
