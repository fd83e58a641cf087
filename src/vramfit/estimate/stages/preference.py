"""DPO, KTO, ORPO, SimPO: the reference model, the reference (and KTO's KL) passes, the log-prob loss.

TRL 1.16.0 (the version the config import reads; file:line in the installed package):

* the reference is a frozen copy created from the policy's path with the policy's init kwargs (same
  dtype) for full fine-tuning, none for PEFT (adapters disabled) or with ``precompute_ref_log_probs``
  unless FSDP is on (trl/trainer/dpo_trainer.py:909, kto_trainer.py:920); it is wrapped by
  ``prepare_deepspeed``, which keeps ZeRO-3 and turns every other stage into stage 0 (a whole copy
  per GPU, trl/models/utils.py:285), by ``prepare_fsdp`` (sharded, :292), else by
  ``accelerator.prepare_model(evaluation_mode=True)`` (a whole copy);
* DPO and KTO score log-probs with the fused LM head (``add_fused_lm_head``, trainer/utils.py:1548):
  ``ChunkedLogProbFunction`` projects [4096 tokens x 32768 vocabulary] tiles and never builds the
  logits (trl/kernels/chunked_logprob.py:30, 341-386, 406-413); the reference pass runs under
  ``torch.no_grad`` inside the policy's loss (dpo_trainer.py:1285-1340);
* ORPO and CPO/SimPO build the full logits, take their log-probs with TRL's Triton kernel and add a
  cross-entropy over the chosen half (:mod:`.profiles` says which stage does what, with the sources).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

from vramfit.choices import ZERO_FAMILY, Loss, Method, Parallelism, Precision, Reference, Stage
from vramfit.estimate.allocator import round_allocation
from vramfit.estimate.framework import runs_under_autocast
from vramfit.estimate.loss import LossMemory, logits_bytes_per_element, returned_logits_bytes, vocab_rows
from vramfit.estimate.params import base_tensors
from vramfit.estimate.phases import Contribution, StepPhase
from vramfit.estimate.stages.profiles import PAIRED, STAGE_PROFILES, LogProbs, chosen_nll, logprobs_path
from vramfit.estimate.state import shard
from vramfit.stage_keys import GENERATES

if TYPE_CHECKING:
    from vramfit.estimate.step import Step
    from vramfit.scenario import Scenario

_SHARDS_REFERENCE = (Parallelism.ZERO3, Parallelism.FSDP)  # prepare_deepspeed keeps stage 3; prepare_fsdp shards
SCORE = StepPhase.SCORE
EVERY_PHASE = tuple(StepPhase)


def frozen_copy_bytes(step: Step) -> int:
    """Per-GPU bytes of one more frozen copy of the model (the reference, PPO's reward model).

    Full fine-tuning: every base tensor in the dtype the policy was loaded in (its fp32 master for
    ``-mixed``; 16-bit under DeepSpeed, whose engine casts to its bf16/fp16 config), sharded only by
    ZeRO-3 and FSDP. PEFT with an explicit copy: the frozen base as the policy stores it."""
    sc, p = step.sc, step.parts
    if sc.method is not Method.FULL:
        return p.weights + p.quantized_base
    per = 2 if sc.parallelism in ZERO_FAMILY and sc.precision is not Precision.FP32 else sc.precision.param_bytes
    if step.profile.reference_compute_dtype:  # loaded untrainable: never upcast (FrameworkProfile field's source)
        per = sc.precision.compute_bytes
    total = sum(round_allocation(t.numel * per) * t.count for t in base_tensors(step.spec))
    return shard(total, sc.num_gpus) if sc.parallelism in _SHARDS_REFERENCE else total


def policy_tokens(sc: Scenario) -> int:
    """Tokens whose log-probs the policy's loss reads, per micro-batch.

    Paired stages: chosen and rejected (2 x micro_batch_size sequences), every token counted (the
    prompt's share is not a scenario key: an upper bound); GRPO: the completion only, the prompt's
    labels are -100 (grpo_trainer.py:1495-1498); PPO: the whole sequence (its ``forward`` returns the
    full logits, sliced afterwards; trl v1.9.0 trl/experimental/ppo/ppo_trainer.py)."""
    if sc.stage is Stage.GRPO:
        return sc.micro_batch_size * sc.completion_len
    return (2 if sc.stage in PAIRED else 1) * sc.micro_batch_size * sc.seq_len


TOKEN_TILE, VOCAB_TILE = 4096, 32768  # chunked_logprob.py:31 TOKEN_CHUNK_SIZE, utils.py:1506 _CHUNKED_LOGPROB_CHUNK_SIZE


def chunked_logprobs(N: int, V: int, H: int, cb: int, head_grad_bytes: int, detail: str,
                     weight_cast: bool = False) -> LossMemory:
    """``ChunkedLogProbFunction`` over N tokens: saved the masked hidden states (cb·N·H), int64
    targets and fp32 log_z (12·N); forward: one [4096, 32768] tile in the compute dtype and six fp32
    per-token accumulators; backward: the fp32 input gradient (4·N·H) and its cast (cb·N·H), the
    tile, and, when the output layer trains (``head_grad_bytes`` per element, 0 when frozen), the fp32
    weight gradient (4·V·H) alive with its cast to the weight's dtype: ``grad_weight.to(weight.dtype)``
    in the return statement (kernels/chunked_logprob.py:407-413, 457; no copy for an fp32 weight).
    ``weight_cast``: an fp32 head under autocast is cast one 32768-row slice at a time, never whole
    (so no autocast copy of it): one slice in the forward's ``torch.mm`` argument (:356), two in the
    backward, where ``w_chunk = weight[start:end].to(compute_dtype)`` (:423) is made before the
    previous slice is released."""
    tile = cb * min(N, TOKEN_TILE) * min(V, VOCAB_TILE)
    cast = cb * min(V, VOCAB_TILE) * H if weight_cast else 0
    saved = cb * N * H + 12 * N
    head = (4 + (head_grad_bytes if head_grad_bytes != 4 else 0)) * V * H if head_grad_bytes else 0
    backward = saved + (4 + cb) * N * H + tile + 2 * cast + head
    return LossMemory(saved, saved + tile + cast + 6 * 4 * N, backward, detail)


def selective_logps(T: int, row: int, V: int, lb: int, detail: str, rows_log_softmax: bool = False) -> LossMemory:
    """``selective_log_softmax`` with autograd over T tokens (rows of ``row`` tokens), V vocabulary.

    16-bit logits: each row's ``log_softmax`` output is saved by its backward (lb·T·V) while the logits
    are alive (forward: 2·lb·T·V); backward: the rows' gradients are all held until ``UnbindBackward``
    stacks them into the logits gradient (2·lb·T·V). fp32 logits: ``gather`` + per-row ``logsumexp``,
    which saves its input (the logits, 4·T·V) and makes one row's exp at a time; backward: the
    gather's full-size zero-filled gradient, the rows' logsumexp gradients and their stack (3·4·T·V).
    ``rows_log_softmax``: TRL v0.14.0 GRPO's own loop, ``log_softmax`` per row whatever the dtype
    (grpo_trainer.py:437-440): the 16-bit formula at fp32 sizes."""
    TV = T * V
    if lb == 2 or rows_log_softmax:
        return LossMemory(lb * TV, 2 * lb * TV, 2 * lb * TV, detail)
    return LossMemory(4 * TV, 4 * TV + 4 * row * V, 3 * 4 * TV, detail)


def logits_kernel_logps(T: int, V: int, lb: int, chosen_nll: bool, copies_chosen: bool, detail: str) -> LossMemory:
    """Full logits of T tokens (F = lb·T·V bytes), TRL's Triton log-prob kernel over them and, with
    ``chosen_nll``, ``nn.CrossEntropyLoss`` over the chosen half (h = F/2) first.

    - cross-entropy: ``logits[..., :-1, :].contiguous()`` of the chosen half copies it (h, freed when
      ``cross_entropy_loss`` returns) unless it is one sequence (``copies_chosen`` false: the slice is already
      contiguous); ``log_softmax`` writes and saves h in the logits' dtype (cpo_trainer.py:826-837);
    - kernel (kernels/logprob_entropy.py:146-197): saves the logits themselves (they outlive the caller's
      reference) and two fp32 per-token vectors (log_z, expected_logit) of its four (16·T bytes);
    - backward: the kernel's ``grad_logits = torch.empty_like(logits)`` (:208) next to the saved logits,
      then the shift's slice backward writes a zero-filled F; the cross-entropy's branch runs after it (its
      nodes are older: autograd runs the highest sequence number first) next to that F: nll_loss's and
      log_softmax's gradients (h each) with the saved h, then its two slices' zero-filled h and F,
      summed in place into the buffered F. Each step peaks at 2F + h (F + 3h with the saved one).
    Traced on CPU with TRL 1.16.0's own ``concatenated_forward`` (tests/estimate/test_stages.py)."""
    F = lb * T * V
    h = F // 2 if chosen_nll else 0
    saved = F + h + 8 * T
    forward = F + h + max(h if copies_chosen else 0, 16 * T)
    return LossMemory(saved, forward, 2 * F + h + 8 * T, detail)


def full_log_softmax(T: int, V: int, lb: int, h: int, detail: str, nll_after: bool = False) -> LossMemory:
    """TRL <= 0.14 ``torch.gather(logits.log_softmax(-1), ...)`` over the shifted view ``logits[:, :-1, :]``
    (F = lb·T·V), after the chosen half's cross-entropy (h, :func:`logits_kernel_logps`). Forward: CUDA's
    ``host_softmax`` makes the strided view contiguous first (aten/src/ATen/native/cuda/SoftMax.cu ``auto
    input = input_.contiguous()``: F) next to its output (F, saved; gather saves the same tensor) and the
    logits. Backward: ``gather_backward``'s zero-filled F and ``_log_softmax_backward_data``'s F next to the
    saved ones; the logits are dropped with the outputs before backward. Traced on CPU (the internal copy
    is the kernel's own and not seen there; tests/estimate/test_stage_logits.py). ``nll_after``: DPO's RPO
    cross-entropy runs after the log-probs (v0.14.0 dpo_trainer.py:1214 then :1242-1250; swift's DPOTrainer at
    40c8406fb the same), when the copy is freed: the logits, the saved F, the chosen slice's copy (none for one
    pair) and its h stay within 3F, so the forward peak is the gather's 3F."""
    F = lb * T * V
    return LossMemory(F + h, 3 * F + (0 if nll_after else h), 3 * F + h, detail)


def _trained_head_bytes(step: Step) -> int:
    """Element size of the output layer's trained weight (0 where it is frozen): a modules_to_save copy's own dtype
    (Parts.copy_grads: fp32 under QLoRA's kbit preparation, estimate/saved_modules.py), else the parameters'."""
    from vramfit.estimate.saved_modules import copy_element_bytes

    if not step.head_trains:
        return 0
    return copy_element_bytes(step.spec, step.parts.copy_grads)[1] or step.sc.precision.param_bytes


def stage_loss(step: Step) -> LossMemory:
    """The policy's loss tensors for a standard loss (a fused/chunked scenario loss keeps the SFT model
    of it over the policy's tokens), as the stage's profile says TRL computes its log-probs."""
    from vramfit.estimate.stages import stage_loss_choice

    sc = step.sc
    if stage_loss_choice(sc) is not Loss.STANDARD:
        return step.loss
    T, V = policy_tokens(sc), vocab_rows(step.spec)
    path = logprobs_path(sc.stage, step.profile)
    nll = chosen_nll(sc, path, step.profile)
    if path is LogProbs.FUSED_HEAD:
        head = _trained_head_bytes(step)  # a weight gradient: full, or a saved copy
        return chunked_logprobs(T, V, step.spec.hidden_size, sc.precision.compute_bytes, head,
                                f"{sc.stage.value} log-probs: TRL fused LM head over {T:,} tokens",
                                weight_cast=runs_under_autocast(sc, step.profile))
    # the logits as the model returns them: fp32 where it upcasts (transformers < 4.45 `logits.float()`, TRL
    # never upcasts them itself), else the compute dtype (estimate/loss.py returned_logits_bytes)
    # (none returned under Unsloth's fused CE: its stages are not modelled apart, the compute dtype is kept)
    lb = stage_logits_bytes(step)
    what = {LogProbs.LOGITS_KERNEL: "TRL's Triton log-prob kernel", LogProbs.ROW_LOOP: "selective_log_softmax",
            LogProbs.FULL_LOG_SOFTMAX: "log_softmax of all of them"}[path]
    from vramfit.estimate.framework import stage_recipe

    runner = "TRL" if stage_recipe(step.profile, sc.stage) is None else step.profile.name  # a framework's own recipe
    detail = (f"{sc.stage.value} log-probs: full logits, {what}"
              + (" and the chosen half's cross-entropy" if nll else "") + f" over {T:,} tokens ({runner})")
    if path is LogProbs.LOGITS_KERNEL:
        return amp_cast_moment(step, logits_kernel_logps(T, V, lb, nll, sc.micro_batch_size > 1, detail), T, V)
    h = lb * T * V // 2 if nll else 0  # the chosen half's saved log_softmax; its branch peaks at F + 3h, below
    if path is LogProbs.FULL_LOG_SOFTMAX:
        return amp_cast_moment(step, pre_1_0_copies(
            step, full_log_softmax(T, V, lb, h, detail, nll_after=sc.stage is Stage.DPO), lb * T * V,
            logits_saved=False), T, V)
    rows_log_softmax = STAGE_PROFILES[sc.stage].rows_before_1_0 and step.profile.trl_logits_logprobs is not path
    row = sc.completion_len if sc.stage is Stage.GRPO else sc.seq_len
    return amp_cast_moment(step, pre_1_0_copies(step, row_loop_logps(T, row, V, lb, h, detail, rows_log_softmax),
                                                lb * T * V, logits_saved=lb == 4 and not rows_log_softmax), T, V)


def stage_logits_bytes(step: Step) -> int:
    """Bytes per element of the logits the stage's log-probs read: fp32 where the trainer casts them
    (FrameworkProfile.stage_logits_fp32) or the model upcasts (transformers < 4.45 ``logits.float()``, TRL never
    upcasts them itself), else the compute dtype (estimate/loss.py returned_logits_bytes; none returned under
    Unsloth's fused CE: its stages are not modelled apart, the compute dtype is kept)."""
    sc, V = step.sc, vocab_rows(step.spec)
    if reads_fp32_logits(step):
        return 4  # the cast's 16-bit source is dropped with the model's output, below the log-probs' 3F
    return (returned_logits_bytes(step.spec, sc, step.profile) // (sc.micro_batch_size * sc.seq_len * V)
            or logits_bytes_per_element(sc, step.profile))


def amp_casts_logits(step: Step) -> bool:
    """The trainer's accelerate wrapper returns the model's 16-bit logits in fp32 (FrameworkProfile.amp_outputs_fp32):
    it runs mixed precision (-mixed, or the QLoRA recipe's bf16/fp16, estimate/framework.py runs_under_autocast)
    outside DeepSpeed, whose engine turns accelerate's native AMP off."""
    sc = step.sc
    return (step.profile.amp_outputs_fp32 and sc.precision.compute_bytes == 2 and sc.parallelism not in ZERO_FAMILY
            and runs_under_autocast(sc, step.profile))


def reads_fp32_logits(step: Step) -> bool:
    """The log-probs read fp32 logits: the trainer casts them itself (``stage_logits_fp32``) or accelerate's wrapper
    returns them so (:func:`amp_casts_logits`)."""
    return step.profile.stage_logits_fp32 or amp_casts_logits(step)


def amp_cast_moment(step: Step, loss: LossMemory, T: int, V: int) -> LossMemory:
    """The log-probs' forward high point is at least the cast itself, where :func:`amp_casts_logits`: the model's
    16-bit logits beside their fp32 copy (6 bytes per logit), before the 16-bit ones are dropped."""
    if not amp_casts_logits(step) or step.profile.stage_logits_fp32:
        return loss
    cast = (logits_bytes_per_element(step.sc, step.profile) + 4) * T * V
    return LossMemory(loss.saved, max(loss.forward_peak, cast), loss.backward_peak, loss.detail)


def pre_1_0_copies(step: Step, loss: LossMemory, F: int, logits_saved: bool) -> LossMemory:
    """The copies of the logits (F bytes) a stage made before TRL 1.0 after (KTO) or before (GRPO) its log-probs.

    KTO (``StageProfile.copies_logits``): the chosen and rejected rows' logits, copied for the metrics
    (v0.14.0 kto_trainer.py:1112-1113, v0.29.1 experimental/kto/kto_trainer.py:974-975; LLaMA-Factory@ff6d4d1
    kto/trainer.py:194-196), F together, alive with the logits and the saved tensors until the loss is reduced
    (``logits_saved``: the fp32 row loop's saved tensor is the logits themselves). GRPO v0.15.0-v0.29.1: ``logits / self.temperature``
    (grpo_trainer.py:1069 at v0.29.1) is a second F next to the logits it divides."""
    sc, prof = step.sc, STAGE_PROFILES[step.sc.stage]
    path = logprobs_path(sc.stage, step.profile)
    if prof.copies_logits:
        alive = loss.saved + (0 if logits_saved else F) + F
        return LossMemory(loss.saved, max(loss.forward_peak, alive), loss.backward_peak, loss.detail)
    if prof.rows_before_1_0 and step.profile.trl_logits_logprobs is path:
        return LossMemory(loss.saved, max(loss.forward_peak, 2 * F), loss.backward_peak, loss.detail)
    return loss


def row_loop_logps(T: int, row: int, V: int, lb: int, h: int, detail: str,
                   rows_log_softmax: bool = False) -> LossMemory:
    """:func:`selective_logps` after the chosen half's cross-entropy, whose saved h is alive throughout
    (its own backward branch, F + 3h, stays below the loop's)."""
    loop = selective_logps(T, row, V, lb, detail, rows_log_softmax)
    return LossMemory(loop.saved + h, loop.forward_peak + h, loop.backward_peak + h, detail)


def no_grad_block(step: Step, tokens: int, row: int | None = None) -> int:
    """One decoder block run under no_grad over ``tokens`` tokens in sequences of ``row``: the residual stream, its
    normed copy and the MLP's gate, up and act(gate) outputs alive together (transformers LlamaMLP.forward), or,
    where the eager fp32 softmax runs, the block's attention at its softmax (:func:`no_grad_eager_attention`),
    whichever is larger; nothing is saved."""
    spec, cb = step.spec, step.sc.precision.compute_bytes
    inter = spec.intermediate_size or 4 * spec.hidden_size
    mlp = cb * tokens * (3 * inter + 2 * spec.hidden_size)
    return max(mlp, no_grad_eager_attention(step, tokens, row or step.sc.seq_len))


def no_grad_eager_attention(step: Step, tokens: int, row: int) -> int:
    """A block's eager attention under no_grad at its softmax (0 where the eager fp32 softmax does not run): the
    (B, H, S, S) score tensors (block_extras.eager_forward_softmax), the block input beside its normed copy, q, k, v
    (block_extras.checkpointed_block_own: a checkpointed forward is a no_grad one too) and, with fewer k/v heads
    than query heads, their repeat_kv copies (transformers v5.24.0 models/llama/modeling_llama.py
    eager_attention_forward ``key_states = repeat_kv(key, module.num_key_value_groups)``, v alike; a copy:
    expand then reshape). The simulator's TRL DPO step on a 3-layer Gemma-2-2B (LoRA, 2 x 2048 tokens, eager
    soft-capped attention) peaks in the adapters-off reference pass at that moment, two fp32 and one bf16
    (2, 8, 2048, 2048) tensors beside the policy's saved ones; the MLP's working set alone read -7.7 %."""
    from dataclasses import replace

    from vramfit.choices import Checkpointing
    from vramfit.estimate.activations import dtypes_for
    from vramfit.estimate.block_extras import checkpointed_block_own, eager_forward_softmax

    spec = step.spec
    sc = replace(step.sc, micro_batch_size=max(1, tokens // row), seq_len=row,
                 gradient_checkpointing=Checkpointing.FULL)
    scores = eager_forward_softmax(spec, sc, step.profile)
    if not scores:
        return 0
    c = dtypes_for(sc, step.profile, spec).compute
    repeated = 0
    if spec.num_key_value_heads < spec.num_attention_heads:
        repeated = c * tokens * spec.num_attention_heads * (spec.head_dim + spec.v_dim)
    return scores + checkpointed_block_own(spec, sc, step.profile, 0) + c * tokens * spec.hidden_size + repeated


def scoring_pass(step: Step, sequences: int, row: int, scored: int) -> Iterator[Contribution]:
    """A no_grad log-prob pass over ``sequences`` x ``row`` tokens that scores ``scored`` tokens: one
    block's working set, then the head: the fused head's masked hidden states, tile and fp32
    accumulators, or the full logits and one row's log_softmax (utils.py:538-600), or, where the whole
    log_softmax is taken at once (TRL <= 0.14 ``get_batch_logps``), the logits, ``host_softmax``'s contiguous
    copy of their shifted view and its output together (:func:`full_log_softmax`'s forward, no_grad)."""
    sc, V = step.sc, vocab_rows(step.spec)
    path = logprobs_path(sc.stage, step.profile)
    if path is LogProbs.FUSED_HEAD:
        cb = sc.precision.compute_bytes
        head = cb * scored * step.spec.hidden_size + cb * min(scored, TOKEN_TILE) * min(V, VOCAB_TILE) + 7 * 4 * scored
    elif path is LogProbs.FULL_LOG_SOFTMAX:
        head = 3 * (4 if reads_fp32_logits(step) else logits_bytes_per_element(sc, step.profile)) * scored * V
    else:
        lb = 4 if amp_casts_logits(step) else logits_bytes_per_element(sc, step.profile)
        head = lb * (scored + scored // max(1, sequences)) * V
        prof = STAGE_PROFILES[sc.stage]
        if prof.copies_logits or (prof.rows_before_1_0 and step.profile.trl_logits_logprobs is path):
            # the pass's own logits and their KTO chosen/rejected copies or GRPO's `logits / temperature`
            # (pre_1_0_copies), made under no_grad too
            head = max(head, 2 * lb * scored * V)
    yield Contribution("score_logits", SCORE, max(head, no_grad_block(step, sequences * row, row)))


def held_logits(step: Step) -> int:
    """The policy's logits still referenced when the reference pass runs: the chosen/rejected copies of KTO before
    TRL 1.0 (v0.14.0 kto_trainer.py:1202-1234: get_batch_loss_metrics holds them from forward() through the
    reference forward; LLaMA-Factory@ff6d4d1 kto/trainer.py:231-236 the same), or the logits themselves where
    the trainer keeps views of them (FrameworkProfile.keeps_policy_logits)."""
    sc = step.sc
    path = logprobs_path(sc.stage, step.profile)
    from vramfit.estimate.stages import stage_loss_choice

    if path is LogProbs.FUSED_HEAD or stage_loss_choice(sc) is not Loss.STANDARD:
        return 0
    if STAGE_PROFILES[sc.stage].copies_logits or step.profile.keeps_policy_logits:
        return stage_logits_bytes(step) * policy_tokens(sc) * vocab_rows(step.spec)
    return 0


def reference_model(step: Step) -> Iterator[Contribution]:
    """A frozen reference copy, resident in every phase."""
    from vramfit.estimate.stages import reference

    # precomputed reference log-probs hold no copy in training, under FSDP too: TRL 1.16.0 loads one there for the
    # precompute pass and drops it after (dpo_trainer.py:908-914, 1033-1034; kto_trainer.py:1041-1042: "freed once it
    # is done"; prepare_fsdp registers it nowhere else), so it is gone before the first training step
    if reference(step.sc) is Reference.COPY:
        copy = frozen_copy_bytes(step)
        for phase in EVERY_PHASE:
            yield Contribution("reference_model", phase, copy)


def preference_score(step: Step) -> Iterator[Contribution]:
    """The reference (and KTO's KL) pass at the end of the policy's forward: everything alive then
    (the policy's loss reduced to its saved tensors), plus the pass's logits. KTO runs one completion per example and the KL pass
    under no_grad (kto_trainer.py:1337 _compute_kl_logps) and the reference pass one after the other."""
    from vramfit.estimate.contributions import CONTRIBUTORS

    sc = step.sc
    if sc.stage in GENERATES:
        return
    for core in CONTRIBUTORS:
        for c in core(step):
            if c.phase is StepPhase.FORWARD:
                # the policy's loss is done: its saved tensors stay, its forward tile is freed
                # (mm_buf is local to ChunkedLogProbFunction.forward, kernels/chunked_logprob.py:347)
                kept = step.loss.saved + held_logits(step) if c.name == "logits_loss" else c.bytes
                yield Contribution(c.name, SCORE, kept)
    from vramfit.estimate.vision_inputs import lm_scenario

    seqs, row = (2 if sc.stage in PAIRED else 1) * sc.micro_batch_size, lm_scenario(step.spec, sc).seq_len
    yield from scoring_pass(step, seqs, row, seqs * row)  # a vision-language model's image tokens re-run too


CONTRIBUTORS = (reference_model, preference_score)


def _stage_runner(step: Step) -> str:
    """Whose code runs the stage: TRL's trainer, which its stage profile reads, or the framework's own recipe (profile
    ``stage_recipes``), counted with the recipe's own log-prob code where the profile models it (its log-prob path
    differs from TRL 1.16's: torchtune's DPO/SimPO, FrameworkProfile.trl_logits_logprobs), else with TRL's stage
    profile (torchtune's PPO)."""
    from vramfit.estimate.framework import stage_recipe

    stage, implementation = step.sc.stage.value, STAGE_PROFILES[step.sc.stage].implementation
    recipe = stage_recipe(step.profile, step.sc.stage)
    if recipe is None:
        return f"Stage {stage} as {implementation} runs it"
    where, name = f"Stage {stage} in {step.profile.name}'s {' / '.join(recipe.recipes)} recipe", step.profile.name
    if logprobs_path(step.sc.stage, step.profile) is not STAGE_PROFILES[step.sc.stage].logprobs:
        return (f"{where}, its memory estimated as {step.profile.version} runs the stage ({name}'s own log-prob code, "
                "not TRL's)")
    return f"{where}, its memory estimated as {implementation} runs the stage (no {name} stage profile)"


def describe(step: Step) -> list[str]:
    """The stage's assumptions, in words."""
    from vramfit.estimate.stages import reference

    sc = step.sc
    ref = reference(sc)
    batch = ("pairs: chosen and rejected run as one concatenated forward of 2 × micro_batch_size sequences"
             if sc.stage in PAIRED else "completions" if sc.stage in GENERATES else "examples (one completion each)")
    out = [f"{_stage_runner(step)}; micro_batch_size counts {batch}."]
    from vramfit.estimate.stages import stage_loss_choice

    asked = step.asked_loss or sc.loss  # step.sc holds the loss the trainer runs
    if asked is not Loss.STANDARD and stage_loss_choice(replace(sc, loss=asked)) is Loss.STANDARD:
        from vramfit.estimate.framework import stage_recipe

        trl = stage_recipe(step.profile, sc.stage) is None  # TRL's trainer, not the framework's own recipe
        out.append(f"loss {asked.value}: the {sc.stage.value} trainer of this release has no fused or chunked loss"
                   + (" (use_liger_kernel applies Liger's layer kernels only)" if trl else "")
                   + ", so its own log-prob code is counted.")
    if logprobs_path(sc.stage, step.profile) is not STAGE_PROFILES[sc.stage].logprobs:
        release = sc.framework_version or step.profile.version  # the profile's default release when unset
        out.append(f"Log-probs as framework_version {release} takes them (TRL before 1.0 or its own trainer): "
                   "from the full logits" + (" cast to fp32" if step.profile.stage_logits_fp32 else "")
                   + (", and the chosen half's cross-entropy" if chosen_nll(
                       sc, logprobs_path(sc.stage, step.profile), step.profile) else "") + ".")
    elif sc.rpo_alpha is not None:
        out.append(f"rpo_alpha {sc.rpo_alpha:g}: TRL 1.16's RPO term (loss_type sft) reads the fused head's per-token "
                   "log-probs of the chosen half: no tensor of its own.")
    if (logprobs_path(sc.stage, step.profile) is not LogProbs.FUSED_HEAD and amp_casts_logits(step)
            and not step.profile.stage_logits_fp32):
        out.append("Mixed precision runs through accelerate's wrapper, which returns the model's logits in fp32 "
                   "(convert_outputs_to_fp32): the log-probs read fp32 logits.")
    how = {
        Reference.COPY: f"a frozen copy of the model ({frozen_copy_bytes(step) / 2**30:,.2f} GiB per GPU"
                        + (", sharded" if sc.parallelism in _SHARDS_REFERENCE and sc.method is Method.FULL else "")
                        + ") and a no_grad pass through it",
        Reference.ADAPTERS_OFF: "the policy with its adapters disabled (no copy), a no_grad pass",
        Reference.PRECOMPUTED: "log-probs precomputed before training (precompute_ref_log_probs): no model, no pass",
        Reference.NONE: "none" + (" (reference-free loss)" if sc.stage in (Stage.ORPO, Stage.SIMPO) else
                                  " (GRPO beta = 0, TRL's default)" if sc.stage is Stage.GRPO else ""),
    }[ref]
    out.append(f"Reference ({'auto → ' if sc.reference is Reference.AUTO else ''}{ref.value}): {how}.")
    if sc.stage in GENERATES:
        from vramfit.estimate.stages.rl import describe_rl

        out.extend(describe_rl(step))
    return out
