"""``analyze_dataset``: the length pass over a dataset and the report the planner and the CLI use."""

from __future__ import annotations

import random
from array import array
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from vramfit.dataset.fields import Fields, detect_fields
from vramfit.dataset.limits import (
    MAX_ROWS,
    MAX_SAMPLE_CHARS,
    MAX_SAMPLE_ROWS,
    TOKENIZE_BATCH_ROWS,
    DatasetError,
)
from vramfit.dataset.policy import (
    Packing,
    Policy,
    batch_shape,
    micro_batches,
    peak_batch,
    processed_tokens,
    training_rows,
)
from vramfit.dataset.readers import dataset_bytes, detect_format, iter_rows
from vramfit.dataset.tokenize import Encoder
from vramfit.plan.disk import TOKENIZED_BYTES_PER_TOKEN

#: A suggested max_length loses at most this share of the dataset's tokens to truncation.
SUGGEST_MAX_LOSS = 0.01
#: Suggested max_length values are multiples of this (or of pad_to_multiple_of when set).
SUGGEST_STEP = 64
#: Micro-batch sizes whose processed tokens are simulated for the planner (it searches powers of two).
MICRO_BATCHES = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class LengthPass:
    """Token counts of the rows read (all of them, or a uniform sample)."""

    lengths: array  # tokens per sample after the chat template / EOS
    rows_read: int
    fields: Fields
    sampled: bool

    @property
    def scale(self) -> float:
        return self.rows_read / len(self.lengths) if self.lengths else 1.0


class _Reservoir:
    """A uniform sample of ``size`` rendered rows (Vitter 1985, algorithm R: row n kept with probability size / n)."""

    def __init__(self, size: int, seed: int):
        self.size, self.rng, self.texts, self.chars = size, random.Random(seed), [], 0

    def slot(self, n: int) -> int | None:
        """Where row ``n`` goes, or None when it is not sampled."""
        if len(self.texts) < self.size:
            self.texts.append("")
            return len(self.texts) - 1
        j = self.rng.randrange(n)
        return j if j < self.size else None

    def put(self, i: int, text: str) -> None:
        self.chars += len(text) - len(self.texts[i])
        if self.chars > MAX_SAMPLE_CHARS:
            raise DatasetError("sample", f"the sampled rows hold over {MAX_SAMPLE_CHARS:,} characters; sample fewer rows")
        self.texts[i] = text


def _check_columns(row: dict, fields: Fields, n: int, path: Path) -> None:
    """Row ``n`` holds the columns read from the first row (a JSON row may lack one: KeyError before)."""
    for c in fields.columns:
        if c not in row:
            raise DatasetError("dataset", f"row {n} of {path.name} has no column {c!r} (the dataset's "
                               f"{fields.kind.value} column, found in the first row)")


def read_lengths(path: str | Path, encoder: Encoder, *, field_name: str | None = None, split: str = "train",
                 sample: int | None = None, seed: int = 0, on_rows: Callable[[int], None] | None = None) -> LengthPass:
    """Stream ``path``, render each row (or each sampled row) as the trainer does and count its tokens in batches."""
    if sample is not None and not 1 <= sample <= MAX_SAMPLE_ROWS:
        raise DatasetError("sample", f"must be from 1 to {MAX_SAMPLE_ROWS:,} rows, got {sample!r}")
    lengths = array("I")
    fields: Fields | None = None
    texts: list[str] = []
    pool = _Reservoir(sample, seed) if sample is not None else None
    n = 0
    for n, row in enumerate(iter_rows(Path(path), split), 1):
        if n > MAX_ROWS:
            raise DatasetError("dataset", f"more than {MAX_ROWS:,} rows; pass --sample N")
        fields = fields or detect_fields(row, field_name)
        _check_columns(row, fields, n, Path(path))
        if on_rows and n % 10_000 == 0:
            on_rows(n)
        if pool is not None:
            i = pool.slot(n)
            if i is not None:
                pool.put(i, encoder.render(row, fields, n))
            continue
        texts.append(encoder.render(row, fields, n))
        if len(texts) >= TOKENIZE_BATCH_ROWS:
            lengths.extend(encoder.count(texts, fields))
            texts = []
    if fields is None:
        raise DatasetError("dataset", f"{Path(path).name} holds no rows")
    for start in range(0, len(pool.texts) if pool else 0, TOKENIZE_BATCH_ROWS):
        lengths.extend(encoder.count(pool.texts[start:start + TOKENIZE_BATCH_ROWS], fields))
    lengths.extend(encoder.count(texts, fields))
    if not any(lengths):
        every = "every sampled row" if pool is not None and n > len(lengths) else "every row"
        raise DatasetError("dataset", f"{Path(path).name} has no tokens: the text in "
                           f"{', '.join(map(repr, fields.columns))} is empty in {every}")
    if on_rows:
        on_rows(n)
    return LengthPass(lengths, n, fields, pool is not None and n > len(lengths))


