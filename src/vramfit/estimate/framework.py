"""What each training framework does differently, as data.

The same scenario costs different memory under transformers+PEFT, torchtune and litgpt because their
code keeps different tensors. Each field below names the code it models.
"""

from __future__ import annotations

from dataclasses import dataclass

from vramfit.scenario import Framework, Method, Precision


@dataclass(frozen=True)
class FrameworkProfile:
    name: str
    # LoRA adapter weights are fp32 whatever the base dtype (PEFT >= 0.12 autocast_adapter_dtype=True,
    # peft src/peft/tuners/tuners_utils.py cast_adapter_dtype); else the model's parameter dtype.
    adapters_fp32: bool
    # PEFT LoRA casts the layer input to the adapter dtype (peft tuners/lora/layer.py _cast_input_dtype),
    # a new tensor per adapted layer when the dtypes differ.
    lora_casts_input: bool
    lora_dropout_default: float
    # litgpt fuses q,k,v into one linear; its LoRAQKVLinear runs one dropout and one lora_A for the
    # enabled slices (lit-gpt@8641822 lit_gpt/lora.py).
    fused_qkv_lora: bool
    # RMSNorm computes in fp32 and autograd keeps the fp32 input (transformers LlamaRMSNorm,
    # torchtune modules/rms_norm.py); lit-gpt@8641822 RMSNorm computes in the input dtype.
    rmsnorm_upcast: bool
    # GQA: k,v expanded to all heads before SDPA (torchtune attention 2024, lit-gpt); transformers >= 5
    # passes enable_gqa to SDPA when there is no padding mask (integrations/sdpa_attention.py use_gqa_in_sdpa).
    expands_kv_for_sdpa: bool
    # QLoRA: non-quantized parameters cast to fp32 by peft prepare_model_for_kbit_training (peft other.py:202).
    qlora_unquantized_fp32: bool
    # bitsandbytes <= 0.43.1 MatMul4Bit saved its input (ctx.tensors = (A, B)); lit-gpt@8641822 ran bnb 0.41.
    qlora_saves_input: bool
    # lit-gpt@8641822 quantized every nn.Linear, lm_head included (Fabric BitsandbytesPrecision, no ignore list).
    qlora_quantizes_lm_head: bool
    # how logits and loss are laid out for loss="standard"
    standard_loss: str  # "hf-upcast-in-loss" | "torchtune-upcast-in-model" | "litgpt-chunked-head"
    # default torch optimizer implementation: "fused" (no parameter-sized temporaries) or "foreach"
    torch_optimizer_impl: str
    # FSDP1 before the reshard-only hooks (pytorch/pytorch#95805, PR #101982): frozen parameters
    # all-gathered in backward stay unsharded until the end of backward
    fsdp_frozen_stay_gathered: bool = False
    # FSDP keeps the root unit (embeddings, final norm, lm_head when not wrapped on their own)
    # gathered from the start of forward to the end of backward (torch docs notes/fsdp.rst);
    # torchtune shards tok_embeddings and output as units of their own (custom_sharded_layers)
    fsdp_root_gathered: bool = True
    # the attention output reaches o_proj as a copy: torchtune runs packed batches through
    # flex_attention, whose [B, H, S, D] output `transpose(1, 2).contiguous()` copies
    # (torchtune modules/attention.py); SDPA flash/efficient outputs are already [B, S, H, D]
    attn_output_copied: bool = False
    # bitsandbytes 0.50 CUDA gemm_4bit runs a fused kernel without de-quantizing the weight for up
    # to 512 tokens per micro-batch (backends/cuda/ops.py _gemm_4bit_use_custom_cuda); 0 = always
    # de-quantizes (bnb <= 0.49, torchao NF4's weight.to(dtype))
    qlora_fused_max_tokens: int = 0
    # transformers >= 5 quantizes only modules whose type is exactly nn.Linear (Falcon's FalconLinear
    # stays unquantized) and stores MoE experts as 3-D parameters, which bitsandbytes never quantizes
    hf_quantizer_rules: bool = False
    # the precision a user of this framework gets when the scenario does not say, per method
    # (parse_scenario applies it); see each profile's comment for the code it follows
    default_precision: tuple[tuple[Method, Precision], ...] = (
        (Method.FULL, Precision.BF16_TRUE), (Method.LORA, Precision.BF16_TRUE), (Method.QLORA, Precision.BF16_TRUE))


