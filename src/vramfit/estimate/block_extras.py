"""Activation terms beside one block's saved tensors (estimate/activations.py): the working set of a
block's backward, what torchtitan's op-level selective AC keeps, a checkpointed block's input, and the
saved tensors outside the blocks (final norm, lm_head input, eager mask)."""

from __future__ import annotations

from vramfit.estimate.activations import Saved, dtypes_for, mlp_width
from vramfit.estimate.attention import (
    falls_back_repeating_kv,
    mask_count,
    runs_eager_attention,
    score_elements,
    sdpa_math_fallback,
    softmax_fp32,
)
from vramfit.estimate.framework import FrameworkProfile
from vramfit.estimate.loss import layer_kv_bytes
from vramfit.estimate.norms import NormSite, norm_saved
from vramfit.estimate.profile_enums import CompileScope
from vramfit.models.spec import ModelSpec, PositionEncoding
from vramfit.scenario import Attention, Checkpointing, Method, Quantize, Scenario


def block_backward_transient(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile,
                             saved: Saved | None = None) -> int:
    """Largest working set of gradient tensors inside one block's backward, beyond saved tensors.

    ``saved``: the block's saved tensors; an eager softmax's working set is counted net of those autograd has
    freed when it peaks (``Saved.freed_before_sink_softmax_backward``, ``Saved.freed_before_softmax_backward``).

    Gated MLP: the gradient of ``act * up`` and the two gradients it produces (3 x T x I); plain
    MLP: 2 x T x I. Flash/SDPA backward: grad of the output, grads of q, k, v and the fp32 ``dq``
    accumulator of FlashAttention-2 (Dao 2023, Algorithm 2). Eager: grad of the probabilities and
    the fp32 softmax gradient (input and output).
    """
    dt = dtypes_for(sc, profile, spec)
    c = dt.compute
    b, s = sc.micro_batch_size, sc.seq_len
    T = b * s
    a, kv, d = spec.num_attention_heads, spec.num_key_value_heads, spec.head_dim
    tokens = T * (spec.expert_rows_per_token if spec.num_experts else 1)
    width = mlp_width(spec)
    mlp = (3 if spec.gated_mlp else 2) * dt.mlp * tokens * width
    if profile.lora_fused_autograd and sc.method is not Method.FULL and spec.gated_mlp:
        # LoRA_MLP.backward: DW = dY @ W_down^T is the one new (T, I) tensor; the SwiGLU backward
        # kernel overwrites DW, e, g in place and dX is written into X (fast_lora.py, inplace=True)
        mlp = c * tokens * width
        if profile.lora_product_temporary:
            # matmul_lora's `out += (X @ A) @ (s * B)` adds a second (T, I) tensor while DW is built
            # (unsloth@0e0d8fc kernels/utils.py, see FrameworkProfile.lora_product_temporary)
            mlp = 2 * c * tokens * width
    if runs_eager_attention(spec, sc, profile) and not softmax_fp32(spec, dt.autocast):
        # softmax in the compute dtype: grad of the probabilities and softmax's backward output; with
        # sinks also the zeros that the backward of probs[..., :-1] scatters into (S + 1 columns),
        # as the simulator traces gpt-oss (_softmax_backward_data, new_zeros, scatter)
        sink = 1 if spec.attention_sinks else 0
        # fp32 sinks (attention.sinks_fp32: fp32 parameters) make that softmax and its gradients fp32
        sm = 4 if spec.attention_sinks and dt.residual == 4 else c
        freed = saved.freed_before_sink_softmax_backward if saved and sink else 0
        attn = (2 + sink) * sm * b * a * s * (s + sink) - freed
    elif runs_eager_attention(spec, sc, profile):
        attn = _fp32_softmax_backward(spec, sc, saved)
    elif sdpa_math_fallback(spec, sc, profile):
        # the math kernel's softmax is an fp32 one like eager's (attention.cpp _scaled_dot_product_attention_math:
        # _safe_softmax on the fp32 scores, its gradient fp32 through matmul's backward): the simulator's T4 trace of a
        # checkpointed TinyLlama peaks with the saved fp32 probabilities, the fp32 bmm gradient and
        # _softmax_backward_data's fp32 output
        attn = _fp32_softmax_backward(spec, sc, saved)
    else:
        # k and v copied out to every head for the kernel (attention.falls_back_repeating_kv): their gradients too,
        # before expand's backward sums them back to the groups
        grads_kv = a if falls_back_repeating_kv(sc, profile, spec=spec) else kv
        attn = c * T * d * (2 * a + 2 * grads_kv) + 4 * T * a * d
    return max(mlp, attn)


