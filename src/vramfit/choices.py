"""The finite choices of a scenario, one enum per key (re-exported by :mod:`vramfit.scenario`).

Every value is what users write (``"bf16-mixed"``); ``str(member)`` is that value.
"""

from __future__ import annotations

from enum import Enum


class _Choice(str, Enum):
    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.value

    @classmethod
    def values(cls) -> list[str]:
        return [m.value for m in cls]


class Method(_Choice):
    FULL = "full"
    LORA = "lora"
    QLORA = "qlora"


class Precision(_Choice):
    BF16_TRUE = "bf16-true"
    BF16_MIXED = "bf16-mixed"
    FP16_MIXED = "fp16-mixed"
    FP16_TRUE = "fp16-true"
    FP32 = "fp32"

    @property
    def mixed(self) -> bool:
        return self in _MIXED

    @property
    def param_bytes(self) -> int:
        """Bytes per element of the stored (trainable) weights: fp32 master for ``-mixed``."""
        return 2 if self in _TRUE_16 else 4

    @property
    def compute_bytes(self) -> int:
        """Bytes per element of activations (autocast dtype for ``-mixed``)."""
        return 4 if self is _FP32 else 2

    @property
    def meaning(self) -> str:
        """What the precision keeps in memory, in words (printed with the assumptions and --help)."""
        half = "bf16" if self.value.startswith("bf16") else "fp16"
        if self is Precision.FP32:
            return "fp32 weights, gradients, optimizer states and activations"
        if self.mixed:
            return (f"fp32 weights (the master copy), gradients and optimizer states; {half} autocast compute "
                    "(full fine-tuning with AdamW: 16 B per parameter)")
        return f"{half} weights, gradients and optimizer states, no fp32 master copy (full fine-tuning with AdamW: 8 B per parameter)"


# the members as module constants: the properties above run several times per estimate, and a class
# attribute lookup of an enum member goes through Enum's descriptor (Python 3.11 enum.py)
_MIXED = (Precision.BF16_MIXED, Precision.FP16_MIXED)
_TRUE_16 = (Precision.BF16_TRUE, Precision.FP16_TRUE)
_FP32 = Precision.FP32


class Quantize(_Choice):
    NF4 = "nf4"
    NF4_DQ = "nf4-dq"
    FP4 = "fp4"
    FP4_DQ = "fp4-dq"
    INT8 = "int8"
    GPTQ_INT4 = "gptq-int4"
    NONE = "none"


class QuantizeExperts(_Choice):
    """Whether a quantized base (QLoRA) also quantizes mixture-of-experts expert weights.

    ``auto`` follows the framework profile: transformers 5 stores experts as fused 3-D parameters,
    which bitsandbytes (nn.Linear only) leaves unquantized; transformers 4 (one nn.Linear per
    expert), torchtune and litgpt quantize them. ``yes``/``no`` force it. Ignored without quantization.
    """

    AUTO = "auto"
    YES = "yes"
    NO = "no"


class QuantizeVision(_Choice):
    """Whether a quantized base (QLoRA) of a vision-language model also quantizes its vision tower and projector.

    ``auto`` follows the framework profile (``qlora_quantizes_vision``): bitsandbytes through transformers replaces
    every nn.Linear but the head; Unsloth's dynamic 4-bit checkpoints keep the vision layers in 16 bits.
    ``yes``/``no`` force it. Ignored without quantization or without a vision tower.
    """

    AUTO = "auto"
    YES = "yes"
    NO = "no"


class FreezeVision(_Choice):
    """Whether a vision-language model's vision tower and projector stay frozen.

    ``auto`` follows the framework: HF Trainer trains every parameter in full fine-tuning and PEFT's
    ``all-linear`` adapts the tower's linears too (peft v0.21.2 tuners/tuners_utils.py
    _maybe_include_all_linear_layers excludes only the output layer), Unsloth's
    FastVisionModel.get_peft_model defaults to finetune_vision_layers=True; so the tower trains.
    ``yes`` freezes it (ms-swift's freeze_vit), ``no`` trains it.
    """

    AUTO = "auto"
    YES = "yes"
    NO = "no"


