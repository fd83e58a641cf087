"""Replay an allocation trace through a model of PyTorch's CUDA caching allocator.

Fake tensors have no allocator, so ``max_memory_allocated`` / ``max_memory_reserved`` are obtained by
replaying the simulator's event log through the allocator's rules with default settings
(pytorch/pytorch@eb42ad6e ``c10/cuda/CUDACachingAllocator.cpp``, summarised in
``shared/design/cuda-memory-facts.md`` section 1):

- request sizes rounded by ``round_size`` (512 B; :func:`vramfit.estimate.allocator.round_allocation`);
- two pools: small (rounded size <= 1 MiB) and large; ``get_free_block`` takes the best fit (smallest
  cached block that is large enough, lowest address on ties) from the request's pool;
- no fit: a new ``cudaMalloc`` segment of ``get_allocation_size`` (2 MiB small; 20 MiB for 1-10 MiB;
  else rounded up to 2 MiB; :func:`vramfit.estimate.allocator.segment_size`);
- ``should_split``: small pool splits when >= 512 B remain, large pool only when > 1 MiB remains; an
  unsplit block is charged whole to ``allocated_bytes``;
- ``free_block`` merges a freed block with free neighbours in its segment; segments are never returned
  (no ``empty_cache``, no OOM retry: the simulated card is unbounded).

One stream only (the default stream; the autograd engine runs CUDA backward ops on the forward's stream).
Expandable segments, ``max_split_size_mb`` and ``roundup_power2_divisions`` are not modelled.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from vramfit.estimate.allocator import round_allocation, segment_size
from vramfit.estimate.constants import K_MIN_BLOCK_SIZE, K_SMALL_SIZE


class _Block:
    __slots__ = ("seg", "offset", "size", "free", "prev", "next", "small")

    def __init__(self, seg: int, offset: int, size: int, small: bool) -> None:
        self.seg, self.offset, self.size, self.small = seg, offset, size, small
        self.free = True
        self.prev: _Block | None = None
        self.next: _Block | None = None

    def key(self) -> tuple[int, int, int]:
        return (self.size, self.seg, self.offset)


@dataclass
class ReplayStats:
    """Allocator statistics over a replay, in bytes."""

    allocated: int = 0
    reserved: int = 0
    peak_allocated: int = 0
    peak_reserved: int = 0
    segments: int = 0


class CachingAllocatorModel:
    """The caching allocator's block bookkeeping for one device and one stream."""

    def __init__(self) -> None:
        self._free: dict[bool, list[tuple[int, int, int]]] = {True: [], False: []}
        self._blocks: dict[tuple[int, int, int], _Block] = {}
        self.stats = ReplayStats()
        self._next_seg = 0

    def malloc(self, nbytes: int) -> _Block | None:
        size = round_allocation(nbytes)
        if size == 0:
            return None
        small = size <= K_SMALL_SIZE.value
        pool = self._free[small]
        i = bisect.bisect_left(pool, (size, -1, -1))
        if i < len(pool):
            key = pool.pop(i)
            block = self._blocks.pop(key)
        else:
            seg = segment_size(size)
            block = _Block(self._next_seg, 0, seg, small)
            self._next_seg += 1
            self.stats.reserved += seg
            self.stats.segments += 1
            self.stats.peak_reserved = max(self.stats.peak_reserved, self.stats.reserved)
        remaining = block.size - size
        split = remaining >= K_MIN_BLOCK_SIZE.value if small else remaining > K_SMALL_SIZE.value
        if split:
            rest = _Block(block.seg, block.offset + size, remaining, small)
            rest.prev, rest.next = block, block.next
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            self._insert(rest)
        block.free = False
        self.stats.allocated += block.size
        self.stats.peak_allocated = max(self.stats.peak_allocated, self.stats.allocated)
        return block

    def free(self, block: _Block | None) -> None:
        if block is None:
            return
        self.stats.allocated -= block.size
        block.free = True
        for nb in (block.prev, block.next):
            if nb is not None and nb.free:
                self._remove(nb)
                if nb is block.prev:
                    block.offset = nb.offset
                    block.prev = nb.prev
                    if nb.prev is not None:
                        nb.prev.next = block
                else:
                    block.next = nb.next
                    if nb.next is not None:
                        nb.next.prev = block
                block.size += nb.size
        self._insert(block)

    def _insert(self, block: _Block) -> None:
        key = block.key()
        bisect.insort(self._free[block.small], key)
        self._blocks[key] = block

    def _remove(self, block: _Block) -> None:
        key = block.key()
        pool = self._free[block.small]
        i = bisect.bisect_left(pool, key)
        del pool[i]
        del self._blocks[key]


def replay(events: list[int], nbytes: list[int], skip: set[int] | frozenset[int] = frozenset()) -> tuple[
    list[int], list[int], ReplayStats
]:
    """Replay ``events`` (sid = allocation, ``~sid`` = free); return allocated and reserved after each event.

    ``skip``: sids that do not live on the device (host/paged memory).
    """
    alloc = CachingAllocatorModel()
    live: dict[int, _Block | None] = {}
    allocated: list[int] = []
    reserved: list[int] = []
    for ev in events:
        if ev >= 0:
            if ev not in skip:
                live[ev] = alloc.malloc(nbytes[ev])
        else:
            sid = ~ev
            if sid in live:
                alloc.free(live.pop(sid))
        allocated.append(alloc.stats.allocated)
        reserved.append(alloc.stats.reserved)
    return allocated, reserved, alloc.stats
