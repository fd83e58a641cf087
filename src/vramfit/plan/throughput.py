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
ZeRO-3 3 Psi; bytes in :mod:`vramfit.plan.traffic`) and activation offload (block inputs out and back
over the host link, on CUDA streams) overlap with compute, except ZeRO-3's gathers past DeepSpeed's
prefetch bucket and, without peer-to-peer, all GPU-to-GPU traffic (:func:`mechanism_step_time`);
optimizer/weight offload traffic, the offloaded optimizer step and paged optimizer state do not.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from vramfit.choices import ZERO_FAMILY
from vramfit.estimate.constants import Constant
from vramfit.models.spec import ModelSpec
from vramfit.plan import layouts
from vramfit.plan.elementwise import elementwise_bytes_per_token, lora_bytes_per_token_fwd, lora_clone_bytes
from vramfit.plan.kernels import (
    DECODE_LAYER_OVERHEAD_S,
    GPTQ_DEQUANT_S_PER_GWEIGHT,
    LAYER_OVERHEAD_S,
    REFERENCE_BANDWIDTH,
    ZERO3_HOST_S_PER_LAYER,
    ZERO3_LAYER_OVERHEAD_S,
    CardSpeed,
    host_optimizer_seconds,
)
from vramfit.plan.rollout import Rollout, rollout_seconds, rollout_work
from vramfit.plan.traffic import (
    comm_bytes,
    fsdp_serial_gather_bytes,
    split_nodes,
    zero3_exposed_share,
    zero3_gather_bytes,
)
from vramfit.scenario import Checkpointing, Method, Offload, Parallelism, Precision, Quantize, Scenario

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


def dequant_bytes_per_weight(sc: Scenario) -> float:
    """Bytes moved per quantized weight each time a matmul de-quantizes it (int8 or 4-bit)."""
    return (INT8_DEQUANT_BYTES_PER_WEIGHT if sc.quantize is Quantize.INT8 else DEQUANT_BYTES_PER_WEIGHT).value


