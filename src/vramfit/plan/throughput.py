"""Training speed, time and cost of a plan: FLOPs from the architecture over the card's peak.

Per token (forward, all counted as multiply-adds x 2, the convention of MFU tables):

- matmul FLOPs ``2 * N_mm`` with ``N_mm`` the parameters a token multiplies with (MoE: active
  experts only; the embedding lookup excluded; lm_head included, tied or not), Kaplan et al. 2020
  (arXiv:2001.08361) Table 1;
- attention ``4 * seq_len * d_attn`` per layer (QK^T and AV, not halved for causal masking),
  llm-foundry ``scripts/train/benchmarking/README.md`` (mosaicml/llm-foundry@061f2c7) "MFU";
- training = forward + backward: full fine-tuning ``6 N_mm + 3 A`` (backward = 2 x forward);
  LoRA/QLoRA ``4 N_mm + 3 A + 6 N_lora``: the frozen weights need the input gradient (2 N_mm) but
  no weight gradient (Hu et al. 2021, arXiv:2106.09685, sec. 4.2);
- recomputation adds hardware FLOPs: selective = the attention core again (A, Korthikanti et al.
  2022, arXiv:2205.05198), full/offload = the whole block forward again.

Time on a card = FLOPs / (dense BF16 peak x utilisation). The utilisation (``MFU_DEFAULT``) is
applied to every FLOP the GPU executes (recompute included), i.e. used as a hardware-FLOPs
utilisation. QLoRA also de-quantizes every 4-bit weight in forward, backward and each recompute: a
memory-bound pass (read 0.5 B + scales, write 2 B per weight) timed at the card's memory bandwidth,
once per micro-batch. Multi-GPU traffic (ZeRO paper, Rajbhandari et al. 2020, sec. 7: DP 2 Psi,
ZeRO-3 3 Psi) and activation offload (block inputs out and back over the host link, on CUDA
streams) are assumed to overlap with compute; optimizer/weight offload traffic does not.
"""

from __future__ import annotations

from dataclasses import dataclass

from vramfit.estimate.constants import Constant
from vramfit.models.spec import ModelSpec
from vramfit.scenario import Checkpointing, Method, Offload, Parallelism, Precision, Scenario

MFU_DEFAULT = Constant(
    0.40,
    "fraction of the dense BF16 peak",
    "mosaicml/llm-foundry@061f2c7 scripts/train/benchmarking/README.md, 'H100 80GB BF16' table: "
    "runs without activation checkpointing (MFU = HFU) reach 34.8-46.4 %, about 40 % from 1B to 13B "
    "at seq 2048-8192 (e.g. 13b, 2048, 8 GPUs: 39.79 %; 7b, 2048: 46.44 %)",
    "tuned pre-training with FSDP and large micro-batches; fine-tuning scripts with micro-batch 1-4 "
    "often reach less. Measure tokens/s on a short trial rental and pass --mfu.",
)
DEQUANT_BYTES_PER_WEIGHT = Constant(
    2.5,
    "bytes moved per 4-bit weight per de-quantization",
    "bitsandbytes functional.dequantize_4bit: reads the packed 4-bit weight (0.5 B) and writes it in "
    "the 16-bit compute dtype (2 B); block scales (1 fp32 per 64, or 8-bit with double quantization) "
    "add under 0.07 B",
)
INT8_DEQUANT_BYTES_PER_WEIGHT = Constant(3.0, "bytes per int8 weight per de-quantization", "reads 1 B, writes 2 B")


@dataclass(frozen=True)
class ModelFlops:
    """Architecture figures the speed model needs, read once from a :class:`ModelSpec`."""

    matmul_params: int  # N_mm: parameters a token multiplies with (active experts, lm_head)
    lm_head_params: int  # vocab x hidden (the lm_head matmul, tied or not)
    attn_flops_per_token_fwd: int  # A at the given seq_len: sum over layers of 4 * ctx * d_attn
    quantizable_params: int  # weights of the block linears (4-bit in QLoRA), all experts
    num_params: int  # all parameters (what ZeRO-3/FSDP gathers)
    block_input_elems_per_token: int = 0  # layers x hidden: what activation offload moves per token


