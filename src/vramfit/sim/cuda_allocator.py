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
- ``free_block`` merges a freed block with free neighbours in its segment; segments are returned only by
  an explicit :meth:`CachingAllocatorModel.empty_cache` (no OOM retry: the simulated card is unbounded).
  What a card without headroom needs is tracked beside it: ``ReplayStats.required``, the bytes of the segments
  holding at least one live block. ``malloc``, when ``cudaMalloc`` fails, calls ``release_cached_blocks``
  (every segment left wholly free goes back to the driver) and retries, so only those segments are needed.

Streams: a block belongs to the stream it was allocated on (``Block::stream``); the file's header
comment: "Once freed, blocks can be re-allocated on the same stream, but not on any other stream"
(``get_free_block`` searches the pool ordered by ``(stream, size, address)`` from the request's stream
and takes no block of another), so each stream keeps a cached pool of its own. ``malloc(nbytes, stream)``; stream 0 is the default stream (the autograd engine runs CUDA
backward ops on the forward's stream). ``record_stream``'s deferred free (the block returns to its
stream's pool once the recorded streams' events complete) is not modelled: a free takes effect at once.
``max_split_size_mb`` is not modelled; ``expandable_segments`` and ``roundup_power2_divisions`` only where a framework
sets them (``CachingAllocatorModel(conf)``, :class:`vramfit.estimate.allocator.AllocatorConf`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from vramfit.estimate.allocator import AllocatorConf, round_request, segment_size
from vramfit.estimate.constants import K_LARGE_BUFFER, K_MIN_BLOCK_SIZE, K_SMALL_BUFFER, K_SMALL_SIZE


class _Block:
    __slots__ = ("seg", "offset", "size", "free", "prev", "next", "small", "stream")

    def __init__(self, seg: int, offset: int, size: int, small: bool, stream: int = 0) -> None:
        self.seg, self.offset, self.size, self.small, self.stream = seg, offset, size, small, stream
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
    required: int = 0  # bytes of segments holding a live block: all a full card keeps after an OOM retry
    peak_required: int = 0


class CachingAllocatorModel:
    """The caching allocator's block bookkeeping for one device: a small and a large pool per stream."""

    def __init__(self, conf: AllocatorConf | None = None) -> None:
        self._free: dict[tuple[int, bool], list[tuple[int, int, int]]] = {}
        self._blocks: dict[tuple[int, int, int], _Block] = {}
        self.stats = ReplayStats()
        self._next_seg = 0
        self.conf = conf
        self._tail: dict[tuple[int, bool], _Block] = {}  # expandable segments: each pool's last mapped block
        self._live: dict[int, int] = {}  # segment -> live blocks in it
        self._seg_size: dict[int, int] = {}  # segment -> bytes

    def malloc(self, nbytes: int, stream: int = 0) -> _Block | None:
        size = round_request(nbytes, self.conf)
        if size == 0:
            return None
        small = size <= K_SMALL_SIZE.value
        pool = self._free.setdefault((stream, small), [])
        i = bisect.bisect_left(pool, (size, -1, -1))
        if self.conf is not None and self.conf.expandable_segments:
            block = self._expandable_block(pool, i, size, stream, small)
        elif i < len(pool):
            key = pool.pop(i)
            block = self._blocks.pop(key)
        else:
            seg = segment_size(size)
            block = _Block(self._next_seg, 0, seg, small, stream)
            self._seg_size[self._next_seg] = seg
            self._next_seg += 1
            self.stats.reserved += seg
            self.stats.segments += 1
            self.stats.peak_reserved = max(self.stats.peak_reserved, self.stats.reserved)
        remaining = block.size - size
        expandable = self.conf is not None and self.conf.expandable_segments  # should_split: any 512 B rest then
        split = remaining >= K_MIN_BLOCK_SIZE.value if small or expandable else remaining > K_SMALL_SIZE.value
        if split:
            rest = _Block(block.seg, block.offset + size, remaining, small, block.stream)
            rest.prev, rest.next = block, block.next
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            self._insert(rest)
            if self._tail.get((stream, small)) is block:
                self._tail[(stream, small)] = rest
        block.free = False
        self.stats.allocated += block.size
        self.stats.peak_allocated = max(self.stats.peak_allocated, self.stats.allocated)
        self._use(block.seg, 1)
        return block

    def _use(self, seg: int, n: int) -> None:
        """Count ``n`` (+1 / -1) live blocks in ``seg`` and keep ``required`` (module docstring). Expandable
        segments (unmapping free pages on release) are not modelled: there required is reserved."""
        if self.conf is not None and self.conf.expandable_segments:
            self.stats.required = self.stats.reserved
        else:
            live = self._live.get(seg, 0)
            self._live[seg] = live + n
            if (live == 0) != (live + n == 0):  # the segment's first live block came or its last one went
                self.stats.required += n * self._seg_size[seg]
        self.stats.peak_required = max(self.stats.peak_required, self.stats.required)

    def segments(self) -> set[int]:
        """The segments opened so far (none returned: only :meth:`empty_cache` returns them)."""
        return set(self._seg_size)

    def wholly_free_bytes(self, segs: set[int]) -> int:
        """Bytes of the segments among ``segs`` that hold no live block (what ``release_cached_blocks`` frees)."""
        return sum(self._seg_size[s] for s in segs if not self._live.get(s, 0))

    def free(self, block: _Block | None) -> None:
        if block is None:
            return
        self.stats.allocated -= block.size
        self._use(block.seg, -1)
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
                    if self._tail.get((block.stream, block.small)) is nb:
                        self._tail[(block.stream, block.small)] = block
                block.size += nb.size
        self._insert(block)

    def _expandable_block(self, pool: list, i: int, size: int, stream: int, small: bool) -> _Block:
        """``expandable_segments:True`` (pytorch/pytorch v2.5.1 c10/cuda/CUDACachingAllocator.cpp): one segment per
        pool and stream, mapped in pages of kSmallBuffer (small pool) or kLargeBuffer (large pool). ``get_free_block``
        takes the best fit but counts the free block before the unmapped end at the size it could grow to, so it
        takes that one last; with no fit, ``try_allocate_expandable_block`` maps pages after the last block, merged
        with it when it is free (``find_expandable_block``). Reserved is the mapped bytes."""
        tail = self._tail.get((stream, small))
        fits = [k for k in pool[i:i + 2] if tail is None or k != tail.key()]
        if fits:
            pool.remove(fits[0])
            return self._blocks.pop(fits[0])
        page = K_SMALL_BUFFER.value if small else K_LARGE_BUFFER.value
        if tail is not None and tail.free:
            self._remove(tail)
            grow = -(-max(0, size - tail.size) // page) * page
            tail.size += grow
        else:
            grow = -(-size // page) * page
            block = _Block(0 if tail is None else tail.seg, 0 if tail is None else tail.offset + tail.size, grow,
                           small, stream)
            if tail is None:
                block.seg = self._next_seg
                self._next_seg += 1
                self.stats.segments += 1
            else:
                tail.next, block.prev = block, tail
            tail = self._tail[(stream, small)] = block
        self.stats.reserved += grow
        self.stats.peak_reserved = max(self.stats.peak_reserved, self.stats.reserved)
        return tail

    def empty_cache(self) -> int:
        """``torch.cuda.empty_cache()``: every segment none of whose blocks is in use goes back to the driver
        (pytorch/pytorch@eb42ad6e c10/cuda/CUDACachingAllocator.cpp ``release_cached_blocks`` ->
        ``release_blocks``: a block is released when ``!block->prev && !block->next``, i.e. it spans its whole,
        merged segment); a segment holding a live block keeps its free remainder cached. Expandable segments
        (unmapping pages) are not modelled. Returns the bytes released."""
        if self.conf is not None and self.conf.expandable_segments:
            return 0
        whole = [b for b in self._blocks.values() if b.prev is None and b.next is None]
        for block in whole:
            self._remove(block)
            self.stats.reserved -= block.size
            self.stats.segments -= 1
        return sum(b.size for b in whole)

    def clone(self) -> CachingAllocatorModel:
        """A copy to replay on (the estimator replays each step after one cached wrap). Only segments that hold
        a free block are copied: a fully allocated one is never searched or merged into, and its blocks belong
        to whoever allocated them; the statistics are copied whole."""
        new = CachingAllocatorModel(self.conf)
        new.stats = ReplayStats(**vars(self.stats))
        new._next_seg = self._next_seg
        new._live, new._seg_size = dict(self._live), dict(self._seg_size)
        heads = {}
        for block in self._blocks.values():
            while block.prev is not None:
                block = block.prev
            heads[(block.seg, block.stream, block.small)] = block
        for head in heads.values():
            prev = None
            while head is not None:
                copy = _Block(head.seg, head.offset, head.size, head.small, head.stream)
                copy.free, copy.prev = head.free, prev
                if prev is not None:
                    prev.next = copy
                if copy.free:
                    new._insert(copy)
                if self._tail.get((head.stream, head.small)) is head:
                    new._tail[(head.stream, head.small)] = copy
                prev, head = copy, head.next
        return new

    def _insert(self, block: _Block) -> None:
        key = block.key()
        bisect.insort(self._free.setdefault((block.stream, block.small), []), key)
        self._blocks[key] = block

    def _remove(self, block: _Block) -> None:
        key = block.key()
        pool = self._free[(block.stream, block.small)]
        i = bisect.bisect_left(pool, key)
        del pool[i]
        del self._blocks[key]


def replay(events: list[int], nbytes: list[int], skip: set[int] | frozenset[int] = frozenset(),
           streams: dict[int, int] | None = None,
           empty_caches: list[int] | tuple[int, ...] = ()) -> tuple[list[int], list[int], ReplayStats]:
    """Replay ``events`` (sid = allocation, ``~sid`` = free); return allocated and reserved after each event.

    ``skip``: sids that do not live on the device (host/paged memory). ``streams``: the stream each
    sid is allocated on, for sids not on the default stream 0 (e.g. an engine's all-gather outputs).
    ``empty_caches``: event indices before which ``torch.cuda.empty_cache()`` ran (sim/trace.py
    ``Trace.empty_caches``): :meth:`CachingAllocatorModel.empty_cache` there.
    """
    streams = streams or {}
    empty = set(empty_caches)
    alloc = CachingAllocatorModel()
    live: dict[int, _Block | None] = {}
    allocated: list[int] = []
    reserved: list[int] = []
    for i, ev in enumerate(events):
        if i in empty:
            alloc.empty_cache()
        if ev >= 0:
            if ev not in skip:
                live[ev] = alloc.malloc(nbytes[ev], streams.get(ev, 0))
        else:
            sid = ~ev
            if sid in live:
                alloc.free(live.pop(sid))
        allocated.append(alloc.stats.allocated)
        reserved.append(alloc.stats.reserved)
    return allocated, reserved, alloc.stats