class Optimizer(_Choice):
    ADAMW = "adamw"
    ADAMW_8BIT = "adamw-8bit"
    PAGED_ADAMW = "paged-adamw"
    PAGED_ADAMW_8BIT = "paged-adamw-8bit"
    ADAMW_4BIT = "adamw-4bit"
    # torchao AdamW8bit (torchao.prototype.low_bit_optim / torchao.optim): its own 8-bit state and a compiled
    # per-parameter step in fp32; "adamw-8bit" is bitsandbytes' AdamW8bit (estimate/state.py has both formats)
    ADAMW_8BIT_TORCHAO = "adamw-8bit-torchao"
    ADAFACTOR = "adafactor"
    SGD = "sgd"
    SGD_MOMENTUM = "sgd-momentum"
    LION = "lion"
    LION_8BIT = "lion-8bit"


class Checkpointing(_Choice):
    NONE = "none"
    FULL = "full"
    SELECTIVE = "selective"  # attention core recomputed (Korthikanti et al. 2022, sec. 5)
    # torchtitan op-level selective AC (torchtitan@9dec370 parallelisms/parallelize_llama.py
    # _apply_ac_to_transformer_block, selective_ac_option = "op"): every second matmul output and
    # the SDPA output are saved, the rest of the block is recomputed
    SELECTIVE_OP = "selective-op"
    OFFLOAD = "offload"


class Attention(_Choice):
    SDPA = "sdpa"
    FLASH = "flash"
    EAGER = "eager"


class Loss(_Choice):
    STANDARD = "standard"
    CHUNKED = "chunked"
    FUSED = "fused"


class Parallelism(_Choice):
    NONE = "none"
    DDP = "ddp"
    ZERO1 = "zero1"
    ZERO2 = "zero2"
    ZERO3 = "zero3"
    FSDP = "fsdp"
    FSDP_GRAD_OP = "fsdp-grad-op"
    # FSDP1 ShardingStrategy.NO_SHARD: every unit's FlatParameter whole on every rank, gradients all-reduced
    # in place, no all-gather (torch v2.13.0 distributed/fsdp/_flat_param.py ``shard``/``needs_unshard``,
    # _runtime_utils.py ``_reduce_grad_no_shard``), but wrapped the FSDP way (estimate/no_shard.py)
    FSDP_NO_SHARD = "fsdp-no-shard"


#: the parallelisms that run PyTorch FSDP (any sharding strategy)
FSDP_FAMILY = (Parallelism.FSDP, Parallelism.FSDP_GRAD_OP, Parallelism.FSDP_NO_SHARD)
#: the parallelisms that run DeepSpeed's ZeRO engine (any stage)
ZERO_FAMILY = (Parallelism.ZERO1, Parallelism.ZERO2, Parallelism.ZERO3)
#: bitsandbytes' 4-bit storages (bnb.nn.Linear4bit quant_type nf4/fp4, with or without nested quantization)
BNB_4BIT = (Quantize.NF4, Quantize.NF4_DQ, Quantize.FP4, Quantize.FP4_DQ)


class Framework(_Choice):
    """Whose training code runs the step: its layout of adapters, loss and quantized base differs.

    ``hf``: transformers + PEFT (+ Trainer/TRL); ``torchtune``; ``litgpt``; ``torchtitan`` (FSDP2
    pre-training loop); ``unsloth`` (its Triton kernels and LoRA autograd functions). This key is an
    extension of the shared schema (default ``hf``), added because the measured sources differ in
    exactly these ways (see the README, "Frameworks").
    """

    HF = "hf"
    TORCHTUNE = "torchtune"
    LITGPT = "litgpt"
    TORCHTITAN = "torchtitan"
    UNSLOTH = "unsloth"


class KbitPrepare(_Choice):
    """Whether the QLoRA recipe runs peft's ``prepare_model_for_kbit_training`` (it casts every
    non-quantized parameter - norms, embeddings, head - to fp32: peft v0.21.2 src/peft/utils/other.py).

    ``auto`` follows the framework profile (the HF Trainer recipes call it; torchtune, litgpt, Answer.AI's
    FSDP+QLoRA script and Unsloth do not); peft skips GPTQ models whatever is asked
    (``is_gptq_quantized``, same file). Ignored without quantization.
    """

    AUTO = "auto"
    YES = "yes"
    NO = "no"


