"""Logits and cross-entropy: the largest single tensors of a step at long vocabularies.

Returns three figures per micro-batch, in bytes: what the loss keeps for backward, the forward
high point (while the loss is computed) and the backward high point (its gradients), each on top
of the block activations. V = vocabulary rows of the output layer, T = tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from vramfit.estimate.constants import LITGPT_LM_HEAD_CHUNK, TORCHTUNE_OUTPUT_CHUNKS
from vramfit.estimate.framework import CompileScope, FrameworkProfile, LossLayout
from vramfit.estimate.titan_loss import runs_titan_chunked_loss, titan_chunked_loss
from vramfit.models.spec import ModelSpec
from vramfit.scenario import Checkpointing, LogitsToKeep, Loss, Method, Precision, Scenario, Stage


@dataclass(frozen=True)
class LossMemory:
    saved: int  # kept from the end of forward until the loss backward
    forward_peak: int  # extra at the high point of computing the loss
    backward_peak: int  # extra at the high point of the loss backward (saved included)
    detail: str
    held: int = 0  # still alive at the end of backward (logits the training loop keeps referenced)
    kept: int = 0  # the model's returned logits (and KV cache), kept by the loop through backward and the optimizer step
    cache: int = 0  # the KV cache the model returns (estimate/loss.py returned_cache_bytes), in forward_peak and kept


def vocab_rows(spec: ModelSpec) -> int:
    return (spec.lm_head_params or spec.embedding_params) // spec.hidden_size


def label_rows(sc: Scenario) -> Scenario:
    """The scenario the head and loss see: with ``logits_to_keep`` labels (SFT), one row of the micro-batch's label
    positions, ``n + 1`` of them for ``n = ceil(label_share x micro_batch_size x seq_len)`` labels (at most the
    whole row), for the whole ``micro_batch_size x seq_len`` otherwise. ms-swift @3debbef8e swift/trainers/mixin.py
    ``get_logits_to_keep`` (batch of one row): ``loss_mask = (labels != -100)[0]``, ``logits_to_keep =
    pad(loss_mask[1:], (0, 1), value=True)`` (the positions whose next token is a label, and the last), labels cut
    to the label positions with one -100 in front; transformers v4.53.0
    modeling_qwen2.py ``Qwen2ForCausalLM.forward`` ``slice_indices = ... else logits_to_keep``, ``self.lm_head(
    hidden_states[:, slice_indices, :])``, as Liger-Kernel v0.6.1 model/qwen2.py ``lce_forward`` does before its
    fused loss (training) or its logits and ``loss_function`` (evaluation). Not counted: the kept hidden rows'
    copy and their gradient's scatter back, ``tokens x hidden`` at most (0.1 GiB at 16k tokens of a 7B)."""
    if sc.logits_to_keep is not LogitsToKeep.LABELS or sc.stage is not Stage.SFT:
        return sc
    tokens = sc.micro_batch_size * sc.seq_len
    return replace(sc, micro_batch_size=1, seq_len=min(tokens, math.ceil(sc.label_share * tokens) + 1))


def logits_bytes_per_element(sc: Scenario, profile: FrameworkProfile) -> int:
    """dtype of ``lm_head``'s output: fp32 for fp32 precision, else the 16-bit compute dtype (HF
    QLoRA's fp32 ``lm_head`` runs under autocast, see :func:`runs_under_autocast`)."""
    if sc.precision is Precision.FP32:
        return 4
    return 2


