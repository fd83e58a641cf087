"""From per-sample token counts to the micro-batches a trainer feeds the GPU, each step as the trainers do it.

- Truncation keeps the first ``max_length`` tokens (TRL 1.16.0 ``SFTConfig.truncation_mode`` "keep_start",
  ``trl/data_utils.py`` ``truncate_dataset``).
- Packing (``trl/data_utils.py`` ``pack_dataset``): ``bfd`` sorts each map batch by length and puts each
  sample in the fullest row it fits (best fit decreasing; longer samples truncated, empty ones dropped);
  ``bfd_split`` first cuts long samples into ``max_length`` pieces; ``wrapped`` concatenates and cuts
  every ``max_length`` tokens. Each works on one ``Dataset.map`` batch at a time: 1000 rows
  (datasets 5.2.0 ``arrow_dataset.py``, ``Dataset.map(batch_size=1000)``), so rows never span batches.
- Padding-free: ``SFTTrainer`` turns it on for ``bfd``/``bfd_split`` packing (``sft_trainer.py``:
  ``padding_free = args.padding_free or (args.packing and args.packing_strategy in {"bfd", "bfd_split"})``);
  the collator then concatenates a micro-batch into one row with ``position_ids`` restarting per
  sample, so attention stays within each sample. ``wrapped`` rows attend across sample borders.
- Padding (``DataCollatorForLanguageModeling`` and ``trl/trainer/utils.py`` ``pad``): to the longest row
  in the micro-batch, rounded up to ``pad_to_multiple_of``; ``max_length`` pads every row to the limit
  (transformers ``DataCollatorWithPadding(padding="max_length")``, Axolotl ``pad_to_sequence_len``).
- Order: ``RandomSampler`` (a random permutation, last micro-batch short: ``dataloader_drop_last`` False),
  or ``group_by_length`` (transformers 5.24.0 ``trainer_pt_utils.get_length_grouped_indices``: mega-batches
  of ``min(n // (4 b), 50) * b`` samples sorted longest first, ``b`` = micro-batch x accumulation, and
  the longest sample moved to the first batch "so that an OOM happens sooner rather than later").
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from vramfit.dataset.limits import DatasetError

#: Rows per ``Dataset.map`` batch in which TRL packs (datasets 5.2.0 ``Dataset.map`` default).
MAP_BATCH_ROWS = 1000


class Packing(str, Enum):
    NONE = "none"
    BFD = "bfd"
    BFD_SPLIT = "bfd_split"
    WRAPPED = "wrapped"


class Padding(str, Enum):
    LONGEST = "longest"
    MAX_LENGTH = "max_length"


@dataclass(frozen=True)
class Policy:
    """How the trainer turns samples into micro-batches."""

    micro_batch_size: int = 1
    grad_accum: int = 1
    max_length: int | None = None
    padding: Padding = Padding.LONGEST
    pad_to_multiple_of: int | None = None
    packing: Packing = Packing.NONE
    padding_free: bool = False
    group_by_length: bool = False
    seed: int = 0

    def __post_init__(self):
        if self.packing is not Packing.NONE and self.max_length is None:
            raise DatasetError("packing", "packing needs a max_length (the packed row length)")
        if self.padding is Padding.MAX_LENGTH and self.max_length is None:
            raise DatasetError("padding", "padding to max_length needs a max_length")
        if self.padding_free and self.packing is Packing.NONE and self.max_length is not None:
            # trl 1.16.0 sft_trainer.py refuses it: "When `padding_free=True` without packing, `max_length` is not enforced"
            raise DatasetError("max_length", "padding-free without packing does not truncate (TRL refuses a max_length "
                               "there): give --max-length none, or pack")
        if self.padding_free and self.padding is Padding.MAX_LENGTH:
            raise DatasetError("padding", "padding-free batches are not padded to max_length",
                               [p.value for p in Padding])

    @property
    def flattened(self) -> bool:
        """True when a micro-batch is one concatenated row (padding-free)."""
        return self.padding_free or self.packing in (Packing.BFD, Packing.BFD_SPLIT)

    @property
    def cross_sample_attention(self) -> bool:
        """True when tokens attend to other samples of their row (``wrapped`` packing)."""
        return self.packing is Packing.WRAPPED

    def round_up(self, n: int) -> int:
        m = self.pad_to_multiple_of
        return n if not m else -(-n // m) * m


def truncated(lengths: Sequence[int], max_length: int | None) -> tuple[list[int], int]:
    """(lengths after keep-start truncation, tokens dropped)."""
    if max_length is None:
        return list(lengths), 0
    return [min(n, max_length) for n in lengths], sum(n - max_length for n in lengths if n > max_length)


def _bfd(lengths: list[int], cap: int) -> list[int]:
    """Row lengths of best-fit-decreasing bins of capacity ``cap`` (each length <= cap)."""
    bins: list[int] = []
    spaces: list[tuple[int, int]] = []  # (free space, bin index), sorted
    for n in sorted(lengths, reverse=True):
        i = bisect.bisect_left(spaces, (n, -1))
        if i < len(spaces):
            space, b = spaces.pop(i)
        else:
            space, b = cap, len(bins)
            bins.append(0)
        bins[b] += n
        if space - n > 0:
            bisect.insort(spaces, (space - n, b))
    return bins


def training_rows(lengths: Sequence[int], p: Policy) -> tuple[list[int], int]:
    """(the row lengths the trainer trains on, tokens lost to truncation) under ``p``."""
    if p.packing is Packing.NONE:
        return truncated(lengths, p.max_length)
    cap = p.max_length
    assert cap is not None
    rows: list[int] = []
    dropped = 0
    for start in range(0, len(lengths), MAP_BATCH_ROWS):
        chunk = [n for n in lengths[start:start + MAP_BATCH_ROWS] if n > 0]
        if p.packing is Packing.WRAPPED:
            total = sum(chunk)
            rows += [cap] * (total // cap) + ([total % cap] if total % cap else [])
            continue
        if p.packing is Packing.BFD:
            chunk, lost = truncated(chunk, cap)
            dropped += lost
        else:  # bfd_split: pieces of cap tokens, then the remainder
            chunk = [x for n in chunk for x in [cap] * (n // cap) + ([n % cap] if n % cap else [])]
        rows += _bfd(chunk, cap)
    return rows, dropped


def sample_order(rows: Sequence[int], p: Policy) -> list[int]:
    """Indices of ``rows`` in the order the sampler yields them (one epoch, seeded)."""
    rng = random.Random(p.seed)
    order = list(range(len(rows)))
    rng.shuffle(order)
    if not p.group_by_length or not rows:
        return order
    b = p.micro_batch_size * p.grad_accum
    mult = min(len(rows) // (b * 4), 50) or 1
    size = mult * b
    megas = [sorted(order[i:i + size], key=lambda j: rows[j], reverse=True) for i in range(0, len(order), size)]
    top = max(range(len(megas)), key=lambda k: rows[megas[k][0]])
    megas[0][0], megas[top][0] = megas[top][0], megas[0][0]
    return [j for m in megas for j in m]


def batch_shape(rows: Sequence[int], p: Policy) -> tuple[int, int]:
    """(rows, padded row length) of one micro-batch holding samples of lengths ``rows``."""
    if p.flattened:
        return 1, p.round_up(sum(rows))
    if p.padding is Padding.MAX_LENGTH:
        assert p.max_length is not None
        return len(rows), p.round_up(p.max_length)
    return len(rows), p.round_up(max(rows))


def micro_batches(rows: Sequence[int], p: Policy) -> list[tuple[int, int]]:
    """The (rows, padded length) of every micro-batch of one epoch, in sampler order."""
    order = sample_order(rows, p)
    mb = p.micro_batch_size
    return [batch_shape([rows[j] for j in order[i:i + mb]], p) for i in range(0, len(order), mb)]


def processed_tokens(rows: Sequence[int], p: Policy) -> int:
    """Tokens one epoch's micro-batches process: rows x padded length of each (:func:`micro_batches`), summed."""
    return sum(r * n for r, n in micro_batches(rows, p))


def peak_batch(rows: Sequence[int], p: Policy) -> tuple[int, int]:
    """The largest micro-batch (rows, padded length) any epoch's order can produce.

    Any sampler may put the longest row in a micro-batch with the next longest ones (group-by-length
    does so on purpose), so the peak is the ``micro_batch_size`` longest rows together.
    """
    if not rows:
        raise DatasetError("dataset", "no non-empty rows to train on")
    top = sorted(rows, reverse=True)[: p.micro_batch_size]
    if p.flattened:
        return batch_shape(top, p)
    return batch_shape([top[0]] * min(p.micro_batch_size, len(rows)), p)