class AdamwImpl(_Choice):
    """Which torch.optim implementation runs the ``adamw`` optimizer (torch v2.13.0 torch/optim/adamw.py):
    ``fused`` (``fused=True``: one kernel, no parameter-sized temporaries) or ``foreach`` (``_multi_tensor_adamw``,
    torch's default on CUDA when ``fused`` is not asked for: ``_default_to_fused_or_foreach`` in
    torch/optim/optimizer.py; its ``torch._foreach_sqrt`` copies the second moment). ``auto`` follows the framework
    release (the HF Trainer's default optim is ``adamw_torch_fused`` from transformers 4.54 with torch >= 2.8,
    huggingface/transformers PR #37358, ``adamw_torch`` = foreach before; each profile's ``torch_optimizer_impl``). An HF ``optim: adamw_torch`` or torchtune's ``fused: False``
    is ``foreach``. Ignored for other optimizers.
    """

    AUTO = "auto"
    FUSED = "fused"
    FOREACH = "foreach"


class UseReentrant(_Choice):
    """Whether the Trainer's gradient checkpointing is torch's reentrant one (``gradient_checkpointing_kwargs=
    {"use_reentrant": ...}``). ``auto`` follows the framework release: transformers 4.x fills no kwargs with
    ``use_reentrant=True`` (v4.45.2 modeling_utils.py l. 2404, v4.57.1 l. 3692), transformers 5 with False (v5.24.0
    l. 3158); torchtune, litgpt, torchtitan, Answer.AI's script and llama-recipes wrap blocks non-reentrantly. It matters
    under FSDP1 with frozen block units (estimate/reentrant_fsdp1.py). Ignored without gradient checkpointing.
    """

    AUTO = "auto"
    YES = "yes"
    NO = "no"


class FsdpVersion(_Choice):
    """Which FSDP runs ``parallelism: fsdp`` / ``fsdp-grad-op``: FSDP1 (``FullyShardedDataParallel``, flat parameters)
    or FSDP2 (``fully_shard``, per-parameter DTensor shards).

    ``auto`` follows the framework profile (hf: FSDP1, as accelerate's plugin defaults ``fsdp_version`` to 1,
    accelerate v1.15.0 utils/dataclasses.py FullyShardedDataParallelPlugin; torchtune and torchtitan: FSDP2).
    Only the hf profile offers both (accelerate v1.15.0 utils/fsdp_utils.py ``fsdp2_prepare_model``).
    """

    AUTO = "auto"
    V1 = "1"
    V2 = "2"


class LogitsToKeep(_Choice):
    """Which positions the model computes logits (and the loss) for.

    ``all``: every token of every sequence. ``labels``: only the positions whose next token carries a label, the
    other rows of the final hidden states never reach the output layer: ms-swift from 46ad5ca56 (2025-05-29,
    v3.5.0) builds a boolean ``logits_to_keep`` mask of the label positions when a forward holds one row (micro-batch
    1, or any batch under packing/padding_free, which concatenate it into one row), in training and evaluation alike
    (swift/trainers/mixin.py ``get_logits_to_keep`` @3debbef8e, ``prepare_logits_to_keep`` @ff5128777), and the
    model's forward keeps ``hidden_states[:, logits_to_keep, :]`` before its head (transformers v4.53 Qwen2ForCausalLM;
    Liger-Kernel v0.6.1 ``lce_forward``, whose fused loss then runs on those rows). How many rows that is:
    ``label_share`` of the tokens.
    """

    ALL = "all"
    LABELS = "labels"


class Offload(_Choice):
    NONE = "none"
    OPTIMIZER = "optimizer"
    OPTIMIZER_PARAMS = "optimizer+params"


class Stage(_Choice):
    """What the step optimizes: supervised fine-tuning, a preference loss or an RL loop (TRL trainers)."""

    SFT = "sft"
    DPO = "dpo"
    KTO = "kto"
    ORPO = "orpo"
    SIMPO = "simpo"
    GRPO = "grpo"
    PPO = "ppo"


