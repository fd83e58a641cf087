"""The reserved figure's spread when a dataset's real lengths vary from micro-batch to micro-batch.

A freed block stays cached in its segment, and a request larger than every cached block opens a new segment
(pytorch/pytorch@eb42ad6e ``c10/cuda/CUDACachingAllocator.cpp``, as :mod:`vramfit.estimate.varlen` replays it): each
micro-batch longer than every one before it strands the loss's segments of the shorter ones, so
``torch.cuda.max_memory_reserved()`` (and nvidia-smi) on a card with headroom grows past the fixed-length figure by an
amount the sampler's order sets. :func:`reserved_spread` gives the 10th/50th/90th percentile of that growth over
random epoch orders (:func:`vramfit.estimate.varlen.shuffled_stranded`, checked against the simulator in
``tests/sim/test_sim_varlen.py``); the fixed-length estimate is unchanged. Near the card's capacity a failed
``cudaMalloc`` releases the wholly free cached segments and retries (``release_cached_blocks``), so the card bounds
the growth; the fit verdict stays on the fixed-length figure (``peak.required_bytes``).

No spread (None) where every step replays the same sizes or the order is not random: packed rows (TRL
``pack_dataset``), padding to ``max_length``, transformers' ``group_by_length`` (the longest sample moved to the
first batch, ``trainer_pt_utils.get_length_grouped_indices``, so no later batch is longer), or equal lengths.
Padding-free micro-batches without packing (one concatenated row per micro-batch) are not modelled here.
"""

from __future__ import annotations

import dataclasses
import importlib
import random
from typing import Any

#: Random epoch orders replayed (the percentiles' sample; seeded, so a figure is reproducible).
SPREAD_RUNS = 50
#: At most this many sample lengths are replayed (a uniform, seeded sample of larger sets) to keep the estimate instant.
SPREAD_MAX_SAMPLES = 20_000
GiB = 2**30


def spread_lengths(report) -> list[int] | None:
    """The per-sample row lengths (truncated, rounded to ``pad_to_multiple_of``) whose random order sets the spread,
    or None when the report's policy gives every epoch order the same sizes or no random order (module docstring)."""
    pol = report.policy
    if pol["packing"] != "none" or pol["padding"] != "longest" or pol["padding_free"] or pol["group_by_length"]:
        return None
    rows = list(report.row_lengths)
    if len(set(rows)) < 2:
        return None
    if len(rows) > SPREAD_MAX_SAMPLES:
        rows = random.Random(0).sample(rows, SPREAD_MAX_SAMPLES)
    return rows


def reserved_spread(result, report, *, spec=None, card=None) -> dict[str, Any] | None:
    """The ``reserved_spread`` field of an estimate made at the report's peak micro-batch: integer bytes added to
    ``peak.reserved_bytes`` by the dataset's lengths in random order (10th percentile, median, 90th percentile),
    or None where the lengths do not vary between steps (see :func:`spread_lengths`)."""
    rows = spread_lengths(report)
    if rows is None:
        return None
    varlen = importlib.import_module("vramfit.estimate.varlen")
    sc = result.scenario
    if spec is None:
        from vramfit.estimate import resolve_spec

        spec = resolve_spec(sc)[1]
    if card is None and sc.gpu:
        from vramfit.gpus import get_gpu

        card = get_gpu(sc.gpu)
    spread = varlen.shuffled_stranded(spec, sc, rows, runs=SPREAD_RUNS, card=card)
    # the card bounds the growth: a cudaMalloc past its usable memory fails, and the allocator frees its wholly free
    # cached segments and retries (release_cached_blocks in DeviceCachingAllocator::malloc, pytorch/pytorch@eb42ad6e),
    # so reserved stops where the process (reserved + context and workspaces, ``device_bytes``) fills the card
    cap = None if card is None else max(0, card.usable_bytes - result.peak.device_bytes)
    low, mid, high = spread if cap is None else (min(x, cap) for x in spread)
    return {"fixed_reserved_bytes": result.peak.reserved_bytes, "p10_bytes": low, "median_bytes": mid,
            "p90_bytes": high, "orders": SPREAD_RUNS, "samples": len(rows),
            "capped_by_gpu": None if cap is None or max(spread) <= cap else card.gpu_id}


def with_reserved_spread(result, report, *, spec=None, card=None):
    """``result`` with its ``reserved_spread`` field from ``report`` (a :class:`vramfit.dataset.DatasetReport` of the
    same scenario's batching policy); unchanged where the lengths give no spread."""
    spread = reserved_spread(result, report, spec=spec, card=card)
    return result if spread is None else dataclasses.replace(result, reserved_spread=spread)


def spread_line(spread: dict[str, Any]) -> str:
    """The spread as one sentence (GiB = 2^30 bytes)."""
    def g(n: int) -> str:
        return f"{n / GiB:,.2f}"

    capped = spread["capped_by_gpu"]
    return (f"reserved {g(spread['fixed_reserved_bytes'])} GiB at fixed length; with this dataset's lengths in random "
            f"order, +{g(spread['p10_bytes'])}…+{g(spread['p90_bytes'])} GiB (median +{g(spread['median_bytes'])}; "
            f"10th–90th percentile of {spread['orders']} epoch orders) "
            + (f"up to the {capped}'s free memory" if capped else "on a card with room")
            + " (near its capacity PyTorch frees wholly free cached segments and retries); the fit verdict uses the "
            "fixed-length figure")
