"""The FSDP1 wrap residue and the training step in one caching allocator.

FSDP1 wrapping a model that was loaded on the CPU leaves cached blocks on the default stream (the moved
originals, the flattened parameters, ``sync_module_states``' broadcast buckets: estimate/fsdp_reserved.py,
mechanism 2), and the training loop does not release them: neither AnswerDotAI/fsdp_qlora@4cd6923 train.py
(its ``torch.cuda.empty_cache()``, l. 634, runs before the wrap; ``reset_peak_memory_stats``, l. 809, after it
keeps the residue in the figure) nor the HF Trainer, which empties the cache only every
``torch_empty_cache_steps`` steps (transformers TrainingArguments, default None: never). The step's tensors are served from that residue only where a cached block is large enough:
``get_free_block`` takes the smallest cached block of the request's pool and stream that fits, and a block
never grows past its own segment (pytorch/pytorch@eb42ad6e ``c10/cuda/CUDACachingAllocator.cpp``:
``try_merge_blocks`` joins neighbours inside one segment only). So the residue is a floor only while the
step's tensors are small enough to live in it; once they are larger (a bigger micro-batch or longer
sequence: block inputs, the no-grad MLP working set, the loss's fp32 logits), they open segments of their
own beside it, and the part of the residue no step tensor fits in stays reserved on top.

This module replays both in one allocator (the simulator's :class:`vramfit.sim.cuda_allocator.CachingAllocatorModel`)
and returns the residue the step leaves unused: the residue less what the step no longer reserves for itself
(its own reserved bytes minus the segments it opens after the wrap). The step's own reserved bytes are counted as
the estimate counts them (:func:`step_alone`), so the term added to the estimate's figure never counts the
step's fragmentation twice, and the sum grows with the micro-batch (checked over 648 HF FSDP scenarios: the
device figure falls from one micro-batch to the next in 3 of them, by at most 16 MiB, at 256 tokens).

The step's program (:func:`step_program`) is the sequence of default-stream tensors the step model already
knows, in the order the step makes them:

- forward, per decoder block under full checkpointing: the block's tensors as its no-grad forward makes them
  (the saved tensors of ``Step.saved`` in order, each freed once the next two exist: under ``no_grad`` an op's
  output dies with its consumer), the no-grad MLP working set
  (:func:`vramfit.estimate.transients.nograd_mlp_bytes`) and the block's output, which the next block's
  checkpoint keeps until that block's backward (torch/utils/checkpoint.py ``CheckpointFunction.forward``:
  ``ctx.save_for_backward(*tensor_inputs)``); any other policy is replayed as keeping every block's saved
  tensors (at most what it keeps: the more the step holds, the more of the residue it reuses, so the term
  it yields is then a lower bound);
- the loss and the other transients of :func:`vramfit.estimate.transients.step_transients`;
- backward, top block first: the block's recomputed saved tensors (``Step.saved``) and its backward working
  set (``Step.block_transient``), freed with the block's checkpoint once its backward has run.
"""

from __future__ import annotations

from functools import lru_cache

from vramfit.scenario import Checkpointing


class _Program:
    """Events in :func:`vramfit.estimate.allocator.transient_reserved`'s form, built with handles."""

    def __init__(self) -> None:
        self.events: list[int] = []
        self.count = 0  # allocations so far (handles are 1-based)

    def alloc(self, n: int, cut: int = 0) -> list[int]:
        """Allocate ``n`` bytes as tensors of at most ``cut`` bytes (0: one tensor); their handles. The caller frees
        them together, so a run longer than ``REPLAY_RUN_PIECES`` is made coarse as the replay would replay it
        (:func:`vramfit.estimate.allocator.cut_pieces`): a working set of gigabytes cut at one block input of a
        handful of tokens is not a program of millions of events."""
        from vramfit.estimate.allocator import cut_pieces

        sizes = cut_pieces(n, cut)
        self.events.extend(sizes)
        self.count += len(sizes)
        return list(range(self.count - len(sizes) + 1, self.count + 1))

    def free(self, handles: list[int]) -> None:
        self.events.extend(-k for k in handles)

    def extend(self, events: list[int]) -> None:
        """Append another program's events, its handles shifted past this one's."""
        base = self.count
        for ev in events:
            self.events.append(ev if ev >= 0 else ev - base)
            self.count += ev >= 0