@dataclass(frozen=True)
class ModelFlops:
    """Architecture figures the speed model needs, read once from a :class:`ModelSpec`."""

    matmul_params: int  # N_mm: parameters a token multiplies with (active experts, lm_head)
    lm_head_params: int  # vocab x hidden (the lm_head matmul, tied or not)
    attn_flops_per_token_fwd: int  # A at the given seq_len: sum over layers of 4 * ctx * d_attn
    quantizable_params: int  # weights of the block linears (4-bit in QLoRA), all experts
    num_params: int  # all parameters (what ZeRO-3/FSDP gathers)
    block_input_elems_per_token: int = 0  # layers x hidden: what activation offload moves per token
    num_layers: int = 0
    elem_bytes_per_token_fwd: int = 0  # memory-bound (elementwise) traffic of one forward, all layers + loss
    hidden_size: int = 0  # what tensor/pipeline parallel send per token (plan/layouts.py); sizes DeepSpeed's
    # "auto" prefetch bucket (:func:`zero3_exposed_share`)
    kv_width: int = 0  # key + value elements per token of one layer (context parallel's ring)
    routed_elems_per_token: int = 0  # MoE layers x top_k x hidden: what expert parallel's all-to-all moves
    routed_expert_params: int = 0  # the routed experts' parameters, all layers (expert parallel shards them whole)
    # a vision-language model's images (plan/stage_work.py scenario_flops): per sequence, the image tokens in
    # the language model's sequence and the patches through the tower; per patch, the tower's linear weights
    # and its attention FLOPs
    image_lm_tokens: int = 0
    tower_patches: int = 0
    tower_mm_params: int = 0
    tower_attn_per_patch: float = 0.0  # mean over the patches (segments of unequal length)
    # DoRA's weight norms per forward call and its extra elementwise bytes per token (elementwise.dora_traffic)
    dora_bytes_per_call: int = 0
    dora_bytes_per_token_fwd: int = 0
    # PEFT's whole trained copies (modules_to_save): all their elements, and the output layer's copy's alone
    copy_params: int = 0
    head_copy_params: int = 0


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
    return ModelFlops(n_mm, head, attn, quant, spec.num_params, spec.num_hidden_layers * spec.hidden_size,
                      spec.num_hidden_layers, elementwise_bytes_per_token(spec), spec.hidden_size,
                      spec.num_key_value_heads * (spec.head_dim + spec.v_dim),
                      max((spec.layers_of(x) for x in spec.block_linears if x.group == "expert"), default=0)
                      * spec.num_experts_per_tok * spec.hidden_size,
                      sum(x.params * spec.layers_of(x) for x in spec.block_linears if x.group == "expert"))


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
    if ckpt is Checkpointing.SELECTIVE_OP:
        # torchtitan's op policy recomputes every second block matmul (about half the block's
        # matmul FLOPs) and keeps the attention output (torchtitan@9dec370 parallelize_llama.py)
        return mf.matmul_params - mf.lm_head_params + lora_params
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
    # what the mechanism model (``card=``) reads, per GPU
    n_micro: int = 1  # micro-batches per optimizer step
    mm_flops_mb: float = 0.0  # matmul FLOPs of one micro-batch (recompute included)
    attn_flops_mb: float = 0.0  # attention FLOPs the kernel executes in one micro-batch
    elem_bytes_mb: float = 0.0  # memory-bound traffic of one micro-batch
    layers: int = 0  # decoder blocks (fixed per-layer launch overhead)
    zero3_partitions: int = 0  # DeepSpeed ZeRO-3's data-parallel partitions (its hooks' host time); 0: not ZeRO-3
    compiled: bool = False
    gptq_weights_mb: float = 0.0  # GPTQ weights de-quantized per micro-batch (all passes)
    opt_bytes: float = 0.0  # optimizer step memory traffic per GPU
    opt_on_host: bool = False  # offloaded: the step runs on the CPU at host DRAM speed (kernels.HOST_DRAM_BYTES_PER_GPU)
    opt_host_params: float = 0.0  # offloaded with one CPU thread per rank: its parameters (kernels.CPU_ADAM_PARAMS_PER_S_ONE_THREAD)
    # several nodes (:func:`traffic.split_nodes`): ring bytes per GPU whose bus bandwidth is the node's NICs
    net_bytes: float = 0.0
    net_hops: int = 0  # inter-node ring steps per optimizer step (each costs the network's latency)
    exposed_peer_bytes: float = 0.0  # part of peer_bytes no prefetch hides (ZeRO-3 gathers past its bucket)
    exposed_net_bytes: float = 0.0  # the same of net_bytes
    # tensor/pipeline parallel (plan/layouts.py): on the critical path, not overlapped
    tp_bytes: float = 0.0  # tensor-parallel collectives per GPU per step, over the node's GPU-to-GPU link
    bubble: float = 0.0  # pipeline bubble as a fraction of the compute time
    pp_bytes: float = 0.0  # pipeline sends per GPU per step (the network when stages are on other nodes)
    pp_net: bool = False
    ep_bytes: float = 0.0  # expert parallel's all-to-all per GPU per step (blocking; plan/layouts.py)
    ep_net: bool = False  # the expert-parallel group spans nodes
    rollout: Rollout | None = None  # GRPO/PPO: the step's generation (plan/rollout.py), before it trains
    forward_passes: int = 0  # no-grad forwards besides the micro-batches' (plan/stage_work.py), each dispatching its layers


@dataclass(frozen=True)
class Speed:
    """Seconds of one optimizer step on a card, and what they are made of."""

    compute_s: float  # FLOPs at peak x utilisation, plus de-quantization
    dequant_s: float  # part of compute_s
    comm_s: float
    host_s: float
    step_s: float  # generate_s included
    tokens_per_s: float  # over all GPUs
    generate_s: float = 0.0  # GRPO/PPO rollout generation (plan/rollout.py)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def step_work(sc: Scenario, mf: ModelFlops, trainable_params: int) -> Work:
    """The card-independent work of one optimizer step of ``sc`` per GPU: its SFT step's (:func:`sft_work`) of
    the sequences its stage trains, plus the stage's other passes and a VLM's tower (plan/stage_work.py).
    ``mf``: :func:`stage_work.scenario_flops` of the scenario (:func:`model_flops` for text alone)."""
    from vramfit.plan.stage_work import stage_work

    return stage_work(sc, mf, trainable_params, sft_work)


