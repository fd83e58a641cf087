"""The caching allocator's arithmetic (pytorch/pytorch@eb42ad6e c10/cuda/CUDACachingAllocator.cpp)."""

import pytest

from vramfit.estimate.allocator import reserved_for_tensors, round_allocation, rounded_sum, segment_size

MiB = 1024**2


@pytest.mark.parametrize(("request_bytes", "charged"), [(0, 0), (-5, 0), (1, 512), (512, 512), (513, 1024),
                                                         (4096 * 4096 * 2, 4096 * 4096 * 2), (10**9 + 1, 1_000_000_512)])
def test_round_allocation_is_512_byte_blocks(request_bytes, charged):
    assert round_allocation(request_bytes) == charged


@pytest.mark.parametrize(("request_bytes", "segment"), [
    (0, 0),
    (1, 2 * MiB),  # small requests share 2 MiB blocks (kSmallBuffer)
    (1 * MiB, 2 * MiB),  # kSmallSize is still small
    (1 * MiB + 1, 20 * MiB),  # 1-10 MiB: a 20 MiB segment (kLargeBuffer)
    (10 * MiB - 512, 20 * MiB),
    (10 * MiB, 10 * MiB),  # >= kMinLargeAlloc: rounded up to 2 MiB (kRoundLarge)
    (11 * MiB + 1, 12 * MiB),
    (4096 * 128256 * 2, 1002 * MiB),  # Llama 3 embeddings in bf16: 1002 MiB exactly
])
def test_segment_size_follows_get_allocation_size(request_bytes, segment):
    assert segment_size(request_bytes) == segment


def test_rounded_sum_counts_each_tensor_rounded():
    assert rounded_sum([(1000, 3), (512, 2)]) == 3 * 1024 + 2 * 512
    assert rounded_sum(()) == 0


def test_reserved_for_tensors_packs_small_and_rounds_large():
    assert reserved_for_tensors([(100, 10)]) == 2 * MiB  # ten 512-byte blocks in one 2 MiB segment
    assert reserved_for_tensors([(1 * MiB, 3)]) == 4 * MiB  # 3 MiB of small blocks -> two 2 MiB segments
    assert reserved_for_tensors([(5 * MiB, 2)]) == 10 * MiB  # 1-10 MiB requests packed, no own segment
    assert reserved_for_tensors([(30 * MiB + 1, 1)]) == 32 * MiB  # own segment rounded to 2 MiB
    # a Llama-3-8B layer's seven bf16 linears (all >= 10 MiB, multiples of 2 MiB): no slack
    llama_layer = [(4096 * 4096 * 2, 2), (4096 * 1024 * 2, 2), (4096 * 14336 * 2, 3)]
    assert reserved_for_tensors(llama_layer) == rounded_sum(llama_layer) == (2 * 32 + 2 * 8 + 3 * 112) * MiB