def step_program(r, transients: list[int] | None = None) -> tuple[int, ...]:
    """The step's default-stream tensors in order (module docstring), as allocator events
    (``r``: a :class:`vramfit.estimate.step.Step`; ``transients``: its ``step_transients`` where the caller has them)."""
    from vramfit.estimate.allocator import coarsen, round_allocation
    from vramfit.estimate.block_extras import block_input_bytes
    from vramfit.estimate.constants import K_SMALL_SIZE
    from vramfit.estimate.transients import nograd_mlp_bytes, step_transients

    sc, spec = r.sc, r.spec
    p = _Program()
    layers = spec.num_hidden_layers
    full = sc.gradient_checkpointing is Checkpointing.FULL
    block_in = block_input_bytes(spec, sc, r.profile)
    mlp = nograd_mlp_bytes(r)
    # the small pool's tensors (<= 1 MiB) never take a block of the large pool the residue is in (get_pool)
    kept = [round_allocation(n) for n in r.saved.items.values() if n > K_SMALL_SIZE.value]
    held: list[list[int]] = []
    x = p.alloc(block_in)  # the embedding output: the lowest block's input
    for _ in range(layers):
        if full:
            _nograd_block(p, kept)
            work = p.alloc((3 if spec.gated_mlp else 2) * mlp, mlp)
            out = p.alloc(block_in)
            p.free(work)
            held.append(x)
            x = out
        else:
            held.append([h for n in kept for h in p.alloc(n)])
    # the loss, cut at one logits block: its runs bounded as alloc's
    p.extend(coarsen(step_transients(r) if transients is None else transients))
    p.free(x)
    for handles in reversed(held):
        if full:  # the recompute, then the block's backward working set
            recomputed = [h for n in kept for h in p.alloc(n)]
            p.free(p.alloc(r.block_transient, block_in))
            p.free(recomputed)
        else:
            p.free(p.alloc(r.block_transient, block_in))
        p.free(handles)
    return tuple(p.events)


def _nograd_block(p: _Program, tensors: list[int]) -> None:
    """A block's forward without grad: each op output dies once its consumer's output exists."""
    live: list[list[int]] = []
    for n in tensors:
        live.append(p.alloc(n))
        if len(live) > 2:
            p.free(live.pop(0))
    for handles in live:
        p.free(handles)


@lru_cache(maxsize=256)
def unreused_residue(units: tuple[tuple[int, ...], ...], group: int, elem: int, gathered: tuple[int, ...],
                     shards_to_host: bool, sync_bucket: int, release: bool, program: tuple[int, ...],
                     alone: int = -1) -> int:
    """Bytes of the wrap residue (cached, free blocks after :func:`vramfit.estimate.fsdp_reserved.replay_wrap`)
    that the step's ``program`` leaves unused: the residue less what the step no longer has to reserve for
    itself, i.e. its reserved bytes on its own (``alone``; -1: the program's own replay) minus the segments it
    opens after the wrap."""
    from vramfit.sim.cuda_allocator import CachingAllocatorModel  # light: no torch

    a = _wrapped(units, group, elem, gathered, shards_to_host, sync_bucket, release).clone()
    residue, before = a.stats.reserved - a.stats.allocated, a.stats.reserved
    # the step's own high point from here: after an empty_cache (``release``) the peak still holds the wrap's
    # pre-release one (torch keeps max_memory_reserved), which is not a segment the step opens
    a.stats.peak_reserved = a.stats.reserved
    after_wrap = _replay(a, program)[1]
    if alone < 0:
        alone = _replay(CachingAllocatorModel(), program)[1]
    return max(0, residue - (alone - (after_wrap - before)))


def _wrapped(units: tuple[tuple[int, ...], ...], group: int, elem: int, gathered: tuple[int, ...],
             shards_to_host: bool, sync_bucket: int, release: bool = False):
    """The allocator as the wrap leaves it (built once per model and sharding: estimate/fsdp_reserved.py
    ``wrapped``; callers replay on a copy)."""
    from vramfit.estimate.fsdp_reserved import wrapped

    return wrapped(units, group, elem, gathered, shards_to_host, sync_bucket, release)[0]


def step_alone(r, program: tuple[int, ...], transients: list[int] | None = None) -> int:
    """The step's reserved bytes on its own as the estimate counts them: the program's allocated high point
    plus the segments the step's transients leave cached (``reserved.reserved_bytes``' transient term, whole
    2 MiB units). Used as ``alone`` in :func:`unreused_residue`, so that the residue term and the figure it is
    added to count the step's own fragmentation once, the same way (and the sum grows with the micro-batch)."""
    from vramfit.estimate.allocator import transient_reserved
    from vramfit.estimate.constants import K_ROUND_LARGE
    from vramfit.estimate.transients import step_transients

    peak, reserved = transient_reserved(step_transients(r) if transients is None else transients)
    unit = K_ROUND_LARGE.value
    return allocated_peak(program) + (reserved - peak) // unit * unit


def allocated_peak(program: tuple[int, ...]) -> int:
    """The program's allocated high point on its own: its live tensors at their ``round_size`` (a block the
    allocator hands out unsplit would add under 1 MiB)."""
    from vramfit.estimate.allocator import plain_peak

    return plain_peak(program)


def _replay(a, events: tuple[int, ...]) -> tuple[int, int]:
    """Run ``events`` on allocator ``a``; its peak allocated and peak reserved bytes."""
    from vramfit.estimate.allocator import run_events

    run_events(a, events)
    return a.stats.peak_allocated, a.stats.peak_reserved


__all__ = ["allocated_peak", "step_alone", "step_program", "unreused_residue"]
