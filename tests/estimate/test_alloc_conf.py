"""A framework's PYTORCH_CUDA_ALLOC_CONF in the allocator model (issue 13): Unsloth 2024.12 sets
``expandable_segments:True,roundup_power2_divisions:[64:128,256:64,>:32]`` on import (unsloth@0e0d8fc
unsloth/__init__.py)."""

from vramfit.estimate.allocator import (
    AllocatorConf,
    parse_alloc_conf,
    plain_peak,
    round_request,
    transient_reserved,
)
from vramfit.sim.cuda_allocator import CachingAllocatorModel

MiB = 2**20
UNSLOTH = parse_alloc_conf("expandable_segments:True,roundup_power2_divisions:[64:128,256:64,>:32]")


def test_the_divisions_parse_as_torch_fills_its_sixteen_intervals():
    # 64 MiB is interval 6: it and every interval below get 128; 256 MiB is interval 8 and gets 64, but ">:32" fills
    # from the last named interval (8) to the end, overwriting it; interval 7 (128-256 MiB) is never named: 0
    assert UNSLOTH == AllocatorConf(True, (128,) * 7 + (0,) + (32,) * 8)
    assert parse_alloc_conf("expandable_segments:False") == AllocatorConf()
    assert parse_alloc_conf("roundup_power2_divisions:[>:4]").roundup_power2_divisions == (4,) * 16


def test_requests_round_up_to_the_next_division_of_their_power_of_two():
    assert round_request(300 * MiB + 1, UNSLOTH) == 304 * MiB  # 256 MiB / 32 = 8 MiB steps
    assert round_request(5 * 2**30 + 1, UNSLOTH) == 5 * 2**30 + 128 * MiB  # 4 GiB / 32
    assert round_request(100 * MiB + 1, UNSLOTH) == 100 * MiB + MiB // 2  # 64 MiB / 128
    assert round_request(200 * MiB + 1, UNSLOTH) == 200 * MiB + 512  # interval 7 has no divisions: 512 B
    assert round_request(2**30, UNSLOTH) == 2**30  # a power of two stays
    assert round_request(300 * MiB + 1) == 300 * MiB + 512  # torch's defaults


def test_an_expandable_segment_grows_its_free_end_in_20_mib_pages():
    a = CachingAllocatorModel(UNSLOTH)
    x = a.malloc(100 * MiB)
    a.free(x)
    a.malloc(150 * MiB)  # the free 100 MiB at the end is extended by 60 MiB (50 MiB in 20 MiB pages)
    assert (a.stats.reserved, a.stats.segments) == (160 * MiB, 1)
    default = CachingAllocatorModel()
    default.free(default.malloc(100 * MiB))
    default.malloc(150 * MiB)  # no cached block fits: a second segment
    assert (default.stats.reserved, default.stats.segments) == (250 * MiB, 2)


def test_best_fit_takes_the_free_end_of_the_segment_last():
    a = CachingAllocatorModel(UNSLOTH)
    first, mid, last = a.malloc(100 * MiB), a.malloc(40 * MiB), a.malloc(60 * MiB)
    a.free(first)
    a.free(last)  # free: 100 MiB at the start, 60 MiB before the unmapped end
    block = a.malloc(60 * MiB)  # the 60 MiB end fits exactly but could grow: the 100 MiB block is split instead
    assert (block.offset, block.size) == (0, 60 * MiB)
    assert a.malloc(60 * MiB + 1).offset == 140 * MiB and a.stats.reserved == 220 * MiB  # the end grows by 20 MiB
    assert mid.offset == 100 * MiB


def test_the_replay_reports_the_conf_rounding_and_the_plain_peak_without_it():
    events = [300 * MiB + 1, -1, 100 * MiB]
    assert plain_peak(events) == 300 * MiB + 512
    assert transient_reserved(events, UNSLOTH) == (304 * MiB, 320 * MiB)  # 304 MiB mapped in 20 MiB pages
    assert transient_reserved(events) == (300 * MiB + 512, 302 * MiB)  # one segment, 2 MiB rounding


def test_a_clone_keeps_the_free_end_of_the_segment():
    a = CachingAllocatorModel(UNSLOTH)
    a.malloc(40 * MiB)
    a.free(a.malloc(60 * MiB))
    b = a.clone()
    b.malloc(70 * MiB)  # the free 60 MiB end grows by one 20 MiB page, as it would have in the original
    assert b.stats.reserved == 120 * MiB and a.stats.reserved == 100 * MiB
