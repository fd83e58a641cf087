"""ZeRO-1/2's fit figure counts the segments that hold a live block when the most do (estimate/zero2_step.py
``_zero2_replay``, the simulator's ``required``): a card without the room releases every wholly free segment before
an allocation fails (CUDACachingAllocator.cpp ``release_cached_blocks``). Only the flatten's originals and the
reduction stream's came off before, so a step tensor's freed segment stayed counted: Llama-3.1-8B full under ZeRO-2
needed 37.60 GiB per GPU on 7 GPUs and 38.54 GiB on 8 (a review found 7 A100-40GB fitting and 8 not)."""

import pytest

from vramfit import estimate
from vramfit.estimate import zero2_step

RUN = {"model": "meta-llama/Llama-3.1-8B", "method": "full", "parallelism": "zero2", "gradient_checkpointing": "full",
       "seq_len": 2048}


def _required(**keys) -> int:
    return estimate({**RUN, **keys}).peak.required_bytes


def test_more_gpus_never_need_more():
    figures = [_required(num_gpus=g) for g in range(2, 9)]
    assert figures == sorted(figures, reverse=True)
    assert _required(num_gpus=8) < _required(num_gpus=7) < int(0.95 * 40 * 2**30) + 2**30


@pytest.mark.parametrize("key, values", [("micro_batch_size", [1, 2, 3, 4, 6, 8]), ("seq_len", [1024, 2048, 4096, 8192])])
def test_the_figure_grows_with_the_step(key, values):
    figures = [_required(num_gpus=8, **{key: v}) for v in values]
    assert figures == sorted(figures)


def test_a_fused_loss_needs_no_more():
    assert _required(num_gpus=8, seq_len=4096, loss="fused") <= _required(num_gpus=8, seq_len=4096)


def test_the_replay_releases_the_steps_own_free_segments():
    """A 400 MiB step tensor freed, then a 500 MiB one: the first's segment is wholly free when the second opens its
    own, so a card without the room releases it (100 MiB kept live throughout)."""
    MiB = 2**20
    reserved, at_step, needed = zero2_step._zero2_replay((100 * MiB, 400 * MiB, -2, 500 * MiB), ((3, 4),), None)
    assert (reserved, at_step, needed) == (1000 * MiB, 600 * MiB, 600 * MiB)  # 400 MiB released: 1000 - 600
