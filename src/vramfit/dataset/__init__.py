"""Plan from the dataset's real sequence lengths, not one ``seq_len``.

``analyze_dataset(path, tokenizer=..., policy=Policy(...))`` streams a JSON Lines, CSV, Parquet file
or a saved ``datasets`` folder, renders each row as TRL's ``SFTTrainer`` does (chat template, EOS),
counts its tokens with a local tokenizer (or a flagged characters-per-token approximation), and
applies truncation, packing, padding and the sampler's order as the trainers do. The report gives
the peak micro-batch (what memory must fit), the typical one, tokens lost to truncation, a
suggested ``max_length``, the tokens the GPUs process per epoch (time and cost) and the disk of
the tokenized set. :func:`with_reserved_spread` adds to an estimate the spread its reserved figure takes when the
unpacked lengths come in random order (:mod:`vramfit.dataset.spread`). ``tokenizers``, ``pyarrow`` and ``jinja2`` come with the ``dataset`` extra and
are imported only when needed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from vramfit.dataset.limits import DatasetError
from vramfit.dataset.policy import Packing, Padding, Policy
from vramfit.dataset.report import DatasetReport, build_report, read_lengths
from vramfit.dataset.spread import reserved_spread, with_reserved_spread
from vramfit.dataset.tokenize import CHARS_PER_TOKEN, load_encoder


def analyze_dataset(
    path: str | Path,
    *,
    tokenizer: str | Path | None = None,
    policy: Policy | None = None,
    field_name: str | None = None,
    split: str = "train",
    sample: int | None = None,
    chars_per_token: float | None = None,
    on_rows: Callable[[int], None] | None = None,
) -> DatasetReport:
    """The :class:`DatasetReport` of the dataset at ``path`` under ``policy`` (default: TRL's SFT defaults
    without a ``max_length``: pad to the longest in the micro-batch, no packing, random order)."""
    encoder = load_encoder(tokenizer, chars_per_token)
    p = policy or Policy()
    lp = read_lengths(path, encoder, field_name=field_name, split=split, sample=sample, seed=p.seed, on_rows=on_rows)
    return build_report(lp, p, Path(path), encoder)


__all__ = ["CHARS_PER_TOKEN", "DatasetError", "DatasetReport", "Packing", "Padding", "Policy", "analyze_dataset",
           "reserved_spread", "with_reserved_spread"]