PROFILES: dict[Framework, FrameworkProfile] = {
    Framework.HF: FrameworkProfile(
        name="transformers + PEFT",
        adapters_fp32=True,
        lora_casts_input=True,
        lora_dropout_default=0.0,  # peft LoraConfig.lora_dropout default
        fused_qkv_lora=False,
        rmsnorm_upcast=True,
        expands_kv_for_sdpa=False,
        qlora_unquantized_fp32=True,
        qlora_saves_input=False,
        qlora_quantizes_lm_head=False,
        # transformers >= 4.46 (PR #33902): logits stay in the model dtype, ForCausalLMLoss upcasts
        standard_loss="hf-upcast-in-loss",
        # HF Trainer default optim "adamw_torch_fused" for torch >= 2.8 (transformers PR #37358)
        torch_optimizer_impl="fused",
        qlora_fused_max_tokens=512,
        hf_quantizer_rules=True,
        # bf16-true for every method: transformers 5.24.0 modeling_utils.py from_pretrained sets
        # `dtype = "auto"` when none is given, i.e. the checkpoint's config dtype (bf16 for the catalog's
        # Llama/Mistral/Qwen checkpoints); Trainer(bf16=True) then autocasts over bf16 parameters and
        # AdamW keeps its states in the parameter dtype. transformers 4 loaded fp32 (= bf16-mixed).
        default_precision=((Method.FULL, Precision.BF16_TRUE), (Method.LORA, Precision.BF16_TRUE),
                           (Method.QLORA, Precision.BF16_TRUE)),
    ),
    Framework.TORCHTUNE: FrameworkProfile(
        name="torchtune",
        adapters_fp32=False,
        lora_casts_input=False,
        lora_dropout_default=0.0,  # torchtune modules/peft/lora.py LoRALinear(dropout=0.0)
        fused_qkv_lora=False,
        rmsnorm_upcast=True,
        expands_kv_for_sdpa=True,
        qlora_unquantized_fp32=False,
        qlora_saves_input=False,  # torchao linear_nf4 saves only the NF4 weight
        qlora_quantizes_lm_head=False,
        # torchtune (late 2024): TransformerDecoder returns self.output(h).float(); recipes shift the
        # labels (not the logits) and `del logits` before backward
        standard_loss="torchtune-upcast-in-model",
        torch_optimizer_impl="fused",  # recipes' configs: torch.optim.AdamW with fused: True
        fsdp_root_gathered=False,
        attn_output_copied=True,
        # recipes' configs set `dtype: bf16` (recipes/configs/*/*_full*.yaml, *_lora*.yaml); the recipes
        # build the model in that dtype (training.set_default_dtype) with no fp32 master copy
        default_precision=((Method.FULL, Precision.BF16_TRUE), (Method.LORA, Precision.BF16_TRUE),
                           (Method.QLORA, Precision.BF16_TRUE)),
    ),
    Framework.LITGPT: FrameworkProfile(
        name="litgpt",
        adapters_fp32=False,
        lora_casts_input=False,
        lora_dropout_default=0.05,  # lit-gpt@8641822 finetune/lora.py lora_dropout = 0.05
        fused_qkv_lora=True,
        rmsnorm_upcast=False,
        expands_kv_for_sdpa=True,
        qlora_unquantized_fp32=False,
        qlora_saves_input=True,
        qlora_quantizes_lm_head=True,
        standard_loss="litgpt-chunked-head",  # model(..., lm_head_chunk_size=128) + chunked_cross_entropy
        torch_optimizer_impl="foreach",  # torch 2.1 AdamW default
        # lit-gpt@8641822 LoRA + Lightning FSDPStrategy: measured peaks of 1 + 1/N times the weights
        # (LIT_RES multi-GPU table) match frozen units kept gathered through backward
        fsdp_frozen_stay_gathered=True,
        # litgpt finetune/full.py and lora.py (Lightning-AI/litgpt@29ece59): `precision = precision or
        # get_default_supported_precision(training=True)` = "bf16-mixed" on bf16 GPUs (litgpt/utils.py);
        # lora.py refuses "mixed" with --quantize bnb.*, so QLoRA runs with --precision bf16-true
        default_precision=((Method.FULL, Precision.BF16_MIXED), (Method.LORA, Precision.BF16_MIXED),
                           (Method.QLORA, Precision.BF16_TRUE)),
    ),
}


def profile_for(framework: Framework) -> FrameworkProfile:
    return PROFILES[framework]


def adapter_bytes(profile: FrameworkProfile, precision: Precision) -> int:
    """Bytes per element of LoRA adapter weights (and their grads and torch optimizer states)."""
    if profile.adapters_fp32:
        return 4
    return precision.param_bytes


def runs_under_autocast(scenario, profile: FrameworkProfile) -> bool:
    """Autocast is on for ``-mixed`` precision, and for HF QLoRA in 16 bits: the recipe
    (prepare_model_for_kbit_training + Trainer bf16=True/fp16=True) runs it under autocast; without
    it the fp32 norms would make every activation fp32."""
    from vramfit.scenario import Method

    if scenario.precision.mixed:
        return True
    return (
        scenario.method is Method.QLORA
        and profile.qlora_unquantized_fp32
        and scenario.precision.compute_bytes == 2
    )