def sft_work(sc: Scenario, mf: ModelFlops, trainable_params: int) -> Work:
    """The work of one SFT step of ``sc`` per GPU: ``micro_batch_size x seq_len`` text tokens (and a VLM's
    image tokens, ``mf.image_lm_tokens``) through the language model per micro-batch."""
    if sc.per_rank_layout:
        from vramfit.plan.layouts import expert_parallel_work, model_parallel_work

        if sc.expert_parallel > 1:
            return expert_parallel_work(sc, mf, sft_work(replace(sc, expert_parallel=1), mf, trainable_params))
        return model_parallel_work(sc, mf, trainable_params, sft_work)
    # the copies train whole weights, not adapters: no rank-r matmuls or adds (an embedding copy's gradient is a
    # scatter); an output layer's copy adds its weight gradient's matmul, 2 V H per token, to the frozen head's 4 V H
    lora = 0 if sc.method is Method.FULL else trainable_params - mf.copy_params
    model = train_flops_per_token(mf, sc.method, lora) + 2 * mf.head_copy_params
    hw = model + recompute_flops_per_token(mf, sc.gradient_checkpointing, lora)
    tokens_mb = sc.micro_batch_size * (sc.seq_len + mf.image_lm_tokens)
    ga = sc.grad_accum
    dequant = 0.0
    if sc.method is Method.QLORA:
        passes = 2 + (1 if sc.gradient_checkpointing in (Checkpointing.FULL, Checkpointing.OFFLOAD) else 0)
        dequant = ga * passes * mf.quantizable_params * dequant_bytes_per_weight(sc)
    wbytes = 4 if sc.precision is Precision.FP32 else 2
    param_bytes = held_param_bytes(sc, mf)
    mixed_ddp = sc.precision.mixed and sc.parallelism is Parallelism.DDP
    grad_bytes = trainable_params * (4 if mixed_ddp or sc.precision is Precision.FP32 else 2)
    peer_b, host_b = comm_bytes(sc, param_bytes, grad_bytes, trainable_params * wbytes)
    peer_b, net_b, hops = split_nodes(sc, peer_b, param_bytes, grad_bytes, mf.num_layers)
    stream = 0.0
    if sc.gradient_checkpointing is Checkpointing.OFFLOAD:
        stream = 2.0 * ga * tokens_mb * mf.block_input_elems_per_token * sc.precision.compute_bytes
    mech = mechanisms(sc, mf, model, hw, lora, trainable_params, tokens_mb)
    if sc.parallelism is Parallelism.ZERO3:
        share = zero3_exposed_share(sc, mf.hidden_size, mf.quantizable_params / max(1, mf.num_layers))
        inside, across = zero3_gather_bytes(sc, param_bytes)
        mech["exposed_peer_bytes"], mech["exposed_net_bytes"] = share * inside, share * across
    elif sc.method is not Method.FULL and _lora_units_nested(sc):
        mech["exposed_peer_bytes"], mech["exposed_net_bytes"] = fsdp_serial_gather_bytes(sc, param_bytes)
    if sc.quantize.value == "gptq-int4":
        dequant = 0.0  # timed by its kernel rate (kernels.GPTQ_DEQUANT_S_PER_GWEIGHT), not by bytes
    text_tokens = sc.micro_batch_size * sc.seq_len * ga * sc.num_gpus
    return Work(model, hw, float(ga * tokens_mb * hw), dequant, peer_b, host_b, text_tokens, stream,
                **mech, net_bytes=net_b, net_hops=hops, rollout=rollout_work(sc, mf))


