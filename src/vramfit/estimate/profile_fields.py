"""The typed fields of a framework profile (estimate/framework_profiles.py holds the profiles, estimate/framework.py their helpers).

Each field names the code (file and version) it models; every choice with more than two values is an enum,
and code never compares the display ``name``.
"""

from __future__ import annotations

from dataclasses import dataclass

from vramfit.choices import FSDP_FAMILY
from vramfit.estimate.allocator import AllocatorConf
from vramfit.estimate.nccl import NvlsBuffers
from vramfit.estimate.profile_enums import (  # noqa: F401  (re-exported: the profile's field types)
    CompileScope,
    DoraBase,
    ForcedFp32,
    FrameworkVersion,
    LoopCarry,
    LossLayout,
    OptimizerImpl,
    SavedCopyDtype,
    StageRecipe,
)
from vramfit.estimate.stages.profiles import LogProbs
from vramfit.scenario import Checkpointing, Loss, Method, Optimizer, Parallelism, Precision, Quantize, Stage

#: the optimizers the scenario runs from bitsandbytes (bitsandbytes v0.50.2 optim/: AdamW8bit, PagedAdamW,
#: PagedAdamW8bit, Lion, Lion8bit; vramfit.sim.optim _bnb_optimizer builds the same classes), which a profile with
#: ``runs_bnb_optimizers`` False refuses
BNB_OPTIMIZERS = (Optimizer.ADAMW_8BIT, Optimizer.PAGED_ADAMW, Optimizer.PAGED_ADAMW_8BIT, Optimizer.LION,
                  Optimizer.LION_8BIT)


