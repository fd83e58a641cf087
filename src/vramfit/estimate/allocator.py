"""The PyTorch CUDA caching allocator's arithmetic, shared by the estimator and the simulator.

Models ``round_size`` and ``get_allocation_size`` of pytorch/pytorch@eb42ad6e
``c10/cuda/CUDACachingAllocator.cpp`` with default settings (no ``roundup_power2_divisions``,
no ``max_split_size_mb``, no expandable segments).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from itertools import groupby

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


#: The most pieces of one size a replayed run keeps (:func:`coarsen`). The longest such run among the measured rows and
#: golden scenarios has 354 (LitGPT's autocast copies of Mixtral-8x7B's weights, cut at its 250 MiB largest weight) and
#: a wrap program's cut at most 37 (estimate/wrap_step.py), so none of them changes.
REPLAY_RUN_PIECES = 1024


def cut_pieces(n: int, cut: int, conf: AllocatorConf | None = None) -> list[int]:
    """``n`` bytes as tensors of ``cut`` bytes and a remainder, in allocation order, as a step's working set is cut
    (estimate/wrap_step.py, estimate/transients.py), the run of ``cut``-byte pieces coarsened as :func:`coarsen` does
    for pieces freed together (the caller frees them together) where it is longer than :data:`REPLAY_RUN_PIECES`.
    ``cut`` 0: one tensor. Never builds the fine list: a tiny ``cut`` (one block input at a few tokens) would make
    millions of pieces of a working set of gigabytes."""
    if n <= 0:
        return []
    if not cut or n <= cut:
        return [n]
    k, last = divmod(n, cut)
    tail = [last] if last else []
    if k <= REPLAY_RUN_PIECES:
        return [cut] * k + tail
    return _coarse_run(cut, k, _multiple(k), conf) + tail


def _multiple(k: int) -> int:
    """How many pieces :func:`coarsen` joins in a run of ``k``: the least power of two that leaves at most
    :data:`REPLAY_RUN_PIECES` (a power of two: a freed block of ``2m`` pieces holds two of ``m`` exactly)."""
    return 1 << (-(-k // REPLAY_RUN_PIECES) - 1).bit_length()


def _coarse_run(size: int, k: int, m: int, conf: AllocatorConf | None) -> list[int]:
    """``k`` allocations of ``size`` bytes as allocations of ``m`` pieces' ``round_size`` each, the last one the rest."""
    unit = round_request(size, conf)
    whole, rest = divmod(k, m)
    return [m * unit] * whole + ([rest * unit] if rest else [])


def coarsen(events: tuple[int, ...] | list[int], conf: AllocatorConf | None = None) -> list[int]:
    """``events`` (:func:`transient_reserved`'s form) with every run of more than :data:`REPLAY_RUN_PIECES` equal
    allocations that are freed together replaced by at most that many: the work a replay does stays bounded.

    Why: a step's working sets are cut into pieces of one block input or one fp32 logits block
    (estimate/wrap_step.py ``step_program``, estimate/transients.py), sized by ``seq_len``; where the working set is
    not (experts' weights at a handful of tokens, image tokens' logits at ``seq_len`` 1) the cut made millions of
    2-8 KiB pieces and one replay took minutes. Where no run is longer than the bound (every measured and golden
    scenario, :data:`REPLAY_RUN_PIECES`) the list comes back as it is, and so does the figure.

    A run: ``k`` consecutive allocations of one size, all freed between the same two allocations (a working set freed
    together). Where some run of a size is longer than the bound, every such run of that size becomes allocations of
    ``m`` pieces' ``round_size`` each, the last one the rest (``m``: the least power of two that leaves the longest of
    them at most the bound; one ``m`` per size, so a block one run frees serves the next run's pieces as in the fine
    replay), freed after the other frees between those two allocations. The allocator facts this rests on
    (pytorch/pytorch@eb42ad6e c10/cuda/CUDACachingAllocator.cpp, shared/design/cuda-memory-facts.md section 1, as
    :class:`vramfit.sim.cuda_allocator.CachingAllocatorModel` replays them):

    - ``allocated_bytes`` counts a block at its ``round_size``: the coarse run charges the fine pieces' sum, all live
      at its end in both forms, so :func:`plain_peak` does not move and the replay's allocated peak only by the under
      1 MiB a large-pool block keeps unsplit (``should_split``) per fine piece.
    - ``free_block`` merges a freed block with its free neighbours, so frees with no allocation between them leave one
      state in any order: once the run is freed the blocks it was carved from are whole again in both forms, which
      differ only in the segments the run opened.
    - Those differ only as far as a piece ``m`` times larger is served differently: ``get_free_block`` gives it only
      cached blocks at least its size (and a piece over 1 MiB, ``kSmallSize``, from the large pool), and
      ``get_allocation_size`` opens a 2 MiB (``kSmallBuffer``) or 20 MiB (``kLargeBuffer``) segment that fits two or
      more pieces below 10 MiB, else one rounded up to 2 MiB (``kRoundLarge``): either form's new segments are at least
      two-thirds full. So they differ by at most half the run's bytes plus the bytes cached on its stream when it
      starts (tests/estimate/test_replay_bounds.py checks the first on a fresh allocator); the figures of the fuzzed
      scenarios moved by 0.004 % (Qwen3-30B-A3B, FSDP, ``seq_len`` 1) to 1 % (a 101 TB LLaVA step under ZeRO-2).

    Such a run stands for thousands of tensors of one block input or one logits row block that the step does not
    make (its tensors are weight- or image-sized there): the piece size is a modelling choice, not worth minutes."""
    # stretches of allocations and of frees, in order (a C-level pass: the long lists are the ones this is for)
    parts = [(freeing, list(group)) for freeing, group in groupby(events, (0).__gt__)]
    runs: list[tuple[int, int, int]] = []  # (first handle, 0-based; pieces; size)
    count = 0
    for freeing, block in parts:
        if not freeing:
            for size, group in groupby(block):
                k = len(list(group))
                runs.append((count, k, size))
                count += k
    long_sizes = {size for _, k, size in runs if k > REPLAY_RUN_PIECES and size > 0}
    if not long_sizes:
        return list(events)
    coarse, multiple = _coarse_runs(parts, runs, count, long_sizes)
    if not coarse:
        return list(events)
    return _rewrite(parts, runs, count, coarse, multiple, conf)


