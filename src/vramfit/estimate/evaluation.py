"""Evaluation passes during training (scenario key ``eval_batch_size``; 0 = none): the ``evaluate`` phase.

Many runs evaluate every N optimizer steps. The HF Trainer's ``evaluation_loop`` calls ``prediction_step``, which
runs ``compute_loss`` under ``torch.no_grad()`` on ``per_device_eval_batch_size`` sequences (transformers v4.51.3
trainer.py ``prediction_step``: ``with torch.no_grad(): ... loss, outputs = self.compute_loss(model, inputs,
return_outputs=True)``); ms-swift evaluates by default (swift/llm/argument/base_args/data_args.py
``split_dataset_ratio: float = 0.01`` at b91109223, swift/trainers/arguments.py ``per_device_eval_batch_size: int =
1``, and packs the held-out set as the training set, swift/llm/train/sft.py ``_encode_dataset``).

What the pass holds (:func:`evaluation_pass`):

- the model state that lives between optimizer steps: weights, adapters, master weights, optimizer state,
  workspaces, the engine's buffers (ZeRO-3's gathered parameters) and any forward autocast copies; no gradients,
  which the Trainer's ``model.zero_grad()`` after the step set to None (torch 2.x ``set_to_none=True``), except
  DeepSpeed ZeRO-3's flat gradient partition, allocated once in ``_setup_for_real_optimizer``
  (deepspeed runtime/zero/stage3.py ``self.grad_partitions_flat_buffer = torch.zeros(...)``);
- no saved activations (no_grad), only one block's working set (``stages.preference.no_grad_block``);
- the head: the whole ``tokens x vocab`` logits and the loss's fp32 tensors, as the training forward's loss
  figures at the eval batch (:func:`eval_loss`); with ``logits_to_keep`` labels only the label positions' rows
  (ms-swift's mask is built in ``_prepare_inputs``, which the Trainer's ``prediction_step`` calls too:
  estimate/loss.py ``label_rows``). Liger's fused linear cross-entropy only runs in training:
  linkedin/Liger-Kernel v0.5.8 src/liger_kernel/transformers/model/qwen2.py ``lce_forward`` l. 206 ``if
  self.training and (labels is not None)``, else ``logits = self.lm_head(hidden_states)`` and
  ``self.loss_function(...)`` (transformers ForCausalLMLoss: ``logits.float()``, then cross_entropy's fp32
  log_softmax); v0.5.10 l. 202 the same. ``FrameworkProfile.fused_loss_trains_only`` says where that holds.

The reserved figure (:func:`evaluation_reserved`): the pass comes after training steps have reserved their segments;
its big tensors reuse cached transient blocks where they fit (a standard training loss of the same length leaves
exactly those) and open new segments where none does (a fused training loss leaves only small chunks), and the
training segments stay reserved (no ``empty_cache``; swift's ``gc_collect`` after ``evaluate`` runs only after it).
Segments left by gradients and optimizer temporaries are not offered to the eval tensors: each is at most one
parameter's size, smaller than a ``tokens x vocab`` tensor once the sequence is longer than the hidden size.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

from vramfit.choices import Loss, Parallelism, Stage
from vramfit.estimate.phases import Contribution, StepPhase

if TYPE_CHECKING:
    from vramfit.estimate.allocator import AllocatorConf
    from vramfit.estimate.loss import LossMemory
    from vramfit.estimate.step import Step

EVALUATE = StepPhase.EVALUATE

#: the forward-phase components that are still alive when an evaluation pass runs between optimizer steps
_KEPT = ("weights", "quantized_base", "adapters", "master_weights", "workspaces", "optimizer_state", "comm_buffers",
         "rope_cache", "autocast_copies")


def evaluates(step: Step) -> bool:
    """An SFT run that evaluates during training (other stages' evaluation passes are not modelled)."""
    return step.sc.eval_batch_size > 0 and step.sc.stage is Stage.SFT


def eval_loss(step: Step) -> LossMemory:
    """The loss figures of one evaluation micro-batch: the training loss at ``eval_batch_size`` sequences, the
    standard one where the fused loss runs in training only (``profile.fused_loss_trains_only``)."""
    from vramfit.estimate.loss import loss_memory

    sc = step.sc
    loss = Loss.STANDARD if sc.loss is Loss.FUSED and step.profile.fused_loss_trains_only else sc.loss
    eval_sc = replace(sc, micro_batch_size=sc.eval_batch_size, loss=loss, keeps_outputs=False)
    return loss_memory(step.spec, eval_sc, step.profile)


def eval_forward_bytes(step: Step) -> int:
    """The pass's working set beyond the model state: its head (logits and loss, :func:`eval_loss`) or one block's
    no_grad working set, whichever is larger."""
    from vramfit.estimate.stages.preference import no_grad_block

    tokens = step.sc.eval_batch_size * step.sc.seq_len
    return max(eval_loss(step).forward_peak, no_grad_block(step, tokens, step.sc.seq_len))


def evaluation_pass(step: Step) -> Iterator[Contribution]:
    """The ``evaluate`` phase: the state kept between steps (:data:`_KEPT`, as at the forward's high point) plus
    the pass's own working set."""
    if not evaluates(step):
        return
    from vramfit.estimate.contributions import (
        activations,
        communication,
        framework_buffers,
        gradients,
        model_state,
    )
    from vramfit.estimate.core import zero3_eval_head_relief

    relief = zero3_eval_head_relief(step.spec, step.sc, step.profile)  # ZeRO-3: the head inside the live elements
    for core in (model_state, communication, framework_buffers, activations):
        for c in core(step):
            if c.phase is StepPhase.FORWARD and c.name in _KEPT:
                yield Contribution(c.name, EVALUATE, c.bytes - (relief if c.name == "comm_buffers" else 0))
    if step.sc.parallelism is Parallelism.ZERO3:  # the flat gradient partition outlives zero_grad
        for c in gradients(step):
            if c.phase is StepPhase.FORWARD:
                yield Contribution(c.name, EVALUATE, c.bytes)
    yield Contribution("eval_forward", EVALUATE, eval_forward_bytes(step))


def eval_events(step: Step, first: int) -> list[int]:
    """The pass's head tensors as allocator events (``allocator.transient_reserved``'s form), numbered after
    ``first`` earlier allocations: the loss's forward figure cut at one fp32 ``tokens x vocab`` block, as
    ``transients._loss_from_figures`` cuts the training loss, all freed when the loss is reduced."""
    from vramfit.estimate.loss import label_rows, vocab_rows

    rows = label_rows(replace(step.sc, micro_batch_size=step.sc.eval_batch_size))  # the logits' rows (loss.py)
    unit = max(1, 4 * rows.micro_batch_size * rows.seq_len * vocab_rows(step.spec))
    left, sizes = eval_loss(step).forward_peak, []
    while left > 0:
        sizes.append(min(left, unit))
        left -= sizes[-1]
    return sizes + [-(first + k) for k in range(1, len(sizes) + 1)]


def evaluation_reserved(step: Step, events: list[int], reserved: int, conf: AllocatorConf | None) -> int:
    """``reserved`` (the training step's) plus the segments the evaluation pass opens: the transient replay of the
    step followed by the pass, less the step's alone."""
    if not evaluates(step):
        return reserved
    from vramfit.estimate.allocator import transient_reserved

    first = sum(1 for e in events if e >= 0)
    alone = transient_reserved(events, conf)[1]
    after = transient_reserved([*events, *eval_events(step, first)], conf)[1]
    return reserved + max(0, after - alone)


def evaluation_notes(step: Step) -> list[str]:
    """The assumption to state when the scenario evaluates during training (or asks for it where it is not modelled)."""
    sc = step.sc
    if not sc.eval_batch_size:
        return []
    if not evaluates(step):
        return [f"eval_batch_size {sc.eval_batch_size}: evaluation passes are modelled for the sft stage only; "
                f"none counted for {sc.stage.value}."]
    from vramfit.estimate.loss import label_rows

    kept = label_rows(replace(sc, micro_batch_size=sc.eval_batch_size))
    rows = kept.micro_batch_size * kept.seq_len
    labels = rows != sc.eval_batch_size * sc.seq_len
    fused = f" (the fused loss runs in training only: the pass makes {'their' if labels else 'whole'} logits)" \
        if sc.loss is Loss.FUSED and step.profile.fused_loss_trains_only else ""
    whole = f"the logits of {rows:,} label positions" if labels else "the whole logits"
    return [f"Evaluation between optimizer steps: {sc.eval_batch_size} x {sc.seq_len} tokens under no_grad, "
            f"no saved activations or gradients; {whole} and the loss's fp32 tensors{fused}, "
            f"{eval_forward_bytes(step) / 2**30:,.2f} GiB; "
            "its tensors reuse cached loss segments of the same size or open their own, which stay reserved."]