@dataclass(frozen=True)
class FrameworkProfile:
    name: str  # display text only: never compared
    # LoRA adapter weights are fp32 whatever the base dtype (PEFT >= 0.12 autocast_adapter_dtype=True,
    # peft v0.21.2 src/peft/tuners/tuners_utils.py cast_adapter_dtype); else the model's parameter dtype.
    adapters_fp32: bool
    # PEFT LoRA casts the layer input to the adapter dtype (peft v0.21.2
    # tuners/tuners_utils.py BaseTunerLayer._cast_input_dtype),
    # a new tensor per adapted layer when the dtypes differ.
    lora_casts_input: bool
    # LoRA dropout when the scenario sets none (peft v0.21.2 LoraConfig 0.0, torchtune v0.4.0
    # LoRALinear 0.0, lit-gpt@8641822 finetune/lora.py 0.05)
    lora_dropout_default: float
    # litgpt fuses q,k,v into one linear; its LoRAQKVLinear runs one dropout and one lora_A for the
    # enabled slices (lit-gpt@8641822 lit_gpt/lora.py).
    fused_qkv_lora: bool
    # RMSNorm computes in fp32 and autograd keeps the fp32 input (transformers v5.24.0 LlamaRMSNorm,
    # torchtune v0.4.0 modules/rms_norm.py); lit-gpt@8641822 RMSNorm computes in the input dtype.
    rmsnorm_upcast: bool
    # GQA: k,v expanded to all heads before SDPA (torchtune v0.4.0 modules/attention.py, lit-gpt@8641822);
    # transformers v5.24.0 passes enable_gqa to SDPA when there is no padding mask
    # (integrations/sdpa_attention.py use_gqa_in_sdpa).
    expands_kv_for_sdpa: bool
    # QLoRA: non-quantized parameters cast to fp32 by peft prepare_model_for_kbit_training
    # (peft v0.21.2 src/peft/utils/other.py prepare_model_for_kbit_training: param.data.to(torch.float32)).
    qlora_unquantized_fp32: bool
    # bitsandbytes <= 0.43.1 MatMul4Bit saved its input (ctx.tensors = (A, B)); lit-gpt@8641822 ran bnb 0.41.
    qlora_saves_input: bool
    # lit-gpt@8641822 quantized every nn.Linear, lm_head included (Fabric BitsandbytesPrecision, no ignore list).
    qlora_quantizes_lm_head: bool
    # how logits and loss are laid out for loss="standard" (transformers v4.46.0, torchtune v0.4.0,
    # lit-gpt@8641822: one LossLayout member each, which cites the code)
    standard_loss: LossLayout
    # the torch AdamW implementation the framework's default recipe runs (torch v2.13.0 torch/optim/adamw.py)
    torch_optimizer_impl: OptimizerImpl
    # TRL v0.7.6-v0.21.x SFTTrainer (v0.21.0 trainer/sft_trainer.py l. 600-629, trainer/utils.py l. 582-589
    # peft_module_casting_to_bf16): after prepare_model_for_kbit_training, with args.bf16 on a 4-bit model that is not
    # sharded, every fp32 embed_tokens / lm_head module goes back to bf16 (norms stay fp32); v0.22.0 makes neither call.
    qlora_16bit_embeddings: bool = False
    # TRL 1.16.0's SFT, DPO, KTO and GRPO trainers on a 4-bit or 8-bit model: no prepare_model_for_kbit_training (only the
    # experimental ORPO and CPO trainers call it), and every trainable parameter cast to bf16 after get_peft_model
    # (trl/trainer/sft_trainer.py l. 902-911, dpo_trainer.py l. 726-729, kto_trainer.py l. 778-780, grpo_trainer.py
    # l. 538-541): QLoRA adapters in 16 bits, their inputs not cast to fp32 (estimate/framework.py scenario_profile)
    qlora_adapters_16bit: bool = False
    # FSDP keeps the root unit (embeddings, final norm, lm_head when not wrapped on their own)
    # gathered from the start of forward to the end of backward (torch v2.13.0 docs/source/notes/fsdp.rst);
    # torchtune shards tok_embeddings and output as units of their own (custom_sharded_layers)
    fsdp_root_gathered: bool = True
    # methods whose recipes leave tok_embeddings and output in the root unit although ``fsdp_root_gathered`` is
    # unset: torchtune v0.4.0 (and @30b8519e8) sets custom_sharded_layers only in the *_full.yaml configs
    # (recipes/configs/llama3_1/70B_full.yaml); the LoRA/QLoRA configs set none, so lora_finetune_distributed.py
    # shards the decoder layers, then fully_shard(model) holds the rest (training/_distributed.py shard_model),
    # and torch 2.4-2.7 never reshards the root after forward (distributed/_composable/fsdp/_fsdp_state.py
    # _lazy_init: ``post_forward_mesh_info = None`` for the root, unconditionally until torch 2.8 made it
    # ``if self._auto_reshard_after_forward``)
    fsdp_root_unit_methods: tuple[Method, ...] = ()
    # FSDP (parallelism fsdp) is FSDP1 wrapping a model loaded on the host: FullyShardedDataParallel(model,
    # device_id=...) moves, flattens and shards one unit at a time on the GPU (accelerate v0.28.0 accelerator.py
    # prepare_model passes device_id=self.device; AnswerDotAI/fsdp_qlora@4cd6923 train.py l. 724-736); the cached
    # transients stay reserved (estimate/fsdp_reserved.py). FSDP2 engines shard on the meta device instead.
    fsdp1_host_wrap: bool = False
    # that wrap runs with sync_module_states=True: rank 0 broadcasts each unit's moved tensors in coalesced
    # buckets before flattening them (estimate/fsdp_reserved.py); AnswerDotAI/fsdp_qlora@4cd6923 train.py
    # l. 733 (sync_module_states=args["low_memory"], default True l. 1011), PEFT examples/sft/configs/
    # fsdp_config*.yaml `fsdp_sync_module_states: true` (accelerate's own plugin default is False)
    fsdp1_sync_module_states: bool = False
    # the training loop empties the allocator's cache after that wrap, before the first step: torchtune@c69fba18b
    # recipes/*_finetune_distributed.py train() -> utils.cleanup_before_training() (torchtune/utils/memory.py:
    # gc.collect(); torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()): only the free remainders of
    # segments that hold a shard stay reserved (estimate/fsdp_reserved.py)
    fsdp1_empty_cache_after_wrap: bool = False
    # FSDP (parallelism fsdp) wraps each trainable leaf (every LoRA A and B) as an FSDP1 unit of its own nested in
    # its decoder layer's unit (peft v0.21.2 utils/other.py fsdp_auto_wrap_policy: lambda_policy_fn;
    # AnswerDotAI/fsdp_qlora@05ed9f2 train.py get_wrapping_policy), under FSDP1's all-gather rate limiter
    # (limit_all_gathers=True: its default, and fsdp_qlora's l. 760): the next layer's gather waits for the
    # free events of the nested units, so it does not overlap the layer's compute (plan/traffic.py)
    fsdp_lora_units_nested: bool = False
    # the Trainer's gradient checkpointing is torch's reentrant one: transformers 4.x gradient_checkpointing_enable
    # fills gradient_checkpointing_kwargs=None with {"use_reentrant": True} (v4.45.2 modeling_utils.py l. 2404, v4.57.1
    # l. 3692; v5.24.0 l. 3158 defaults to False). Under FSDP1 with frozen block units this keeps every block's
    # recomputed input and its gradient until the end of backward (estimate/reentrant_fsdp1.py)
    ckpt_reentrant: bool = False
    # the model's layer loop runs the checkpoint around each decoder layer as the FSDP wrapper replaced it, so FSDP1's
    # pre-forward runs inside the recompute (transformers v4.51.3 models/llama/modeling_llama.py LlamaModel.forward:
    # ``self._gradient_checkpointing_func(decoder_layer.__call__, hidden_states, ...)``); from v4.52.0 the layer
    # checkpoints inside its own __call__ (modeling_layers.py GradientCheckpointingLayer), inside the unit
    ckpt_around_fsdp_units: bool = False
    # the framework's multi-GPU launcher leaves each rank one CPU thread (HF: `accelerate launch`, framework.py); torchtune's
    # `tune run` is torch.distributed.run
    # (torchtune@30b8519e8 torchtune/_cli/run.py l. 18, 81-89 `_run_distributed` calls its run(args)), whose
    # config_from_args sets OMP_NUM_THREADS=1 for every rank when nproc_per_node > 1 and the variable is unset
    # (torch v2.13.0 distributed/run.py l. 872-884), so an offloaded optimizer step (torch's CPU AdamW) runs on one
    # core per rank (plan/kernels.py CPU_ADAM_PARAMS_PER_S_ONE_THREAD)
    ranks_single_threaded: bool = False
    # the attention output reaches o_proj as a copy: torchtune runs packed batches through
    # flex_attention, whose [B, H, S, D] output `transpose(1, 2).contiguous()` copies
    # (torchtune v0.4.0 modules/attention.py); SDPA flash/efficient outputs are already [B, S, H, D]
    attn_output_copied: bool = False
    # tokens per micro-batch up to which the 4-bit matmul runs without de-quantizing the weight
    # (bitsandbytes@0.50.2, constants.BNB_GEMM_4BIT_FUSED_MAX_TOKENS); 0 = always de-quantizes
    # (bnb <= 0.49, torchao NF4's weight.to(dtype))
    qlora_fused_max_tokens: int = 0
    # the 4-bit weights were quantized from an fp16 copy, so bitsandbytes de-quantizes them to fp16 and
    # MatMul4Bit's `.to(A.dtype)` makes a second, bf16 copy under bf16 compute (Lightning@71aed75
    # fabric/plugins/precision/bitsandbytes.py _Linear4bit._quantize_weight: `weight.contiguous().to(device="cuda",
    # dtype=torch.half)` then quantize_4bit; bitsandbytes 0.41.1 functional.py quantize_4bit keeps `A.dtype` in the
    # state, dequantize_4bit allocates `out` in it; autograd/_functions.py MatMul4Bit: dequantize_4bit(B, state).to(A.dtype))
    qlora_dequant_via_fp16: bool = False
    # FSDP/ZeRO-3 keep each 4-bit weight's quantization state whole on every GPU (bitsandbytes >= 0.43.0 holds it on
    # the Linear4bit module, see core._module_quant_state); torchao's NF4Tensor shards its scalers with the data
    qlora_module_quant_state: bool = False
    # the model runs transformers' modelling code (transformers v5.24.0): masking_utils builds a real
    # mask for sliding windows, sdpa_attention.py passes enable_gqa only without a mask, soft-capped
    # attention falls back to eager, MoE experts are 3-D parameters (PEFT ParamWrapper for LoRA)
    runs_transformers_modeling: bool = False
    # transformers >= v4.53.0 masking_utils.py (v5.24.0 alike): the model builds one (B, 1, S, S) mask per attention
    # type its layers use (Gemma 2/3, gpt-oss: ``causal_mask_mapping`` = create_causal_mask and
    # create_sliding_window_causal_mask), float for eager, boolean for SDPA (torch converts it to a 16-bit bias in
    # every layer's call). False: v4.44.2-v4.52.4 ``_update_causal_mask`` builds one float mask in the embeddings'
    # dtype that every layer shares (Mistral bakes the window into it; Gemma 2/3 make their sliding mask inside each
    # sliding decoder layer, dropped when the layer returns). estimate/attention.py mask_count, forward_extras.py
    masks_per_layer_type: bool = False
    # transformers v5.24.0 integrations/bitsandbytes.py quantizes only modules whose type is exactly
    # nn.Linear (Falcon's FalconLinear stays unquantized) and never the 3-D expert parameters
    quantizes_exact_linear_only: bool = False
    # MXFP4 expert banks (spec.experts_mxfp4) de-quantized to bf16 at load (Mxfp4Config(dequantize=True), the
    # only trainable path: quantizers/quantizer_mxfp4.py is_trainable): the integer type of the nibble indices
    # _convert_moe_packed_tensors makes per byte of blocks; transformers v5.24.0 integrations/mxfp4.py l. 270-277
    # `(blk & 0x0F).to(torch.int)` (4 B), deleted before the high nibble's; 0 = the framework loads no MXFP4
    mxfp4_index_bytes: int = 0
    # the modelling code is transformers 4's for the MoE experts: a family whose v4 training forward loops over the
    # experts with indexed bank copies (spec.experts_v4_indexed_loop, transformers v4.55.0 GptOssExperts.forward) runs
    # that loop, unless a hub kernel replaces it (scenario moe_kernel); v5.24.0 runs grouped_mm (integrations/moe.py)
    experts_v4_forward: bool = False
    # both nibble index tensors alive at once (transformers v4.55.0 integrations/mxfp4.py l. 119-120: int64
    # idx_lo and idx_hi made before either is used)
    mxfp4_indices_together: bool = False
    # the parallelisms under which the framework calls from_pretrained with no device_map, so the weights load into
    # host memory and the engine moves (or shards) them afterwards: FSDP and ZeRO-3 by default (transformers v4.55.0
    # modeling_utils.py l. 848-849: `if device_map is None: param_device = "cpu"`); estimate/mxfp4_load.py
    weights_load_host: tuple[Parallelism, ...] = (*FSDP_FAMILY, Parallelism.ZERO3)
    # an MXFP4 bank loaded to the host is still de-quantized on the GPU: transformers v4.55.0 integrations/mxfp4.py
    # l. 93-96 moves CPU blocks and scales to CUDA whenever it is available, l. 327-330 moves the result back and
    # empties the cache (v5.24.0 _convert_moe_packed_tensors converts on the blocks' own device)
    mxfp4_host_dequant_on_gpu: bool = False
    # the modelling code is transformers 4's for vision encoders: a tower whose v4 encoder checkpoints its layers
    # (spec.vision.checkpointed_v4, transformers v4.46.2 models/mllama/modeling_mllama.py l. 381-386) runs them under
    # checkpointing once the model's gradient checkpointing is on; v5.24.0 runs them as plain modules
    vision_v4_checkpointing: bool = False
    # the vision-language checkpoints (config model_type) whose images the framework's recipes feed through a vision
    # tower; None: any transformers loads (AutoModelForImageTextToText; Unsloth's FastVisionModel loads through it,
    # unsloth@6a83bb53a5 unsloth/models/vision.py). torchtune v0.4.0 builds one vision-language family,
    # torchtune/models/llama3_2_vision/_model_builders.py (Mllama's checkpoints); v0.1 none; lit-gpt@8641822
    # lit_gpt/config.py and torchtitan@9dec370 torchtitan/models/ hold decoder-only text models. Images elsewhere are
    # refused (estimate/vision_inputs.py check_image_framework)
    image_model_types: tuple[str, ...] | None = None
    # a vision-language model's tower stays frozen unless the scenario says (freeze_vision=auto); no
    # modelled framework freezes it (transformers v5.24.0 Trainer trains every parameter, peft v0.21.2
    # all-linear adapts the tower's linears, Unsloth FastVisionModel.get_peft_model
    # finetune_vision_layers=True)
    freezes_vision: bool = False
    # enable_input_require_grads (run for adapters under gradient checkpointing) hooks the input embeddings of every
    # sub-model, the vision tower's patch embedding among them, so autograd records even a frozen tower (transformers
    # v5.24.0 modeling_utils.py l. 2147-2180: each PreTrainedModel with get_input_embeddings; v4.57.1 l. 2858 and
    # earlier hooked the model's own input embeddings only; estimate/vision.py frozen_tower_recorded)
    hooks_sub_model_embeddings: bool = False
    # QLoRA of a vision-language model quantizes the tower's and projector's linears too (scenario quantize_vision
    # auto): transformers v5.24.0 quantizers/base.py get_modules_to_not_convert keeps only get_keys_to_not_convert's
    # (the output head, tied weights, the last parameter) and _keep_in_fp32_modules (none in Gemma 3, Qwen2.5/3-VL,
    # Mllama); bitsandbytes replaces every other nn.Linear; frameworks whose checkpoints keep the vision
    # layers 16-bit set it False (unsloth.py)
    qlora_quantizes_vision: bool = True
    # the framework's collator casts the batch's pixel values to the model's dtype, so they reach the GPU in the compute
    # dtype, not as the processors' float32 (unslothai/unsloth-zoo@ce232d6c unsloth_zoo/vision_utils.py
    # UnslothVisionDataCollator._cast_pixel_values_dtype_inplace: `batch[key].to(self.dtype)`, the config's dtype);
    # TRL 1.16.0's DataCollatorForVisionLanguageModeling (trainer/sft_trainer.py) returns the processor's tensors as
    # they are (estimate/vision.py pixel_input_bytes)
    pixels_in_model_dtype: bool = False
    # model types the framework runs in its forced-float32 mode when the scenario asks for fp16 (a card without
    # bf16), each with what that mode keeps in fp32 (ForcedFp32); the weights stay 16-bit and nothing runs under
    # autocast (activations.dtypes_for). unslothai/unsloth@015bdef models/loader.py l. 1805-1820 (the model type
    # on FORCE_FLOAT32 and dtype float16 or no bf16: UNSLOTH_FORCE_FLOAT32=1, load in bf16, weights then cast to
    # fp16); rl.py l. 2366-2380 (force_float32: the trainer's fp16/bf16 off, no autocast). The per-family
    # float32 patches (unsloth-zoo temporary_patches/) say which activations are fp32: see the profile's table.
    fp16_forced_fp32: tuple[tuple[str, ForcedFp32], ...] = ()
    # its forced-float32 mode loads the checkpoint in bf16 and casts it to fp16 module by module, so the load's high
    # point holds one fp16 copy of the largest 16-bit tensor beside every weight (estimate/cast_load.py; unslothai/
    # unsloth@6a83bb53a5 unsloth/models/vision.py l. 407-409, unslothai/unsloth-zoo@e8c8beae patching_utils.py l. 244-266)
    forced_fp32_loads_bf16: bool = False
    # the precision a user of this framework gets when the scenario does not say, per method
    # (parse_scenario applies it); each profile cites the code it follows (transformers v5.24.0,
    # torchtune v0.4.0 recipe configs, Lightning-AI/litgpt@29ece59)
    default_precision: tuple[tuple[Method, Precision], ...] = (
        (Method.FULL, Precision.BF16_TRUE), (Method.LORA, Precision.BF16_TRUE), (Method.QLORA, Precision.BF16_TRUE))
    # tied input/output embeddings are loaded as two tensors (litgpt@0077627 finetune/full.py validate_args
    # refuses `tie_embeddings`, so lm_head is a separate copy of the embedding weights)
    untied_head_copy: bool = False
    # FSDP gradient accumulation under Fabric's no_backward_sync keeps unsharded gradients between
    # micro-batches (litgpt@0077627 finetune/full.py `fabric.no_backward_sync(model, enabled=is_accumulating)`;
    # torch v2.13.0 FSDP no_sync docstring: 'accumulating the full model gradients (instead of gradient shards)')
    fsdp_unsharded_accum_grads: bool = False
    # ... but only when the parameters are offloaded: AnswerDotAI/fsdp_qlora@4cd6923 train.py l. 1063-1064 turns
    # --no_sync on for --use_cpu_offload with gradient accumulation (FSDP1 cannot accumulate offloaded shards)
    fsdp_no_sync_when_offloaded: bool = False
    # FSDP1 LoRA: each decoder block is one unit whose FlatParameter holds the frozen weights and the adapters
    # together (use_orig_params=True), so a no_sync gradient spans the whole block (estimate/step_grads.py
    # _fsdp1_no_sync_grads); Lightning-AI/pytorch-lightning@71aed75 (2.1.0) fabric/strategies/fsdp.py l. 173-175
    # sets use_orig_params=True, lit-gpt@8641822 finetune/lora.py l. 83-85 wraps auto_wrap_policy={Block}
    fsdp_lora_block_units: bool = False
    # LoRA's A and B are nn.Linear modules whose weights F.linear receives as leaves that require grad: under autocast
    # each fp32 one's 16-bit cast is cached for the whole autocast region (torch v2.13.0 aten/src/ATen/autocast_mode.cpp
    # cached_cast: ``can_try_cache`` for an fp32 leaf that requires grad and is not a view), so the forward holds every
    # adapter's copy until it returns (peft v0.21.2 tuners/lora/layer.py Linear.forward ``lora_B(lora_A(dropout(x)))``);
    # lit-gpt multiplies by transposed views (no cache), Unsloth casts with ``.to`` (estimate/forward_extras.py)
    autocast_caches_adapters: bool = False
    # the loop forces the longest training sample into the first micro-batch and pads that batch to it
    # (lit-gpt@8641822 finetune/lora.py get_batch: `ix[0] = longest_seq_ix` at iter_num 0, `max_len = max(...)`),
    # so only the first micro-batch is known to be seq_len long; with held gradients the later ones bound the peak
    # from above (estimate/first_batch.py states the floor)
    longest_sample_first: bool = False
    # what the loop still references from the previous micro-batch while the next one runs its forward (LoopCarry:
    # each value cites its loop, e.g. litgpt@5895df10 finetune/lora.py l. 276-280 `logits = model(...)` bound until
    # the next forward returns; transformers v5.24.0 Trainer.training_step returns `loss.detach()`); what backward
    # did not free of the graph stays (estimate/retained_graph.py)
    loop_carry: LoopCarry = LoopCarry.NOTHING
    # full fine-tuning computes the logits unchunked (litgpt@0077627 finetune/full.py `logits = model(input_ids)`,
    # then chunked_cross_entropy over 128-token chunks of them); LoRA keeps the chunked head (lora.py)
    full_unchunked_logits: bool = False
    # an older TRL's log-prob code for ORPO and CPO/SimPO (estimate/stages/profiles.py); None: TRL 1.16.0's kernel
    trl_logits_logprobs: LogProbs | None = None
    # the stages whose trainer replaces its log-prob code by a fused linear loss when asked (scenario loss fused or
    # chunked; use_liger_kernel). None in trl 1.16.0: DPO, KTO and GRPO keep their fused LM head and turn Liger's
    # fused_linear_cross_entropy off (trainer/dpo_trainer.py:937-952, kto_trainer.py:948-963, grpo_trainer.py:1049-1064),
    # and ORPO/CPO (experimental/orpo/orpo_trainer.py:771, experimental/cpo/cpo_trainer.py) call the model without
    # labels, so Liger's patched forward computes the whole logits (liger-kernel v0.5.10 transformers/model/llama.py
    # l. 221 fuses only with labels); the stage's own path then stands, whatever the scenario's loss says
    fused_stage_losses: tuple[Stage, ...] = ()
    # the preference trainer casts the model's logits to fp32 before its log-probs
    # (hiyouga/LLaMA-Factory@ff6d4d1 src/llamafactory/train/dpo/trainer.py:230, kto/trainer.py:179 `.logits.to(torch.float32)`)
    stage_logits_fp32: bool = False
    # the trainer calls the model through accelerate's native-AMP wrapper whenever it runs mixed precision outside
    # DeepSpeed: Accelerator.prepare_model sets ``model.forward = convert_outputs_to_fp32(autocast(forward))``
    # (huggingface/accelerate v0.33.0 accelerator.py l. 1375-1384, v1.16.0 l. 1791-1801; native_amp is off under
    # DeepSpeed, l. 535-564), and ``convert_to_fp32`` is ``tensor.float()`` on every fp16/bf16 tensor of the output
    # (utils/operations.py l. 777-778): a trainer that reads the model's logits (TRL's preference and RL trainers,
    # all HF Trainer subclasses) reads them in fp32, the 16-bit ones dropped with the output
    amp_outputs_fp32: bool = False
    # ORPO's SFT term and the pref_ftx/SimPO terms are the mean of the per-token log-probs already held
    # (LLaMA-Factory@ff6d4d1 dpo/trainer.py:150-157 odds_ratio_loss `sft_loss = -chosen_logps`, :300-302): no
    # cross-entropy over the chosen half's logits, whatever cpo_alpha/rpo_alpha say
    chosen_nll_in_logps: bool = False
    # a full fine-tune's frozen reference copy is loaded in the compute dtype, never upcast to fp32
    # (LLaMA-Factory@ff6d4d1 model/adapter.py:310 `if is_trainable and cast_trainable_params_to_fp32`;
    # trainer_utils.py:136-146 create_ref_model loads it with is_trainable=False)
    reference_compute_dtype: bool = False
    # the policy's (fp32) logits stay alive through the reference pass: LLaMA-Factory@ff6d4d1 dpo/trainer.py:239
    # `chosen_logits, rejected_logits = all_logits.split(batch_size, dim=0)` (views) are held by
    # get_batch_loss_metrics (:289-290) while compute_reference_log_probs runs (:293); TRL reduces them to means
    keeps_policy_logits: bool = False
    # the fused linear cross-entropy (scenario loss "fused") runs only in training: Liger's patched forward
    # materialises the logits and calls the model's own loss outside it (linkedin/Liger-Kernel v0.5.8
    # src/liger_kernel/transformers/model/qwen2.py lce_forward l. 206 ``if self.training and (labels is not None)``;
    # v0.5.10 l. 202), so evaluation passes hold whole logits (estimate/evaluation.py)
    fused_loss_trains_only: bool = False
    # the fused loss reads the output layer's weight from the model's forward instead of calling the layer (Liger
    # v0.5.6 src/liger_kernel/transformers/model/qwen2.py l. 97 ``lce(self.lm_head.weight, ...)``), so under ZeRO-3 the
    # read registers it as an external parameter of the CausalLM module, the forward's outermost module (DeepSpeed
    # v0.16.5 runtime/zero/parameter_offload.py l. 57-71 ZeROOrderedDict.__getitem__: ``register_external_parameter(
    # FWD_MODULE_STACK[-1], param)``, armed for every module by engine.py l. 1990-1994 ``_in_forward = True``). From
    # then on that module fetches it at the first step of every forward (partitioned_param_coordinator.py l. 34-40
    # iter_params adds ``ds_external_parameters()``), so in an evaluation pass the head counts in the live elements the
    # prefetch fills up to stage3_max_live_parameters (l. 380-405) instead of coming on top of them
    # (estimate/core.py zero3_eval_head_relief, checked on the simulator)
    fused_loss_head_external: bool = False
    # what the recipe can be told to run, which the planner may offer: bitsandbytes' 8-bit and paged optimizers, and
    # a fused linear + cross-entropy loss (Liger / Cut Cross-Entropy). torchtitan v0.3.0 builds only Adam, AdamW and
    # DistMuon (components/optimizer/optimizer.py _resolve_optimizer_factory) and computes its own cross-entropy on the
    # whole logits (components/loss.py cross_entropy_loss); torchtitan@9dec370 torchtitan/optimizer.py l. 33-39 builds
    # torch.optim.Adam or AdamW, else NotImplementedError("Optimizer {name} not added."). False: a scenario's
    # bitsandbytes optimizer (BNB_OPTIMIZERS) is refused too (framework.check_runs)
    runs_bnb_optimizers: bool = True
    # the fused linear + cross-entropy loss: Liger (linkedin/Liger-Kernel v0.5.10) or Cut Cross-Entropy, which
    # torchtitan v0.3.0 does not call (components/loss.py cross_entropy_loss)
    runs_fused_loss: bool = True
    # ``loss: chunked`` (torchtune's CEWithChunkedOutputLoss, estimate/loss.py) as something the recipe can be told to
    # run: torchtitan v0.3.0 components/loss.py has cross_entropy_loss on the whole logits only (its
    # ChunkedLossWrapper came in 9530a874d, 2026-06-26, after the profile's release); Unsloth's loss is its own
    # fused cross-entropy; litgpt's scripts always run their chunked_cross_entropy, which is their ``loss: standard``.
    # False: refused (framework.check_runs), never offered by the planner
    runs_chunked_loss: bool = True
    # ``dora`` runs: PEFT's DoRA (peft v0.21.2 tuners/lora/variants.py DoraLinearVariant, tuners/lora/dora.py
    # DoraLinearLayer) or torchtune's (v0.4.0 modules/peft/dora.py DoRALinear, since v0.3.0); estimate/dora.py. litgpt
    # has none, and Unsloth's own LoRA kernels (unsloth@015bdef models/llama.py get_peft_model) are not modelled: refused
    runs_dora: bool = False
    # ``modules_to_save`` runs: PEFT's ModulesToSaveWrapper (huggingface/peft@5d602fdbf src/peft/utils/other.py
    # ModulesToSaveWrapper.update: a ``copy.deepcopy`` of the module trained beside the frozen original;
    # estimate/saved_modules.py), which Unsloth's get_peft_model also builds. torchtune, litgpt and torchtitan build no
    # such copies: refused
    runs_modules_to_save: bool = False
    # the dtype each copy is trained in (SavedCopyDtype): PEFT's keeps the original's (peft@5d602fdbf
    # ModulesToSaveWrapper.update), Unsloth's an fp16 original's in fp32 (unsloth@015bdef models/llama.py l. 162-189)
    saved_copy_dtype: SavedCopyDtype = SavedCopyDtype.ORIGINAL
    # the checkpointing mode under which get_peft_model moves the frozen originals of the copies to disk before PEFT
    # copies them (None: never): Unsloth's "unsloth" mode (unsloth@015bdef models/llama.py l. 3466-3480
    # offload_input_embeddings / offload_output_embeddings)
    saved_originals_to_disk_under: Checkpointing | None = None
    # the model types whose loader reaches that get_peft_model (unsloth@015bdef models/loader.py l. 828-890: the
    # FastLlamaModel subclasses; FastModel's get_peft_model, models/vision.py l. 1855-2140, offloads nothing)
    saved_originals_to_disk_model_types: tuple[str, ...] = ()
    # the quantizations that keep the load on that path (unsloth@015bdef models/loader.py l. 487: an 8-bit load goes
    # to FastModel)
    saved_originals_to_disk_quantizations: tuple[Quantize, ...] = ()
    # the LoRA targets the framework trains as whole copies instead of LoRA layers (unsloth@015bdef models/llama.py
    # get_peft_model l. 3317-3330: ``if module == "embed_tokens": train_embed_tokens = True;
    # modules_to_save.append("embed_tokens")``; its 2024.11/2024.12 releases did the same for ``lm_head``, unsloth@0e0d8fc
    # l. 2072-2079, until b7ec64c96f, 2026-03-03): refused in lora_targets, pointing to modules_to_save
    targets_trained_as_copies: tuple[str, ...] = ()
    # where a DoRA layer's base output comes from (profile_enums.DoraBase: peft v0.14.0 338aeff38 reuses the base
    # layer's where dropout is 0, else recomputes it on DoRA's own weight, which its matmul then keeps)
    dora_base_output: DoraBase = DoraBase.REUSED_WITHOUT_DROPOUT
    # DoRA forms B·A by running the adapters on ``torch.eye(in_features)`` (peft v0.12.0, #1806 a0788a3f9, for FSDP;
    # torchtune v0.4.0 the same); peft v0.9.0-v0.11.x tuners/lora/layer.py _apply_dora multiplied
    # ``lora_B.weight @ lora_A.weight``, no identity
    dora_eye: bool = True
    # its CPU offload moves parameters and gradients with the optimizer state, so there is no optimizer-only offload
    # to offer: torchtitan v0.3.0 training.enable_cpu_offload -> FSDP2 fully_shard(offload_policy=CPUOffloadPolicy())
    # (the importer reads it as offload optimizer+params, config_import/torchtitan.py)
    offload_moves_params: bool = False
    # the recipe can be told to offload model state to the host at all: litgpt's scripts build Fabric's FSDPStrategy
    # with ``cpu_offload=False`` written in (lit-gpt@8641822 finetune/lora.py l. 83-89, full.py l. 62-67;
    # litgpt@26857050 finetune/full.py l. 108-114), so a scenario's offload is refused and the planner offers none
    # (framework.check_runs)
    runs_offload: bool = True
    # ``compile: true`` is a switch of the framework's own training code: transformers' Trainer ``torch_compile``,
    # torchtune's ``compile`` (v0.4.0 recipes), torchtitan's ``training.compile``. litgpt's finetune scripts call no
    # torch.compile (litgpt@26857050 litgpt/finetune/lora.py, full.py, adapter.py: only pretrain.py compiles; lit-gpt@8641822
    # finetune/ the same), and Unsloth runs its own kernels and compiles its patched modules itself (unsloth-zoo
    # compiler.py), so a torch.compile of the whole model is not modelled on top (framework.check_runs refuses it, the
    # planner does not offer it)
    runs_compile: bool = True
    # where LossLayout.HF_UPCAST_IN_LOSS's upcast and cross-entropy run, as the estimate names it: transformers'
    # ForCausalLMLoss (loss/loss_utils.py), torchtitan@9dec370 train.py's loss_fn (``cross_entropy(pred.flatten(0,
    # 1).float(), ...)``)
    standard_loss_site: str = "ForCausalLMLoss"
    # the training stages the framework has a trainer or recipe for (empty: every stage, TRL's trainers: transformers'
    # Trainer via TRL, Unsloth's patched TRL trainers); framework.check_runs refuses the others. torchtune v0.4.0
    # (and @30b8519e8) recipes/: lora_dpo_single_device.py and lora_dpo_distributed.py (DPOLoss, or SimPOLoss with
    # return_average_logprobs, l. 459-460) and ppo_full_finetune_single_device.py; @c69fba18b (v0.1) only
    # lora_dpo_single_device.py. lit-gpt@8641822 finetune/ has adapter, adapter_v2, full and lora (supervised only);
    # torchtitan@9dec370 train.py runs next-token cross-entropy only
    stages: tuple[Stage, ...] = ()
    # the framework's own recipes for those stages (beyond SFT), where it runs them instead of TRL's trainers:
    # framework.check_runs refuses a method or a GPU count no recipe of the stage runs, and the stage's assumption
    # line names the recipe beside the stage profile the estimate counts (estimate/stages/profiles.py, TRL's). Empty:
    # TRL's trainers run every stage in ``stages``, every method, any GPU count. torchtune v0.4.0 (03a4b1e41)
    # torchtune/_recipe_registry.py l. 270-302: lora_dpo_single_device (supports_distributed=False) and
    # lora_dpo_distributed (True) train LoRA adapters only (recipes/lora_dpo_*.py get_adapter_params +
    # set_trainable_params) on whatever model builder the config names, the qlora_* builders' NF4 base included
    # (the LoRA SFT recipes run QLoRA the same way), with DPOLoss or SimPOLoss; ppo_full_finetune_single_device
    # (supports_distributed=False) trains the whole policy, no adapters. No full-weight DPO recipe before
    # full_dpo_distributed.py (fb5255725, 2025-02-07, first in v0.6.0)
    stage_recipes: tuple[StageRecipe, ...] = ()
    # the least per-device batch a KTO run accepts: TRL's KTOTrainer.__init__ refuses 1 while its loss computes the KL
    # term ("Actual (not effective) batch size must be > 1", trl v0.24.0 trainer/kto_trainer.py l. 680-683, 1.16.0
    # l. 844-847), pairing each example with another of its batch; a trainer that builds the KL inputs in preprocessing
    # and skips that __init__ runs 1 (LLaMA-Factory, framework_version llamafactory-0.9)
    kto_min_micro_batch: int = 2
    # checkpointing that keeps block inputs in host RAM can be asked of the recipe: torchtitan v0.3.0 (PyPI wheel)
    # distributed/activation_checkpoint.py ActivationCheckpointingConfig offers selective, full, memory-budget and none,
    # v0.2.2 config/job_config.py ActivationCheckpoint.mode none/selective/full: no activation offload
    runs_activation_offload: bool = True
    # the checkpointing the scripts run on (one GPU, several GPUs), when the user cannot choose it; empty: the user
    # chooses. lit-gpt@8641822 finetune/lora.py l. 83-90 (full.py, adapter.py alike) and litgpt@01fe959c
    # litgpt/finetune/lora.py setup(): several devices -> FSDPStrategy(activation_checkpointing_policy={Block}), one
    # device -> strategy "auto" with no checkpointing at all. A scenario that leaves gradient_checkpointing unset gets
    # it (scenario.py), the planner tries only it (plan/search.py configs_for), and an estimate that sets another says
    # the scripts do not run that (estimate/__init__.py)
    checkpointing_by_devices: tuple[Checkpointing, ...] = ()
    # the checkpointing a scenario that leaves gradient_checkpointing unset gets: the framework's own default where it
    # has one (unsloth@015bdef models/llama.py l. 3079 get_peft_model use_gradient_checkpointing="unsloth",
    # estimate/unsloth.py), else none (transformers v5.24.0 training_args.py gradient_checkpointing=False)
    default_checkpointing: Checkpointing = Checkpointing.NONE
    # the data-parallel engines the framework's own recipes can be told to run (empty: every value of ``parallelism``).
    # torchtune's distributed recipes shard with FSDP only, FULL_SHARD or, with ``fsdp_reshard_after_forward: False``,
    # SHARD_GRAD_OP (pytorch/torchtune@bd2a0fc7c recipes/full_finetune_distributed.py l. 62 and 382,
    # lora_finetune_distributed.py l. 58 and 326; @c69fba18b FSDP1 FULL_SHARD, l. 274): no DDP, no DeepSpeed anywhere
    # in recipes/ or torchtune/. torchtitan adds DDP over replicas and never runs DeepSpeed (9dec370
    # parallelisms/parallelize_llama.py apply_fsdp / apply_ddp; v0.2.2 fsdp_reshard_after_forward "never"). litgpt's
    # scripts shard with Fabric's FSDPStrategy (FULL_SHARD) whenever there is more than one device
    # (lit-gpt@8641822 finetune/lora.py l. 78-90)
    parallelisms: tuple[Parallelism, ...] = ()
    # the parallelism several GPUs get when the scenario names none; None: DDP where ``parallelisms`` has it, else FSDP
    # (framework.multi_gpu_default). torchtitan shards by default: --training.data_parallel_shard_degree defaults to
    # -1, "leftover ranks will be used", and data_parallel_replicate_degree to 1 (9dec370 torchtitan/config_manager.py
    # l. 242-268; v0.2.2 torchtitan/config/job_config.py l. 313 and 324), so FSDP runs over every rank the tensor,
    # pipeline and context degrees leave
    default_parallelism: Parallelism | None = None
    # DDP (data-parallel replicas without sharding) can run beside tensor, pipeline or context parallelism. torchtitan
    # cannot: 9dec370 parallelisms/parallelize_llama.py l. 106-108 (``elif parallel_dims.dp_replicate_enabled: if
    # world_mesh.ndim > 1: raise RuntimeError("DDP has not supported > 1D parallelism")``; v0.2.2
    # models/llama3/infra/parallelize.py l. 148-151 the same), and with context parallel l. 79-80 take FSDP's branch
    # (``dp_shard_enabled or cp_enabled``): framework.check_ddp_layout refuses ddp there with data-parallel ranks to
    # replicate, or with context parallel (tensor/pipeline parallel alone over every GPU runs neither, l. 79-108:
    # ddp then stands for that, as the TOML importer writes it)
    ddp_beside_model_parallel: bool = True
    # a quantized base trains on one device only: litgpt's scripts raise NotImplementedError("Quantization is currently
    # not supported for multi-GPU training") for --quantize with more than one device (lit-gpt@8641822
    # finetune/lora.py l. 78-82; litgpt@26857050 litgpt/finetune/lora.py l. 152-157)
    quantized_on_one_device: bool = False
    # a bitsandbytes-quantized base refuses "-mixed" precision: litgpt's scripts raise ValueError("Quantization and
    # mixed precision is not supported.") when --quantize bnb.* meets a "mixed" precision (lit-gpt@8641822
    # finetune/lora.py; litgpt@26857050 litgpt/finetune/lora.py alike), so QLoRA runs bf16-true / 16-true / 32-true
    quantized_refuses_mixed: bool = False
    # methods the framework trains (empty: all). torchtitan v0.3.0 has no 4-bit base: no bitsandbytes, NF4 or int4
    # anywhere in the package (its quantization converters are float8 and MX training); LoRA is its LoRAConverter
    # (components/lora.py)
    methods: tuple[Method, ...] = ()
    # the recipes can shard inside a node and replicate across nodes (HSDP, ``shard_scope: node``). litgpt's
    # fine-tuning scripts shard over every rank: Fabric's FSDPStrategy with its default FULL_SHARD (litgpt@26857050
    # finetune/full.py l. 108-114, adapter.py l. 126) or ModelParallelStrategy(data_parallel_size=devices * num_nodes)
    # (finetune/lora.py l. 158-162); only pretrain.py l. 143 asks for HYBRID_SHARD. torchtune's distributed recipes
    # take data_parallel_replicate_dim (torchtune@bd2a0fc recipes/full_finetune_distributed.py l. 170)
    runs_hybrid_shard: bool = True
    # what the run is where only one rank holds each shard (one GPU, DDP only, or tensor/pipeline parallel alone):
    # torchtitan v0.3.0 applies FSDP2 at every degree (models/llama3/parallelize.py: "Always run
    # apply_fsdp_to_decoder -- with shard_degree=1 it is a no-op for the all-gather but still installs the
    # MixedPrecisionPolicy"), as the estimate counts it; its releases before applied FSDP, and with it the bf16 cast
    # and the CPU offload, only over more than one shard (9dec370 parallelisms/parallelize_llama.py l. 80 and
    # parallel_dims.py l. 103-104; v0.2.2 models/llama3/infra/parallelize.py l. 125 ``if parallel_dims.fsdp_enabled``),
    # running fp32 there (9dec370 train.py: no autocast) or autocast (v0.2.2 distributed/utils.py maybe_enable_amp,
    # off under TP/PP). Said as an assumption line; empty: nothing to say
    one_shard_note: str = ""
    # said beside the framework line where the modelled release is not the newest one users install, with what the
    # newer one runs that is not modelled (torchtitan: v0.2.2 modelled, 0.3.0's chunked loss and flex attention not)
    release_note: str = ""
    # the recipe leaves config.use_cache on (Llama-2 config.json use_cache: true) and checkpoints the blocks with
    # torch's checkpoint_wrapper, not HF's gradient_checkpointing_enable, so the model builds and returns the KV
    # cache in training: transformers v4.31.0 models/llama/modeling_llama.py l. 615 (use_cache from the config),
    # l. 658-663 (forced off only under self.gradient_checkpointing), l. 324 and 704-705 (each layer's post-rotary
    # k and v appended to next_decoder_cache, returned as past_key_values); estimate/loss.py returned_cache_bytes
    returns_kv_cache: bool = False
    # the release(s) the fields above model, framework_version's default (e.g. transformers v5.24.0 +
    # peft v0.21.2; each profile names its own)
    version: str = ""
    # older releases whose code keeps different tensors, each citing the release that differs
    # (e.g. transformers v4.44.2 logits.float(), peft v0.11.1 base-dtype adapters)
    older_versions: tuple[FrameworkVersion, ...] = ()
    # ``-mixed`` is FSDP2 MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), not autocast:
    # the all-gathered parameters are bf16, so activations and the residual stream are bf16; fp32
    # lives only in the sharded parameters, gradients and optimizer states (torchtitan@9dec370
    # parallelize_llama.py apply_fsdp; torch v2.13.0 distributed/fsdp/_fully_shard/_fsdp_api.py)
    mixed_casts_params: bool = False
    # the same cast under FSDP only, besides autocast (accelerate v0.28.0/v1.15.0 state.py fsdp_plugin.set_mixed_precision
    # -> utils/dataclasses.py FullyShardedDataParallelPlugin.set_mixed_precision: MixedPrecision(param_dtype=dtype))
    fsdp_mixed_casts_params: bool = False
    # that cast's policy reduces gradients and casts outputs in the parameter dtype too, not fp32 (accelerate v1.15.0
    # utils/dataclasses.py FullyShardedDataParallelPlugin.set_mixed_precision, called from state.py
    # AcceleratorState.__init__: `dtype_args = {"param_dtype": dtype, "reduce_dtype": dtype}` plus
    # `buffer_dtype` (FSDP1) or `output_dtype=dtype` (FSDP2); the same reduce_dtype in every release from v0.12.0,
    # where the policy first appears, FSDP2's output_dtype from v1.6.0); torchtitan@9dec370 reduces in fp32
    # (parallelize_llama.py apply_fsdp: MixedPrecisionPolicy(param_dtype, reduce_dtype=fp32))
    fsdp_reduce_in_param_dtype: bool = False
    # ``-mixed`` under DeepSpeed ZeRO is the engine's cast, not autocast: the engine casts the module's parameters to
    # bf16/fp16 (DeepSpeed 0.19.8 runtime/engine.py _configure_distributed_model -> _cast_module_mixed_precision) and
    # keeps fp32 only in the optimizer's master partitions, and the trainer runs no autocast (accelerate 1.15.0
    # accelerator.py: native_amp stays False for DistributedType.DEEPSPEED, bf16 and fp16 alike; Lightning 2.x
    # fabric/plugins/precision/deepspeed.py DeepSpeedPrecision.forward_context: no autocast either), so activations
    # and the residual stream are 16-bit
    ds_mixed_is_engine_cast: bool = True
    # DeepSpeed < 0.9.0 gathers ZeRO-3 parameters on one GPU too: an offloaded one is copied to the GPU, then gathered
    # into a second buffer (v0.8.3 zero/partition_parameters.py all_gather_coalesced; NoGatherHandle since v0.9.0 #2953)
    ds_gathers_on_one_gpu: bool = False
    # DeepSpeed < 0.18.7 ZeRO-1/2 move each parameter group to the host and empty the cache before flattening it
    # (v0.16.2 runtime/zero/stage_1_and_2.py __init__ l. 320-329: ``param.cpu_data = param.data.cpu()``,
    # ``empty_cache()``; v0.8.3 l. 302 and v0.12.0 l. 318 ``move_to_cpu(self.bit16_groups[i])``, the same through
    # v0.18.6); v0.18.7 (PR #7828, 84af82212) flattens on the accelerator when it has the room (estimate/ds_load.py)
    ds_flattens_on_host: bool = False
    # DeepSpeed < 0.17.2 ZeRO-1/2 allocate the IPG reduction buckets at the start of the optimizer's backward(), before
    # the loss's backward runs (v0.16.2 runtime/zero/stage_1_and_2.py backward l. 2029-2052: ``buf_0 =
    # torch.empty(int(self.reduce_bucket_size), ...)``, ``buf_1`` with overlap_comm, then ``loss.backward``; the same
    # in v0.8.3, v0.9.0, v0.10.0, v0.12.0, v0.14.0, v0.15.0, v0.17.0, v0.17.1 backward -> backward_prologue); PR #6993
    # (ed5f73755, in v0.17.2) dropped that call, leaving the first gradient hook's (process_gradients ->
    # backward_prologue, renamed setup_buckets by PR #7665 in v0.18.3): live at the loss's backward only when True
    ds_ipg_at_backward_start: bool = False
    # what compile: true covers (torchtune v0.4.0 recipes compile model and loss; torchtitan@9dec370
    # compiles each block, loss eager: one CompileScope member each)
    compile_scope: CompileScope = CompileScope.MODEL_AND_LOSS
    # recipes (method, several GPUs) that run the compiled standard loss; None: all. torchtune v0.4.0 full_finetune_*.py
    # and lora_finetune_distributed.py drop what training.compile_loss(self._loss_fn) returns (CrossEntropyLoss stays
    # eager; the chunked loss is patched in place); lora_finetune_single_device.py assigns it
    compiled_loss_recipes: tuple[tuple[Method, bool], ...] | None = None
    # RMSNorm is one Triton kernel that saves its 16-bit input and the fp32 rstd per row
    # (unsloth@015bdef unsloth/kernels/rms_layernorm.py Fast_RMS_Layernorm: save_for_backward(X, W, r))
    rmsnorm_kernel: bool = False
    # LoRA_MLP / LoRA_QKV / LoRA_W autograd functions (unsloth@015bdef unsloth/kernels/fast_lora.py):
    # each saves only its input X (the MLP also the gate and up outputs e, g); lora_A's output is
    # recomputed in backward, and the SwiGLU backward overwrites e, g and the down-proj gradient in place
    lora_fused_autograd: bool = False
    # block-input-sized tensors on the GPU during one block's backward under gradient_checkpointing
    # "offload": the restored input and the prefetched next one (transformers v5.24.0
    # activation_checkpointing_enable(offload=True), torch saved_tensors_hooks). Unsloth's
    # "unsloth" mode (unsloth-zoo@36ff5fc unsloth_zoo/gradient_checkpointing.py
    # UnslothCheckpointFunction): the input copied back into one GPU_BUFFER, the last layer's input
    # never offloaded (CURRENT_GC_INDEX == LAST_GC_INDEX), and in backward the incoming dY, the
    # recomputed block output and the input's .grad (torch.autograd.backward(outputs, args); inp.grad)
    offload_ckpt_block_tensors: int = 2
    # of those, the next block's input prefetched ahead (transformers v5.24.0 activation_checkpointing_enable
    # (offload=True): the restored input and the prefetched next one, above); the lowest block has no next
    # one, so its backward holds one fewer. Unsloth (unsloth-zoo@36ff5fc) prefetches nothing.
    offload_ckpt_prefetched: int = 1
    # LoRA matmuls add the adapter product out of place, an output-sized temporary: unsloth@0e0d8fc
    # kernels/utils.py matmul_lora `out += (X @ A.to(dtype)) @ (s * B.to(dtype))` (in place, `out.addmm_`, since
    # unsloth@4f16602), so LoRA_MLP.backward's DW = matmul_lora(dY, downW.t(), ...) holds two (T, I) tensors
    lora_product_temporary: bool = False
    # every attention layer owns a RoPE cos/sin cache in the compute dtype that grows with the sequence
    # (unsloth@0e0d8fc models/_utils.py patch_llama_rope_scaling builds `self.rotary_emb` in each
    # LlamaAttention.__init__; sizes in estimate/unsloth.py rope_cache_bytes)
    rope_cache_per_layer: bool = False
    # those caches hold the model's whole context, fixed: built at max(max_seq_length, max_position_embeddings) rows
    # and never regrown on the training path (unsloth@4773950b65, 2024.5, models/llama.py l. 902-940
    # LlamaRotaryEmbedding: _set_cos_sin_cache(seq_len=max_position_embeddings), no 4 x 8192 cap; the forward reads
    # cos_cached directly, l. 319-321); False: the 4 x 8192 start grown in steps of 8192 (from unsloth@f8a9421721)
    rope_cache_full_context: bool = False
    # ``attention: flash`` is the flash-attn package's FlashAttention-2 (transformers ``attn_implementation=
    # "flash_attention_2"``), whose kernels refuse cards older than Ampere (flash-attn v2.0.0 on,
    # csrc/flash_attn/flash_api.cpp mha_fwd: ``TORCH_CHECK(is_sm90 || is_sm8x, "FlashAttention only supports Ampere
    # GPUs or newer.")``; its README: "currently supports: Ampere, Ada, or Hopper GPUs"): no card without it runs the scenario
    # (plan/verdict.py card_refusal). False where the framework falls back on older cards (Unsloth: xformers below
    # compute capability 8, unsloth@0927c34 models/_utils.py l. 166-183; SDPA's memory-efficient kernel elsewhere)
    flash_attention_is_fa2: bool = False
    # where that fallback (a card the catalog marks without FlashAttention-2) is xformers' memory_efficient_attention
    # called with k and v copied out to every query head when a gradient is needed, so the kernel saves full-head k and
    # v for backward instead of grouped ones (estimate/attention.py falls_back_repeating_kv). Unsloth: HAS_FLASH_ATTENTION
    # only at compute capability 8+ (unsloth@0927c34 models/_utils.py l. 166-183); below it LlamaAttention_fast_forward
    # takes the xformers branch, ``K.expand(...)`` then ``if hidden_states.requires_grad: K = K.reshape(bsz,
    # kv_seq_len, n_heads, head_dim)``, the same for V (unsloth@a16bc73e80 2024.1 models/llama.py l. 278-297,
    # unsloth@0927c34 l. 367-386, unsloth@0e0d8fc l. 393-412; unsloth@015bdef utils/attention_dispatch.py l. 462-480,
    # select_attention_backend: XFORMERS when flash-attn is not there); xformers' _fMHA.forward
    # ``ctx.save_for_backward(inp.query, inp.key, inp.value, op_ctx.out, op_ctx.lse)`` (facebookresearch/xformers@00afc123
    # xformers/ops/fmha/__init__.py) keeps those copies, and nothing else keeps the grouped ones
    flash_fallback_repeats_kv: bool = False
    # the model types whose attention that fallback describes: the framework's own attention forward, not the
    # transformers modeling code it leaves other types to (Unsloth: loader.py hands llama, mistral, gemma, qwen2 and
    # qwen3 to FastLlamaModel and its subclasses, unsloth@015bdef models/loader.py l. 828-890, whose attention forwards
    # are LlamaAttention_fast_forward or call select_attention_backend: models/qwen2.py l. 50-52, gemma.py l. 418-420,
    # mistral.py l. 123, qwen3.py l. 138); () with the flag: every type
    fallback_attention_model_types: tuple[str, ...] = ()
    # the transformers 4.x minor release the run had, for the families whose modelling then kept a RoPE cache in every
    # attention layer (ModelSpec.rope_cache_v4_last): transformers v4.39.3 models/mistral/modeling_mistral.py l. 105-116
    # and estimate/rope_v4.py; 0: no such cache (v5.24.0 models/llama/modeling_llama.py l. 348: one rotary module per
    # model, cos/sin computed per call)
    rope_cache_v4_release: int = 0
    # methods whose loader builds the model without a torch_dtype, so those caches are fp32 whatever the weights'
    # dtype (AnswerDotAI/fsdp_qlora@4cd6923 train.py l. 576-577: the QLoRA path's AutoModelForCausalLM.from_config(cfg)
    # under init_empty_weights, which leaves buffers real on the host in the default fp32, moved whole by FSDP's
    # device_id; its LoRA path passes torch_dtype, l. 542-557); (): the load dtype (estimate/rope_v4.py)
    rope_cache_v4_fp32_methods: tuple[Method, ...] = ()
    # parallelism fsdp is FSDP2 fully_shard (torchtune v0.4.0 training/_distributed.py shard_model, torchtitan@9dec370
    # parallelize_llama.py apply_fsdp): per-parameter gradients copied into one flat reduce-scatter input, blocks
    # resharded after forward (estimate/fsdp2.py)
    fsdp2: bool = False
    # FSDP2 leaves the last block unsharded after forward (torchtitan@9dec370 apply_fsdp: `reshard_after_forward =
    # int(layer_id) < len(model.layers) - 1`, "FSDP would prefetch it immediately")
    fsdp2_last_block_kept: bool = False
    # the FSDP2 the scenario can pick instead (fsdp_version: 2; hf: accelerate v1.15.0 utils/fsdp_utils.py
    # fsdp2_prepare_model): the fields it changes, with its source; None: the
    # framework runs one FSDP only (FrameworkProfile.fsdp2 says which)
    fsdp2_variant: FrameworkVersion | None = None
    # FSDP2 units beyond the blocks as accelerate v1.15.0 utils/fsdp_utils.py fsdp2_prepare_model l. 857-885 builds
    # them: the input embedding a unit of its own (untied), the final norm and lm_head one unit (the embedding in it
    # when tied) with reshard_after_forward=False, then the root with torch's default (False for the root)
    fsdp2_tail_unit: bool = False
    # the loss is computed inside the model's forward (transformers v5.24.0 LlamaForCausalLM.forward:
    # `loss = self.loss_function(logits=logits, labels=labels, ...)` when the Trainer passes labels), so an FSDP2 root
    # unit's pre-backward fires on the loss's gradient, before the loss's backward (estimate/fsdp2.py, 5)
    loss_in_model_forward: bool = False
    # the release's step is modelled allocation by allocation (estimate/unsloth.py step_events, each step citing its
    # code: unsloth@0e0d8fc, flash-attn 2 mha_bwd) and replayed through the caching allocator model of
    # pytorch/pytorch@eb42ad6e for the reserved figure, in place of the generic transients
    step_allocation_order: bool = False
    # the PYTORCH_CUDA_ALLOC_CONF the framework sets on import (unsloth@0e0d8fc unsloth/__init__.py), honoured by the
    # replayed step's allocator model as pytorch/pytorch v2.5.1 c10/cuda/CUDACachingAllocator.cpp does
    # (estimate/allocator.py AllocatorConf); None: torch's defaults
    alloc_conf: AllocatorConf | None = None
    # the engine runs expert parallelism for mixture-of-experts models (the planner proposes EP degrees):
    # torchtitan v0.3.0 ParallelismConfig.expert_parallel_degree, the sparse mesh ("pp", "dp_replicate", "efsdp",
    # "ep") of distributed/parallel_dims.py; the other profiles' engines are modelled without it
    expert_parallel: bool = False
    # LoRA on a 4-bit linear clones the base layer's output before adding the adapter's (peft v0.14.0 and v0.21.2
    # tuners/lora/bnb.py Linear4bit.forward: ``result = result.clone()``, "for 4bit, we need to defensively clone")
    lora_4bit_clones_output: bool = False
    # one-GPU QLoRA builds the model on the GPU and quantizes each LoRA linear's weight there with torchao 0.1's
    # un-chunked to_nf4, at build and again in load_state_dict, with no empty_cache after: the transients' segments
    # stay reserved (estimate/nf4_load.py; pytorch/torchtune@0914d5cfb recipes/lora_finetune_single_device.py,
    # pytorch/ao@v0.1 torchao/dtypes/nf4tensor.py quantize_tensor_nearest)
    nf4_load_on_gpu: bool = False
    # the NCCL release under the profile's torch, where it sets NVLS buffers up with each communicator on NVSwitch
    # nodes (estimate/nccl.py NvlsBuffers: NCCL 2.18-2.20); None: NCCL >= 2.22 (torch >= 2.7) makes them only when an
    # NVLS algorithm first runs (NVIDIA/nccl v2.22.3-1 src/init.cc RUNTIME_CONNECT default 1), not counted
    nccl_nvls: NvlsBuffers | None = None

    def scripts_checkpointing(self, num_gpus: int) -> Checkpointing | None:
        """The checkpointing the scripts run on ``num_gpus`` GPUs where the user cannot choose it
        (``checkpointing_by_devices``), else None."""
        by = self.checkpointing_by_devices
        return (by[0] if num_gpus == 1 else by[1]) if by else None

    def loss_seq_multiple(self, loss: Loss, context_parallel: int = 1) -> int:
        """What ``seq_len`` must be a multiple of for this profile's ``loss`` (estimate/titan_loss.py
        ``loss_seq_multiple``): the core's way to it (stage_keys.seq_len_step)."""
        from vramfit.estimate.titan_loss import loss_seq_multiple

        return loss_seq_multiple(self, loss, context_parallel)

    def unset_checkpointing(self, num_gpus: int) -> Checkpointing:
        """What a scenario that leaves gradient_checkpointing unset runs: the scripts' own, else the framework's
        default (``default_checkpointing``)."""
        return self.scripts_checkpointing(num_gpus) or self.default_checkpointing

    def lora_dropout(self, given: float | None) -> float:
        """The LoRA dropout that runs: the scenario's, else the framework's default (``lora_dropout_default``)."""
        return given if given is not None else self.lora_dropout_default

    def reuses_dora_base_output(self, given_dropout: float | None) -> bool:
        """Whether a DoRA layer keeps the base layer's own output (``dora_base_output``, estimate/dora.py), else a
        recomputed one and the weight its matmul ran on."""
        base = self.dora_base_output
        return base is DoraBase.REUSED or (base is DoraBase.REUSED_WITHOUT_DROPOUT
                                           and self.lora_dropout(given_dropout) == 0)

    @property
    def derives_checkpointing(self) -> bool:
        """An unset gradient_checkpointing is the framework's (:meth:`unset_checkpointing`), not plain none."""
        return bool(self.checkpointing_by_devices) or self.default_checkpointing is not Checkpointing.NONE