def histogram(lengths) -> list[tuple[int, int, int]]:
    """(from, to, samples) with ``from <= length < to``: bins of 64 tokens doubling (0, 64, 128, 256, ...)."""
    top = max(lengths, default=0)
    edges = [0, 64]
    while edges[-1] <= top:
        edges.append(edges[-1] * 2)
    counts = [0] * (len(edges) - 1)
    for n in lengths:
        counts[max(0, (n // 64).bit_length())] += 1  # n < 64 -> bin 0; 64..127 -> 1; 128..255 -> 2 ...
    return [(edges[i], edges[i + 1], c) for i, c in enumerate(counts)]


def lost_tokens(lengths, limit: int) -> int:
    return sum(n - limit for n in lengths if n > limit)


def suggest_max_length(lengths, step: int = SUGGEST_STEP) -> tuple[int, float]:
    """The smallest multiple of ``step`` that truncation loses at most :data:`SUGGEST_MAX_LOSS` of the tokens at."""
    total = sum(lengths)
    hi = -(-max(lengths) // step)
    lo = 1
    while lo < hi:  # losses fall as the limit grows: bisect over the multiples
        mid = (lo + hi) // 2
        if lost_tokens(lengths, mid * step) <= SUGGEST_MAX_LOSS * total:
            hi = mid
        else:
            lo = mid + 1
    return lo * step, (lost_tokens(lengths, lo * step) / total if total else 0.0)


@dataclass(frozen=True)
class DatasetReport:
    """What the dataset means for memory and time under one batching policy. Tokens are per epoch."""

    path: str
    format: str
    file_bytes: int
    fields: str
    tokenizer: str
    exact_tokens: bool  # False: characters-per-token approximation
    rows: int
    sampled_rows: int | None
    policy: dict
    sample_tokens: int  # after the template, before truncation
    percentiles: dict  # p50, p90, p99, max of the sample lengths
    histogram: list
    truncated_samples: int
    dropped_tokens: int
    dropped_share: float
    train_rows: int  # after packing
    train_tokens: int  # real tokens trained on
    peak_rows: int
    peak_row_len: int
    peak_tokens: int
    longest_row_len: int  # the longest padded row alone: the per-row peak at any micro-batch size
    typical_rows: int
    typical_row_len: int
    typical_tokens: int  # the median micro-batch
    processed_tokens: int  # padding included: what the GPUs compute
    processed_by_micro_batch: dict  # micro-batch size -> processed tokens per epoch (the planner varies it)
    padding_share: float
    packing_efficiency: float | None
    cross_sample_attention: bool
    suggested_max_length: int
    suggested_loss_share: float
    tokenized_bytes: int
    notes: list = field(default_factory=list)
    #: each training row's padded length (truncated, rounded to pad_to_multiple_of) before the sampler orders them, for
    #: the reserved figure's spread (vramfit.dataset.spread); not in :meth:`to_dict` (one number per sample)
    row_lengths: tuple = field(default=(), repr=False, compare=False)

    def to_dict(self) -> dict:
        d = asdict(replace(self, row_lengths=()))
        del d["row_lengths"]
        return d

    def processed_at(self, micro_batch_size: int) -> int:
        """Processed tokens per epoch at ``micro_batch_size``: the sizes the report simulated, any other one batched
        the same way from the rows (in the same sampler order) and scaled as the sample was (a micro-batch of 3 had
        been priced at 4's padding, 11-15 % more tokens)."""
        known = self.processed_by_micro_batch
        if micro_batch_size in known:
            return known[micro_batch_size]
        if not self.row_lengths:  # a report read back without its rows: the nearest size simulated at or above
            return known[next((m for m in sorted(known) if m >= micro_batch_size), max(known))]
        memo = self.__dict__.setdefault("_processed_memo", {})  # the planner asks per plan row: once per size
        if micro_batch_size not in memo:
            scale = self.rows / self.sampled_rows if self.sampled_rows else 1.0  # LengthPass.scale, as build_report
            memo[micro_batch_size] = round(scale * processed_tokens(self.row_lengths, self.policy_at(micro_batch_size)))
        return memo[micro_batch_size]

    @property
    def peak_seq_len(self) -> int:
        """The estimator's ``seq_len`` for the peak micro-batch at its ``micro_batch_size`` rows."""
        return -(-self.peak_tokens // max(1, self.policy["micro_batch_size"]))

    def policy_at(self, micro_batch_size: int):
        """The report's batching policy (:class:`vramfit.dataset.policy.Policy`) at another ``micro_batch_size``."""
        from vramfit.dataset.policy import Packing, Padding, Policy

        d = self.policy
        return Policy(**{**d, "padding": Padding(d["padding"]), "packing": Packing(d["packing"]),
                         "micro_batch_size": micro_batch_size})

    @property
    def varies_with_micro_batch(self) -> bool:
        """True when the peak row's length depends on the micro-batch size: a flattened micro-batch (padding-free, or
        packed rows concatenated) is one row of its samples together, so more samples make it longer
        (:func:`vramfit.dataset.policy.batch_shape`); padded rows are as long as their longest at any size."""
        return self.policy_at(1).flattened

    def seq_len_at(self, micro_batch_size: int) -> int:
        """The estimator's ``seq_len`` for the peak micro-batch at ``micro_batch_size`` rows (the ``micro_batch_size``
        longest rows together, :func:`vramfit.dataset.policy.peak_batch`): :attr:`peak_seq_len` at another size."""
        from vramfit.dataset.policy import peak_batch

        rows, length = peak_batch(self.row_lengths, self.policy_at(micro_batch_size))
        return -(-rows * length // micro_batch_size)

    @property
    def typical_seq_len(self) -> int:
        """The estimator's ``seq_len`` for the median micro-batch at ``micro_batch_size`` rows."""
        return -(-self.typical_tokens // max(1, self.policy["micro_batch_size"]))


def _pct(sorted_lengths, q: float) -> int:
    return sorted_lengths[min(len(sorted_lengths) - 1, int(q * len(sorted_lengths)))]


def build_report(lp: LengthPass, p: Policy, path: Path, encoder: Encoder) -> DatasetReport:
    """The :class:`DatasetReport` of counted lengths under policy ``p`` (sampled figures scaled up)."""
    lengths = lp.lengths
    rows, dropped = training_rows(lengths, p)
    batches = micro_batches(rows, p)
    peak_r, peak_l = peak_batch(rows, p)
    by_tokens = sorted(batches, key=lambda b: b[0] * b[1])
    typ = by_tokens[(len(by_tokens) - 1) // 2]
    s = sorted(lengths)
    total = sum(lengths)
    processed = sum(r * n for r, n in batches)
    train = sum(rows)
    step = p.pad_to_multiple_of or SUGGEST_STEP
    sug, sug_loss = suggest_max_length(lengths, step)
    k = lp.scale
    by_mb = {m: round(k * processed_tokens(rows, replace(p, micro_batch_size=m)))
             for m in sorted(set(MICRO_BATCHES) - {p.micro_batch_size})}
    by_mb[p.micro_batch_size] = round(processed * k)
    return DatasetReport(
        path=str(path), format=detect_format(path), file_bytes=dataset_bytes(path), fields=lp.fields.describe(),
        tokenizer=encoder.source, exact_tokens=encoder.exact, rows=lp.rows_read,
        sampled_rows=len(lengths) if lp.sampled else None,
        policy={k2: (v.value if hasattr(v, "value") else v) for k2, v in asdict(p).items()},
        sample_tokens=round(total * k), percentiles={"p50": _pct(s, 0.5), "p90": _pct(s, 0.9), "p99": _pct(s, 0.99), "max": s[-1]},
        histogram=histogram(lengths),
        truncated_samples=round(k * sum(1 for n in lengths if p.max_length is not None and n > p.max_length))
        if p.packing in (Packing.NONE, Packing.BFD) else 0,
        dropped_tokens=round(dropped * k), dropped_share=dropped / total if total else 0.0,
        train_rows=round(len(rows) * k), train_tokens=round(train * k),
        peak_rows=peak_r, peak_row_len=peak_l, peak_tokens=peak_r * peak_l,
        longest_row_len=batch_shape([max(rows)], p)[1],
        typical_rows=typ[0], typical_row_len=typ[1], typical_tokens=typ[0] * typ[1],
        processed_tokens=round(processed * k), processed_by_micro_batch=dict(sorted(by_mb.items())),
        padding_share=1 - train / processed if processed else 0.0,
        packing_efficiency=(train / (len(rows) * p.max_length)) if p.packing is not Packing.NONE and rows else None,
        cross_sample_attention=p.cross_sample_attention, suggested_max_length=sug, suggested_loss_share=sug_loss,
        tokenized_bytes=round(TOKENIZED_BYTES_PER_TOKEN * train * k), notes=_notes(lp, encoder),
        row_lengths=tuple(p.round_up(n) for n in rows),
    )


def _notes(lp: LengthPass, encoder: Encoder) -> list[str]:
    """What makes the figures less than exact."""
    notes = []
    if not encoder.exact:
        notes.append(f"token counts approximate ({encoder.source}); give --tokenizer for exact counts")
    if lp.fields.conversational and encoder.template is None:
        notes.append("no chat template found: messages rendered in the ChatML layout")
    if lp.sampled:
        notes.append(f"a uniform sample of {len(lp.lengths):,} of {lp.rows_read:,} rows: totals scaled by {lp.scale:.2f}; "
                     "the peak is the sample's, the full set may hold longer rows")
    return notes
