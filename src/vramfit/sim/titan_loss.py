"""torchtitan 0.3's training step on the simulator: the model returns the final norm's output and
``ChunkedLossWrapper`` runs ``lm_head`` and the cross-entropy over 8 sequence chunks, each chunk's backward inside
the loss call (estimate/titan_loss.py models the same).

Run where the scenario's profile has ``standard_loss`` :attr:`LossLayout.TORCHTITAN_CHUNKED_LOSS` (torchtitan 0.3);
torchtitan 0.2.2 and before (``framework_version: torchtitan-0.2.2``) keep the model's own whole-logits loss
(sim/run.py ``_forward_loss``). Every step below cites torchtitan v0.3.0 (the PyPI wheel):

- trainer.py l. 510-535: ``ChunkedLossWrapper.set_lm_head(model.lm_head)`` and ``model._skip_lm_head = True``, so
  ``pred = model(inputs)`` (l. 814) is the final norm's output ``h`` (B x S x D); the HF model's decoder returns the
  same tensor (``last_hidden_state``, its norm's output), computed inside the root's call so that FSDP2's root hooks
  run (sim/losses.py ``in_root_call``).
- trainer.py l. 818-828: ``loss, _ = self.loss_fn(pred, labels, global_valid_tokens)``, ``del pred``,
  ``loss.backward()``: sim/run.py's loop drops ``h`` when this module returns and runs that backward.
- components/loss.py ``ChunkedLossWrapper.__call__`` (l. 630-787), reproduced op for op with plain torch ops and
  the real FSDP2 calls on the ``lm_head`` module (:func:`chunked_loss`); ``GradAccumulator`` (l. 474-564);
  ``cross_entropy_loss`` (l. 32-65, its plain path) and ``CrossEntropyLoss.__call__`` (l. 351-367);
  ``_DecoderOutputGradientBackProp`` (l. 838-875).

FSDP2's units are torchtitan 0.3's (distributed/fsdp.py ``apply_fsdp_to_decoder`` l. 165-310): sim/fsdp.py builds
them with accelerate's ``fsdp2_prepare_model`` (the profile's ``fsdp2_tail_unit``), which makes the same ones.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from vramfit.estimate.constants import TORCHTITAN_LOSS_CHUNKS
from vramfit.scenario import Scenario

#: torchtitan v0.3.0 components/loss.py l. 610 ``ChunkedLossWrapper.Config.num_chunks: int = 8``
NUM_CHUNKS = TORCHTITAN_LOSS_CHUNKS.value
#: torchtitan v0.3.0 components/loss.py l. 27
IGNORE_INDEX = -100


def runs_titan_chunked_loss(sc: Scenario) -> bool:
    """The scenario's standard loss is torchtitan 0.3's ``ChunkedLossWrapper`` (read from its profile)."""
    from vramfit.estimate.framework import scenario_profile
    from vramfit.estimate.titan_loss import runs_titan_chunked_loss as runs

    return runs(sc, scenario_profile(sc))


def titan_step_loss(built: Any, ids: torch.Tensor, labels: torch.Tensor, root: Any = None) -> torch.Tensor:
    """``pred = model(inputs)`` with ``_skip_lm_head`` (the final norm's output), then the chunked loss on it
    (module docstring). ``labels`` are torchtitan's: already shifted by its dataloader, so used as they are."""
    from vramfit.sim.losses import in_root_call

    decoder = built.causal_lm.get_decoder()
    hidden = in_root_call(built, lambda: decoder(input_ids=ids).last_hidden_state, root, ids)
    # trainer.py l. 884-903: global_valid_tokens, a device scalar counted before the micro-batches (no label ignored
    # here); its int64 count, as a float the loss divides by
    valid = torch.tensor(float(labels.numel()), device=labels.device)
    return chunked_loss(hidden, labels, built.lm_head, valid)


def _chunk(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """loss.py l. 668-677 ``_chunk_local``: equal pieces on dim 1, each ``contiguous()`` (a copy unless the split is
    contiguous already, as with one sequence per micro-batch)."""
    seq_len = t.shape[1]
    if seq_len % NUM_CHUNKS:  # l. 670-673 torch._check
        raise ValueError("ChunkedLossWrapper sequence length must be divisible by num_chunks")
    return tuple(c.contiguous() for c in torch.split(t, [seq_len // NUM_CHUNKS] * NUM_CHUNKS, dim=1))


def _accumulate(buffer: torch.Tensor, index: int, chunk_grad: torch.Tensor) -> None:
    """``GradAccumulator.add`` (loss.py l. 500-541): the chunk's gradient cast to the buffer's fp32 (a copy), then
    copied into its slice of the sequence."""
    if chunk_grad.dtype != buffer.dtype:
        chunk_grad = chunk_grad.to(buffer.dtype)  # l. 530-531
    n = chunk_grad.shape[1]
    buffer[:, index * n:(index + 1) * n] = chunk_grad  # l. 533-539


def _set_lm_head_loop_flags(lm_head: Any, looping: bool) -> None:
    """loss.py l. 728-739 (``looping``: reshard neither after forward nor after backward, no gradient sync until the
    last chunk, then an explicit ``unshard()``) and l. 768-772 (the flags restored, then ``reshard()``)."""
    lm_head.set_reshard_after_forward(not looping)
    lm_head.set_reshard_after_backward(not looping)
    lm_head.set_requires_gradient_sync(not looping, recurse=False)
    if looping:
        lm_head.unshard()
    else:
        lm_head.reshard()


def chunked_loss(hidden: torch.Tensor, labels: torch.Tensor, lm_head: torch.nn.Module,
                 valid: torch.Tensor) -> torch.Tensor:
    """``ChunkedLossWrapper.__call__`` (loss.py l. 630-787) on the hidden states ``hidden`` (B x S x D); returns the
    loss ``_DecoderOutputGradientBackProp`` makes, whose backward hands the accumulated gradient to ``hidden``."""
    from torch.distributed.fsdp import FSDPModule

    fsdp_enabled = isinstance(lm_head, FSDPModule)  # l. 654
    requires_grad = hidden.requires_grad  # l. 657
    h_chunks = [c.detach().requires_grad_(requires_grad) for c in _chunk(hidden)]  # l. 694-696
    label_chunks = list(_chunk(labels))  # l. 697
    # l. 703-709: GradAccumulator(hidden_states, dtype=torch.float32) allocates zeros_like(local, dtype) (l. 498)
    buffer = torch.zeros_like(hidden, dtype=torch.float32) if requires_grad else None
    total_loss = hidden.new_zeros((), dtype=torch.float32)  # l. 711
    if fsdp_enabled:
        _set_lm_head_loop_flags(lm_head, looping=True)
    last_idx = len(h_chunks) - 1
    for i, (h_chunk, label_chunk) in enumerate(zip(h_chunks, label_chunks, strict=True)):
        if fsdp_enabled and i == last_idx:  # l. 743-746
            lm_head.set_requires_gradient_sync(True, recurse=False)
        logits = lm_head(h_chunk)  # l. 748: bound until the next chunk's logits replace it
        # l. 754-756: the inner CrossEntropyLoss: cross_entropy_loss (l. 60-65) divided by global_valid_tokens
        chunk_loss = F.cross_entropy(logits.flatten(0, 1).float(), label_chunk.flatten(0, 1), reduction="sum",
                                     ignore_index=IGNORE_INDEX) / valid
        total_loss = total_loss + chunk_loss.detach()  # l. 758
        if requires_grad:  # l. 760-766
            chunk_loss.backward()
            _accumulate(buffer, i, h_chunk.grad)
            h_chunk.grad = None
    if fsdp_enabled:
        _set_lm_head_loop_flags(lm_head, looping=False)
    if not requires_grad:  # l. 773-774
        return total_loss
    # l. 777: GradAccumulator.result() (l. 543-564) in h's dtype; the buffer, the chunks and the last logits stay
    # bound until the call returns
    accumulated_grad = buffer.to(hidden.dtype)
    return _DecoderOutputGradientBackProp.apply(hidden, accumulated_grad, total_loss)  # l. 780-787, 819-835


class _DecoderOutputGradientBackProp(torch.autograd.Function):
    """loss.py l. 838-875: saves the accumulated gradient and returns it as ``hidden_states``' gradient."""

    @staticmethod
    def forward(ctx: Any, hidden_states: torch.Tensor, accumulated_grad: torch.Tensor,
                loss: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(accumulated_grad)  # l. 858
        return loss.detach()  # l. 859

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (accumulated_grad,) = ctx.saved_tensors  # l. 865
        return accumulated_grad, None, None  # l. 875