def held_param_bytes(sc: Scenario, mf: ModelFlops) -> int:
    """Bytes of the model's weights as a GPU holds them (what ZeRO-3/FSDP gathers): 4-bit block weights at half a
    byte under QLoRA, the rest in the compute dtype (fp32 under fp32 training)."""
    wbytes = 4 if sc.precision is Precision.FP32 else 2
    if sc.method is Method.QLORA:
        return mf.quantizable_params // 2 + (mf.num_params - mf.quantizable_params) * wbytes
    return mf.num_params * wbytes


def _lora_units_nested(sc: Scenario) -> bool:
    """The framework wraps LoRA adapters as FSDP1 units nested in the layers' units (profile
    ``fsdp_lora_units_nested``; :func:`traffic.fsdp_serial_gather_bytes`)."""
    from vramfit.estimate.framework import scenario_profile

    return sc.parallelism is Parallelism.FSDP and scenario_profile(sc).fsdp_lora_units_nested


#: Executed share of the counted attention FLOPs: FlashAttention/SDPA skip the masked half of a causal
#: score matrix (Dao 2023, arXiv:2307.08691, sec. 3.1.1); eager attention computes all of it.
_CAUSAL_SKIP = 0.5


def causal_share(sc: Scenario) -> float:
    """The share of the counted causal attention FLOPs the scenario's kernel executes (:data:`_CAUSAL_SKIP`)."""
    return 1.0 if sc.attention.value == "eager" else _CAUSAL_SKIP


def recomputes_attention(ck: Checkpointing) -> bool:
    """The recompute runs the attention core again: selective (Korthikanti et al. 2022) and whole-block
    checkpointing; torchtitan's op policy saves the SDPA output (torchtitan@9dec370 parallelize_llama.py)."""
    return ck in (Checkpointing.SELECTIVE, Checkpointing.FULL, Checkpointing.OFFLOAD)


def forward_passes(ck: Checkpointing) -> int:
    """Forward-sized passes of memory-bound traffic per micro-batch: forward, backward (about two forwards),
    and the recompute; torchtitan's op policy recomputes every op outside its _save_list (mm, sdpa,
    reduce_scatter, abs, max: torchtitan@9dec370 parallelize_llama.py), i.e. all memory-bound ones."""
    return 3 + (1 if ck in (Checkpointing.FULL, Checkpointing.OFFLOAD, Checkpointing.SELECTIVE_OP) else 0)


def optimizer_shards(sc: Scenario) -> int:
    """GPUs the optimizer state is split over: ZeRO and FSDP shard it, DDP replicates it."""
    return sc.num_gpus if sc.parallelism in (*ZERO_FAMILY, Parallelism.FSDP, Parallelism.FSDP_GRAD_OP) else 1


def optimizer_traffic_per_param(sc: Scenario) -> float:
    """Bytes one optimizer step moves per trainable parameter: it reads the weight it updates, its gradient and its
    states and writes the weight and the states back, ``2 w + g + 2 s``. ``w`` = ``g``: 4 under ``-mixed`` and fp32
    (torch AMP's fp32 parameters and gradients), else the 16-bit parameter; ``s``: the optimizer's state per element
    in its real format (estimate/state.py ``state_bytes_per_element``, the bytes memory counts too).
    torch AdamW (torch/optim/adamw.py ``_multi_tensor_adamw`` / ``_fused_adamw``): ``exp_avg``, ``exp_avg_sq`` in the
    parameter's dtype, 7 w. bitsandbytes 8-bit AdamW (v0.50.2 csrc/ops.cuh ``optimizerStatic8bitBlockwise(p, g, state1,
    state2, ..., absmax1, absmax2, ...)``, one launch per parameter from optim/optimizer.py ``Optimizer2State.update_step``:
    the 16-bit p and g, both uint8 states and their fp32 absmax per 256 read, p, the states and absmax written):
    10.06 B per bf16 parameter, not the 7 B a 1-byte "state" width times AdamW's seven accesses gave. SGD: 3 w."""
    from vramfit.estimate.state import state_bytes_per_element

    w = sc.precision.param_bytes
    return 3 * w + 2 * state_bytes_per_element(sc.optimizer, w)


