"""The PyTorch CUDA caching allocator's arithmetic, shared by the estimator and the simulator.

Models ``round_size`` and ``get_allocation_size`` of pytorch/pytorch@eb42ad6e
``c10/cuda/CUDACachingAllocator.cpp`` with default settings (no ``roundup_power2_divisions``,
no ``max_split_size_mb``, no expandable segments).
"""

from __future__ import annotations

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
    m = K_MIN_BLOCK_SIZE.value
    return max(m, -(-nbytes // m) * m)


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
