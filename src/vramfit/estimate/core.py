"""The estimator: per-GPU peak memory of one training step, as the maximum over its phases.

persistent state (weights, quantized base, adapters, master weights, workspaces)
+ the maximum over: end of forward, start of backward (loss gradients), inside a block's backward
(recompute of a checkpointed block, de-quantization), the optimizer step (its temporaries), with the
gradients held between micro-batches of gradient accumulation.
"""

from __future__ import annotations

from dataclasses import dataclass

from vramfit.estimate import activations as act
from vramfit.estimate.allocator import reserved_for_tensors, round_allocation, rounded_sum
from vramfit.estimate.constants import (
    BNB_4BIT_BLOCK,
    CUBLAS_WORKSPACE,
    CUBLAS_WORKSPACE_HOPPER,
    CUBLASLT_WORKSPACE,
    CUDA_CONTEXT,
    K_ROUND_LARGE,
    NCCL_CHANNELS,
    NCCL_LL128_BUFF,
    NCCL_LL_BUFF,
    NCCL_SIMPLE_BUFF,
)
from vramfit.estimate.framework import FrameworkProfile, adapter_bytes, profile_for, runs_under_autocast
from vramfit.estimate.loss import loss_memory
from vramfit.estimate.params import ParamTensor, adapter_tensors, base_tensors, resolve_adapters
from vramfit.estimate.state import (
    optimizer_state_bytes,
    quantized_weight_bytes,
    shard,
    sharding_for,
)
from vramfit.models.spec import ModelSpec
from vramfit.scenario import (
    Attention,
    Checkpointing,
    Loss,
    Method,
    Optimizer,
    Parallelism,
    Precision,
    Quantize,
    QuantizeExperts,
    Scenario,
)

_DS = (Parallelism.ZERO1, Parallelism.ZERO2, Parallelism.ZERO3)


@dataclass
class Parts:
    """Per-GPU bytes of every component (allocated unless said otherwise)."""

    weights: int = 0
    quantized_base: int = 0
    adapters: int = 0
    master_weights: int = 0
    gradients: int = 0
    optimizer_state: int = 0
    paged_optimizer_state: int = 0  # CUDA managed memory: device only
    workspaces: int = 0
    comm_buffers: int = 0
    activations: int = 0
    autocast_copies: int = 0
    logits_loss: int = 0
    temporaries: int = 0
    host: int = 0
    num_trainable: int = 0
    param_tensors: tuple[tuple[int, int], ...] = ()  # (bytes, count) of persistent tensors (for reserved)


def experts_quantized(sc: Scenario, profile: FrameworkProfile) -> bool:
    """MoE experts in the quantized base: the scenario's quantize_experts, ``auto`` = the profile
    (transformers 5 fused 3-D experts are not nn.Linear, so bitsandbytes leaves them unquantized)."""
    if sc.quantize_experts is QuantizeExperts.AUTO:
        return not profile.hf_quantizer_rules
    return sc.quantize_experts is QuantizeExperts.YES


def _is_quantized_linear(
    t: ParamTensor, sc: Scenario, profile: FrameworkProfile, spec: ModelSpec | None = None
) -> bool:
    if sc.quantize is Quantize.NONE:
        return False
    if t.kind == "linear":
        if profile.hf_quantizer_rules and spec is not None:
            if spec.model_type == "falcon":
                return False  # FalconLinear is not exactly nn.Linear
        experts = {lin.name for lin in spec.block_linears if lin.group == "expert"} if spec is not None else ()
        if t.name in experts:
            return experts_quantized(sc, profile)
        return True
    return t.kind == "lm_head" and profile.qlora_quantizes_lm_head