class Reference(_Choice):
    """Where the reference log-probs of a preference or RL stage come from."""

    AUTO = "auto"  # as TRL does for the stage and method (see vramfit.estimate.stages)
    COPY = "copy"  # a frozen copy of the model, resident on the GPU
    ADAPTERS_OFF = "adapters-off"  # PEFT: the same weights with the adapters disabled
    PRECOMPUTED = "precomputed"  # log-probs computed once before training (precompute_ref_log_probs)
    NONE = "none"  # no reference: reference-free losses, GRPO with beta = 0


class Generation(_Choice):
    """How GRPO/PPO generate their rollouts."""

    HF = "hf"  # transformers generate() on the training GPUs
    VLLM_COLOCATE = "vllm-colocate"  # vLLM in the training process, gpu_memory_utilization of each card
    VLLM_SERVER = "vllm-server"  # vLLM on GPUs of its own (trl vllm-serve), none of the training memory


class ShardScope(_Choice):
    """Over which ranks ZeRO/FSDP shard the model state when a run spans several nodes.

    ``all``: every rank of every node (ZeRO-3 / FSDP FULL_SHARD across the world). ``node``: the state
    is sharded among the GPUs of one node and replicated across nodes, so parameter all-gathers and
    gradient reduce-scatters stay on the node's links and only a gradient all-reduce crosses nodes:
    FSDP2 HSDP (a 2-D mesh, ``(Replicate(), Shard(0))``, torch/distributed/fsdp/_fully_shard/_fully_shard.py
    at v2.13.0), FSDP1 ``HYBRID_SHARD`` / ``_HYBRID_SHARD_ZERO2`` for fsdp-grad-op, and for DeepSpeed
    ZeRO-3 the ZeRO++ hierarchical partition hpZ (``zero_hpz_partition_size`` = GPUs per node: a second
    16-bit copy of the weights sharded within the node, deepspeed 0.19.8 runtime/zero/config.py).
    """

    ALL = "all"
    NODE = "node"


class Interconnect(_Choice):
    """The network between nodes; rates, latency and sources in ``data/interconnects.csv``.

    ``auto``: the card's usual rental node (the CSV's ``gpus`` column), else 100 GbE.
    """

    AUTO = "auto"
    IB_3200 = "ib-3200"
    IB_1600 = "ib-1600"
    IB_800 = "ib-800"
    EFA_3200 = "efa-3200"
    ETH_400 = "eth-400"
    ETH_200 = "eth-200"
    ETH_100 = "eth-100"


class PipelineSchedule(_Choice):
    """How a pipeline-parallel run orders its micro-batches (torch.distributed.pipelining names them
    ``Schedule1F1B`` and ``ScheduleInterleaved1F1B``; Narayanan et al. 2021, "Efficient Large-Scale Language
    Model Training on GPU Clusters Using Megatron-LM", sec. 2.2).

    ``1f1b``: one forward, one backward; stage ``i`` of ``p`` holds at most ``p - i`` micro-batches'
    activations. ``interleaved-1f1b``: each rank holds ``pipeline_virtual_stages`` model chunks; the bubble
    shrinks by that factor and the first rank holds more in flight.
    """

    ONE_F_ONE_B = "1f1b"
    INTERLEAVED = "interleaved-1f1b"


class MoeKernel(_Choice):
    """What runs a mixture-of-experts block's experts: the modelling code's own forward, or a hub kernel.

    ``none``: the model's own experts forward at the modelled framework version (transformers v5.24.0
    integrations/moe.py grouped_mm; transformers-4.55 gpt-oss: GptOssExperts' per-expert training loop).
    ``megablocks``: ``from_pretrained(use_kernels=True)`` replaced the block's forward by kernels-community/megablocks
    ``MegaBlocksMoeMLP`` (transformers v4.55.0 integrations/hub_kernels.py, on a model that kernelize saw on a CUDA
    device): tokens binned per expert, two batched matmuls on the banks themselves (no weight copies).
    """

    NONE = "none"
    MEGABLOCKS = "megablocks"
