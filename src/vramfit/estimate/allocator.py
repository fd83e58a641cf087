"""The PyTorch CUDA caching allocator's arithmetic, shared by the estimator and the simulator.

Models ``round_size`` and ``get_allocation_size`` of pytorch/pytorch@eb42ad6e
``c10/cuda/CUDACachingAllocator.cpp`` with default settings (no ``roundup_power2_divisions``,
no ``max_split_size_mb``, no expandable segments).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from vramfit.estimate.constants import (
    K_LARGE_BUFFER,
    K_MIN_BLOCK_SIZE,
    K_MIN_LARGE_ALLOC,
    K_ROUND_LARGE,
    K_SMALL_BUFFER,
    K_SMALL_SIZE,
)


def round_allocation(nbytes: int) -> int:
    """Bytes the allocator charges for a request (``round_size``): at least 512, a multiple of 512.

    ``max_memory_allocated`` counts these rounded block sizes, not the requested bytes.
    A zero-byte tensor allocates nothing.
    """
    if nbytes <= 0:
        return 0
    return -(-nbytes // _MIN_BLOCK) * _MIN_BLOCK  # >= one block for any nbytes > 0


_MIN_BLOCK = K_MIN_BLOCK_SIZE.value  # read once: round_allocation runs ~100 times per estimate


@dataclass(frozen=True)
class AllocatorConf:
    """The ``PYTORCH_CUDA_ALLOC_CONF`` settings a framework sets and the replay honours (default: none set).

    ``roundup_power2_divisions``: divisions per power-of-two size interval, index ``log2(size) - 20`` clamped to
    0..15 (``CUDAAllocatorConfig::roundup_power2_divisions``); ``()`` = plain 512-byte rounding.
    ``expandable_segments``: one growable segment per pool, mapped in pages (:class:`CachingAllocatorModel`)."""

    expandable_segments: bool = False
    roundup_power2_divisions: tuple[int, ...] = ()


def parse_alloc_conf(text: str) -> AllocatorConf:
    """``PYTORCH_CUDA_ALLOC_CONF`` as torch parses the two keys modelled (pytorch/pytorch v2.5.1
    c10/cuda/CUDAAllocatorConfig.cpp ``parseArgs``, ``parseRoundUpPower2Divisions``): ``[a:n,...,>:m]`` fills the
    intervals below the first ``a`` (in MiB) with its ``n``, sets interval ``log2(a)`` to ``n``, and ``>:m`` fills
    from the last ``a``'s interval to the end (overwriting it); intervals not named stay 0."""
    expandable, div = False, [0] * 16
    for key, _, value in (part.partition(":") for part in re.split(r",(?![^\[]*\])", text) if part):
        if key == "expandable_segments":
            expandable = value == "True"
        elif key == "roundup_power2_divisions":
            first, last = True, 0
            for item in value.strip("[]").split(","):
                size, _, n = item.partition(":")
                if size == ">":
                    div[last:] = [int(n)] * (16 - last)
                    continue
                index = min(int(size).bit_length() - 1, 15)
                if first:
                    div[:index] = [int(n)] * index
                    first = False
                div[index], last = int(n), index
    return AllocatorConf(expandable, tuple(div) if any(div) else ())


