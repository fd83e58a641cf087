"""Model state per GPU: weights, quantized base, adapters, gradients, master weights, optimizer state.

Pure functions of the parameter inventory (:mod:`vramfit.estimate.params`). Each byte count follows
the storage format of the library that holds it; sources are named at each formula.
"""

from __future__ import annotations

from dataclasses import dataclass

from vramfit.estimate.allocator import round_allocation
from vramfit.estimate.constants import (
    BNB_4BIT_BLOCK,
    BNB_BLOCKSIZE_8BIT,
    BNB_DQ_BLOCK,
    BNB_MIN_8BIT_SIZE,
    BNB_PAGED_MIN_NUMEL,
    GPTQ_GROUP_SIZE,
    TORCHAO_4BIT_BLOCK,
    TORCHAO_8BIT_BLOCK,
    TORCHAO_MIN_QUANT_SIZE,
)
from vramfit.estimate.params import ParamTensor
from vramfit.scenario import Offload, Optimizer, Parallelism, Quantize


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def quantized_weight_bytes(out_features: int, in_features: int, quantize: Quantize) -> int:
    """Storage of one quantized linear weight, in bytes (bias not included).

    - NF4/FP4 (bitsandbytes ``Linear4bit``, QLoRA paper sec. 2-3): 4 bits per weight packed two per
      uint8, plus one fp32 absmax per block of 64 (0.5 bit/param); with double quantization the
      absmax is stored as uint8 plus one fp32 second-level scale per 256 blocks and a 256-entry fp32
      code (8/64 + 32/(64*256) = 0.127 bit/param, QLoRA paper sec. 3 "Double Quantization").
    - int8 (LLM.int8, bitsandbytes ``Int8Params``): 1 byte per weight + fp32 scale per output row.
    - GPTQ int4 (AutoGPTQ ``QuantLinear``, group 128): int32-packed weights (4 bit), fp16 scales and
      int32-packed zeros per group and output, int32 ``g_idx`` per input feature.
    """
    n = out_features * in_features
    if quantize in (Quantize.NF4, Quantize.FP4):
        return _ceil(n, 2) + 4 * _ceil(n, BNB_4BIT_BLOCK.value)
    if quantize in (Quantize.NF4_DQ, Quantize.FP4_DQ):
        blocks = _ceil(n, BNB_4BIT_BLOCK.value)
        return _ceil(n, 2) + blocks + 4 * _ceil(blocks, BNB_DQ_BLOCK.value) + 4 * 256
    if quantize is Quantize.INT8:
        return n + 4 * out_features
    if quantize is Quantize.GPTQ_INT4:
        groups = _ceil(in_features, GPTQ_GROUP_SIZE.value)
        return _ceil(n, 2) + 2 * groups * out_features + groups * _ceil(out_features, 8) * 4 + 4 * in_features
    raise ValueError(f"not a quantized format: {quantize}")


def gathered_quantized_bytes(out_features: int, in_features: int, quantize: Quantize) -> int:
    """Bytes of one quantized linear weight that FSDP/ZeRO-3 shard and all-gather: the parameter's own data only.
    bitsandbytes keeps the 4-bit blocks' absmax (and double quantization's state) in ``Params4bit.quant_state`` and
    int8's row scales in ``Int8Params.SCB``, attributes rather than parameters (bitsandbytes v0.49.0
    nn/modules.py), so every GPU holds them whole and no all-gather moves them. The simulator's accelerate FSDP2 of
    an 8-layer Llama NF4 QLoRA all-gathers 22,093,824 B per block: its packed uint8 weights, bf16 adapters and norms,
    no absmax."""
    n = out_features * in_features
    if quantize in (Quantize.NF4, Quantize.FP4, Quantize.NF4_DQ, Quantize.FP4_DQ):
        return _ceil(n, 2)
    if quantize is Quantize.INT8:
        return n
    return quantized_weight_bytes(out_features, in_features, quantize)


@dataclass(frozen=True)
class OptimizerState:
    device_bytes: int  # in PyTorch's allocator
    paged_bytes: int  # bitsandbytes paged (CUDA managed memory, not in torch counters)


