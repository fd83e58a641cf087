"""The PyTorch CUDA caching allocator's arithmetic, shared by the estimator and the simulator.

Models ``round_size`` and ``get_allocation_size`` of pytorch/pytorch@eb42ad6e
``c10/cuda/CUDACachingAllocator.cpp`` with default settings (no ``roundup_power2_divisions``,
no ``max_split_size_mb``, no expandable segments).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from vramfit.estimate.constants import (
    K_LARGE_BUFFER,
    K_MIN_BLOCK_SIZE,
    K_MIN_LARGE_ALLOC,
    K_ROUND_LARGE,
    K_SMALL_BUFFER,
    K_SMALL_SIZE,
)


def round_allocation(nbytes: int) -> int:
    """Bytes the allocator charges for a request (``round_size``): at least 512, a multiple of 512.

    ``max_memory_allocated`` counts these rounded block sizes, not the requested bytes.
    A zero-byte tensor allocates nothing.
    """
    if nbytes <= 0:
        return 0
    return -(-nbytes // _MIN_BLOCK) * _MIN_BLOCK  # >= one block for any nbytes > 0


_MIN_BLOCK = K_MIN_BLOCK_SIZE.value  # read once: round_allocation runs ~100 times per estimate


@dataclass(frozen=True)
class AllocatorConf:
    """The ``PYTORCH_CUDA_ALLOC_CONF`` settings a framework sets and the replay honours (default: none set).

    ``roundup_power2_divisions``: divisions per power-of-two size interval, index ``log2(size) - 20`` clamped to
    0..15 (``CUDAAllocatorConfig::roundup_power2_divisions``); ``()`` = plain 512-byte rounding.
    ``expandable_segments``: one growable segment per pool, mapped in pages (:class:`CachingAllocatorModel`)."""

    expandable_segments: bool = False
    roundup_power2_divisions: tuple[int, ...] = ()


def parse_alloc_conf(text: str) -> AllocatorConf:
    """``PYTORCH_CUDA_ALLOC_CONF`` as torch parses the two keys modelled (pytorch/pytorch v2.5.1
    c10/cuda/CUDAAllocatorConfig.cpp ``parseArgs``, ``parseRoundUpPower2Divisions``): ``[a:n,...,>:m]`` fills the
    intervals below the first ``a`` (in MiB) with its ``n``, sets interval ``log2(a)`` to ``n``, and ``>:m`` fills
    from the last ``a``'s interval to the end (overwriting it); intervals not named stay 0."""
    expandable, div = False, [0] * 16
    for key, _, value in (part.partition(":") for part in re.split(r",(?![^\[]*\])", text) if part):
        if key == "expandable_segments":
            expandable = value == "True"
        elif key == "roundup_power2_divisions":
            first, last = True, 0
            for item in value.strip("[]").split(","):
                size, _, n = item.partition(":")
                if size == ">":
                    div[last:] = [int(n)] * (16 - last)
                    continue
                index = min(int(size).bit_length() - 1, 15)
                if first:
                    div[:index] = [int(n)] * index
                    first = False
                div[index], last = int(n), index
    return AllocatorConf(expandable, tuple(div) if any(div) else ())