def _coarse_runs(parts: list, runs: list[tuple[int, int, int]], count: int,
                 long_sizes: set[int]) -> tuple[set[int], dict[int, int]]:
    """(the runs :func:`coarsen` merges, the pieces per coarse allocation of each size): the runs of a size some run
    passes the bound with, freed together between the same two allocations."""
    candidates = [i for i, (_, k, size) in enumerate(runs) if size in long_sizes and k > 1]
    run_of = [-1] * count  # handle -> its run, for the runs of a size some long run has
    for i in candidates:
        first, k, _ = runs[i]
        run_of[first:first + k] = [i] * k
    freed: Counter[int] = Counter()
    stretch: dict[int, int] = {}  # run -> allocations made before its frees (-1: freed across allocations)
    made = 0
    for freeing, block in parts:
        if not freeing:
            made += len(block)
            continue
        ids = Counter([run_of[~ev] for ev in block])
        ids.pop(-1, None)
        freed.update(ids)
        for run in ids:
            if stretch.setdefault(run, made) != made:
                stretch[run] = -1
    together = [i for i in candidates if stretch.get(i, -1) >= 0 and freed[i] == runs[i][1]]
    # one multiple per size, from its longest run: every run of a size is cut alike (a block one run leaves serves
    # the next run's pieces as it does in the fine replay)
    multiple: dict[int, int] = {}
    for i in together:
        _, k, size = runs[i]
        multiple[size] = max(multiple.get(size, 1), _multiple(k))
    return {i for i in together if multiple[runs[i][2]] > 1}, multiple


def _rewrite(parts: list, runs: list[tuple[int, int, int]], count: int, coarse: set[int], multiple: dict[int, int],
             conf: AllocatorConf | None) -> list[int]:
    """The events with each run in ``coarse`` made of coarse allocations (:func:`_coarse_run`), freed after the
    other frees between the same two allocations."""
    coarse_of = [-1] * count
    for i in coarse:
        first, k, _ = runs[i]
        coarse_of[first:first + k] = [i] * k
    handle: list[int] = []  # old handle (0-based) -> new handle (1-based); a coarsened run's members: unused
    pieces: dict[int, range] = {}  # coarsened run -> its new handles
    out: list[int] = []
    run = 0
    for freeing, block in parts:
        if freeing:  # frees between two allocations commute: the others first, then each coarsened run's pieces
            out.extend([-handle[~ev] for ev in block if coarse_of[~ev] < 0])
            for i in sorted({coarse_of[~ev] for ev in block} - {-1}):
                out.extend([-h for h in pieces[i]])
            continue
        for size, group in groupby(block):
            _, k, _ = runs[run]
            base = handle[-1] if handle else 0
            if run in coarse:
                sizes = _coarse_run(size, k, multiple[size], conf)
                pieces[run] = range(base + 1, base + len(sizes) + 1)
                handle.extend([base + len(sizes)] * k)  # (the last piece's handle: the next run counts on)
                out.extend(sizes)
            else:
                handle.extend(range(base + 1, base + k + 1))
                out.extend(group)
            run += 1
    return out


def run_events(model, events: tuple[int, ...] | list[int], each=None) -> None:
    """Run :func:`transient_reserved`-style ``events`` on ``model`` (a ``CachingAllocatorModel``, possibly
    holding blocks already: estimate/wrap_step.py replays the step after the FSDP wrap); ``each()`` after every event.
    Runs of more equal pieces than :data:`REPLAY_RUN_PIECES` are replayed coarsened (:func:`coarsen`)."""
    blocks = []
    for ev in coarsen(events, model.conf):
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