def optimizer_state_bytes(t: ParamTensor, optimizer: Optimizer, param_bytes: int) -> OptimizerState:
    """Optimizer state of ``t.count`` tensors of one shape, in the library's real format.

    - torch AdamW: ``exp_avg`` and ``exp_avg_sq`` ``zeros_like(p)``, the parameter's dtype
      (torch/optim/adamw.py ``_init_group``).
    - bitsandbytes 8-bit Adam-type (``Optimizer2State``): uint8 state1/state2 plus fp32 absmax per
      256-element block; tensors under 4096 elements keep fp32 states; 32-bit bnb states are fp32.
      Paged variants put states of >= 1e5 elements in CUDA managed memory (optim/optimizer.py).
    - torchao AdamW4bit: 4-bit codes (two per byte) + fp32 scale per 128 elements, for tensors of
      >= 4096 elements divisible by 128; else ``zeros_like(p)`` (torchao/optim/adam.py).
    - torchao AdamW8bit: uint8 codes + fp32 scale per 256 elements + its 256-entry fp32 ``qmap`` per state,
      for tensors of >= 4096 elements divisible by 256; else ``zeros_like(p)``, the parameter's dtype (not
      bitsandbytes' fp32) (torchao v0.6.1 prototype/low_bit_optim/adam.py ``_new_buffer``, subclass_8bit.py).
    - Adafactor (transformers optimization.py): fp32 row and column second moments for >= 2-D
      tensors, full fp32 ``exp_avg_sq`` for 1-D; no first moment (``beta1=None``).
    - SGD momentum: a buffer in the parameter dtype; Lion: fp32 (bitsandbytes v0.50.2 optim/optimizer.py l. 667-681);
      Lion 8-bit (bitsandbytes ``Optimizer1State``): uint8 + fp32 absmax per 256.
    """
    n, c = t.numel, t.count
    paged = optimizer in (Optimizer.PAGED_ADAMW, Optimizer.PAGED_ADAMW_8BIT)
    if optimizer is Optimizer.ADAMW:
        per = 2 * n * param_bytes
    elif optimizer is Optimizer.PAGED_ADAMW:
        per = 2 * n * 4
    elif optimizer in (Optimizer.ADAMW_8BIT, Optimizer.PAGED_ADAMW_8BIT):
        if n >= BNB_MIN_8BIT_SIZE.value:
            per = 2 * n + 2 * 4 * _ceil(n, BNB_BLOCKSIZE_8BIT.value)
        else:
            per = 2 * n * 4
    elif optimizer is Optimizer.ADAMW_4BIT:
        if n >= TORCHAO_MIN_QUANT_SIZE.value and n % TORCHAO_4BIT_BLOCK.value == 0:
            per = 2 * (_ceil(n, 2) + 4 * (n // TORCHAO_4BIT_BLOCK.value))
        else:
            per = 2 * n * param_bytes
    elif optimizer is Optimizer.ADAMW_8BIT_TORCHAO:
        block = TORCHAO_8BIT_BLOCK.value
        if n >= TORCHAO_MIN_QUANT_SIZE.value and n % block == 0:
            per = 2 * (n + 4 * (n // block) + 4 * 256)
        else:
            per = 2 * n * param_bytes
    elif optimizer is Optimizer.ADAFACTOR:
        if len(t.shape) >= 2:
            rows = n // t.shape[-1]
            cols = n // t.shape[-2]
            per = 4 * (rows + cols)
        else:
            per = 4 * n
    elif optimizer is Optimizer.SGD:
        per = 0
    elif optimizer in (Optimizer.SGD_MOMENTUM, Optimizer.LION):  # Lion's state: fp32 whatever the parameter's
        per = n * (4 if optimizer is Optimizer.LION else param_bytes)
    elif optimizer is Optimizer.LION_8BIT:
        per = n + 4 * _ceil(n, BNB_BLOCKSIZE_8BIT.value) if n >= BNB_MIN_8BIT_SIZE.value else 4 * n
    else:  # pragma: no cover - enum is exhaustive
        raise ValueError(optimizer)
    if paged and n >= BNB_PAGED_MIN_NUMEL.value:
        return OptimizerState(0, per * c)
    # each state is its own allocation, rounded by the caching allocator
    states = 2 if optimizer in _TWO_STATE else 1
    return OptimizerState(states * round_allocation(per // states) * c, 0)


#: A reference weight matrix (4096 x 4096) above every quantization threshold and a multiple of every block size
#: (bitsandbytes 256, torchao 128/256) and of the allocator's 512 B: the case that holds the bulk of a model's state.
_REFERENCE = ParamTensor("reference", (4096, 4096), 1, "linear")


def state_bytes_per_element(optimizer: Optimizer, param_bytes: int) -> float:
    """Optimizer state per trainable element, as :func:`optimizer_state_bytes` counts it for a large weight matrix
    (device and paged together): the rate a checkpoint writes per trainable parameter (plan/disk.py), so disk and
    memory share one rule, e.g. Lion's fp32 state under 16-bit weights, bitsandbytes' 8-bit states with their absmax."""
    st = optimizer_state_bytes(_REFERENCE, optimizer, param_bytes)
    return (st.device_bytes + st.paged_bytes) / _REFERENCE.numel


def state_tensors(optimizer: Optimizer) -> int:
    """Optimizer-state tensors per parameter, each its own allocation (:func:`optimizer_state_bytes`): AdamW's two
    moments, else one (a stateless SGD's none are counted as one of zero bytes)."""
    return 2 if optimizer in _TWO_STATE else 1


_TWO_STATE = (
    Optimizer.ADAMW,
    Optimizer.PAGED_ADAMW,
    Optimizer.ADAMW_8BIT,
    Optimizer.PAGED_ADAMW_8BIT,
    Optimizer.ADAMW_4BIT,
    Optimizer.ADAMW_8BIT_TORCHAO,
)


@dataclass(frozen=True)
class Sharding:
    """Fraction divisors of each state part per GPU, and what lives in host RAM."""

    weights: int
    grads: int
    optimizer: int
    weights_on_host: bool
    optimizer_on_host: bool
    grads_on_host: bool
    secondary_weights: int = 0  # ZeRO++ hpZ: divisor of the second 16-bit weight copy (0: none)


def sharding_for(parallelism: Parallelism, num_gpus: int, offload: Offload, shard_group: int | None = None,
                 hpz: int = 0) -> Sharding:
    """How ZeRO (Rajbhandari et al. 2020, sec. 5) and FSDP split model state over ``num_gpus``.

    ZeRO-1 partitions optimizer state (incl. fp32 master), ZeRO-2 adds gradients, ZeRO-3 adds
    parameters; FSDP FULL_SHARD = ZeRO-3. FSDP SHARD_GRAD_OP stores its parameters sharded too (FSDP1 keeps the
    flat parameter's ``_local_shard`` and gathers into a ``_full_param_padded`` of its own, torch v2.13.0
    distributed/fsdp/_flat_param.py; FSDP2 keeps the DTensor shard): only the unsharded copies live longer, from
    each unit's forward to its post-backward, counted as communication buffers (core.comm_buffers). Offload (ZeRO-Offload, FSDP
    ``CPUOffload``) moves the optimizer state (and gradients, which the CPU step reads) to host
    memory, and with parameter offload the sharded parameters too.

    ``shard_group`` (HSDP, FSDP ``HYBRID_SHARD``): the state is split over that many ranks (one node)
    and replicated over the others (torch/distributed/fsdp/_fully_shard/_fully_shard.py at v2.13.0: a
    2-D mesh shards over the 1st dim, replicates over the 0th). ``hpz`` (ZeRO++ hpZ, ZeRO-3 only):
    besides the primary shard over every rank, each rank keeps ``1/hpz`` of the 16-bit weights for the
    backward all-gather inside the node (deepspeed 0.19.8 runtime/zero/partition_parameters.py
    ``_partition_param_sec``: ``secondary_partition_size = tensor_size // num_ranks_in_param_group``).
    """
    n = shard_group or num_gpus
    w = g = o = 1
    if parallelism in (Parallelism.ZERO1,):
        o = n
    elif parallelism is Parallelism.ZERO2:
        g = o = n
    elif parallelism in (Parallelism.ZERO3, Parallelism.FSDP, Parallelism.FSDP_GRAD_OP):
        w = g = o = n
    opt_host = offload is not Offload.NONE
    return Sharding(
        weights=w,
        grads=g,
        optimizer=o,
        weights_on_host=offload is Offload.OPTIMIZER_PARAMS,
        optimizer_on_host=opt_host,
        grads_on_host=opt_host,
        secondary_weights=hpz if parallelism is Parallelism.ZERO3 and hpz > 1 else 0,
    )


def shard(nbytes: int, divisor: int) -> int:
    """Per-GPU share of ``nbytes`` split ``divisor`` ways (padded up, as FSDP pads the flat shard)."""
    return _ceil(nbytes, divisor) if divisor > 1 else nbytes


def fsdp1_keeps_grad_shards(sc, profile) -> bool:
    """FSDP1 under ``CPUOffload(offload_params=True)``: each unit's reduce-scattered gradient shard, cast to the flat
    parameter's dtype, is kept on the GPU as ``flat_param._saved_grad_shard`` after its copy to the pinned ``_cpu_grad``
    (torch v2.13.0 distributed/fsdp/_runtime_utils.py ``_accumulate_sharded_grad`` l. 917-927, ``_offload_grad``), and
    dropped only by ``prepare_gradient_for_optim`` at the end of backward (``_finalize_params``; _flat_param.py
    l. 1694-1720; pytorch/pytorch#106029). So every shard is on the GPU by the end of backward, none at the CPU step,
    and their blocks stay cached on the post-backward stream (estimate/fsdp_reserved.py ``gradient_pool``).
    FSDP2's CPUOffloadPolicy moves each shard to the host and keeps none (estimate/fsdp2.py ``shards_offloaded``)."""
    return (sc.offload is Offload.OPTIMIZER_PARAMS and sc.parallelism in (Parallelism.FSDP, Parallelism.FSDP_GRAD_OP)
            and sc.shard_group > 1 and not profile.fsdp2)