def _fp32_softmax_backward(spec: ModelSpec, sc: Scenario, saved: Saved | None) -> int:
    """Working set of an eager attention's fp32 softmax backward, beside the saved fp32 probabilities.

    transformers eager attention (v4.36-v4.44 models/llama/modeling_llama.py LlamaAttention.forward; v4.48-v5.24.0
    eager_attention_forward; v4.31 the same without the dropout line): ``matmul(q, k^T) * scaling + mask``,
    ``softmax(w, dim=-1, dtype=float32).to(q.dtype)``, ``dropout(p=attention_dropout)``, ``matmul(w, v)``. torch
    v2.13.0 aten/src/ATen/native/SoftMax.cpp ``softmax(input, dim, dtype)``: a 16-bit input is first copied to
    fp32 (``input_.toType(dtype)``, as the simulator traces bf16 and fp16 alike), and
    ``_softmax`` saves its fp32 output (derivatives.yaml ``_softmax: result``); ``_to_copy`` saves nothing;
    Dropout.cpp returns the input itself for p == 0, else native_dropout keeps its mask; ``matmul`` keeps the
    16-bit probabilities. Backward (retain_graph=False frees each node's saved tensors once it has run): the
    matmul's node makes the 16-bit gradient of the probabilities and frees the probabilities it kept;
    ``_to_copy``'s node casts that gradient to fp32 and drops the 16-bit one; ``_softmax_backward_data`` then holds
    the fp32 gradient and its fp32 result beside the saved fp32 output: 8 bytes per score beyond the output, net
    of what the block has freed by then (the MLP's saved tensors, o_proj's input, the 16-bit probabilities or the
    dropout's output and mask). In an fp32 model the casts are no-ops and the output is the tensor the matmul
    keeps: the same 2 x 4 bytes. The simulator's trace of a tiny Llama with eager attention peaks there: three fp32
    (B, H, S, S) tensors (``_softmax``, ``_to_copy``, ``_softmax_backward_data``) and no 16-bit one."""
    return 8 * score_elements(spec, sc) - (saved.freed_before_softmax_backward if saved else 0)