def round_request(nbytes: int, conf: AllocatorConf | None = None) -> int:
    """``round_size`` under ``conf`` (pytorch/pytorch v2.5.1 c10/cuda/CUDACachingAllocator.cpp): with more than one
    division for the size's interval and a size above 512 x divisions, up to the next of ``divisions`` equal steps
    between the powers of two around it (``roundup_power2_next_division``); else :func:`round_allocation`."""
    if conf is None or not conf.roundup_power2_divisions or nbytes <= 0:
        return round_allocation(nbytes)
    divisions = conf.roundup_power2_divisions[min(max(nbytes.bit_length() - 1 - 20, 0), 15)]
    if divisions <= 1 or nbytes <= _MIN_BLOCK * divisions or nbytes & (nbytes - 1) == 0:
        return round_allocation(nbytes)
    step = (1 << (nbytes.bit_length() - 1)) // divisions
    return -(-nbytes // step) * step


def plain_peak(events: list[int] | tuple[int, ...]) -> int:
    """The allocated high-water mark of ``events`` (:func:`transient_reserved`'s form) at 512-byte rounding: what the
    estimator's own allocated figure counts, whatever the placement."""
    sizes, live, peak = [], 0, 0
    for ev in events:
        if ev >= 0:
            sizes.append(round_allocation(ev))
            live += sizes[-1]
            peak = max(peak, live)
        else:
            live -= sizes[-ev - 1]
    return peak


def segment_size(nbytes: int) -> int:
    """Size of the ``cudaMalloc`` segment opened for a request that no cached block can serve
    (``get_allocation_size``): 2 MiB for small requests, 20 MiB for 1-10 MiB, else rounded up to 2 MiB."""
    size = round_allocation(nbytes)
    if size == 0:
        return 0
    if size <= K_SMALL_SIZE.value:
        return K_SMALL_BUFFER.value
    if size < K_MIN_LARGE_ALLOC.value:
        return K_LARGE_BUFFER.value
    r = K_ROUND_LARGE.value
    return -(-size // r) * r


def rounded_sum(tensors: list[tuple[int, int]] | tuple[tuple[int, int], ...]) -> int:
    """Allocated bytes of tensors given as (bytes, count) pairs."""
    return sum(count * round_allocation(size) for size, count in tensors)


def reserved_for_tensors(tensors: list[tuple[int, int]] | tuple[tuple[int, int], ...]) -> int:
    """Reserved bytes when every large tensor opens its own segment and small ones share 2 MiB blocks.

    Models the allocator at model load: parameters are allocated one after another and never freed,
    so each large one (>= 10 MiB) sits in a segment of its own rounded to 2 MiB; 1-10 MiB requests
    are packed into shared 20 MiB segments and small ones (<= 1 MiB) into 2 MiB blocks.
    Tensors are given as (bytes, count) pairs.
    """
    small = 0
    large = 0
    for size, count in tensors:
        r = round_allocation(size)
        if r <= K_SMALL_SIZE.value:
            small += r * count
        elif r < K_MIN_LARGE_ALLOC.value:
            large += r * count  # packed into shared 20 MiB segments
        else:
            large += segment_size(r) * count
    small_segments = -(-small // K_SMALL_BUFFER.value) * K_SMALL_BUFFER.value if small else 0
    return large + small_segments


def transient_reserved(events: list[int] | tuple[int, ...], conf: AllocatorConf | None = None) -> tuple[int, int]:
    """(peak allocated, reserved) of a sequence of transient tensors replayed through the caching
    allocator's segment rules (:class:`vramfit.sim.cuda_allocator.CachingAllocatorModel`, the
    simulator's replay of pytorch/pytorch@eb42ad6e ``c10/cuda/CUDACachingAllocator.cpp``).

    ``events``: ``n >= 0`` allocates a tensor of ``n`` bytes; ``-k`` frees the ``k``-th allocation
    (1-based). The rules that make reserved exceed allocated here: a freed block is cached, never
    returned to the driver without ``empty_cache``; best fit from the request's pool
    (``get_free_block``); a smaller request splits a cached block when more than 1 MiB would remain
    (``should_split``, ``max_split_size`` unlimited by default); a larger request than any cached
    block opens a new segment rounded to 2 MiB (``get_allocation_size``, kRoundLarge); expandable
    segments are off by default (``torch-docs`` ``expandable_segments``). Reserved only grows.
    ``conf``: the framework's ``PYTORCH_CUDA_ALLOC_CONF`` (:class:`AllocatorConf`), None for torch's defaults.
    """
    return _replay(tuple(events), conf)[:2]


def transient_required(events: list[int] | tuple[int, ...], conf: AllocatorConf | None = None) -> int:
    """The peak bytes of the segments holding a live block in :func:`transient_reserved`'s replay: what the
    transients need on a card without headroom, where ``malloc`` releases every wholly free cached segment
    (``release_cached_blocks``) before it fails (:class:`vramfit.sim.cuda_allocator.CachingAllocatorModel`)."""
    return _replay(tuple(events), conf)[2]


@lru_cache(maxsize=4096)  # a pure function of the events: the planner and the web repeat the same steps
def _replay(events: tuple[int, ...], conf: AllocatorConf | None = None) -> tuple[int, int, int]:
    from vramfit.sim.cuda_allocator import CachingAllocatorModel  # light: no torch

    model = CachingAllocatorModel(conf)
    run_events(model, events)
    return model.stats.peak_allocated, model.stats.peak_reserved, model.stats.peak_required


def run_events(model, events: tuple[int, ...] | list[int], each=None) -> None:
    """Run :func:`transient_reserved`-style ``events`` on ``model`` (a ``CachingAllocatorModel``, possibly
    holding blocks already: estimate/wrap_step.py replays the step after the FSDP wrap); ``each()`` after every event."""
    blocks = []
    for ev in events:
        if ev >= 0:
            blocks.append(model.malloc(ev))  # a zero-byte tensor allocates nothing (None)
        else:
            model.free(blocks[-ev - 1])
            blocks[-ev - 1] = None
        if each is not None:
            each()


def largest_weight(spec) -> int:
    """Elements of the model's largest weight: a block linear's or the (un)embedding's."""
    return max([x.in_features * x.out_features for x in spec.block_linears]
               + [spec.lm_head_params or spec.embedding_params])
