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