def model_state(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> tuple[Parts, list]:
    """Weights, quantized base, adapters, grads, master weights and optimizer state per GPU."""
    p = Parts()
    n = sc.num_gpus
    shd = sharding_for(sc.parallelism, n, sc.offload)
    # DeepSpeed's ZeRO optimizer keeps an fp32 master partition (and fp32 states) whenever the model
    # runs in 16 bits, "-true" or "-mixed" alike (deepspeed/runtime/zero/stage_1_and_2.py
    # single_partition_of_fp32_groups; stage3.py fp32_partitioned_groups_flat)
    ds_mixed = sc.parallelism in _DS and sc.precision is not Precision.FP32
    pb = sc.precision.param_bytes
    full = sc.method is Method.FULL
    adapters = resolve_adapters(spec, sc, profile.fused_qkv_lora)
    tensors = base_tensors(spec)
    sizes: list[tuple[int, int]] = []
    trainable: list[tuple[ParamTensor, int]] = []  # (tensor, dtype bytes of the trainable copy)

    for t in tensors:
        if full:
            if ds_mixed:  # DeepSpeed: 16-bit params + fp32 master in the optimizer partition
                w, m = 2, 4
            elif sc.precision.mixed:  # torch AMP: the fp32 parameters are the master copy
                w, m = 0, 4
            else:
                w, m = pb, 0
            p.weights += shard(round_allocation(t.numel * w) * t.count, shd.weights) if w else 0
            p.master_weights += shard(round_allocation(t.numel * m) * t.count, shd.optimizer) if m else 0
            sizes.append((t.numel * max(w, m), t.count))
            trainable.append((t, 2 if ds_mixed else pb))
            continue
        if _is_quantized_linear(t, sc, profile, spec):
            q = quantized_weight_bytes(t.shape[0], t.shape[1], sc.quantize)
            p.quantized_base += shard(round_allocation(q) * t.count, shd.weights)
            sizes.append((q, t.count))
            continue
        if sc.method is Method.QLORA and profile.qlora_unquantized_fp32:
            w = 4
        elif ds_mixed:
            w = 2  # zero.Init keeps the frozen base in 16 bits
        else:
            w = pb
        p.weights += shard(round_allocation(t.numel * w) * t.count, shd.weights)
        sizes.append((t.numel * w, t.count))

    ab = adapter_bytes(profile, sc.precision)
    for t in adapter_tensors(adapters, sc.lora_rank, spec.num_hidden_layers):
        stored = 2 if ds_mixed else ab
        p.adapters += shard(round_allocation(t.numel * stored) * t.count, shd.weights)
        if ds_mixed:
            p.master_weights += shard(round_allocation(t.numel * 4) * t.count, shd.optimizer)
        trainable.append((t, stored))

    state_bytes = 4 if ds_mixed else None
    opt_host = 0
    for t, dtype_bytes in trainable:
        p.num_trainable += t.total
        grad = round_allocation(t.numel * dtype_bytes) * t.count
        p.gradients += shard(grad, shd.grads)
        st = optimizer_state_bytes(t, sc.optimizer, state_bytes or (4 if sc.precision.mixed and full else dtype_bytes))
        p.optimizer_state += shard(st.device_bytes, shd.optimizer)
        p.paged_optimizer_state += shard(st.paged_bytes, shd.optimizer)
        opt_host += shard(st.device_bytes, shd.optimizer)
    if shd.optimizer_on_host:
        p.host += opt_host + p.master_weights + p.gradients
        p.optimizer_state = 0
        p.master_weights = 0
        # the GPU keeps the 16-bit gradients of the bucket in flight only (ZeRO-Offload, sec. 4)
        p.gradients = 0
    if shd.weights_on_host:
        p.host += p.weights + p.quantized_base + p.adapters
        p.weights = p.quantized_base = p.adapters = 0
    p.param_tensors = tuple(sizes)
    return p, adapters


def _layer_param_bytes(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """Unsharded bytes of one decoder block as gathered by ZeRO-3/FSDP (16-bit or quantized)."""
    total = 0
    for lin in spec.block_linears:
        if sc.quantize is not Quantize.NONE and sc.method is not Method.FULL:
            total += quantized_weight_bytes(lin.out_features, lin.in_features, sc.quantize) * lin.count
        else:
            total += lin.weight_params * sc.precision.compute_bytes
        total += lin.bias_params * sc.precision.compute_bytes
    return total + spec.block_norm_params * sc.precision.compute_bytes


def _comm_buffers(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, parts: Parts) -> int:
    """Communication buffers of the data-parallel engine, per GPU, live during forward/backward."""
    h = spec.hidden_size
    if sc.num_gpus == 1 and sc.parallelism in (Parallelism.NONE, Parallelism.DDP):
        return 0
    if sc.parallelism is Parallelism.DDP:
        # gradient_as_bucket_view=False (default): buckets are a second copy of all gradients
        # (pytorch/pytorch PR #41954; Lightning DDP optimizations doc)
        return parts.gradients
    bucket = 2 * h * h  # HF "auto" reduce_bucket_size = hidden_size**2 elements, 16-bit
    if sc.parallelism in (Parallelism.ZERO1, Parallelism.ZERO2):
        return bucket
    layer = _layer_param_bytes(spec, sc, profile)
    if sc.parallelism is Parallelism.ZERO3:
        # current + prefetched layer (stage3_prefetch_bucket_size = 0.9 h^2 "auto") + reduce bucket
        return 2 * layer + bucket
    if sc.parallelism is Parallelism.FSDP:
        # "forward currently requires 2x all-gather buffer size" (torch docs notes/fsdp.rst); the
        # root unit (embeddings, final norm, lm_head) stays gathered until the end of backward
        if not profile.fsdp_root_gathered:
            return 2 * layer
        root = (spec.embedding_params + spec.lm_head_params + spec.final_norm_params) * sc.precision.compute_bytes
        if sc.method is Method.QLORA and profile.qlora_unquantized_fp32:
            root *= 2
        return 2 * layer + root - shard(root, sc.num_gpus)
    if sc.parallelism is Parallelism.FSDP_GRAD_OP:
        return 2 * layer  # unsharded gradients of the unit being reduce-scattered
    return 0


def _optimizer_temporaries(sc: Scenario, parts: Parts, profile: FrameworkProfile, largest_param: int) -> int:
    """Temporaries of the optimizer step.

    torch foreach AdamW: ``torch._foreach_sqrt(exp_avg_sqs)`` copies the whole second moment of a
    (device, dtype) group (torch/optim/adamw.py ``_multi_tensor_adamw``); fused: none assumed.
    Adafactor: fp32 copies of grad, param and update of one parameter at a time. torchao 4-bit:
    both states of one parameter dequantized to fp32.
    """
    if sc.offload is not sc.offload.NONE:
        return 0
    if sc.optimizer is Optimizer.ADAMW and profile.torch_optimizer_impl == "foreach":
        return parts.optimizer_state // 2
    if sc.optimizer is Optimizer.ADAFACTOR:
        # transformers Adafactor.step, per parameter: grad.float() and p.float() (new tensors unless
        # already fp32), `update` and the rank-1 `_approx_sq_grad` that replaces it (both alive at
        # the assignment), then `-update * lr`: up to four full-size fp32 tensors
        copies = 2 + (0 if sc.precision.param_bytes == 4 else 2)
        return copies * 4 * largest_param
    if sc.optimizer is Optimizer.ADAMW_4BIT:
        return 2 * 4 * largest_param
    return 0


def compute(spec: ModelSpec, sc: Scenario) -> dict:
    """All parts and phase peaks of a scenario on a resolved architecture (bytes, per GPU)."""
    profile = profile_for(sc.framework)
    parts, adapters = model_state(spec, sc, profile)
    L = spec.num_hidden_layers
    quantized = sc.quantize is not Quantize.NONE and sc.method is not Method.FULL

    # workspaces: cuBLAS + cuBLASLt, allocated through the caching allocator (CublasHandlePool.cpp)
    # sm90 cards get the 32 MiB cuBLAS workspace (CublasHandlePool.cpp); catalog ids name them
    hopper = (sc.gpu or "").startswith(("h100", "h200", "gh200"))
    # one set for the forward thread and one for autograd's backward thread: cuBLAS workspaces are
    # per thread since pytorch/pytorch PR #180283
    parts.workspaces = 2 * ((CUBLAS_WORKSPACE_HOPPER if hopper else CUBLAS_WORKSPACE).value + CUBLASLT_WORKSPACE.value)

    saved = act.block_saved(spec, sc, profile, adapters, quantized)
    per_layer = sum(round_allocation(v) for v in saved.items.values())
    block_in = round_allocation(act.block_input_bytes(spec, sc, profile))
    ck = sc.gradient_checkpointing
    if ck is Checkpointing.NONE:
        blocks, recompute = L * per_layer, 0
    elif ck is Checkpointing.SELECTIVE:
        kernel = sum(round_allocation(v) for k, v in saved.items.items() if k.startswith("attn."))
        blocks, recompute = L * (per_layer - kernel), kernel
    elif ck is Checkpointing.FULL:
        blocks, recompute = L * block_in, per_layer
    else:  # offload: block inputs in host memory, the current and the prefetched one on the GPU
        blocks, recompute = 2 * block_in, per_layer
        parts.host += L * block_in
    lm_head_trainable = sc.method is Method.FULL or "lm_head" in sc.lora_targets
    extra = act.model_extra_saved(spec, sc, profile, lm_head_trainable)
    parts.activations = blocks + extra + _sliding_window_masks(spec, sc, profile)

    autocast_fwd = 0
    if runs_under_autocast(sc, profile) and sc.parallelism not in (Parallelism.FSDP, Parallelism.ZERO3) and sc.parallelism not in _DS:
        autocast_fwd, parts.autocast_copies = _autocast_copies(spec, sc)

    loss = loss_memory(spec, sc, profile)
    parts.logits_loss = loss.forward_peak
    tb = act.block_backward_transient(spec, sc, profile)
    largest = max(
        [lin.in_features * lin.out_features for lin in spec.block_linears]
        + [spec.lm_head_params or spec.embedding_params]
    )
    dequant = 0
    tokens = sc.micro_batch_size * sc.seq_len
    if quantized and tokens > profile.qlora_fused_max_tokens:
        # bnb MatMul4Bit forward/backward: F.dequantize_4bit(B).to(A.dtype) -> one full weight in the
        # compute dtype (+ fp32 absmax when double-quantized) (bitsandbytes autograd/_functions.py:315,346)
        biggest_q = max(lin.in_features * lin.out_features for lin in spec.block_linears)
        if profile.qlora_quantizes_lm_head:
            biggest_q = max(biggest_q, spec.lm_head_params or spec.embedding_params)
        dequant = sc.precision.compute_bytes * biggest_q + 4 * (-(-biggest_q // BNB_4BIT_BLOCK.value))

    comm = _comm_buffers(spec, sc, profile, parts)
    parts.comm_buffers = comm
    in_bwd = sc.optimizer_in_backward
    held = parts.gradients if (sc.grad_accum > 1 and not in_bwd) else 0
    grad_bytes_per = max(1, parts.gradients // max(1, parts.num_trainable)) if parts.num_trainable else 0
    head_grad = 0
    if lm_head_trainable and not held:
        head_grad = round_allocation((spec.lm_head_params or spec.embedding_params) * grad_bytes_per)

    # every phase as named contributions: its peak is their sum, and the breakdown is exact
    persistent = {
        "weights": parts.weights,
        "quantized_base": parts.quantized_base,
        "adapters": parts.adapters,
        "master_weights": parts.master_weights,
        "workspaces": parts.workspaces,
    }
    live = dict(persistent, optimizer_state=parts.optimizer_state, comm_buffers=comm, gradients=held)
    acts = {"activations": parts.activations, "autocast_copies": parts.autocast_copies}
    layer_grads = 0 if held or in_bwd else min(parts.gradients, _layer_grad(parts, L))
    phases: dict[str, dict[str, int]] = {
        "forward": {
            **live,
            **acts,
            "autocast_copies": parts.autocast_copies + autocast_fwd,
            "logits_loss": loss.forward_peak,
            "temporaries": dequant,
        },
        # one cross-entropy: the output layer's weight gradient is made after the fp32 logits
        # gradients are freed (nll_loss_backward, _log_softmax_backward_data, then MmBackward), so it
        # belongs to the next phase; chunked: the first chunk's matmul backward creates it while the
        # other chunks' saved logits are still alive
        "backward-loss": {
            **live,
            **acts,
            "logits_loss": loss.backward_peak,
            "gradients": held + (head_grad if sc.loss is Loss.CHUNKED else 0),
        },
        "backward-block": {
            **live,
            **acts,
            "activations": parts.activations - extra + recompute,
            "temporaries": tb + dequant,
            "gradients": held + head_grad + layer_grads,
        },
    }
    if (
        profile.fsdp_frozen_stay_gathered
        and sc.parallelism is Parallelism.FSDP
        and sc.num_gpus > 1
        and sc.method is not Method.FULL
    ):
        # end of backward: every frozen unit gathered (the full weights, a separate allocation) on
        # top of the shards (pytorch/pytorch#95805)
        gathered = parts.weights + parts.quantized_base
        phases["backward-end"] = {
            **live,
            "comm_buffers": comm + gathered * sc.num_gpus,
            "gradients": parts.gradients,
            "logits_loss": loss.held,
            "activations": recompute,
            "temporaries": tb,
        }
    if spec.tie_word_embeddings and lm_head_trainable and not in_bwd:
        # tied embeddings: the embedding's own gradient (embedding_dense_backward, V x H) meets the
        # output layer's, still in autograd's input buffer, at the very end of backward
        phases["backward-end-tied"] = {
            **persistent,
            "optimizer_state": parts.optimizer_state,
            "gradients": parts.gradients + head_grad,
            "comm_buffers": comm,
        }
    if in_bwd:
        opt_temp = 0
    else:
        opt_temp = _optimizer_temporaries(sc, parts, profile, largest)
        # DDP buckets live from wrap to exit; ZeRO/FSDP gather buffers are freed after backward
        step_comm = comm if sc.parallelism is Parallelism.DDP else 0
        phases["optimizer-step"] = {
            **persistent,
            "optimizer_state": parts.optimizer_state,
            "gradients": parts.gradients,
            "comm_buffers": step_comm,
            "temporaries": opt_temp,
        }
    parts.temporaries = max(tb + dequant, opt_temp)
    phases = {name: {k: v for k, v in d.items() if v} for name, d in phases.items()}
    return {
        "parts": parts,
        "phases": phases,
        "per_layer": per_layer,
        "saved": saved,
        "loss": loss,
        "recompute": recompute,
        "block_transient": tb,
        "dequant": dequant,
        "opt_temp": opt_temp,
        "profile": profile,
        "adapters": adapters,
    }


def _sliding_window_masks(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """Sliding-window layers whose window is shorter than the sequence get a real mask in
    transformers; SDPA then runs its memory-efficient kernel, which saves the 16-bit additive
    [B, 1, S, S] bias for backward in every such layer (not under checkpointing, which recomputes)."""
    window = spec.sliding_window
    if (
        not profile.hf_quantizer_rules  # transformers' masking (masking_utils); others use flash/flex
        or not window
        or sc.seq_len <= window
        or sc.attention is not Attention.SDPA
        or sc.gradient_checkpointing is not Checkpointing.NONE
    ):
        return 0
    if spec.layer_types:
        layers = sum(1 for t in spec.layer_types if t == "sliding_attention")
    else:
        layers = spec.num_hidden_layers
    return layers * round_allocation(sc.precision.compute_bytes * sc.micro_batch_size * sc.seq_len * sc.seq_len)


def _autocast_copies(spec: ModelSpec, sc: Scenario) -> tuple[int, int]:
    """16-bit weight copies made by autocast: (extra at the end of forward, alive into backward).

    Autocast caches the cast of leaf tensors that require grad for the whole autocast region
    (ATen autocast_mode.cpp ``cached_cast``); frozen weights are cast at each use. Either copy is
    kept by the matmul's backward (the input gradient needs the weight) unless the block is
    checkpointed. 4-bit weights are de-quantized by bitsandbytes, never cast by autocast. The
    output layer's weight is cast even when tied to the embeddings.
    """
    quantized = sc.quantize is not Quantize.NONE and sc.method is not Method.FULL
    block = 0 if quantized else sum(x.weight_params for x in spec.block_linears) * spec.num_hidden_layers
    head = spec.lm_head_params or spec.embedding_params
    if sc.gradient_checkpointing is Checkpointing.NONE:
        return 0, 2 * (block + head)
    # checkpointed blocks save nothing; the trainable weights' cached copies live until the forward's
    # autocast region ends, the output layer's copy is saved by its matmul
    trainable = block if sc.method is Method.FULL else 0
    return 2 * trainable, 2 * head


def _layer_grad(parts: Parts, layers: int) -> int:
    return parts.gradients // max(1, layers)


def reserved_bytes(allocated_peak: int, parts: Parts, per_layer_tensors: int, layers: int) -> int:
    """``max_memory_reserved``: the allocated peak plus what the caching allocator holds unused.

    Persistent tensors: each large one opens its own segment rounded to 2 MiB
    (``reserved_for_tensors``). Activations: tensors freed and re-requested every micro-batch are
    served from cached blocks; each distinct size leaves on average half a 2 MiB rounding unit
    unused (kRoundLarge, CUDACachingAllocator.cpp).
    """
    persistent_slack = reserved_for_tensors(parts.param_tensors) - rounded_sum(parts.param_tensors)
    act_slack = per_layer_tensors * layers * (K_ROUND_LARGE.value // 2)
    return allocated_peak + max(0, persistent_slack) + act_slack


def process_bytes(sc: Scenario) -> tuple[int, int]:
    """CUDA context and NCCL buffers: outside PyTorch's allocator, in nvidia-smi's figure."""
    ctx = CUDA_CONTEXT.value
    nccl = 0
    if sc.num_gpus > 1:
        per_peer = NCCL_SIMPLE_BUFF.value + NCCL_LL_BUFF.value + NCCL_LL128_BUFF.value
        aligned = -(-per_peer // (2 * 1024**2)) * 2 * 1024**2  # ALIGN_SIZE(recvSize, CUDA_IPC_MIN)
        nccl = NCCL_CHANNELS.value * 2 * aligned  # ring: a receive buffer from each of 2 neighbours
    return ctx, nccl


__all__ = ["compute", "reserved_bytes", "process_bytes", "Parts", "Precision"]