def model_flops(spec: ModelSpec, seq_len: int) -> ModelFlops:
    """:class:`ModelFlops` of an architecture at a sequence length.

    Sliding-window layers (``layer_types``) attend over ``min(seq_len, sliding_window)`` tokens.
    """
    head = spec.vocab_size * spec.hidden_size
    n_mm = spec.active_params_per_token - spec.embedding_params + head
    d_attn = spec.num_attention_heads * spec.head_dim
    attn = 0
    types = spec.layer_types or ("full_attention",) * spec.num_hidden_layers
    for t in types[: spec.num_hidden_layers]:
        ctx = min(seq_len, spec.sliding_window) if ("sliding" in t and spec.sliding_window) else seq_len
        attn += 4 * ctx * d_attn
    attn += 4 * seq_len * d_attn * max(0, spec.num_hidden_layers - len(types))
    quant = spec.num_hidden_layers * sum(lin.weight_params for lin in spec.block_linears)
    return ModelFlops(n_mm, head, attn, quant, spec.num_params, spec.num_hidden_layers * spec.hidden_size)


def train_flops_per_token(mf: ModelFlops, method: Method, lora_params: int = 0) -> int:
    """Model FLOPs per trained token (no recompute): ``6 N + 3 A`` full, ``4 N + 3 A + 6 N_lora`` LoRA."""
    if method is Method.FULL:
        return 6 * mf.matmul_params + 3 * mf.attn_flops_per_token_fwd
    return 4 * mf.matmul_params + 3 * mf.attn_flops_per_token_fwd + 6 * lora_params


def recompute_flops_per_token(mf: ModelFlops, ckpt: Checkpointing, lora_params: int = 0) -> int:
    """Extra forward FLOPs per token of activation recomputation."""
    if ckpt is Checkpointing.NONE:
        return 0
    if ckpt is Checkpointing.SELECTIVE:
        return mf.attn_flops_per_token_fwd
    return 2 * (mf.matmul_params - mf.lm_head_params) + mf.attn_flops_per_token_fwd + 2 * lora_params


@dataclass(frozen=True)
class Work:
    """What one optimizer step asks of each GPU, independent of the card."""

    flops_per_token: int  # model FLOPs (the MFU numerator)
    hardware_flops_per_token: int  # + recompute
    flops: float  # hardware FLOPs per GPU per step
    dequant_bytes: float  # memory traffic of QLoRA de-quantization per GPU per step
    peer_bytes: float  # GPU-to-GPU bytes per GPU per step (overlapped with compute)
    host_bytes: float  # offload bytes over the host link per GPU per step (not overlapped)
    tokens_per_step: int  # over all GPUs
    stream_bytes: float = 0.0  # activation offload: block inputs out and back, overlapped (CUDA streams)


@dataclass(frozen=True)
class Speed:
    """Seconds of one optimizer step on a card, and what they are made of."""

    compute_s: float  # FLOPs at peak x utilisation, plus de-quantization
    dequant_s: float  # part of compute_s
    comm_s: float
    host_s: float
    step_s: float
    tokens_per_s: float  # over all GPUs

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _comm_bytes(sc: Scenario, param_bytes: int, grad_bytes: int, trainable16: int) -> tuple[float, float]:
    """(GPU-to-GPU bytes, host-link bytes) per GPU per optimizer step."""
    n, ga = sc.num_gpus, sc.grad_accum
    ring = (n - 1) / n if n > 1 else 0.0
    p = sc.parallelism
    if n == 1 or p is Parallelism.NONE:
        peer = 0.0
    elif p in (Parallelism.DDP, Parallelism.ZERO1):
        peer = 2 * ring * grad_bytes  # all-reduce of the gradients once per step (no_sync between)
    elif p in (Parallelism.ZERO2, Parallelism.FSDP_GRAD_OP):
        peer = ring * grad_bytes * ga + ring * trainable16  # reduce-scatter each micro-batch, gather params
    else:  # zero3 / fsdp: gather the weights for forward and backward of every micro-batch
        peer = (2 * ring * param_bytes + ring * grad_bytes) * ga
    host = 0.0
    if sc.offload is not Offload.NONE:
        host = (grad_bytes + trainable16) / n  # gradients out, updated 16-bit weights back
    if sc.offload is Offload.OPTIMIZER_PARAMS:
        host += 2 * param_bytes / n * ga  # each GPU's weight shard fetched for forward and backward
    return peer, host


