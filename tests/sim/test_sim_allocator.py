"""The caching-allocator replay: rounding, pools, splitting, merging, reserved segments."""

from __future__ import annotations

from vramfit.sim.cuda_allocator import CachingAllocatorModel, replay

MiB = 2**20


def test_small_requests_round_to_512_and_share_a_2mib_segment():
    a = CachingAllocatorModel()
    blocks = [a.malloc(100) for _ in range(4)]
    assert a.stats.allocated == 4 * 512
    assert a.stats.reserved == 2 * MiB and a.stats.segments == 1
    for b in blocks:
        a.free(b)
    assert a.stats.allocated == 0 and a.stats.reserved == 2 * MiB


def test_mid_size_request_opens_a_20mib_segment_and_large_rounds_to_2mib():
    a = CachingAllocatorModel()
    a.malloc(3 * MiB)
    assert a.stats.reserved == 20 * MiB
    a.malloc(11 * MiB)  # fits in the 17 MiB left of that segment
    assert a.stats.reserved == 20 * MiB
    b = CachingAllocatorModel()
    b.malloc(11 * MiB + 1)
    assert b.stats.reserved == 12 * MiB


def test_freed_block_is_reused_best_fit_and_split():
    a = CachingAllocatorModel()
    x = a.malloc(100 * MiB)
    a.free(x)
    y = a.malloc(50 * MiB)
    z = a.malloc(50 * MiB)
    assert a.stats.reserved == 100 * MiB and a.stats.allocated == 100 * MiB
    a.free(y)
    a.free(z)
    a.malloc(100 * MiB)  # the two halves merged back into one block
    assert a.stats.reserved == 100 * MiB


def test_large_block_not_split_when_remainder_is_under_1mib_is_charged_whole():
    a = CachingAllocatorModel()
    x = a.malloc(20 * MiB)
    a.free(x)
    a.malloc(20 * MiB - 512 * 1024)  # 0.5 MiB left over: whole block handed out
    assert a.stats.allocated == 20 * MiB


def test_zero_byte_allocations_cost_nothing():
    a = CachingAllocatorModel()
    assert a.malloc(0) is None
    assert a.stats.allocated == 0 and a.stats.reserved == 0


def test_replay_skips_host_allocations_and_reports_per_event_counters():
    nbytes = [10 * MiB, 30 * MiB, 4 * MiB]
    events = [0, 1, 2, ~1, ~0]
    allocated, reserved, stats = replay(events, nbytes, skip={1})
    assert allocated[1] == allocated[0]  # sid 1 is host memory
    assert stats.peak_allocated == 10 * MiB + 4 * MiB
    assert reserved[-1] == stats.peak_reserved


def test_a_block_cached_on_one_stream_is_not_reused_by_another():
    # CUDACachingAllocator.cpp: "Once freed, blocks can be re-allocated on the same stream, but not on
    # any other stream": a freed 100 MiB all-gather output on a side stream stays cached there
    a = CachingAllocatorModel()
    a.free(a.malloc(100 * MiB, stream=1))
    a.malloc(100 * MiB)  # the default stream opens a segment of its own
    assert a.stats.reserved == 200 * MiB and a.stats.segments == 2
    a.malloc(60 * MiB, stream=1)  # the side stream reuses (and splits) its cached block
    assert a.stats.reserved == 200 * MiB
    assert a.stats.allocated == 160 * MiB


def test_split_remainder_stays_on_its_stream_and_merges_back():
    a = CachingAllocatorModel()
    x = a.malloc(30 * MiB, stream=2)
    a.free(x)
    y = a.malloc(10 * MiB, stream=2)  # splits: 20 MiB remain cached on stream 2
    a.malloc(20 * MiB)  # stream 0 cannot take that remainder
    assert a.stats.reserved == 50 * MiB
    a.free(y)
    a.malloc(30 * MiB, stream=2)  # 10 + 20 merged back into the whole segment
    assert a.stats.reserved == 50 * MiB and a.stats.allocated == 50 * MiB


def test_replay_puts_the_mapped_sids_on_their_stream():
    # sid 0 (80 MiB) allocated on stream 1 and freed; sid 1 (80 MiB) on the default stream
    events, nbytes = [0, ~0, 1, ~1], [80 * MiB, 80 * MiB]
    assert replay(events, nbytes)[2].peak_reserved == 80 * MiB
    assert replay(events, nbytes, streams={0: 1})[2].peak_reserved == 160 * MiB


def test_empty_cache_returns_only_segments_with_no_block_in_use():
    # torch.cuda.empty_cache() -> release_blocks: a block spanning its whole segment goes back, a segment that
    # holds a live block keeps its free remainder cached
    a = CachingAllocatorModel()
    gone, kept = a.malloc(30 * MiB), a.malloc(40 * MiB)
    a.free(kept)
    kept = a.malloc(20 * MiB)  # splits the 40 MiB segment: 20 MiB in use, 20 MiB free
    a.free(gone)
    assert a.stats.reserved == 70 * MiB
    assert a.empty_cache() == 30 * MiB
    assert (a.stats.reserved, a.stats.segments, a.stats.allocated) == (40 * MiB, 1, 20 * MiB)
    assert a.malloc(20 * MiB) is not None and a.stats.reserved == 40 * MiB  # the remainder is still reusable