def projection_stage(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, head_grad: int) -> tuple[int, int]:
    """(logits bytes, output-weight gradient bytes) when the chunked loss backward reaches the output projections.

    torchtune's CEWithChunkedOutputLoss takes the n logit chunks the model made (torchtune@1814feb17
    modules/transformer.py ``chunked_output``: every ``self.output(chunk)`` runs in the model's forward, before the
    loss's n cross-entropies), so each cross-entropy node has a higher sequence number than every projection's
    MmBackward, and autograd's ready queue pops the highest first (torch v2.5.0 torch/csrc/autograd/engine.h
    ``CompareNodeTaskTime``): all n cross-entropy backwards run, leaving n logit gradients in the logits dtype,
    before the first projection's. The weight's n contributions meet in its AccumulateGrad node's input buffer
    (input_buffer.cpp ``accumulate``: out of place for the first merge, whose buffered gradient is a view,
    :func:`head_grad_is_view`; in place into that sum after), so the second projection's backward holds the
    buffered gradient, its own new one and n - 1 logit gradients, then their sum beside n - 2; the first holds n and
    one weight gradient.
    The cross-entropy stage before it holds no weight gradient (tests/estimate/test_loss_order.py traces the real
    engine on the CPU). (0, 0) for other losses or a frozen output layer."""
    if sc.loss is not Loss.CHUNKED or not head_grad:
        return 0, 0
    sc = label_rows(sc)
    n = TORCHTUNE_OUTPUT_CHUNKS.value
    g = logits_bytes_per_element(sc, profile) * -(-sc.micro_batch_size * sc.seq_len * vocab_rows(spec) // n)
    # the first merge is out of place (head_grad_is_view): once the second projection's backward has freed its logit
    # gradient, the buffered gradient, the new one and their sum (later merges add into that sum in place)
    first_merge = ((n - 2) * g, 3 * head_grad) if n > 1 else (0, 0)
    return max(((n - 1) * g, 2 * head_grad), (n * g, head_grad), first_merge, key=sum)


#: the layouts whose kernel makes the output layer's weight gradient itself, a new tensor, instead of nn.Linear's
#: MmBackward: Unsloth's fused CE (unsloth-zoo@ce232d6c fused_losses/cross_entropy_loss.py, the gradient computed in
#: forward) and Apple's Cut Cross-Entropy (apple/ml-cross-entropy@1f3ebdb cce.py, ``zeros_like`` of the weight)
_HEAD_GRAD_IN_KERNEL = (LossLayout.UNSLOTH_FUSED_CE, LossLayout.APPLE_CCE)


def head_grad_is_view(sc: Scenario, profile: FrameworkProfile) -> bool:
    """Whether the output layer's weight gradient reaches autograd's input buffer as a view, so that the next
    gradient of the same weight is added out of place (``old + new``: three weight-sized tensors at once).

    F.linear multiplies by ``weight.t()``; ``mm_mat2_backward`` (torch v2.11.0 tools/autograd/templates/
    FunctionsManual.cpp) returns ``grad.t().mm(mat1).t()`` for that column-major operand and TBackward transposes it
    back, and a view made in backward keeps its base alive through its autograd view metadata, so the result's
    storage has two users and ``can_accumulate_inplace`` (torch/csrc/autograd/input_buffer.cpp) refuses it. Not for
    a loss whose kernel makes the gradient (a fused loss, :data:`_HEAD_GRAD_IN_KERNEL`), nor under ``-mixed``
    autocast, where ToCopyBackward hands on a new fp32 tensor. Measured: one H100 (torch 2.11.0, transformers 5.17.0,
    benchmarks/gpu_grid.py 2026-12-05), Llama-3.2-3B full bf16 2 x 512 checkpointed, tied: 27,348,395,008 B allocated,
    where the estimate with an in-place sum read 26,559,209,472 B (one 128256 x 3072 bf16 is 788,004,864 B); a CPU run under torch.profiler (torch 2.13.0)
    shows ``aten::add`` for the first merge of a Linear's weight gradients and ``aten::add_`` for later ones and for a
    custom Function's fresh gradient."""
    if sc.loss is Loss.FUSED or profile.standard_loss in _HEAD_GRAD_IN_KERNEL:
        return False
    from vramfit.estimate.framework import casts_params

    # a -mixed run whose wrapper casts the parameters (FSDP's MixedPrecisionPolicy, the DeepSpeed engine) has no
    # autocast copy of the weight, so no ToCopyBackward: the view stays (the simulator's accelerate FSDP2 of
    # Llama-3.2-1B in bf16-mixed traces the same aten::add as in bf16-true)
    return not sc.precision.mixed or casts_params(sc, profile)


def head_calls(sc: Scenario, profile: FrameworkProfile) -> int:
    """How many times the output layer runs per micro-batch: once per 128-token chunk under lit-gpt's
    chunked head (lit-gpt@8641822 lit_gpt/lora.py GPT.forward: ``[self.lm_head(x_i) for x_i in
    x.split(lm_head_chunk_size, dim=1)]``, chunks along the sequence), else once."""
    if not litgpt_chunked_head(sc, profile):
        return 1
    return -(-sc.seq_len // LITGPT_LM_HEAD_CHUNK.value)


def head_autocast_calls(sc: Scenario, profile: FrameworkProfile) -> int:
    """How many 16-bit copies autocast makes of a frozen output layer per micro-batch: one per call of the layer
    (forward_extras.head_autocast_copy), so one per output chunk under torchtune's chunked loss (torchtune v0.4.0
    modules/transformer.py ``chunked_output``: ``[self.output(chunk) for chunk in last_hidden_state.chunk(
    num_output_chunks, dim=1)]``), each saved by its matmul for the input gradient, else :func:`head_calls`. The
    simulator's chunked loss on a 3-layer Gemma-2-2B LoRA under fp16 autocast keeps eight (256000, 2304) fp16
    copies of the fp32 head (9,437,184,000 B); with one counted the estimate read -45 %."""
    if sc.loss is Loss.CHUNKED:
        return TORCHTUNE_OUTPUT_CHUNKS.value
    return head_calls(sc, profile)


def litgpt_chunked_head(sc: Scenario, profile: FrameworkProfile) -> bool:
    """Whether the loop asks lit-gpt's model for a list of head chunks (``model(input_ids, lm_head_chunk_size=128)``,
    lit-gpt@8641822 finetune/lora.py); litgpt 2024's full.py asks for whole logits (``full_unchunked_logits``)."""
    if sc.loss is not Loss.STANDARD or profile.standard_loss is not LossLayout.LITGPT_CHUNKED_HEAD:
        return False
    return not (profile.full_unchunked_logits and sc.method is Method.FULL)


def compiles_loss(scenario: Scenario, profile: FrameworkProfile) -> bool:
    """``compile: true`` compiles the loss too (the profile's compile scope and, for the standard loss, its recipe)."""
    if not scenario.compile or profile.compile_scope is CompileScope.BLOCKS:
        return False
    recipes = profile.compiled_loss_recipes
    return (scenario.loss is Loss.CHUNKED or recipes is None
            or (scenario.method, scenario.num_gpus > 1) in recipes)


def loss_memory(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> LossMemory:
    """The loss's figures (:func:`step_loss`), plus the logits (and any KV cache) a loop that ``keeps_outputs``
    holds on to; a returned KV cache (:func:`returned_cache_bytes`) is alive while the loss is computed. The head
    and loss run on the label positions only where the model keeps those (:func:`label_rows`)."""
    cache = returned_cache_bytes(spec, sc, profile)
    sc = label_rows(sc)
    m = step_loss(spec, sc, profile)
    if cache:
        # meta-llama/llama-recipes@e5970e2e utils/train_utils.py l. 88 `loss = model(**batch).loss`: the output and
        # its past_key_values are dropped once the forward, loss included, has returned
        m = replace(m, forward_peak=m.forward_peak + cache, cache=cache,
                    detail=m.detail + "; the returned KV cache is alive until the forward returns")
    logits = returned_logits_bytes(spec, sc, profile) if sc.keeps_outputs and not m.held else 0
    kept = logits + (cache if sc.keeps_outputs else 0)
    if not kept:
        return m
    # e.g. AnswerDotAI/fsdp_qlora@4cd6923 train.py: `output = model(...)` (l. 841) is set to None only after
    # optimizer.step() (l. 894), so output.logits outlives the loss backward, every block's backward and the step;
    # llama-recipes@1e0f8a1f (before PR #41) utils/train_utils.py `outputs = model(**batch)` keeps its
    # past_key_values too, until the next step's forward reassigns it
    what = "logits and KV cache" if cache else "logits"
    return replace(m, backward_peak=m.backward_peak + kept, kept=kept,
                   detail=m.detail + f"; the loop keeps the returned {what} until after the optimizer step")


def returned_logits_bytes(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """Bytes of the logits the model returns: fp32 where the model upcasts them (transformers < 4.45
    ``logits.float()``, torchtune ``self.output(h).float()``), else the logits dtype; none with a fused loss
    (no logits exist), Unsloth's fused cross-entropy or torchtitan 0.3's chunked loss (the model returns the hidden
    states, estimate/titan_loss.py)."""
    if sc.loss is Loss.FUSED or profile.standard_loss is LossLayout.UNSLOTH_FUSED_CE or runs_titan_chunked_loss(sc, profile):
        return 0
    upcast = sc.loss is Loss.STANDARD and profile.standard_loss in _MODEL_UPCASTS
    return (4 if upcast else logits_bytes_per_element(sc, profile)) * sc.micro_batch_size * sc.seq_len * vocab_rows(spec)


def returned_cache_bytes(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """Bytes of the KV cache the model returns in training when the recipe leaves ``use_cache`` on
    (``profile.returns_kv_cache``): every layer's post-rotary k and v, [batch, kv heads, seq, head_dim] in the
    compute dtype, stored before repeat_kv (transformers v4.31.0 models/llama/modeling_llama.py l. 324
    ``past_key_value = (key_states, value_states) if use_cache else None``, then l. 327-328 repeat_kv). Extra
    memory only where whole blocks are recomputed (full or offloaded checkpointing: the checkpointed forward
    saves none of the layer's tensors, so the cache is the only reference to them, and the backward's recompute
    makes new ones); without checkpointing they are the k/v the attention saved for backward anyway (GQA's
    pre-repeat copy there is not modelled)."""
    if not profile.returns_kv_cache or sc.gradient_checkpointing not in (Checkpointing.FULL, Checkpointing.OFFLOAD):
        return 0
    return spec.num_hidden_layers * layer_kv_bytes(spec, sc.micro_batch_size * sc.seq_len, sc.precision.compute_bytes)


def layer_kv_bytes(spec: ModelSpec, tokens: int, elem: int) -> int:
    """One layer's k and v for ``tokens`` tokens, before any GQA repeat, ``elem`` bytes each: [tokens, kv heads,
    head_dim] and [tokens, kv heads, v_dim] (the returned cache's layer, transformers v4.31.0 modeling_llama.py
    l. 324; a checkpointed block's own k, v, block_extras.checkpointed_block_own)."""
    return tokens * spec.num_key_value_heads * (spec.head_dim + spec.v_dim) * elem


#: the layouts whose model returns fp32 logits (``logits.float()`` / ``self.output(h).float()`` in the model)
_MODEL_UPCASTS = (LossLayout.HF_UPCAST_IN_MODEL, LossLayout.TORCHTUNE_UPCAST_IN_MODEL,
                  LossLayout.TORCHTUNE_SHIFTED_LOGITS_KEPT)


#: the layouts that soft-cap the logits (Gemma 2's ``final_logit_softcapping``) inside their kernel or chunk, so no
#: whole-logits tanh tensors exist: Unsloth's Triton cross-entropy (unsloth@0927c34 kernels/cross_entropy_loss.py
#: ``_cross_entropy_forward``/``_chunked_cross_entropy_forward``/``_cross_entropy_backward``, ``DO_SOFTCAPPING``:
#: ``t * tanh(x / t)`` on each block of a row in registers), its fused CE (unsloth-zoo@ce232d6c
#: fused_losses/cross_entropy_loss.py l. 109-120 ``compute_fused_ce_loss``: per chunk of rows, which this layout
#: does not count) and Apple's Cut Cross-Entropy (unsloth-zoo@bb133c7 loss_utils.py l. 210 ``softcap =
#: logit_softcapping``, applied in the CCE kernels)
_CAP_IN_KERNEL = (LossLayout.UNSLOTH_TRITON_CE, LossLayout.UNSLOTH_FUSED_CE, LossLayout.APPLE_CCE)


def step_loss(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> LossMemory:
    T = sc.micro_batch_size * sc.seq_len
    V = vocab_rows(spec)
    TV = T * V
    lb = logits_bytes_per_element(sc, profile)
    up = 0 if lb == 4 else 4  # the fp32 upcast is a new tensor unless the logits are fp32 already
    if sc.loss is Loss.FUSED:
        # Liger FusedLinearCrossEntropy (linkedin/Liger-Kernel v0.5.2 ops/fused_linear_cross_entropy.py): token chunks of
        # next_power_of_2(ceil(T / ceil(V / h))); per chunk logits, fp32 upcast and its gradient.
        ratio = -(-V // spec.hidden_size)
        chunk = 1 << max(0, (-(-T // ratio) - 1).bit_length())
        chunk = min(chunk, T)
        grad_in = sc.precision.compute_bytes * T * spec.hidden_size
        transient = chunk * V * (lb + 4 + 4)
        return LossMemory(grad_in, grad_in + transient, grad_in, f"fused linear+CE, chunks of {chunk} tokens")
    if runs_titan_chunked_loss(sc, profile):
        return titan_chunked_loss(spec, sc, profile, V, lb, compiles_loss(sc, profile))
    if compiles_loss(sc, profile):
        # compiled cross-entropy: the fp32 upcast and log_softmax fuse into the kernel, and the
        # backward recomputes them from the saved input logits and the per-token logsumexp
        # (inductor min-cut partitioner); per chunk for the chunked loss. The standard loss's input is
        # the model's fp32 logits when the model upcasts (torchtune v0.4.0 transformer.py
        # `self.output(h).float()`, outside the compiled layers): the 16-bit logits die at the cast
        n = TORCHTUNE_OUTPUT_CHUNKS.value if sc.loss is Loss.CHUNKED else 1
        torchtune_upcast = profile.standard_loss in _MODEL_UPCASTS[1:]
        ib = 4 if sc.loss is not Loss.CHUNKED and torchtune_upcast else lb
        saved = ib * TV + 4 * T
        per = -(-TV // n)
        # forward: logsumexp computed in-kernel (no fp32 copy); backward: one chunk's logit gradient
        fwd = max(saved, lb * TV + up * TV) if ib == 4 else saved
        return LossMemory(saved, fwd, saved + ib * per, f"compiled cross-entropy over {n} chunk(s)")
    if sc.loss is Loss.CHUNKED:
        n = TORCHTUNE_OUTPUT_CHUNKS.value
        per = -(-TV // n)
        saved = 4 * TV  # every chunk's fp32 log_softmax output is saved
        fwd = lb * TV + saved + up * per
        bwd = saved + 2 * 4 * per + lb * per
        return LossMemory(saved, fwd, bwd, f"chunked CE over {n} chunks (torchtune CEWithChunkedOutputLoss)")
    style = profile.standard_loss
    # litgpt@2b195c7f lora.py GPT.forward returns the head chunks (l. 546-548) before its soft-capping (l. 550-551):
    # the chunked-head loop never soft-caps its logits
    cap = lb * TV if spec.final_logit_softcapping and not litgpt_chunked_head(sc, profile) else 0
    if style in _CAP_IN_KERNEL:
        cap = 0
    if cap:
        # Gemma 2 soft-caps the logits: logits / cap -> tanh -> * cap; tanh keeps its output
        base = loss_memory_uncapped(spec, sc, profile, style, TV, lb, up)
        return LossMemory(base.saved + cap, base.forward_peak + 2 * cap, base.backward_peak + cap,
                          base.detail + ", tanh logit soft-capping", base.held)
    return loss_memory_uncapped(spec, sc, profile, style, TV, lb, up)


def loss_memory_uncapped(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, style: LossLayout,
                         TV: int, lb: int, up: int) -> LossMemory:
    """Logits and cross-entropy without soft-capping (see :func:`loss_memory`)."""
    if style is LossLayout.LITGPT_CHUNKED_HEAD:
        return _litgpt_loss(spec, sc, profile, TV, lb)
    if style is LossLayout.UNSLOTH_FUSED_CE:
        # unsloth_zoo loss_utils.unsloth_fused_ce_loss (called from unsloth@015bdef models/llama.py
        # with target_gb=None): no (T, V) logits; per chunk X_j @ W, fp32 CE and its gradient, the
        # hidden states' gradient kept for backward. The chunk is sized from the VRAM left
        # ("target_gb ... default detects VRAM left"), so it never sets the peak on its own.
        grad_in = sc.precision.compute_bytes * sc.micro_batch_size * sc.seq_len * spec.hidden_size
        return LossMemory(grad_in, grad_in, grad_in, "Unsloth fused CE (no logits, chunk sized to free VRAM)")
    if style is LossLayout.APPLE_CCE:
        return _apple_cce(spec, sc)
    if style is LossLayout.UNSLOTH_TRITON_CE:
        return _unsloth_triton_ce(spec, sc, TV, lb)
    if style is LossLayout.TORCHTUNE_UPCAST_IN_MODEL:
        # output(h).float() (the model-dtype logits die at once), CrossEntropyLoss saves its fp32
        # log_softmax output; the recipe deletes the logits before backward
        saved = 4 * TV
        fwd = max(lb * TV + up * TV, 4 * TV + 4 * TV)
        bwd = saved + 4 * TV + 4 * TV
        return LossMemory(saved, fwd, bwd, "fp32 logits from the model, CrossEntropyLoss")
    if style is LossLayout.TORCHTUNE_SHIFTED_LOGITS_KEPT:
        return _torchtune_01_loss(TV)
    if style is LossLayout.HF_UPCAST_IN_MODEL:
        # transformers < 4.45: logits.float() in the model (the 16-bit logits die at once unless already
        # fp32), the shifted .contiguous() fp32 copy, log_softmax's fp32 output saved; the Trainer drops
        # the outputs (and both fp32 logits tensors) before backward. transformers v4.44.2 modeling_llama.py
        # l. 1214 ``shift_logits = logits[..., :-1, :].contiguous()``: no copy at micro-batch 1 (see below)
        saved = 4 * TV
        shifted = 4 * TV if sc.micro_batch_size > 1 else 0
        fwd = max(lb * TV + up * TV, 4 * TV + shifted + 4 * TV)
        bwd = saved + 4 * TV + 4 * TV
        copy = "shifted copy" if shifted else "no shifted copy at micro-batch 1"
        return LossMemory(saved, fwd, bwd, f"fp32 logits from the model (transformers < 4.45), {copy}, CrossEntropyLoss")
    if style is LossLayout.HF_UPCAST_SHIFTED_IN_LOSS:
        # transformers 4.46-4.48 ForCausalLMLoss: the model's 16-bit logits, their fp32 copy and the shifted
        # .contiguous() fp32 copy are all alive while cross_entropy's log_softmax writes (and saves) its fp32 output;
        # backward as below (the slice's backward scatters into a fresh fp32 buffer after the two gradients die).
        # With one sequence per micro-batch there is no copy: logits[..., :-1, :] of a (1, T, V) tensor is already
        # contiguous (torch 2.13 c10/core/Contiguity.h _compute_contiguous skips size-1 dims), so
        # .contiguous() returns it (`vramfit simulate` with 4.47.1's ForCausalLMLoss patched in: no copy at mb 1)
        saved = 4 * TV
        shifted = 4 * TV if sc.micro_batch_size > 1 else 0
        copy = "shifted fp32 copy" if shifted else "no shifted copy at micro-batch 1"
        return LossMemory(saved, lb * TV + up * TV + shifted + saved, saved + 4 * TV + 4 * TV,
                          f"model-dtype logits, fp32 upcast and {copy} in ForCausalLMLoss (transformers 4.46-4.48)")
    if style is not LossLayout.HF_UPCAST_IN_LOSS:
        raise ValueError(f"no logits/loss model for loss layout {style!r}; valid: {[x.value for x in LossLayout]}")
    # transformers >= 4.46 ForCausalLMLoss (loss/loss_utils.py): logits.float() then cross_entropy;
    # log_softmax keeps its fp32 output; the model-dtype logits are dropped with the outputs
    saved = 4 * TV
    fwd = lb * TV + up * TV + 4 * TV
    bwd = saved + 4 * TV + 4 * TV  # grad of nll_loss and of log_softmax, both fp32
    return LossMemory(saved, fwd, bwd, f"model-dtype logits, fp32 upcast in {profile.standard_loss_site}")


def _torchtune_01_loss(TV: int) -> LossMemory:
    """torchtune 0.1's loop (recipes/*_finetune_*.py @c69fba18b; :attr:`LossLayout.TORCHTUNE_SHIFTED_LOGITS_KEPT`).

    Forward: the model's fp32 logits are copied shifted (``.contiguous()``; the unshifted ones die when the name is
    rebound), CrossEntropyLoss gets the (B, V, T) transpose: log_softmax over dim 1 first makes the input contiguous
    (pytorch/pytorch aten/src/ATen/native/cuda/SoftMax.cu ``host_softmax``: ``auto input = input_.contiguous()``, read
    at 000cace5a) and writes its fp32 output, saved for backward: the kept copy, that copy and the output, 3 x 4 TV.
    Backward: nll_loss's fp32 gradient and log_softmax's, beside its saved output and the kept copy, 4 x 4 TV; the kept
    copy lives on through every block's backward and the optimizer step. ``vramfit.sim.trace.LiveTracker`` on the loop
    (CPU tensors): 4.1 x 4 TV at the loss backward, 3.1 x 4 TV with ``del logits`` (torchtune PR #1046), the layout
    :attr:`LossLayout.TORCHTUNE_UPCAST_IN_MODEL` models."""
    kept, saved = 4 * TV, 4 * TV
    return LossMemory(saved, kept + 4 * TV + saved, kept + saved + 4 * TV + 4 * TV,
                      "fp32 logits from the model, shifted copy kept by the loop (torchtune 0.1), CrossEntropyLoss",
                      kept=kept)


def _litgpt_loss(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, TV: int, lb: int) -> LossMemory:
    """lit-gpt's loop under Fabric. Fabric hands the model's outputs back in the default dtype, fp32
    (Lightning@71aed75 fabric/wrappers.py _FabricModule.forward: `output = self._precision.convert_output(output)`;
    plugins/precision/half.py, amp.py, bitsandbytes.py convert_output: `.to(torch.get_default_dtype())`): the loop
    holds fp32 logits (the 16-bit ones die once converted) and chunked_cross_entropy, outside the forward's
    autocast, saves each chunk's fp32 log_softmax.

    - LoRA (lit-gpt@8641822 finetune/lora.py ``model(input_ids, lm_head_chunk_size=128)``): a list of
      (B, 128, V) chunks; backward of one chunk: fp32 gradients of nll_loss and log_softmax, then the cast back.
    - full fine-tuning in litgpt@0077627 finetune/full.py ``logits = model(input_ids)``: one (B, T, V) tensor,
      passed shifted (``logits[..., :-1, :]``) and split into 128-row chunks of its flattened rows.

    The shift is a view; chunked_cross_entropy's ``reshape(-1, V)`` copies it (:func:`_litgpt_shift_copy`)."""
    per = sc.micro_batch_size * LITGPT_LM_HEAD_CHUNK.value * vocab_rows(spec)
    saved = 4 * TV + 4 * TV
    fwd = max(saved, lb * TV + 4 * TV)  # the logits and their fp32 conversion, then the loss
    copy = _litgpt_shift_copy(spec, sc, profile)
    if profile.full_unchunked_logits and sc.method is Method.FULL:
        # litgpt@5895df10 utils.py chunked_cross_entropy (no list): ``logits.split(chunk_size)`` of the
        # (B*(T-1), V) rows, each chunk's nll_loss and log_softmax gradient is 128 rows; SplitBackward then
        # cats the whole fp32 gradient beside the chunk gradients it was given, and SliceBackward writes it
        # into a fresh (B, T, V) zeros: 4 TV above the saved figures at most (/tmp replica: 2.00 x 4TV
        # above the held logits at micro-batch 1 and 2, the per-chunk gradients never on top)
        return LossMemory(saved, saved + copy, saved + 4 * TV,
                          "litgpt full.py: unchunked logits, fp32 from Fabric, chunked_cross_entropy", held=4 * TV)
    cast_back = lb * per if lb != 4 else 0  # `.to(fp32)` of fp32 logits is the tensor itself: no cast to undo
    return LossMemory(saved, max(fwd, saved + copy), saved + 2 * 4 * per + cast_back,
                      "lit-gpt chunked lm_head, fp32 outputs from Fabric, chunked_cross_entropy", held=4 * TV)


def _litgpt_shift_copy(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """Bytes of the fp32 copy chunked_cross_entropy makes of lit-gpt's shifted logits (lit-gpt@8641822
    lit_gpt/utils.py and litgpt@5895df10 litgpt/utils.py chunked_cross_entropy: ``logit_chunk.reshape(-1,
    logit_chunk.size(-1))`` of the list, ``logits.reshape(-1, logits.size(-1))`` of one tensor). The loop shifts
    by slicing (lora.py ``logits[-1] = logits[-1][..., :-1, :]``, full.py ``logits[..., :-1, :]``): a view with
    the unsliced row stride, contiguous only with one sequence per micro-batch (torch 2.13
    c10/core/Contiguity.h _compute_contiguous skips size-1 dims), so reshape copies it when the micro-batch is
    above 1 (aten/src/ATen/native/TensorShape.cpp reshape: ``_unsafe_view(self.clone(at::MemoryFormat::Contiguous))``
    when no view fits). LoRA: the last head chunk only, (B, last - 1, V); full: (B, T - 1, V). The copy is held by
    the function's list / local name until it returns (clone's backward saves nothing): the forward's loss moment
    only. CPU replica of both loops (live storage bytes, B=2, T=512, V=32000): full 2.00 x 4TV above the held
    logits in the loss's forward (1.00 at B=1), LoRA 4.99 fp32 head chunks (3.99 at B=1)."""
    if sc.micro_batch_size == 1:
        return 0
    rows = sc.seq_len
    if litgpt_chunked_head(sc, profile):
        rows -= LITGPT_LM_HEAD_CHUNK.value * (head_calls(sc, profile) - 1)  # the last chunk's tokens
    return 4 * sc.micro_batch_size * (rows - 1) * vocab_rows(spec)


def _apple_cce(spec: ModelSpec, sc: Scenario) -> LossMemory:
    """Apple's Cut Cross-Entropy as Unsloth 2024.12 calls it (unsloth_zoo@bb133c7 loss_utils.fused_linear_cross_entropy,
    shift=True, filter_eps="auto"); apple/ml-cross-entropy@1f3ebdb:

    - forward (cce.py LinearCrossEntropyFunction): no logits; ``save_for_backward(e, c, lse, targets, valids,
      logit_avg)``: the final norm's (T, h) output, the fp32 log-sum-exp per token, the valid positions
      (utils.py _build_flat_valids: int32 indices summed to int64) and a (V,) fp32 logit average;
      indexed_neg_dot adds a (T,) fp32 tensor while the loss is formed;
    - backward (cce_backward.py cce_backward_kernel): ``de = torch.zeros_like(e)`` and ``dc = torch.zeros_like(c)``:
      a gradient buffer the size of the whole lm_head weight, allocated even though the head is frozen."""
    T = sc.micro_batch_size * sc.seq_len
    c = sc.precision.compute_bytes
    V = vocab_rows(spec)
    saved = c * T * spec.hidden_size + 4 * T + 8 * T + 4 * V
    de, dc = c * T * spec.hidden_size, c * V * spec.hidden_size
    return LossMemory(saved, saved + 4 * T, saved + de + dc,
                      "Apple Cut Cross-Entropy (no logits; its backward allocates the lm_head-sized dc)")


def _unsloth_triton_ce(spec: ModelSpec, sc: Scenario, TV: int, lb: int) -> LossMemory:
    """Unsloth's own Triton cross-entropy before Cut Cross-Entropy (unsloth@0927c34, 2024.8; releases up to 2024.11,
    :attr:`LossLayout.UNSLOTH_TRITON_CE`). models/llama.py l. 911-931: the model-dtype logits (``logits.to(
    self.config.torch_dtype)`` is the tensor itself there), the labels shifted by ``torch.hstack`` (no logits copy),
    ``fast_cross_entropy_loss``. kernels/cross_entropy_loss.py l. 225-301 ``Fast_CrossEntropyLoss``: forward allocates
    the fp32 per-row losses and log-sum-exp, ``(rows, ceil(V / 65536))`` of them for a vocabulary above
    ``MAX_FUSED_SIZE`` = 65,536 reduced by ``torch.logsumexp`` to one per row; ``ctx.save_for_backward(logits,
    logsumexp, labels)``; backward runs ``_cross_entropy_backward`` on the saved logits and ``return logits``: the
    gradient is written over them, no new (T, V) tensor.

    The forward then returns those logits (``CausalLMOutputWithPast(loss=loss, logits=logits)``, l. 952-958), and the
    HF Trainer, which Unsloth runs with ``fp16`` or ``bf16`` always on, calls its model through accelerate's mixed-precision
    wrapper: ``Accelerator.prepare_model`` under native AMP sets ``model.forward = convert_outputs_to_fp32(...)``
    (huggingface/accelerate v0.33.0 accelerator.py l. 1375-1384, v1.16.0 l. 1791-1801), whose ``convert_to_fp32`` is
    ``tensor.float()`` on every fp16/bf16 tensor of the output (utils/operations.py l. 777-778): an fp32 copy of the
    whole logits beside the saved 16-bit ones, dropped once ``compute_loss`` has taken the loss, before backward.
    Unsloth's notebooks of 2024 on a T4 (fp16), data/measured ``UNSLOTH_NB_24B``: Llama-3-8B's conversational and Alpaca
    runs share model, release, batch and load, and peak 2.01 GiB apart where the estimate without this copy spanned
    0.97 GiB over the whole 256-2,048-token range."""
    T = sc.micro_batch_size * sc.seq_len
    chunks = -(-vocab_rows(spec) // 65536)
    lse = 4 * T
    fwd = lb * TV + 4 * T + (4 * T * chunks + lse if chunks > 1 else lse)  # logits, losses, the (chunked) lse
    fwd = max(fwd, lb * TV + lse + 4 * TV)  # then the returned logits' fp32 copy (above) beside the saved ones
    return LossMemory(lb * TV + lse, fwd, lb * TV + lse + 4 * T,  # backward: in place, beside dlosses
                      "model-dtype logits, Unsloth's Triton cross-entropy (gradient written over the logits)")