def step_work(sc: Scenario, mf: ModelFlops, trainable_params: int) -> Work:
    """The card-independent work of one optimizer step of ``sc`` per GPU."""
    lora = 0 if sc.method is Method.FULL else trainable_params
    model = train_flops_per_token(mf, sc.method, lora)
    hw = model + recompute_flops_per_token(mf, sc.gradient_checkpointing, lora)
    tokens_mb = sc.micro_batch_size * sc.seq_len
    ga = sc.grad_accum
    dequant = 0.0
    if sc.method is Method.QLORA:
        passes = 2 + (1 if sc.gradient_checkpointing in (Checkpointing.FULL, Checkpointing.OFFLOAD) else 0)
        per = INT8_DEQUANT_BYTES_PER_WEIGHT.value if sc.quantize.value == "int8" else DEQUANT_BYTES_PER_WEIGHT.value
        dequant = ga * passes * mf.quantizable_params * per
    wbytes = 4 if sc.precision is Precision.FP32 else 2
    if sc.method is Method.QLORA:
        param_bytes = mf.quantizable_params // 2 + (mf.num_params - mf.quantizable_params) * wbytes
    else:
        param_bytes = mf.num_params * wbytes
    mixed_ddp = sc.precision.mixed and sc.parallelism is Parallelism.DDP
    grad_bytes = trainable_params * (4 if mixed_ddp or sc.precision is Precision.FP32 else 2)
    peer_b, host_b = _comm_bytes(sc, param_bytes, grad_bytes, trainable_params * wbytes)
    stream = 0.0
    if sc.gradient_checkpointing is Checkpointing.OFFLOAD:
        stream = 2.0 * ga * tokens_mb * mf.block_input_elems_per_token * sc.precision.compute_bytes
    return Work(model, hw, float(ga * tokens_mb * hw), dequant, peer_b, host_b, tokens_mb * ga * sc.num_gpus, stream)


def step_time(
    w: Work,
    *,
    peak_tflops: float,
    mfu: float,
    mem_bandwidth_gbs: float | None,
    peer_gbs: float,
    host_gbs: float,
) -> Speed:
    """Seconds per optimizer step: ``max(compute, GPU-to-GPU traffic, activation offload) + offload traffic``.

    ``peer_gbs``/``host_gbs``: GPU-to-GPU and host-link bandwidth per direction (GB/s).
    """
    dequant = w.dequant_bytes / (mem_bandwidth_gbs * 1e9) if (w.dequant_bytes and mem_bandwidth_gbs) else 0.0
    compute = w.flops / (peak_tflops * 1e12 * mfu) + dequant
    comm = w.peer_bytes / (peer_gbs * 1e9) if w.peer_bytes else 0.0
    host = w.host_bytes / (host_gbs * 1e9) if w.host_bytes else 0.0
    stream = w.stream_bytes / (host_gbs * 1e9) if w.stream_bytes else 0.0
    step = max(compute, comm, stream) + host
    return Speed(compute, dequant, comm, host, step, w.tokens_per_step / step)


def run_hours(total_tokens: float, tokens_per_s: float) -> float:
    """Wall-clock hours to train ``total_tokens`` (dataset tokens x epochs) at ``tokens_per_s``."""
    return total_tokens / tokens_per_s / 3600.0


def run_cost(hours: float, num_gpus: int, usd_per_gpu_hour: float | None) -> float | None:
    """Rental cost in USD: hours x GPUs x price per GPU-hour (None without a price)."""
    return None if usd_per_gpu_hour is None else hours * num_gpus * usd_per_gpu_hour
