"""The step's big transient tensors in the order the step makes them, as events for the caching allocator's replay
(:func:`vramfit.estimate.allocator.transient_reserved`): autocast copies, de-quantized weights, the checkpointed no-grad
MLP working set and the loss (moved out of estimate/allocator.py, which keeps the allocator's own arithmetic)."""

from __future__ import annotations

from vramfit.estimate.allocator import largest_weight, transient_reserved
from vramfit.estimate.hf_upcast_loss import _hf_upcast_in_model_loss, _upcasts_in_model


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
    per-parameter foreach temporaries (DeepSpeed ZeRO-2's flat ones: :func:`vramfit.estimate.zero2_step.zero2_step_reserved`): replayed, those
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
    embed_copy, head_copy = (other * g for g in r.parts.copy_grads)  # modules_to_save (estimate/saved_modules.py)
    _head_copy_grad(r, head_copy, alloc, free)
    free(alloc(other * r.dequant))
    alloc(embed_copy)  # the embedding copy's gradient, after the lowest block; to zero_grad, past this replay
    free(kept)
    return ev


def _head_copy_grad(r, head_copy: int, alloc, free) -> None:
    """The output layer copy's whole gradient (modules_to_save, estimate/saved_modules.py), made by its MmBackward
    once the loss's blocks are freed: a cached loss block serves it where it fits, else it opens a segment, which
    stays reserved through the next step's forward (the gradient lives to zero_grad, past this replay). An fp32 copy
    under autocast: the gradient of its 16-bit cast comes first (as large as the cast, ``Step.head_autocast``), then
    the cast's backward makes the fp32 one (the simulator's QLoRA trace: 1,002 then 2,004 MiB for Llama-3.1-8B's
    head)."""
    if head_copy:
        low = alloc(r.head_autocast)
        alloc(head_copy)
        free(low)


def _loss_from_figures(r, alloc, free, before_backward: list[int]) -> list[int]:
    """Replay the loss from its figures (:class:`vramfit.estimate.loss.LossMemory`), cut at one fp32 logits block."""
    unit = max(1, logits_block(r))
    # a returned KV cache (estimate/loss.py returned_cache_bytes) is counted in the allocated peak only, not replayed:
    # its 2 x layers tensors of one size are not loss blocks (what its cached blocks serve later is not modelled)
    c = r.loss.cache
    kept = alloc(r.loss.kept - c * r.sc.keeps_outputs, unit)
    # the forward working set (the logits, their fp32 upcast) are the inputs of the op whose output is saved
    # (log_softmax): made before it, so the saved block sits above them and their freed blocks leave a hole below it
    # (the engine's trace, DeepSpeed 0.19.8 Qwen2.5-0.5B: mm, _to_copy, _log_softmax in this order; estimate/ds_offload.py)
    work = alloc(r.loss.forward_peak - c - r.loss.saved - r.loss.kept + c * r.sc.keeps_outputs, unit)
    saved = alloc(r.loss.saved, unit)
    free(work)
    free(before_backward)
    grad = alloc(r.loss.backward_peak - r.loss.saved - r.loss.kept, unit)
    free(saved + grad)
    return kept


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


def logits_block(r) -> int:
    """Bytes of one fp32 logits block, ``4 x tokens x vocabulary rows``: the unit the loss's tensors are cut into
    (:func:`_loss_from_figures`)."""
    from vramfit.estimate.loss import vocab_rows

    return 4 * r.sc.micro_batch_size * r.sc.seq_len * vocab_rows(r.spec)


def loss_segments(r) -> int:
    """Bytes of the segments the loss's tensors alone open in the allocator replay (:func:`transient_reserved`)."""
    return transient_reserved(step_transients(r, loss_only=True))[1]


def length_variation_note(r, reserved: int, events: list[int] | None = None) -> str | None:
    """The assumption to state when the loss's tensors hold most of the transient segments: their
    size is tokens x vocabulary, so the reserved figure then depends on how batch lengths vary.

    Mechanism (CUDACachingAllocator.cpp at pytorch/pytorch@eb42ad6e): a request larger than every
    cached block opens a new segment (``get_free_block`` finds nothing, ``alloc_block``) and cached
    segments stay reserved until ``empty_cache``, so a batch longer than all before it adds segments
    for its loss tensors while the shorter batches' segments stay; shorter batches split cached blocks
    and add nothing. Fixed-length (packed or padded) batches replay the same sizes every step.
    :mod:`vramfit.estimate.varlen` replays a length schedule (checked against the simulator run with the lengths in
    order): a record length within the 2 MiB segment rounding of the next strands nothing, one close below it nearly
    its whole loss; among ``n`` batches in random order the expected number of records is ``H_n ~ ln n + 0.58``.
    Stated when those segments are more than half the transient ones and at least 1 % of ``reserved``
    (a presentation threshold: below it the dependence is within the figure's rounding). ``events``: the
    step's :func:`step_transients`, when the caller already has them.
    """
    loss_reserved = loss_segments(r)
    total = transient_reserved(step_transients(r) if events is None else events)[1]
    if 2 * loss_reserved <= total or 100 * loss_reserved < reserved:
        return None
    from vramfit.estimate.vision_inputs import lm_scenario

    length = lm_scenario(r.spec, r.sc).seq_len  # the images' and video's tokens too
    return (
        f"Reserved memory assumes every micro-batch is {length} tokens long: the loss's tensors "
        f"({loss_reserved / 2**30:,.2f} GiB of allocator segments, sized by tokens x vocabulary) hold most of "
        "what the caching allocator keeps, so variable-length batches change it: each batch longer than all "
        "before it opens new segments and the old ones stay reserved (no empty_cache), up to that much again "
        "per new longest length, most for lengths close to the longest; a shuffled epoch of n batches has about "
        "ln n + 0.6 of them, and batches after the longest add nothing; pack or pad to a fixed length to keep this figure."
    )


def first_step_note(r, reserved: int, headroom: int | None = None) -> str | None:
    """The assumption to state where the first step's new tensors can take the loss's cached segments: from the second
    step on, reserved can then be up to those segments above the estimate's figure.

    Mechanism (the simulator's replay of the real step, sim/cuda_allocator.py; pytorch/pytorch@eb42ad6e
    c10/cuda/CUDACachingAllocator.cpp ``get_free_block``: best fit among cached blocks, a larger block split): the
    first backward makes every gradient and the first ``optimizer.step()`` every state (torch/optim/adamw.py
    ``_init_group``, bitsandbytes optim/optimizer.py ``init_state``: lazily), after the first loss freed its tensors,
    so the large ones are carved from the loss's cached segments. ``zero_grad`` frees the gradients but a segment
    still holding a state cannot give the next loss a whole block: its tensors open new segments, which the next
    gradients (served from the holes the freed ones left) do not use. How many segments are taken depends on where
    each tensor lands, so it is stated, not added: ``vramfit measure`` on an H100 (benchmarks/data/measured/
    vramfit_h100.jsonl, per-step peaks): Qwen3-4B full fine-tuning at 2 x 2,048 reserved 32.66 GB after step 1 and
    41.38 GB from step 2 (+8.72 GB; the simulator's trace: all three fp32 loss segments hold states), Llama-3.2-1B at
    4 x 2,048 18.39 -> 22.60 GB (+4.20 GB, one of three); LoRA runs (rank-r tensors under 1 MiB, in the small pool)
    did not move. FSDP's sharded states are created as lazily (torch's AdamW on the shards): the simulator's torchtitan
    run of TITAN_BENCH_2412-1 (Llama-3.1-8B, FSDP2 on 8 GPUs, 2 x 8,192; benchmarks/data/measured/public.jsonl)
    opens one more 7.83 GiB segment, the fp32 logits block, in the second step, and reserves 82.53 GiB against the
    82.4 measured, where the estimate reads 80.18. Stated on one GPU, under DDP and under FSDP (ZeRO creates its
    states when the engine is built) where the loss's segments are at least 1 % of ``reserved`` and the gradients and
    states above 1 MiB (``Parts.large_trainable``) can fill at least one fp32 logits block. ``headroom``: what the
    scenario's card leaves above the device figure; the rise stated is at most that, since an allocation that finds no
    room releases the cached segments and retries."""
    from vramfit.choices import FSDP_FAMILY, Parallelism

    if r.sc.parallelism not in (Parallelism.NONE, Parallelism.DDP, *FSDP_FAMILY):
        return None
    loss = loss_segments(r)
    if not loss or r.parts.large_trainable < logits_block(r):
        return None
    if headroom is not None:  # on a card, an allocation that finds no room releases the cached segments and retries
        loss = min(loss, headroom)  # (CUDACachingAllocator.cpp release_cached_blocks): reserved stops at the card
    if 100 * loss < reserved:
        return None
    return (
        f"From the second optimizer step on, reserved memory can be up to {loss / 2**30:,.2f} GiB above this figure: "
        "the first step's gradients and lazily created optimizer states are placed by best fit in the segments its "
        "loss left cached, and a segment still holding a state after zero_grad cannot serve the next loss, whose "
        "tensors open new segments that sit idle at the backward peak. How many are taken depends on where each "
        "tensor lands (measured on an H100: Qwen3-4B full fine-tuning +8.72 GB after the first step, all of its loss "
        "segments; Llama-3.2-1B +4.20 GB, one of three); vramfit simulate replays the placement."
    )