def mechanisms(sc: Scenario, mf: ModelFlops, model: int, hw: int, lora: int, trainable: int, tokens_mb: int) -> dict:
    """Per micro-batch matmul/attention FLOPs, memory-bound bytes and optimizer bytes of ``sc`` per GPU."""
    from vramfit.estimate.framework import scenario_profile
    from vramfit.plan.kernels import ATTN_BACKWARD_RATIO

    ck = sc.gradient_checkpointing
    recompute_attn = 1 if recomputes_attention(ck) else 0
    a = mf.attn_flops_per_token_fwd
    mm_per_token = hw - (3 + recompute_attn) * a
    attn_per_token = a * causal_share(sc) * (1 + ATTN_BACKWARD_RATIO.value + recompute_attn)
    fwd_passes = forward_passes(ck)
    gptq = 0.0
    if sc.quantize.value == "gptq-int4":
        gptq = mf.quantizable_params * (2 + (1 if ck in (Checkpointing.FULL, Checkpointing.OFFLOAD) else 0))
    shards = optimizer_shards(sc)
    opt = trainable / shards * optimizer_traffic_per_param(sc)  # in GPU memory, or host DRAM when offloaded
    elem = mf.elem_bytes_per_token_fwd + lora_bytes_per_token_fwd(sc, lora) + mf.dora_bytes_per_token_fwd
    clone = lora_clone_bytes(sc, lora)  # PEFT's clone of 4-bit outputs (forward, recompute)
    # DoRA's weight norms: once per forward call and again in a checkpointed recompute (detached: not in backward)
    dora = mf.dora_bytes_per_call * (1 + (1 if ck in (Checkpointing.FULL, Checkpointing.OFFLOAD) else 0))
    return {"n_micro": sc.grad_accum, "mm_flops_mb": float(tokens_mb * mm_per_token),
            "attn_flops_mb": float(tokens_mb * attn_per_token),
            "elem_bytes_mb": float(tokens_mb * (elem * fwd_passes + clone) + dora),
            "layers": mf.num_layers, "compiled": bool(sc.compile), "gptq_weights_mb": gptq, "opt_bytes": opt,
            "opt_on_host": sc.offload is not Offload.NONE,
            # torchrun's one OpenMP thread per rank (profile ranks_single_threaded) on a node of several ranks
            "opt_host_params": trainable / shards if (sc.offload is not Offload.NONE and sc.gpus_per_node > 1
                                                      and scenario_profile(sc).ranks_single_threaded) else 0.0,
            "zero3_partitions": shards if sc.parallelism is Parallelism.ZERO3 else 0}


