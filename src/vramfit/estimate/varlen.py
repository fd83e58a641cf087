"""The reserved figure when micro-batch lengths vary up to ``seq_len`` (unpacked, unpadded batches).

Mechanism (pytorch/pytorch@eb42ad6e c10/cuda/CUDACachingAllocator.cpp, as :class:`vramfit.sim.cuda_allocator.
CachingAllocatorModel` replays it): a freed block stays cached in its segment until ``empty_cache`` or a failed
``cudaMalloc`` (``release_cached_blocks``); a request is served only by a cached block at least as large
(``get_free_block``, best fit), blocks of different segments never merge, and a request larger than every cached
block opens a new segment (``alloc_block``). The loss's tensors are ``tokens x vocabulary`` wide, so a micro-batch
longer than every one before it (a *record* length) opens segments for them while the earlier, smaller ones stay
reserved; a shorter batch splits cached blocks and adds nothing. The figure is then the fixed-length one at the
longest length plus the segments the earlier record lengths left: it depends on the order of the lengths, not only
on their range (lengths in decreasing order add nothing). Fixed-length (packed or padded) batches replay the same
sizes every step. Near the card's capacity a failed ``cudaMalloc`` releases every wholly free cached segment and
retries (``release_cached_blocks`` in ``DeviceCachingAllocator::malloc``; the same sequence in the torch 2.1 line the
SWIFT_BENCH_2401 rows ran), so the card bounds the growth.

Not applied to scored rows: the figure is set by the order the sampler drew the lengths, which no published row
gives. For SWIFT_BENCH_2401-1..4 (found.jsonl, shuffled news samples up to max_length, batch 1) the measured excess
over the fixed-length estimate (+0.39, +1.86, +2.29, +6.03 GiB) lies inside or just under the 10-90 % spread of
:func:`shuffled_stranded` over random orders of an assumed length distribution (gamma with the data page's
3,234 +- 2,548 tokens: 0.5-1.6, 1.0-4.4, 2.9-9.0, 5.8-20 GiB): the mechanism has the size of the gap, but picking a
point in that spread would be a fitted choice.

:func:`schedule_events` replays the step's transients (:func:`vramfit.estimate.transients.step_transients`) for
each micro-batch length in turn through one allocator; ``tests/estimate/test_varlen.py`` checks it against the
simulator, which runs the real library with the lengths in the same order.
"""

from __future__ import annotations

from dataclasses import replace

from vramfit.estimate.allocator import transient_reserved
from vramfit.estimate.constants import K_ROUND_LARGE


def schedule_events(spec, sc, lengths: list[int] | tuple[int, ...], card=None) -> list[int]:
    """:func:`vramfit.estimate.transients.step_transients` of each micro-batch length in ``lengths`` (in order), as
    one event list for :func:`vramfit.estimate.allocator.transient_reserved` (each step's frees renumbered)."""
    from vramfit.estimate.step import compute
    from vramfit.estimate.transients import step_transients

    events: list[int] = []
    made = 0
    for n in lengths:
        step = step_transients(compute(spec, replace(sc, seq_len=int(n)), card))
        events.extend(e if e >= 0 else e - made for e in step)
        made += sum(1 for e in step if e >= 0)
    return events


def stranded_bytes(spec, sc, lengths: list[int] | tuple[int, ...], card=None) -> int:
    """Reserved bytes the length schedule leaves beyond one step at its longest length, in whole 2 MiB units
    (``kRoundLarge``: what is under one unit is segment rounding, as in :func:`vramfit.estimate.reserved.
    reserved_bytes`): the segments earlier record lengths opened for tensors a longer batch could not fit in."""
    longest = max(lengths)
    mixed = transient_reserved(schedule_events(spec, sc, lengths, card))[1]
    fixed = transient_reserved(schedule_events(spec, sc, [longest, longest], card))[1]
    unit = K_ROUND_LARGE.value
    return max(0, mixed - fixed) // unit * unit


def record_lengths(lengths: list[int] | tuple[int, ...]) -> list[int]:
    """The lengths longer than every one before them: only these open segments (see the module's docstring)."""
    out: list[int] = []
    for n in lengths:
        if not out or n > out[-1]:
            out.append(int(n))
    return out


def shuffled_stranded(spec, sc, lengths: list[int] | tuple[int, ...], runs: int = 100, seed: int = 0,
                      card=None) -> tuple[int, int, int]:
    """(10th percentile, median, 90th percentile) of :func:`stranded_bytes` over ``runs`` random orders of a data
    set's sample ``lengths`` (tokens; longer ones truncated to ``seq_len``), one epoch each, as a shuffling sampler
    draws them (torch.utils.data.RandomSampler, the HF Trainer's default), ``micro_batch_size`` samples per batch
    padded to the batch's longest (transformers DataCollatorForSeq2Seq / DataCollatorWithPadding, padding=True).

    Only record lengths matter (:func:`record_lengths`); among ``n`` batches in random order about
    ``H_n = 1 + 1/2 + ... + 1/n`` (``ln n + 0.58``) are records (the expected number of records of ``n`` exchangeable
    distinct values), most near the longest, so the figure is a spread, not a point: the order the sampler drew sets it.
    """
    import random

    rng = random.Random(seed)
    pool = [min(int(n), sc.seq_len) for n in lengths]
    b = max(1, sc.micro_batch_size)
    out = []
    for _ in range(max(1, runs)):
        rng.shuffle(pool)
        batches = [max(pool[i:i + b]) for i in range(0, len(pool), b)]
        records = record_lengths(batches)
        out.append(stranded_bytes(spec, sc, records, card) if len(records) > 1 else 0)
    out.sort()
    return out[len(out) // 10], out[len(out) // 2], out[(9 * len(out)) // 10]
