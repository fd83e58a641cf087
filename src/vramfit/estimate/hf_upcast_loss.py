"""The loss of transformers < 4.45 (``HF_UPCAST_IN_MODEL``) replayed tensor by tensor for
:func:`vramfit.estimate.transients.step_transients` (moved out of estimate/allocator.py)."""

from __future__ import annotations


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