def step_time(
    w: Work,
    *,
    peak_tflops: float,
    mfu: float,
    mem_bandwidth_gbs: float | None,
    peer_gbs: float,
    host_gbs: float,
    card: CardSpeed | None = None,
    net: tuple[float, float] = (0.0, 0.0),
    paged_bytes: float = 0.0,
    link: CardSpeed | None = None,
) -> Speed:
    """Seconds per optimizer step: ``max(compute, GPU-to-GPU traffic, activation offload) + offload traffic``.

    ``peer_gbs``/``host_gbs``: GPU-to-GPU and host-link bandwidth per direction (GB/s). With ``card``
    (:func:`kernels.card_speed`) the compute is timed by mechanism (:func:`mechanism_step_time`) and
    ``mfu`` is not read. ``net``: (bus bytes/s, latency s) of rings that span nodes (:func:`net_rate`).
    ``paged_bytes``: paged optimizer state that lives in host RAM on this card (``verdict.result_paging``),
    paged in and out once per step over the host link (:data:`kernels.PAGED_NOTE`). ``link``: the cards' link
    (:func:`kernels.card_speed`) when ``mfu`` times the compute: without peer-to-peer the traffic is staged through
    host memory at its rate and adds to compute, as :func:`mechanism_step_time` has it.
    """
    if card is not None:
        return mechanism_step_time(w, card, net, paged_bytes)
    p2p = link is None or link.p2p
    if link is not None:
        peer_gbs = link.peer_bytes / 1e9
    dequant = w.dequant_bytes / (mem_bandwidth_gbs * 1e9) if (w.dequant_bytes and mem_bandwidth_gbs) else 0.0
    compute = w.flops / (peak_tflops * 1e12 * mfu) * (1 + w.bubble) + dequant
    comm = w.peer_bytes / (peer_gbs * 1e9) if w.peer_bytes else 0.0
    host = (w.host_bytes + 2 * paged_bytes) / (host_gbs * 1e9)
    stream = w.stream_bytes / (host_gbs * 1e9) if w.stream_bytes else 0.0
    across, waits, exposed = _net_seconds(w, net)
    comm += across
    step = ((max(compute, comm - waits, stream) if p2p else max(compute, stream) + comm - waits)
            + host + exposed + layouts.blocking_seconds(w, peer_gbs * 1e9, net))
    gen = _generate_seconds(w, peak_tflops * 1e12 * mfu, (mem_bandwidth_gbs or 0) * 1e9, peer_gbs * 1e9)
    return Speed(compute, dequant, comm, host, step + gen, w.tokens_per_step / (step + gen), gen)


def _generate_seconds(w: Work, gemm_flops: float, mem_bytes: float, peer_bytes: float) -> float:
    """Rollout seconds of a step (:func:`rollout.rollout_seconds`: generation, its weight gather and the
    reference pass); 0 without a memory bandwidth."""
    if w.rollout is None or not mem_bytes:
        return 0.0
    return rollout_seconds(w.rollout, gemm_flops, mem_bytes, DECODE_LAYER_OVERHEAD_S.value, peer_bytes)


def net_rate(peer_bytes_s: float, node_bytes_s: float, latency_us: float) -> tuple[float, float]:
    """(bus bytes/s, seconds per inter-node step) of a ring spanning nodes: the slower of the node's NICs
    and its GPU-to-GPU link (NCCL tuning.cc: ``busBw = nChannels * speedInter``), NCCL's NET latency."""
    return min(peer_bytes_s, node_bytes_s), latency_us * 1e-6


def scenario_net(interconnect, g, peer_gbs: float) -> tuple[float, float]:
    """:func:`net_rate` of card ``g`` under a scenario's ``interconnect`` (``nodes.network_for``), ``peer_gbs`` its
    GPU-to-GPU link: what :func:`step_time` needs as ``net`` wherever the run spans nodes."""
    from vramfit.nodes import network_for

    net = network_for(interconnect, g.gpu_id)
    return net_rate(peer_gbs * 1e9, net.node_bytes_s, net.latency_us)


def _net_seconds(w: Work, net: tuple[float, float]) -> tuple[float, float, float]:
    """(seconds of the inter-node traffic of one step, seconds of it no prefetch hides, seconds that add).

    FSDP and ZeRO-3 prefetch the next layer's all-gather while a layer computes and reduce gradients
    while backward goes on (torch FSDP2 ``_fsdp_param_group.py`` prefetch; DeepSpeed stage3 prefetch
    bucket); DDP all-reduces buckets during backward. What cannot hide is one layer's share per
    micro-batch (the first all-gather, the last reduce), ZeRO-3's gathers past its prefetch bucket
    (``exposed_net_bytes``) and the latency of every inter-node step.
    """
    if not w.net_bytes:
        return 0.0, 0.0, 0.0
    bw, lat = net
    across, waits = w.net_bytes / bw, w.exposed_net_bytes / bw
    return across, waits, waits + (across - waits) / max(1, w.layers) + w.net_hops * lat