def unpermute_backward(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """transformers 5's grouped experts path (v5.24.0 integrations/moe.py ``grouped_mm_experts_forward``) ends with
    ``weighted_out[inv_perm]`` and ``.view(tokens, top_k, hidden).sum(dim=1)``: in backward, sum's expanded gradient
    is copied contiguous for the view, and the index's backward (torch v2.13.0 derivatives.yaml ``index.Tensor``:
    ``index_backward(grad.new_zeros(...), indices, grad)``, an out-of-place ``index_put``) makes a zero-filled
    (tokens x top_k, hidden) tensor and its result: three (T x top_k, hidden) tensors at once, beside every kept
    tensor, and before the block has made any gradient of its own (``step.compute`` counts it net of one block's
    gradients). Wider than the experts' gated working set where hidden > moe_intermediate_size (Qwen3-MoE,
    DeepSeek). The simulator's tiny Qwen3-MoE with LoRA and checkpointing peaks there (-5.6 % without it)."""

    from vramfit.estimate.moe_kernel import indexed_loop

    if (not spec.num_experts or spec.experts_run_every_token or not profile.runs_transformers_modeling
            or indexed_loop(spec, sc, profile)):
        return 0
    rows = sc.micro_batch_size * sc.seq_len * spec.num_experts_per_tok
    dt = dtypes_for(sc, profile, spec)
    # QLoRA with PEFT's fp32 norms: the unquantized expert path runs in fp32; else the MLP's dtype (a framework's
    # forced-float32 layout included): the rule of activations._mlp_saved
    quantized = sc.quantize is not Quantize.NONE and sc.method is not Method.FULL
    elem = dt.norm_out if quantized and profile.qlora_unquantized_fp32 else dt.mlp
    if spec.routing_weights_fp32:  # fp32 top-k weights promote the weighted product (ModelSpec.routing_weights_fp32)
        elem = 4
    return 3 * elem * rows * spec.hidden_size


def op_sac_saved(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """Bytes one block keeps under torchtitan's op-level selective AC (``selective-op``), besides its input.

    torchtitan@9dec370 parallelisms/parallelize_llama.py _apply_ac_to_transformer_block: the policy
    counts aten.mm calls per block forward and saves an op's output when the op is in ``_save_list``
    (mm, SDPA flash/efficient, reduce_scatter, max) "except every second mm": the 1st, 3rd, 5th ...
    linear's output (block order q, k, v, o, gate, up, down) and SDPA's output and fp32 log-sum-exp
    are kept; everything else is recomputed. Each tensor rounded by the allocator.

    Compiled blocks (``compile: true``, any scope: each covers the blocks) keep fewer: eager SAC caches every
    MUST_SAVE output (torch v2.13.0 utils/checkpoint.py ``_CachingTorchDispatchMode.__torch_dispatch__``:
    ``self.storage[key][idx] = ...``), but AOTAutograd partitions the block's joint graph and saves only what the
    backward graph reads (torch/_functorch/partitioners.py ``min_cut_rematerialization_partition``, MUST_SAVE nodes
    among them). A branch's output projection (o_proj, down_proj) feeds only the residual add, whose backward reads
    nothing, so its output is not saved (:func:`_feeds_residual_only`). Traced with torch 2.13.0's inductor on a
    torchtitan Llama block under this policy (1 x 256 tokens, hidden 512): the compiled forward saves the block
    input, q, v, SDPA's output and log-sum-exp and w1's output, not w2's; torchtitan's Llama 3.1 8B benchmark (2 x
    8,192 tokens, FSDP on 8 H100s) reads 5.4 GiB less reserved compiled than eager (docs/validation.md), where the
    32 down projections' outputs are 4.0 GiB."""
    from vramfit.estimate.allocator import round_allocation

    c, T = sc.precision.compute_bytes, sc.micro_batch_size * sc.seq_len
    dropped = _compiled_drops(spec) if sc.compile else []
    kept = [round_allocation(c * T * lin.out_features) for lin in _policy_saved(spec)
            if not any(lin is d for d in dropped)]
    a, d = spec.num_attention_heads, spec.head_dim
    return sum(kept) + round_allocation(c * T * a * d) + round_allocation(4 * T * a)


def compile_note(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> str | None:
    """What ``compile: true`` changes in the count (the estimator's assumption; None uncompiled): the framework's scope
    (profile ``compile_scope``), the compiled norms and MLP (estimate/norms.py, estimate/activations.py) and, under
    op-level selective AC, the branch outputs AOTAutograd does not keep (:func:`op_sac_saved`)."""
    if not sc.compile:
        return None
    scope = {CompileScope.BLOCKS: "each decoder block compiled; the final norm, output layer and loss eager",
             CompileScope.BLOCKS_AND_LOSS: "each decoder block and the loss compiled; the final norm and output layer "
                                           "eager"}.get(profile.compile_scope, "the model and the loss compiled")
    dropped = _compiled_drops(spec)
    sac = (" Under op-level selective AC a compiled block keeps only what its backward reads: not its down "
           "projection's output, which eager SAC caches." if sc.gradient_checkpointing is Checkpointing.SELECTIVE_OP
           and dropped else "")
    return (f"torch.compile: {scope} (AOTAutograd's min-cut partition): a compiled norm keeps its input and per-token "
            f"statistics, and the MLP's activation is recomputed in backward.{sac}")


def _policy_saved(spec: ModelSpec) -> list:
    """The linears whose outputs torchtitan's op policy saves: the block's 1st, 3rd, 5th ... mm
    (:func:`op_sac_saved`)."""
    return [lin for i, lin in enumerate(spec.block_linears) if i % 2 == 0]


def _compiled_drops(spec: ModelSpec) -> list:
    """Of :func:`_policy_saved`, those a compiled block does not keep (:func:`_feeds_residual_only`)."""
    return [lin for lin in _policy_saved(spec) if _feeds_residual_only(spec, lin)]


def _feeds_residual_only(spec: ModelSpec, lin) -> bool:
    """``lin`` writes its branch's output straight into the residual stream: the last linear of a dense attention or
    MLP group, hidden-sized, with no post-branch norm reading it (``spec.sandwich_norms``: Gemma 2 / 3 norm the
    branch output first). Expert outputs are scaled by the router's weights, whose gradient reads them."""
    group = [x for x in spec.block_linears if x.group == lin.group]
    return (lin.group in ("attn", "mlp") and group[-1] is lin and lin.out_features == spec.hidden_size
            and not spec.sandwich_norms)


def block_input_bytes(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """The block input a checkpointed block keeps (its ``hidden_states`` argument)."""
    dt = dtypes_for(sc, profile, spec)
    return dt.residual * sc.micro_batch_size * sc.seq_len * spec.hidden_size


def eager_mask(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """Eager attention's additive (B, 1, S, S) masks, built in the embeddings' dtype (transformers v5.24.0
    masking_utils.py create_causal_mask(dtype=inputs_embeds.dtype), ``torch.where(mask, 0.0, finfo(dtype).min)``;
    v4.31 modeling_llama.py _prepare_decoder_attention_mask(..., inputs_embeds) the same): fp32 where the residual
    stream is (-mixed, PEFT's fp32 embeddings for QLoRA), as the simulator traces it (``where.self``). One per
    attention type the layers use (:func:`attention.mask_count`: Gemma 2/3 and gpt-oss make a causal and a sliding
    one). transformers builds them for every model that runs eager attention, also where SDPA was asked but the
    model has no SDPA path (``runs_eager_attention``: Gemma 2's soft-capping, gpt-oss's sinks, BLOOM's ALiBi;
    v5.24.0 ``_supports_sdpa = False``). Every checkpointed block's recompute holds its mask as an argument (torch
    v2.13.0 utils/checkpoint.py), so under checkpointing they live through the whole backward; without, to the
    forward's end."""
    eager = sc.attention is Attention.EAGER or (profile.runs_transformers_modeling
                                                and runs_eager_attention(spec, sc, profile))
    if not eager:
        return 0
    one = dtypes_for(sc, profile, spec).residual * sc.micro_batch_size * sc.seq_len * sc.seq_len
    return mask_count(spec, profile) * one


def forward_only_masks(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """transformers' eager masks without checkpointing where no fp32-softmax moment counts them
    (:func:`forward_softmax_moment` needs ``spec.eager_softmax_fp32``; gpt-oss's sink softmax keeps the scores' dtype):
    they are alive through every block's forward with all saved tensors and die when the base model returns, so they
    count in the forward phase only (``Activations.forward_only``). The simulator's tiny gpt-oss (3 layers, 1 x 1024
    tokens, vocabulary 256, LoRA, eager) peaks in forward at the top block's experts, 757,278,496 B, with both bf16
    ``where.self`` masks alive; none is alive when backward starts (716,289,776 B then)."""
    if (sc.gradient_checkpointing is not Checkpointing.NONE or not profile.runs_transformers_modeling
            or eager_forward_softmax(spec, sc, profile)):
        return 0
    return eager_mask(spec, sc, profile)


def model_extra_saved(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, lm_head_trainable: bool) -> int:
    """Saved tensors outside the blocks: the final norm (the same tensors as a block's norm, :func:`norm_saved`;
    its weight trains in full fine-tuning), lm_head input, eager attention mask."""
    dt = dtypes_for(sc, profile, spec)
    T = sc.micro_batch_size * sc.seq_len
    h = spec.hidden_size
    final = Saved()
    # the final norm sits outside the blocks: compiled only where the framework compiles the whole model (torchtitan
    # compiles each block and leaves model.norm and the output layer eager: CompileScope.BLOCKS, BLOCKS_AND_LOSS)
    compiled = sc.compile and profile.compile_scope is CompileScope.MODEL_AND_LOSS
    norm_saved(final, NormSite(spec, profile, compiled, T, dt.compute, sc.method is Method.FULL), "final_norm",
               "final_norm.in", dt.residual)
    total = final.total
    # the output layer keeps its input when its weight trains, or when it is a 4-bit layer whose matmul saves
    # its input (bnb <= 0.43.1 MatMul4Bit `ctx.tensors = (A, B)`, with the head quantized: lit-gpt@8641822)
    quantized = sc.quantize is not Quantize.NONE and sc.method is not Method.FULL
    if lm_head_trainable or (quantized and profile.qlora_saves_input and profile.qlora_quantizes_lm_head):
        total += dt.compute * T * h
    if sc.gradient_checkpointing is Checkpointing.NONE and not profile.runs_transformers_modeling:
        # checkpointed: kept into backward (step.Activations.masks). Not checkpointed, transformers' masks are
        # locals of the base model's forward that nothing saves (``attn_weights + mask``: add keeps no input), freed
        # when it returns, before the output layer (the simulator's trace: freed in forward); they count at the
        # top block's softmax only (forward_softmax_moment) or, without that moment, in forward (forward_only_masks)
        total += eager_mask(spec, sc, profile)
    if spec.embedding_norm:  # word_embeddings_layernorm saves the embedding output
        total += dt.compute * T * h
    return total


def eager_forward_softmax(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """The (B, H, S, S) tensors alive while the top block's eager softmax runs in forward, beyond saved tensors.

    transformers eager attention (v4.36-v4.44 LlamaAttention.forward; v4.48-v5.24.0 eager_attention_forward,
    Gemma 2's softcap steps alike): ``attn_weights = matmul(q, k^T) * scaling``, ``+ mask``, then
    ``softmax(attn_weights, dim=-1, dtype=float32)``; each rebinding unbinds the tensor before it, so the 16-bit
    masked scores are the one score tensor bound (``spec.eager_forward_scores``; BLOOM's baddbmm output stays bound
    too). torch v2.13.0 aten/src/ATen/native/SoftMax.cpp ``softmax(input, dim, dtype)``: a 16-bit input is copied
    to fp32 (``input_.toType(dtype)``, kept until ``_softmax`` returns) and ``_softmax`` writes its fp32 output:
    8 bytes per score beside the bound scores (an fp32 input is not copied: 4; ``+ mask`` makes the scores fp32
    where the mask is, under autocast). Under checkpointing BLOOM's model
    loop still binds the block below's returned 16-bit probabilities (``spec.block_returns_attention_probs``),
    which its checkpoint saved nothing of. The simulator's tiny BLOOM with LoRA and checkpointing peaks there:
    two fp32 and three 16-bit (B, H, S, S) tensors (``_to_copy``, ``_softmax``, ``baddbmm``, ``add``, and block
    1's ``_to_copy``)."""
    if (not profile.runs_transformers_modeling or not runs_eager_attention(spec, sc, profile)
            or not spec.eager_softmax_fp32):
        return 0  # transformers' eager code (others' eager attention is not derived here)
    dt = dtypes_for(sc, profile, spec)
    c = dt.compute
    scores = score_elements(spec, sc)
    # ``+ mask`` promotes the scores to the mask's dtype (:func:`eager_mask`: fp32 under -mixed); softmax copies
    # a 16-bit input to fp32 only; ``.to(query.dtype)`` then makes the probabilities while the masked scores and
    # the fp32 output are bound. RoPE multiplies q by cos/sin in the residual stream's dtype (v5.24.0
    # LlamaRotaryEmbedding.forward ``cos.to(dtype=x.dtype)``), so under autocast the query is fp32 and the cast
    # is a no-op; ALiBi's query is the projection's 16-bit output
    masked = max(c, dt.residual)
    query = dt.residual if spec.position_encoding is PositionEncoding.ROPE else c
    extra = (spec.eager_forward_scores - 1) * c
    at_softmax = extra + masked + (0 if masked == 4 else 4) + 4
    at_cast = extra + masked + 4 + (0 if query == 4 else query)
    below = (spec.block_returns_attention_probs and spec.num_hidden_layers > 1
             and sc.gradient_checkpointing is not Checkpointing.NONE)
    return (max(at_softmax, at_cast) + (query if below else 0)) * scores


def saved_after_softmax(saved: Saved) -> int:
    """The top block's saved tensors made from its softmax on (softmax's output, the probabilities, the MLP's):
    not yet alive at :func:`eager_forward_softmax`'s moment. The saved items run in block order from
    ``attn.softmax_out``; the output projection's LoRA inputs and the second norm's, listed before it, stay
    counted (at most a few (T, h) tensors)."""
    keys = list(saved.items)
    if "attn.softmax_out" not in keys:
        return 0
    from vramfit.estimate.allocator import round_allocation

    # Gemma 2's soft-capping tanh output (tanh saves its result, torch v2.13.0 derivatives.yaml) is listed after
    # the probabilities but made before the softmax
    after = keys[keys.index("attn.softmax_out"):]
    return sum(round_allocation(saved.items[k]) for k in after if k != "attn.softcap_tanh")


def forward_softmax_moment(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, acts,
                           cache: int = 0) -> tuple[int, int]:
    """(working set, kept activations) at the top block's eager softmax in forward (``StepPhase.FORWARD_ATTENTION``);
    (0, 0) where the eager fp32 softmax does not run. Kept: every block's saved tensors (their inputs under
    checkpointing) less the top block's from its softmax on, the eager mask, the other masks and what the
    embedding norm saved; the final norm and the output layer have not run yet. ``acts``: step.Activations;
    ``cache``: the KV cache the model returns (checkpointed: the block's own tensors, :func:`checkpointed_block_own`,
    join the working set)."""
    work = eager_forward_softmax(spec, sc, profile)
    if not work:
        return 0, 0
    work += checkpointed_block_own(spec, sc, profile, cache)
    emb = dtypes_for(sc, profile, spec).compute * sc.micro_batch_size * sc.seq_len * spec.hidden_size
    kept = acts.blocks + acts.masks + (emb if spec.embedding_norm else 0)
    if sc.gradient_checkpointing is Checkpointing.NONE:  # checkpointed, the mask is one of acts.masks
        kept += eager_mask(spec, sc, profile) - saved_after_softmax(acts.saved)
    return work, kept


def checkpointed_block_own(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, cache: int) -> int:
    """A fully checkpointed block's own tensors at its eager softmax in forward (:func:`forward_softmax_moment`):
    the normed input, q, and k, v or the returned KV cache (estimate/loss.py returned_cache_bytes: then every
    earlier layer's k, v too); 0 where that is not the case. Under full checkpointing the forward saves nothing of
    the block (torch utils/checkpoint.py, non-reentrant: saved tensors are packed to holders), so only these are
    alive beside the softmax's score tensors. The simulator's trace of Llama-2-7B (bf16, LoRA q/v, eager, full
    checkpointing, 4 x 2048) peaks in forward there, 21,416,076,288 B; with transformers 4.31's returned cache
    (llama-recipes-2023) this moment is the step's high point."""
    if sc.gradient_checkpointing is not Checkpointing.FULL or not runs_eager_attention(spec, sc, profile):
        return 0
    c = dtypes_for(sc, profile, spec).compute
    T, a, d = sc.micro_batch_size * sc.seq_len, spec.num_attention_heads, spec.head_dim
    own = c * T * (spec.hidden_size + a * d)  # normed input and q
    kv = cache if cache else layer_kv_bytes(spec, T, c)
    return own + kv
