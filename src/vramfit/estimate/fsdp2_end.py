"""FSDP2 full fine-tuning: the segments the end of backward opens on the default stream.

After the lowest block's backward two tensors are made that nothing in the blocks' backward was as large as:

- the input embedding's gradient (autograd's ``embedding_dense_backward``: a new vocab x hidden tensor in the
  gradient's dtype), made after the lowest block's post-backward has reduce-scattered and freed that block's
  gradients;
- the last unit's flat reduce-scatter input, its whole gradients copied into one buffer in the reduce dtype
  (torch 2.7 ``foreach_reduce``: ``reduce_scatter_input = torch.empty((reduce_scatter_input_numel,), ...)`` on the
  default stream; v2.13.0 _fsdp_collectives.py l. 597-601 through ``reduce_scatter_comm.allocate``): the root's
  (embedding, final norm and output layer) where those are one unit (axolotl 0.12's patched fsdp2_prepare_model,
  torchtitan), the embedding's where it is a unit of its own (accelerate's, torchtune's). It is made while the
  embedding's gradient is alive, right after the lowest block's input is dropped (torch 2.7 ``FSDPParamGroup.post_backward``:
  ``self.comm_ctx.reduce_scatter_state = None`` before ``foreach_reduce``; v2.13.0 _fsdp_param_group.py l. 648-656
  pops the oldest of ``reduce_scatter_states``, at most one kept by default).

The caching allocator serves each from the smallest cached block of the default stream that fits, and a block never
outgrows its segment (pytorch/pytorch@eb42ad6e c10/cuda/CUDACachingAllocator.cpp ``get_free_block``,
``try_merge_blocks`` within one segment): the blocks free then are the ones the step made and dropped before, each
at most as large as the tensor it held (:func:`_largest_freed`). A tensor larger than all of them opens a segment
of its own on top of everything the blocks' backward reserved (no ``empty_cache`` in between); later micro-batches
and steps reuse it. The simulator shows both (real FSDP2 on the fake process group, axolotl-0.12, a 4-layer Llama
with hidden 2048 and vocab 32000 untied, 256 tokens, 2 GPUs: after the blocks' high point the first backward opens
a 125 MiB segment for the embedding's gradient, then a 250 MiB one for the root's input).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vramfit.estimate.allocator import segment_size
from vramfit.estimate.attention import score_elements
from vramfit.estimate.fsdp2 import _applies, _grad_bytes, end_tensors
from vramfit.estimate.transients import step_transients
from vramfit.scenario import Attention

if TYPE_CHECKING:
    from vramfit.estimate.step import Step


def _largest_freed(step: Step) -> int:
    """Bytes of the largest tensor the step frees on the default stream before the end of backward: a block's
    unsharded weight or gradient (one tensor per parameter under FSDP2; a MoE layer's expert bank is one 3-D
    parameter), its backward working set, the loss's transients (cut at their tensor size,
    estimate/transients.py), a saved activation. A saved item above what one activation tensor can hold (tokens x
    the widest linear x fp32, or the attention scores under eager attention) is several tensors counted as one
    (the indexed expert weights' copies) and hosts nothing that large."""
    spec, sc = step.spec, step.sc
    per = max(sc.precision.compute_bytes, _grad_bytes(step))
    weights = [(lin.weight_params if lin.group == "expert" else lin.in_features * lin.out_features) * per
               for lin in spec.block_linears]
    tokens = sc.tokens_per_micro_batch
    width = max([lin.out_features for lin in spec.block_linears] + [spec.hidden_size])
    one = tokens * width * 4
    if sc.attention is Attention.EAGER:
        one = max(one, 4 * score_elements(spec, sc))
    saved = [n for n in step.saved.items.values() if n <= one]
    return max([*weights, step.block_transient, *saved, *(e for e in step_transients(step) if e > 0)], default=0)


def end_of_backward_segments(step: Step) -> int:
    """Reserved bytes the end of backward opens beyond the blocks' (module docstring); 0 outside FSDP2 full
    fine-tuning with the step after backward."""
    if not _applies(step) or not step.spec.num_hidden_layers or not step.spec.embedding_params:
        return 0
    freed = _largest_freed(step)
    block, rs_input, grad = end_tensors(step)
    # the lowest block's reduce-scatter input is dropped just before the last unit's is made
    hosts = max(freed, block)
    opened = segment_size(grad) if grad > freed else 0
    if opened and step.spec.tie_word_embeddings:
        # tied: the output layer's gradient exists already, AccumulateGrad adds this one into it and drops it
        # (torch v2.13.0 torch/csrc/autograd/functions/accumulate_grad.h), so its segment is free again; untied, it is the gradient
        hosts = max(hosts, opened)
    if rs_input > hosts:
        opened += segment_size(rs_input)
    return opened


__all__ = ["end_of_backward_segments"]