def mechanism_step_time(w: Work, c: CardSpeed, net: tuple[float, float] = (0.0, 0.0),
                        paged_bytes: float = 0.0) -> Speed:
    """Seconds per optimizer step from the work's mechanisms on one card.

    Per micro-batch: matmuls at the card's sustained GEMM rate, attention at the FlashAttention rate,
    memory-bound ops and NF4 de-quantization at the memory bandwidth, GPTQ de-quantization at its
    kernel rate, and a fixed launch overhead per layer (eager or compiled). Per step: the optimizer's
    memory traffic, in GPU memory or, offloaded, in host DRAM (``host_s``). GPU-to-GPU traffic overlaps
    with compute where the cards have peer-to-peer access, else it adds; offload traffic over the host
    link and paged optimizer state (in and out, ``paged_bytes`` each way) add.
    """
    over = LAYER_OVERHEAD_S["compiled" if w.compiled else "eager"].value * w.layers
    passes = w.forward_passes * w.layers * DECODE_LAYER_OVERHEAD_S.value  # no-grad forwards' dispatch (eager)
    if w.zero3_partitions > 1:  # the host waits on the hooks' all-gathers: their time adds
        over += ZERO3_LAYER_OVERHEAD_S.value * w.layers
    gptq = w.gptq_weights_mb / 1e9 * GPTQ_DEQUANT_S_PER_GWEIGHT.value * REFERENCE_BANDWIDTH / c.mem_bytes
    nf4 = w.dequant_bytes / w.n_micro / c.mem_bytes
    mb = w.mm_flops_mb / c.gemm_flops + w.attn_flops_mb / c.attn_flops + w.elem_bytes_mb / c.mem_bytes + over
    if w.zero3_partitions == 1:  # nothing to gather: its host side runs beside the kernels, the longer one counts
        mb = max(mb, ZERO3_HOST_S_PER_LAYER.value * w.layers)
    dequant = w.n_micro * (gptq + nf4)
    compute = (w.n_micro * mb * (1 + w.bubble) + dequant + passes
               + (0.0 if w.opt_on_host else w.opt_bytes / c.mem_bytes))
    comm = w.peer_bytes / c.peer_bytes if w.peer_bytes else 0.0
    host = (w.host_bytes + 2 * paged_bytes) / c.host_bytes
    if w.opt_on_host:
        host += host_optimizer_seconds(w.opt_bytes, w.opt_host_params)
    stream = w.stream_bytes / c.host_bytes if w.stream_bytes else 0.0
    across, net_waits, exposed = _net_seconds(w, net)
    comm += across
    if c.p2p:  # what prefetch cannot hide adds; the rest overlaps with compute
        waits = w.exposed_peer_bytes / c.peer_bytes
        step = max(compute, comm - waits - net_waits, stream) + waits + host + exposed
    else:
        step = max(compute, stream) + comm - net_waits + host + exposed
    step += layouts.blocking_seconds(w, c.peer_bytes, net) + (gen := _generate_seconds(w, c.gemm_flops, c.mem_bytes, c.peer_bytes))
    return Speed(compute, dequant, comm, host, step, w.tokens_per_step / step, gen)


def run_hours(total_tokens: float, tokens_per_s: float) -> float:
    """Wall-clock hours to train ``total_tokens`` (dataset tokens x epochs) at ``tokens_per_s``."""
    return total_tokens / tokens_per_s / 3600.0


def time_band(hours: float | None, mfu: float | None) -> tuple[float, float] | None:
    """``hours`` at the mechanism model's p90 error either way (``kernels.SPEED_ERROR_P90``: 90 % of the
    published throughputs lie inside); None without hours or when a user utilisation (``mfu``) times it."""
    from vramfit.plan.kernels import SPEED_ERROR_P90

    if hours is None or mfu is not None:
        return None
    return hours * (1 - SPEED_ERROR_P90), hours * (1 + SPEED_ERROR_P90)


def run_cost(hours: float, num_gpus: int, usd_per_gpu_hour: float | None) -> float | None:
    """Rental cost in USD: hours x GPUs x price per GPU-hour (None without a price)."""
    return None if usd_per_gpu_hour is None else hours * num_gpus * usd_per_gpu_hour
