"""What each training framework does differently, as data.

The same scenario costs different memory under transformers+PEFT, torchtune and litgpt because their
code keeps different tensors. Each field below names the code (file and version) it models; every
choice with more than two values is an enum, and code never compares the display ``name``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from vramfit.estimate.constants import BNB_GEMM_4BIT_FUSED_MAX_TOKENS
from vramfit.scenario import Framework, Method, Precision


class LossLayout(str, Enum):
    """How logits and the cross-entropy are laid out for ``loss="standard"`` (see estimate/loss.py)."""

    # transformers v4.46.0 (PR #33902) loss/loss_utils.py ForCausalLMLoss: model-dtype logits,
    # ``logits.float()`` inside the loss
    HF_UPCAST_IN_LOSS = "hf-upcast-in-loss"
    # torchtune v0.4.0 modules/transformer.py TransformerDecoder: ``self.output(h).float()``
    TORCHTUNE_UPCAST_IN_MODEL = "torchtune-upcast-in-model"
    # lit-gpt@8641822 finetune/lora.py: model(..., lm_head_chunk_size=128) + chunked_cross_entropy
    LITGPT_CHUNKED_HEAD = "litgpt-chunked-head"


class OptimizerImpl(str, Enum):
    """torch.optim implementation the framework's AdamW runs (torch v2.13.0 torch/optim/adamw.py)."""

    FUSED = "fused"  # _fused_adamw: one kernel, no parameter-sized temporaries
    FOREACH = "foreach"  # _multi_tensor_adamw: torch._foreach_sqrt copies the second moment


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
    # FSDP1 before the reshard-only hooks (pytorch/pytorch#95805, PR #101982; what the lit-gpt@8641822
    # measurements show): frozen parameters all-gathered in backward stay unsharded until the end of backward
    fsdp_frozen_stay_gathered: bool = False
    # FSDP keeps the root unit (embeddings, final norm, lm_head when not wrapped on their own)
    # gathered from the start of forward to the end of backward (torch v2.13.0 docs/source/notes/fsdp.rst);
    # torchtune shards tok_embeddings and output as units of their own (custom_sharded_layers)
    fsdp_root_gathered: bool = True
    # the attention output reaches o_proj as a copy: torchtune runs packed batches through
    # flex_attention, whose [B, H, S, D] output `transpose(1, 2).contiguous()` copies
    # (torchtune v0.4.0 modules/attention.py); SDPA flash/efficient outputs are already [B, S, H, D]
    attn_output_copied: bool = False
    # tokens per micro-batch up to which the 4-bit matmul runs without de-quantizing the weight
    # (bitsandbytes@0.50.2, constants.BNB_GEMM_4BIT_FUSED_MAX_TOKENS); 0 = always de-quantizes
    # (bnb <= 0.49, torchao NF4's weight.to(dtype))
    qlora_fused_max_tokens: int = 0
    # the model runs transformers' modelling code (transformers v5.24.0): masking_utils builds a real
    # mask for sliding windows, sdpa_attention.py passes enable_gqa only without a mask, soft-capped
    # attention falls back to eager, MoE experts are 3-D parameters (PEFT ParamWrapper for LoRA)
    runs_transformers_modeling: bool = False
    # transformers v5.24.0 integrations/bitsandbytes.py quantizes only modules whose type is exactly
    # nn.Linear (Falcon's FalconLinear stays unquantized) and never the 3-D expert parameters
    quantizes_exact_linear_only: bool = False
    # the precision a user of this framework gets when the scenario does not say, per method
    # (parse_scenario applies it); each profile cites the code it follows (transformers v5.24.0,
    # torchtune v0.4.0 recipe configs, Lightning-AI/litgpt@29ece59)
    default_precision: tuple[tuple[Method, Precision], ...] = (
        (Method.FULL, Precision.BF16_TRUE), (Method.LORA, Precision.BF16_TRUE), (Method.QLORA, Precision.BF16_TRUE))


PROFILES: dict[Framework, FrameworkProfile] = {
    Framework.HF: FrameworkProfile(
        name="transformers + PEFT",
        adapters_fp32=True,
        lora_casts_input=True,
        lora_dropout_default=0.0,  # peft v0.21.2 tuners/lora/config.py LoraConfig.lora_dropout default
        fused_qkv_lora=False,
        rmsnorm_upcast=True,
        expands_kv_for_sdpa=False,
        qlora_unquantized_fp32=True,
        qlora_saves_input=False,
        qlora_quantizes_lm_head=False,
        # transformers >= 4.46 (PR #33902): logits stay in the model dtype, ForCausalLMLoss upcasts
        standard_loss=LossLayout.HF_UPCAST_IN_LOSS,
        # HF Trainer default optim "adamw_torch_fused" for torch >= 2.8 (transformers v5.24.0
        # training_args.py default_optim; PR #37358)
        torch_optimizer_impl=OptimizerImpl.FUSED,
        qlora_fused_max_tokens=BNB_GEMM_4BIT_FUSED_MAX_TOKENS.value,
        runs_transformers_modeling=True,
        quantizes_exact_linear_only=True,
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
        # torchtune v0.4.0 recipes/configs/*/lora_finetune_single_device.yaml: AdamW with fused: True
        torch_optimizer_impl=OptimizerImpl.FUSED,
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
        standard_loss=LossLayout.LITGPT_CHUNKED_HEAD,
        torch_optimizer_impl=OptimizerImpl.FOREACH,  # torch v2.1.0 torch/optim/adamw.py: foreach default on CUDA
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
    if scenario.precision.mixed:
        return True
    return (
        scenario.method is Method.QLORA
        and profile.qlora_unquantized_fp32
        and scenario.precision.compute_bytes == 2
    )