def round_request(nbytes: int, conf: AllocatorConf | None = None) -> int:
    """``round_size`` under ``conf`` (pytorch/pytorch v2.5.1 c10/cuda/CUDACachingAllocator.cpp): with more than one
    division for the size's interval and a size above 512 x divisions, up to the next of ``divisions`` equal steps
    between the powers of two around it (``roundup_power2_next_division``); else :func:`round_allocation`."""
    if conf is None or not conf.roundup_power2_divisions or nbytes <= 0:
        return round_allocation(nbytes)
    divisions = conf.roundup_power2_divisions[min(max(nbytes.bit_length() - 1 - 20, 0), 15)]
    if divisions <= 1 or nbytes <= _MIN_BLOCK * divisions or nbytes & (nbytes - 1) == 0:
        return round_allocation(nbytes)
    step = (1 << (nbytes.bit_length() - 1)) // divisions
    return -(-nbytes // step) * step


def plain_peak(events: list[int] | tuple[int, ...]) -> int:
    """The allocated high-water mark of ``events`` (:func:`transient_reserved`'s form) at 512-byte rounding: what the
    estimator's own allocated figure counts, whatever the placement."""
    sizes, live, peak = [], 0, 0
    for ev in events:
        if ev >= 0:
            sizes.append(round_allocation(ev))
            live += sizes[-1]
            peak = max(peak, live)
        else:
            live -= sizes[-ev - 1]
    return peak


def segment_size(nbytes: int) -> int:
    """Size of the ``cudaMalloc`` segment opened for a request that no cached block can serve
    (``get_allocation_size``): 2 MiB for small requests, 20 MiB for 1-10 MiB, else rounded up to 2 MiB."""
    size = round_allocation(nbytes)
    if size == 0:
        return 0
    if size <= K_SMALL_SIZE.value:
        return K_SMALL_BUFFER.value
    if size < K_MIN_LARGE_ALLOC.value:
        return K_LARGE_BUFFER.value
    r = K_ROUND_LARGE.value
    return -(-size // r) * r


def rounded_sum(tensors: list[tuple[int, int]] | tuple[tuple[int, int], ...]) -> int:
    """Allocated bytes of tensors given as (bytes, count) pairs."""
    return sum(count * round_allocation(size) for size, count in tensors)


def reserved_for_tensors(tensors: list[tuple[int, int]] | tuple[tuple[int, int], ...]) -> int:
    """Reserved bytes when every large tensor opens its own segment and small ones share 2 MiB blocks.

    Models the allocator at model load: parameters are allocated one after another and never freed,
    so each large one (>= 10 MiB) sits in a segment of its own rounded to 2 MiB; 1-10 MiB requests
    are packed into shared 20 MiB segments and small ones (<= 1 MiB) into 2 MiB blocks.
    Tensors are given as (bytes, count) pairs.
    """
    small = 0
    large = 0
    for size, count in tensors:
        r = round_allocation(size)
        if r <= K_SMALL_SIZE.value:
            small += r * count
        elif r < K_MIN_LARGE_ALLOC.value:
            large += r * count  # packed into shared 20 MiB segments
        else:
            large += segment_size(r) * count
    small_segments = -(-small // K_SMALL_BUFFER.value) * K_SMALL_BUFFER.value if small else 0
    return large + small_segments


def transient_reserved(events: list[int] | tuple[int, ...], conf: AllocatorConf | None = None) -> tuple[int, int]:
    """(peak allocated, reserved) of a sequence of transient tensors replayed through the caching
    allocator's segment rules (:class:`vramfit.sim.cuda_allocator.CachingAllocatorModel`, the
    simulator's replay of pytorch/pytorch@eb42ad6e ``c10/cuda/CUDACachingAllocator.cpp``).

    ``events``: ``n >= 0`` allocates a tensor of ``n`` bytes; ``-k`` frees the ``k``-th allocation
    (1-based). The rules that make reserved exceed allocated here: a freed block is cached, never
    returned to the driver without ``empty_cache``; best fit from the request's pool
    (``get_free_block``); a smaller request splits a cached block when more than 1 MiB would remain
    (``should_split``, ``max_split_size`` unlimited by default); a larger request than any cached
    block opens a new segment rounded to 2 MiB (``get_allocation_size``, kRoundLarge); expandable
    segments are off by default (``torch-docs`` ``expandable_segments``). Reserved only grows.
    ``conf``: the framework's ``PYTORCH_CUDA_ALLOC_CONF`` (:class:`AllocatorConf`), None for torch's defaults.
    """
    return _replay(tuple(events), conf)


@lru_cache(maxsize=4096)  # a pure function of the events: the planner and the web repeat the same steps
def _replay(events: tuple[int, ...], conf: AllocatorConf | None = None) -> tuple[int, int]:
    from vramfit.sim.cuda_allocator import CachingAllocatorModel  # light: no torch

    model = CachingAllocatorModel(conf)
    run_events(model, events)
    return model.stats.peak_allocated, model.stats.peak_reserved


def run_events(model, events: tuple[int, ...] | list[int]) -> None:
    """Run :func:`transient_reserved`-style ``events`` on ``model`` (a ``CachingAllocatorModel``, possibly
    holding blocks already: estimate/wrap_step.py replays the step after the FSDP wrap)."""
    blocks = []
    for ev in events:
        if ev >= 0:
            blocks.append(model.malloc(ev))  # a zero-byte tensor allocates nothing (None)
        else:
            model.free(blocks[-ev - 1])
            blocks[-ev - 1] = None


def largest_weight(spec) -> int:
    """Elements of the model's largest weight: a block linear's or the (un)embedding's."""
    return max([x.in_features * x.out_features for x in spec.block_linears]
               + [spec.lm_head_params or spec.embedding_params])


def step_transients(r, loss_only: bool = False) -> list[int]:
    """The big tensors one micro-batch frees again, as :func:`transient_reserved` events, in the order
    the step makes them (``r``: a :class:`vramfit.estimate.step.Step`).

    Forward: under full checkpointing the no-grad MLP working set (:func:`nograd_mlp_bytes`), then
    autocast's weight copies and each block's de-quantized 4-bit weight (one size, reused),
    then the loss's saved tensors and its forward working set; backward: the loss gradient (the
    saved tensors freed after it), the de-quantized weight again. The loss of transformers < 4.45 is replayed
    tensor by tensor (:func:`_hf_upcast_in_model_loss`); any other loss's figures are sums of
    tensors of at most one fp32 logits row block (``4 * tokens * vocab``), so each is cut into
    tensors of that size plus a remainder: a cached fp32 block serves the next fp32 request, a
    smaller cached one cannot (a new segment). Autocast's copies are per-weight tensors: cut at the
    largest weight; the de-quantized weight is one tensor.
    Not replayed: saved activations and gradients (their rounding is counted per tensor elsewhere) and the
    per-parameter foreach temporaries (DeepSpeed ZeRO-2's flat ones: :func:`zero2_step_reserved`): replayed, those
    reuse cached loss blocks once the micro-batch makes them large enough, so reserved would shrink as the micro-batch grows (a real allocator
    effect, but the planner's search assumes memory grows with the micro-batch).
    ``loss_only``: the loss's tensors alone (what a batch's length sizes).
    """
    from vramfit.estimate.unsloth import replays_step, step_events

    if replays_step(r.spec, r.sc, r.profile):
        per_element = r.parts.optimizer_state / max(1, r.parts.num_trainable)
        return step_events(r.spec, r.sc, per_element, r.parts.param_tensors) if not loss_only else []
    spec = r.spec
    weight = largest_weight(spec)
    ev: list[int] = []
    sizes: list[int] = []

    def alloc(n: int, cut: int = 0) -> list[int]:
        n, out = max(0, n), []
        while n > 0:
            sizes.append(min(n, cut) if cut else n)
            ev.append(sizes[-1])
            out.append(len(sizes))
            n -= sizes[-1]
        return out

    def free(ks: list[int]) -> None:
        ev.extend(-k for k in ks)

    if not loss_only:
        _nograd_mlp(r, alloc, free)  # the checkpointed no-grad MLP working set
    other = 0 if loss_only else 1
    auto = alloc(other * r.autocast_forward, 2 * weight)  # one 16-bit copy per weight
    free(alloc(other * r.dequant))
    loss = _hf_upcast_in_model_loss if _upcasts_in_model(r) else _loss_from_figures
    kept = loss(r, alloc, free, auto)  # the logits the loop keeps to the end of the step (estimate/loss.py)
    free(alloc(other * r.dequant))
    free(kept)
    return ev


def zero2_step_reserved(r, step_allocated: int, loss_events: list[int], conf: AllocatorConf | None = None) -> int:
    """Bytes reserved beyond ``step_allocated`` (the optimizer-step phase's allocated bytes) at DeepSpeed ZeRO-2's
    step without optimizer offload: the segments the micro-batch's loss left cached (``loss_events``,
    :func:`step_transients`) and those the step's flat partition-sized tensors opened beyond their own live bytes.
    Each of those is larger than the loss's cached blocks at the usual micro-batch, so it opens a segment of its own,
    and the freed 16-bit ones cannot serve the fp32 ones; 0 when ZeRO-2 does not run this step.

    DeepSpeed v0.16.2 runtime/zero/stage_1_and_2.py (0.19.8 the same without pre-flattened gradients):
    ``copy_grads_in_partition`` puts this GPU's 16-bit gradients in one ``grads_in_partition`` buffer in backward
    (``contiguous_gradients``, the default); ``step``: ``self.flatten(self.averaged_gradients[i])`` (16-bit),
    ``.to(fp32)``, the flat copy dropped, ``free_grad_in_param_list(self.params_in_partition[i])`` and
    ``averaged_gradients[i] = None`` (the buffer goes), ``self._optimizer_step(i)`` (foreach AdamW:
    ``torch._foreach_sqrt`` copies the fp32 second moment, :func:`vramfit.estimate.step.ds_foreach_step`), then
    ``single_partition_of_fp32_groups[i].grad = None``. Before the flatten, full fine-tuning's gradient norm takes a
    float64 copy of each gradient in turn (``scaled_global_norm``, :func:`zero12_norm_piece`): the largest opens a
    segment the smaller ones split. One param group's partition stands for all: the Trainer's no-decay group
    (biases, norms) is small. ``vramfit simulate`` (DeepSpeed 0.19.8, Qwen2.5-0.5B, 2 GPUs, full depth) opens the
    same float64 (1.01 GiB, the whole embedding on rank 0) and foreach sqrt (0.92 GiB) segments.

    Not replayed: DeepSpeed 0.19's flatten on the GPU (estimate/ds_load.py) leaves the 16-bit parameters the engine
    moved there one by one cached, up to the whole 16-bit model, which ``max_memory_reserved`` on a roomy card counts
    (the simulator: Qwen2.5-3B +5.75 GiB). A card without the room gets them back: a failed ``cudaMalloc`` releases
    the cached blocks and retries (pytorch/pytorch@eb42ad6e c10/cuda/CUDACachingAllocator.cpp ``malloc``:
    ``release_cached_blocks``), so counting them would refuse runs that fit; the estimate has one figure per card
    class (the planner's premise, plan/evaluate.py ``class_shifts``)."""
    from vramfit.estimate.framework import OptimizerImpl
    from vramfit.scenario import Method, Offload, Optimizer, Parallelism, Precision

    sc = r.sc
    if (sc.parallelism is not Parallelism.ZERO2 or sc.offload is not Offload.NONE or sc.precision is Precision.FP32
            or sc.num_gpus < 2 or not r.parts.num_trainable):
        return 0
    group = -(-r.parts.num_trainable // sc.num_gpus)
    norm = 8 * zero12_norm_piece(r.spec, group) if sc.method is Method.FULL else 0
    foreach = sc.optimizer is Optimizer.ADAMW and r.profile.torch_optimizer_impl is OptimizerImpl.FOREACH
    events, windows = _zero2_events(loss_events, group, sc.precision.compute_bytes, norm, foreach)
    _, reserved = transient_reserved(events, conf)
    sizes, live, at_step = [], 0, 0
    for i, ev in enumerate(events):  # the live bytes at the step's moments (master and states included)
        if ev >= 0:
            sizes.append(round_allocation(ev))
            live += sizes[-1]
        else:
            live -= sizes[-ev - 1]
        if any(a <= i < b for a, b in windows):
            at_step = max(at_step, live)
    return max(0, reserved - at_step) // K_ROUND_LARGE.value * K_ROUND_LARGE.value


def _zero2_events(loss_events: list[int], group: int, c: int, norm: int, foreach: bool) -> tuple[list[int], list]:
    """Model load, then two steps (the first makes the optimizer states), as :func:`transient_reserved` events, and
    the index windows of the steps. Load (DeepSpeed v0.16.2 stage_1_and_2.py ``__init__``): the fp32 master partition
    is ``bit16_partition.to(device).clone().float()`` (the 16-bit clone goes), and ``initialize_optimizer_states``
    makes a zero fp32 gradient partition and drops it (``group.grad = None`` without offload): both segments stay
    cached for the steps to reuse. Each step: the loss's tensors, the 16-bit gradient buffer, the norm's float64
    copy, the flat 16-bit copy and its fp32 cast, both 16-bit ones dropped, the states (first step:
    torch/optim/adamw.py ``_init_group`` ``zeros_like`` twice), foreach AdamW's sqrt copy, the fp32 gradient dropped.
    """
    ev: list[int] = []
    count = 0

    def alloc(n: int) -> int:
        nonlocal count
        ev.append(n)
        count += 1
        return count

    clone = alloc(c * group)
    alloc(4 * group)  # the fp32 master partition, kept
    ev.append(-clone)
    ev.append(-alloc(4 * group))  # the zero gradient of initialize_optimizer_states, made and dropped
    windows = []
    for first in (True, False):
        base = count
        ev.extend(e if e >= 0 else e - base for e in loss_events)
        count += sum(1 for e in loss_events if e >= 0)
        start = len(ev)
        grads = alloc(c * group)
        ev.append(-alloc(norm))
        flat, fp32 = alloc(c * group), alloc(4 * group)
        ev.extend((-flat, -grads))
        if first:
            alloc(4 * group)
            alloc(4 * group)
        if foreach:
            ev.append(-alloc(4 * group))
        ev.append(-fp32)
        windows.append((start, len(ev)))
    return ev, windows


def zero12_norm_piece(spec, partition_numel: int) -> int:
    """Elements of the largest gradient piece one GPU holds under ZeRO-1/2: they partition the flat 16-bit buffer, not
    each parameter (DeepSpeed v0.16.2 stage_1_and_2.py ``get_data_parallel_partitions``), so a parameter lies whole in
    one partition unless it straddles a boundary, and the (un)embedding, first or last in the buffer, does up to the
    partition's size. The norm takes a float64 copy of each piece (``get_grad_norm_direct``:
    ``g.data.double()``)."""
    return min(largest_weight(spec), partition_numel)


def _loss_from_figures(r, alloc, free, before_backward: list[int]) -> list[int]:
    """Replay the loss from its figures (:class:`vramfit.estimate.loss.LossMemory`), cut at one fp32 logits block."""
    from vramfit.estimate.loss import vocab_rows

    unit = max(1, 4 * r.sc.micro_batch_size * r.sc.seq_len * vocab_rows(r.spec))
    kept = alloc(r.loss.kept, unit)
    saved = alloc(r.loss.saved, unit)
    free(alloc(r.loss.forward_peak - r.loss.saved - r.loss.kept, unit))
    free(before_backward)
    grad = alloc(r.loss.backward_peak - r.loss.saved - r.loss.kept, unit)
    free(saved + grad)
    return kept


def _upcasts_in_model(r) -> bool:
    """The loss is the model's cross-entropy over ``logits.float()`` (``HF_UPCAST_IN_MODEL``), not compiled or capped."""
    from vramfit.estimate.loss import compiles_loss
    from vramfit.estimate.profile_fields import LossLayout
    from vramfit.scenario import Loss

    sc, profile = r.sc, r.profile
    return (sc.loss is Loss.STANDARD and profile.standard_loss is LossLayout.HF_UPCAST_IN_MODEL
            and not r.spec.final_logit_softcapping and not compiles_loss(sc, profile))


def _hf_upcast_in_model_loss(r, alloc, free, before_backward: list[int]) -> list[int]:
    """Replay the loss of transformers < 4.45 tensor by tensor; the handles of the fp32 logits the loop keeps.

    transformers v4.39.3 (and v4.44.2) models/llama/modeling_llama.py LlamaForCausalLM.forward:
    ``logits = self.lm_head(hidden_states)`` (16-bit), ``logits = logits.float()`` (the 16-bit tensor dies: the
    ToCopy node saves nothing), ``shift_logits = logits[..., :-1, :].contiguous()`` (a copy unless one sequence:
    estimate/loss.py), ``CrossEntropyLoss`` (log_softmax keeps its fp32 output). Backward (torch
    tools/autograd/derivatives.yaml): nll_loss's gradient, log_softmax's (the first and the saved output die),
    ``slice_backward`` (aten/src/ATen/native/TensorShape.cpp: ``at::zeros(input_sizes)`` then ``copy_``: a fresh
    fp32 tensor of the unshifted logits' size while log_softmax's gradient lives), ``_to_copy_backward`` (the
    gradient back in 16 bits, while the fp32 one lives): half-size tensors, a segment no fp32 one reuses (the sequence
    is checked against torch's autograd: tests/estimate/test_hf_upcast_loss_replay.py)."""
    from vramfit.estimate.loss import logits_bytes_per_element, vocab_rows

    sc = r.sc
    # the shifted tensors ((seq_len - 1) x vocab) are counted at the logits' size: the same blocks serve both when the
    # logits are a 2 MiB multiple (Llama-2 at 2,048 tokens), and the figure keeps growing with the micro-batch as the
    # planner's search assumes (exact sizes add a segment where the two round to different 2 MiB units)
    tv = sc.micro_batch_size * sc.seq_len * vocab_rows(r.spec)
    lb = logits_bytes_per_element(sc, r.profile)
    half = alloc(lb * tv if lb != 4 else 0)  # fp32 logits: .float() returns them, no copy and no node
    logits = alloc(4 * tv)
    free(half)
    shifted = alloc(4 * tv if sc.micro_batch_size > 1 else 0)
    saved = alloc(4 * tv)
    free(shifted)
    if not r.loss.kept:  # the Trainer drops the outputs before backward
        free(logits)
    free(before_backward)
    nll, lsm = alloc(4 * tv), alloc(4 * tv)
    free(nll + saved)
    sliced = alloc(4 * tv)
    free(lsm)
    back = alloc(lb * tv if lb != 4 else 0)
    free(sliced + back)
    return logits if r.loss.kept else []


def _nograd_mlp(r, alloc, free) -> None:
    """Replay the checkpointed no-grad MLP (:func:`nograd_mlp_bytes`) with :func:`step_transients`' ``alloc`` and
    ``free``: three (gated) or two tensors of its width, or, op by op, a gated MLP whose 4-bit linears return fp32
    (HF QLoRA: the norms are fp32) under autocast, where bitsandbytes and PEFT add copies of each output
    (``vramfit simulate`` on Llama-3.1-8B makes four fp32 and one 16-bit ``tokens x intermediate`` segments here):

    - bitsandbytes 0.45.0 nn/modules.py l. 478-484 ``Linear4bit.forward``: ``x.to(self.compute_dtype)``, then
      ``bnb.matmul_4bit(...).to(inp_dtype)``: a 16-bit output and its fp32 copy (same in 0.50.2);
    - peft v0.14.0 tuners/lora/bnb.py ``Linear4bit.forward`` (LoRA on that linear): ``result = result.clone()``,
      then ``result = result + lora_B(lora_A(dropout(x))) * scaling``: lora_B's output and its scaled copy in
      16 bits (autocast), their fp32 sum;
    - transformers v4.47.1 models/llama/modeling_llama.py ``LlamaMLP.forward``:
      ``down_proj(act_fn(gate_proj(x)) * up_proj(x))``; down_proj casts its fp32 input to 16 bits (as above).
    """
    mlp = nograd_mlp_bytes(r)
    spec, c = r.spec, r.sc.precision.compute_bytes
    tokens = r.sc.micro_batch_size * r.sc.seq_len
    width = mlp // max(1, tokens * spec.intermediate_size)
    ins = [x for x in spec.block_linears if x.group == "mlp" and x.out_features == spec.intermediate_size]
    if not (mlp and spec.gated_mlp and len(ins) == 2 and width != c and r.profile.lora_4bit_clones_output):
        free(alloc((3 if spec.gated_mlp else 2) * mlp, mlp))
        return
    adapted = {a.target for a in r.adapters}
    half = c * tokens * spec.intermediate_size

    def linear(name: str) -> list[int]:
        out = alloc(half)  # matmul_4bit's 16-bit output
        wide = alloc(mlp)  # .to(inp_dtype)
        free(out)
        if name not in adapted:
            return wide
        clone = alloc(mlp)
        free(wide)
        b_out = alloc(half)
        scaled = alloc(half)
        free(b_out)
        total = alloc(mlp)
        free(clone + scaled)
        return total

    gate = linear(ins[0].name)
    act = alloc(mlp)
    free(gate)
    up = linear(ins[1].name)
    prod = alloc(mlp)
    free(act + up)
    down_in = alloc(half)  # down_proj's x.to(compute_dtype)
    free(prod + down_in)


def nograd_mlp_bytes(r) -> int:
    """Bytes of one intermediate-size tensor of a dense block's MLP (0 unless every block is checkpointed).

    Under full checkpointing the forward runs each block without grad, so nothing is saved and its
    intermediates are freed as the block goes: transformers v4.40.0 models/llama/modeling_llama.py
    LlamaMLP.forward ``down_proj(act_fn(gate_proj(x)) * up_proj(x))`` holds ``act_fn(gate)``, ``up`` and
    their product (three ``tokens x intermediate_size`` tensors in the compute dtype) at once; a plain MLP
    (models/gpt_neox/modeling_gpt_neox.py GPTNeoXMLP ``dense_4h_to_h(act(dense_h_to_4h(x)))``) two. Replayed before
    the loss, their cached blocks are smaller than the loss's fp32 ``tokens x vocab`` tensors, which then open
    segments of their own (benchmarks/data/measured/README.md, AAI_FSDPQLORA_2403: the reserved figure grows
    past allocated with the micro-batch).
    Their dtype is the MLP's (as in :func:`vramfit.estimate.activations._mlp_saved`): fp32 under HF QLoRA, where
    ``prepare_model_for_kbit_training`` leaves the norms fp32 and bitsandbytes' Linear4bit returns its input's dtype
    (bitsandbytes 0.45.0 nn/modules.py l. 484 ``Linear4bit.forward``: ``bnb.matmul_4bit(...).to(inp_dtype)``; the
    same in 0.50.2); ``vramfit simulate`` (transformers 5.24) shows these fp32 ``tokens x intermediate_size``
    blocks cached below the loss's segments (448 MiB each for Llama-3.1-8B at 8,192 tokens).
    """
    from vramfit.choices import Checkpointing
    from vramfit.estimate.activations import dtypes_for
    from vramfit.scenario import Method, Quantize

    sc, spec = r.sc, r.spec
    if sc.gradient_checkpointing is not Checkpointing.FULL or spec.num_experts:
        return 0
    quantized = sc.quantize is not Quantize.NONE and sc.method is not Method.FULL
    fp32_mlp = quantized and r.profile.qlora_unquantized_fp32
    width = dtypes_for(sc, r.profile).norm_out if fp32_mlp else sc.precision.compute_bytes
    return sc.micro_batch_size * sc.seq_len * spec.intermediate_size * width


def length_variation_note(r, reserved: int, events: list[int] | None = None) -> str | None:
    """The assumption to state when the loss's tensors hold most of the transient segments: their
    size is tokens x vocabulary, so the reserved figure then depends on how batch lengths vary.

    Mechanism (CUDACachingAllocator.cpp at pytorch/pytorch@eb42ad6e): a request larger than every
    cached block opens a new segment (``get_free_block`` finds nothing, ``alloc_block``) and cached
    segments stay reserved until ``empty_cache``, so a batch longer than all before it adds segments
    for its loss tensors while the shorter batches' segments stay; shorter batches split cached blocks
    and add nothing. Fixed-length (packed or padded) batches replay the same sizes every step.
    Stated when those segments are more than half the transient ones and at least 1 % of ``reserved``
    (a presentation threshold: below it the dependence is within the figure's rounding). ``events``: the
    step's :func:`step_transients`, when the caller already has them.
    """
    loss_reserved = transient_reserved(step_transients(r, loss_only=True))[1]
    total = transient_reserved(step_transients(r) if events is None else events)[1]
    if 2 * loss_reserved <= total or 100 * loss_reserved < reserved:
        return None
    return (
        f"Reserved memory assumes every micro-batch is {r.sc.seq_len} tokens long: the loss's tensors "
        f"({loss_reserved / 2**30:,.2f} GiB of allocator segments, sized by tokens x vocabulary) hold most of "
        "what the caching allocator keeps, so variable-length batches change it: each batch longer than all "
        "before it opens new segments and the old ones stay reserved (no empty_cache), up to that much again "
        "per new longest length; pack or pad to a fixed length to keep this figure."
    )
