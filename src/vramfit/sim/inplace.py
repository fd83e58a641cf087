"""Undo the one allocation pattern where fake tensors and CUDA tensors differ: gradient merges.

When an activation feeds several ops, autograd sums the gradients arriving for it in the consumer
node's input buffer. ``InputBuffer::accumulate`` (torch/csrc/autograd/input_buffer.cpp) adds in place
into the first gradient when it holds the last reference to it and it is a plain dense tensor
(``can_accumulate_inplace``); tensor subclasses such as ``FakeTensor`` always take the out-of-place
``old + new``. On CUDA, then, the merged gradient reuses ``old``'s memory and ``old`` is not freed.

:func:`fold_accumulations` rewrites the event log accordingly: for each ``out = old + new`` the tracker
flagged (:func:`note_accumulation`), if ``old`` is freed before the next
allocation (so the engine held its last reference), the allocation of ``out`` and the free of ``old``
are dropped and ``out`` is renamed ``old`` from then on, unless ``old`` is a view (:func:`can_accumulate_inplace`):
then CUDA too adds out of place. The merges folded are hidden-size gradients of the residual stream in every
layer; the tied embedding's (``lm_head`` and ``embed_tokens`` gradients, V x H each) is not, since the output
layer's gradient is a view.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:  # pragma: no cover
    from vramfit.sim.trace import LiveTracker, Trace


def fold_accumulations(trace: Trace) -> Trace:
    """A copy of ``trace`` whose events allocate gradient merges in place, as on CUDA."""
    if not trace.accum:
        return trace
    events = trace.events
    rename: dict[int, int] = {}
    drop: set[int] = set()  # event indices to drop
    n = len(events)
    for i, ev in enumerate(events):
        if ev < 0 or ev not in trace.accum:
            continue
        old = trace.accum[ev]
        old = rename.get(old, old)
        for j in range(i + 1, n):
            e = events[j]
            if e >= 0:
                break
            if rename.get(~e, ~e) == old and j not in drop:
                drop.update((i, j))
                rename[ev] = old
                break
    if not drop:
        return trace
    out = copy.copy(trace)
    out.events = []
    for i, ev in enumerate(events):
        if i in drop:
            continue
        if ev < 0:
            sid = ~ev
            out.events.append(~rename.get(sid, sid))
        else:
            out.events.append(ev)
    out.marks = _shift_marks(trace.marks, drop)
    out.empty_caches = [i for i, _ in _shift_marks([(i, "") for i in trace.empty_caches], drop)]
    shifted = _shift_marks([(i, f"{kind}:{k}") for i, kind, k in trace.layer_marks], drop)
    out.layer_marks = [(i, tag.split(":")[0], int(tag.split(":")[1])) for i, tag in shifted]
    out.grad_sids = {rename.get(s, s) for s in trace.grad_sids}
    return out


def _shift_marks(marks: list[tuple[int, str]], drop: set[int]) -> list[tuple[int, str]]:
    dropped = sorted(drop)
    import bisect

    return [(i - bisect.bisect_left(dropped, i), label) for i, label in marks]


def can_accumulate_inplace(old: torch.Tensor) -> bool:
    """Whether a CUDA run would add into ``old`` in place: ``can_accumulate_inplace`` (torch v2.11.0/v2.13.0
    torch/csrc/autograd/input_buffer.cpp) asks for a dense tensor whose storage has one user. A view made in backward
    keeps its base alive through its autograd view metadata, so its storage has two and the merge is out of place.
    The largest such view is the output layer's weight gradient (``mm_mat2_backward`` returns ``grad.t().mm(mat1)
    .t()`` for the ``weight.t()`` of F.linear, and TBackward transposes it back): with tied embeddings it waits in
    the buffer for the embedding's gradient, and ``old + new`` holds three V x H tensors at the end of backward.
    Measured (benchmarks/gpu_grid.py on one H100, torch 2.11.0, transformers 5.17.0, 2026-12-05): Llama-3.2-3B full
    bf16 2 x 512 checkpointed peaked at 27,348,395,008 B allocated; the trace with every merge folded, 26,568,262,656 B,
    with this one left out of place 27,350,492,160 B (one 128256 x 3072 bf16 is 788,004,864 B); a CPU run under torch.profiler (torch 2.13.0, no dispatch mode, which would itself force the out-of-
    place path) shows ``aten::add`` for that merge and ``aten::add_`` where the first gradient is no view."""
    from torch._prims_common import is_non_overlapping_and_dense_or_false as dense

    return old._base is None and dense(old)


def node_id() -> int:
    """Sequence number of the autograd node running now (-1 outside backward)."""
    node = torch._C._current_autograd_node()
    return node._sequence_nr() if node is not None else -1


def note_accumulation(self: LiveTracker, args: tuple, out: Any) -> None:
    """Remember ``old + new`` of two gradients from different autograd nodes (an input-buffer merge).

    The autograd engine's ``InputBuffer::accumulate`` adds a second gradient for the same input in place
    when it holds the only reference to the first (torch/csrc/autograd/input_buffer.cpp
    ``can_accumulate_inplace``), but never for tensor subclasses, which fake tensors are; so a fake run
    allocates ``old + new`` where a CUDA run reuses ``old``. :func:`fold_accumulations`
    undoes that in the event log.
    """
    a, b = (args + (None, None))[:2]
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and isinstance(out, torch.Tensor)):
        return
    if a.shape != out.shape or b.shape != out.shape or a.dtype != out.dtype:
        return
    sa, so = self.sid_of(a), self.sid_of(out)
    if sa is None or so is None or sa == so or not can_accumulate_inplace(a):
        return
    if self.trace.nodes.get(sa, -2) != node_id():
        self.trace.accum[so] = sa
