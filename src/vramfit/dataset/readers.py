"""Rows of a dataset file, streamed: JSON Lines, JSON array, CSV, Parquet, a saved ``datasets`` folder.

Every reader yields plain dicts one at a time and never holds more than a line, a CSV record or one
Parquet/Arrow record batch (:data:`ARROW_BATCH_ROWS` rows). Parquet and Arrow need ``pyarrow`` (the
``dataset`` extra), imported only when such a file is read.

A folder saved by ``datasets.Dataset.save_to_disk`` holds ``state.json`` and ``data-*.arrow`` files in
the Arrow IPC *stream* format (huggingface/datasets 5.2.0 ``arrow_writer.py``, ``ArrowWriter`` writes
with ``pa.RecordBatchStreamWriter``), so it is read with ``pyarrow.ipc.open_stream`` without
``datasets`` itself; a ``DatasetDict`` folder (``dataset_dict.json``) holds one such folder per split.
"""

from __future__ import annotations

import codecs
import csv
import json
from collections.abc import Iterator
from pathlib import Path

from vramfit.dataset.limits import MAX_FILE_BYTES, MAX_JSON_ARRAY_BYTES, MAX_LINE_BYTES, DatasetError
from vramfit.safe_input import parse_error

FORMATS = ("jsonl", "json", "csv", "parquet", "hf")
ARROW_BATCH_ROWS = 1000


def detect_format(path: Path) -> str:
    """``jsonl``, ``json``, ``csv``, ``parquet`` or ``hf`` (a saved ``datasets`` folder), from the path."""
    if not path.exists():
        raise DatasetError("dataset", f"file not found: {path}")
    if path.is_dir():
        if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
            return "hf"
        raise DatasetError("dataset", f"{path} is a folder but not one saved by datasets' save_to_disk "
                           "(no state.json or dataset_dict.json)")
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    if suffix == ".json":
        with path.open("rb") as f:
            head = f.read(4096).removeprefix(codecs.BOM_UTF8).lstrip()
        return "json" if head[:1] == b"[" else "jsonl"
    if suffix in (".csv", ".tsv"):
        return "csv"
    if suffix in (".parquet", ".pq"):
        return "parquet"
    raise DatasetError("dataset", f"unknown file type {suffix or '(none)'!r} of {path.name}",
                       [".jsonl", ".json", ".csv", ".parquet", "a datasets folder"])


def _check_size(path: Path, limit: int | None = None) -> int:
    limit = MAX_FILE_BYTES if limit is None else limit
    size = path.stat().st_size
    if size > limit:
        raise DatasetError("dataset", f"{path.name} is {size / 1e9:,.1f} GB, over the limit of {limit / 1e9:,.1f} GB")
    return size


def dataset_bytes(path: Path) -> int:
    """Bytes on disk of the dataset (all files of a folder)."""
    try:
        if path.is_dir():
            return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
        return path.stat().st_size
    except OSError as exc:
        raise _unreadable(path, exc) from None


def iter_rows(path: Path, split: str = "train") -> Iterator[dict]:
    """The rows of ``path`` as dicts, streamed (see the module docstring for the formats)."""
    try:
        fmt = detect_format(path)
        if fmt != "hf":
            _check_size(path)
    except OSError as exc:
        raise _unreadable(path, exc) from None
    return _guarded(path, {"jsonl": _jsonl, "json": _json_array, "csv": _csv, "parquet": _parquet,
                           "hf": lambda p: _hf_dir(p, split)}[fmt](path))


def _guarded(path: Path, rows: Iterator[dict]) -> Iterator[dict]:
    """``rows``, with an OS error while reading (no permission, an I/O error) as one line naming the dataset."""
    try:
        yield from rows
    except OSError as exc:
        raise _unreadable(path, exc) from None


def _unreadable(path: Path, exc: OSError) -> DatasetError:
    return DatasetError("dataset", f"cannot read {path}: {exc.strerror or type(exc).__name__}")


def _jsonl(path: Path) -> Iterator[dict]:
    with path.open("rb") as f:
        for n, line in enumerate(iter(lambda: f.readline(MAX_LINE_BYTES + 1), b""), 1):
            if len(line) > MAX_LINE_BYTES:
                raise DatasetError("dataset", f"line {n} of {path.name} is longer than {MAX_LINE_BYTES:,} bytes")
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except (ValueError, RecursionError) as exc:  # also 4,300+ digit integers, deep nesting (issue 12)
                raise DatasetError("dataset", f"line {n} of {path.name} {parse_error(exc, 'is not JSON: ')}") from None
            if not isinstance(row, dict):
                raise DatasetError("dataset", f"line {n} of {path.name} is a JSON {type(row).__name__}, not an object")
            yield row


def _json_array(path: Path) -> Iterator[dict]:
    _check_size(path, MAX_JSON_ARRAY_BYTES)
    try:
        data = json.loads(path.read_bytes())
    except (ValueError, RecursionError) as exc:  # also 4,300+ digit integers, deep nesting (issue 12)
        raise DatasetError("dataset", f"{path.name} {parse_error(exc, 'is not JSON: ')}") from None
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise DatasetError("dataset", f"{path.name} must be a JSON array of objects (or JSON Lines)")
    yield from data


def _csv(path: Path) -> Iterator[dict]:
    csv.field_size_limit(MAX_LINE_BYTES)
    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    # utf-8-sig: a byte-order mark (Excel's "CSV UTF-8") is dropped, not read into the first column's name
    with path.open("r", encoding="utf-8-sig", newline="") as f:
        try:
            yield from csv.DictReader(f, delimiter=delimiter)
        except (csv.Error, UnicodeDecodeError) as exc:
            raise DatasetError("dataset", f"{path.name} is not readable CSV: {exc}") from None


def _pyarrow():
    try:
        import pyarrow
        import pyarrow.ipc
        import pyarrow.parquet
    except ImportError:
        raise DatasetError("dataset", "Parquet and datasets folders need pyarrow: pip install 'vramfit[dataset]'") from None
    return pyarrow


def _parquet(path: Path) -> Iterator[dict]:
    pa = _pyarrow()
    try:
        pf = pa.parquet.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise DatasetError("dataset", f"{path.name} is not a readable Parquet file: {exc}") from None
    try:  # a valid footer over corrupt data pages fails only here (a snappy page, a truncated column chunk)
        for batch in pf.iter_batches(batch_size=ARROW_BATCH_ROWS):
            yield from batch.to_pylist()
    except (pa.ArrowInvalid, OSError) as exc:
        raise DatasetError("dataset", f"{path.name} is not a readable Parquet file: {exc}") from None


def _hf_dir(path: Path, split: str) -> Iterator[dict]:
    if (path / "dataset_dict.json").is_file():
        try:
            splits = json.loads((path / "dataset_dict.json").read_text(encoding="utf-8"))["splits"]
            splits = [str(s) for s in splits]
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
            raise DatasetError("dataset", f"{path.name}/dataset_dict.json is not a readable datasets index "
                               f"(a JSON object with its splits): {exc}") from None
        if split not in splits:
            raise DatasetError("split", f"{split!r} is not a split of {path.name}", splits)
        path = path / split
    try:
        state = json.loads((path / "state.json").read_text(encoding="utf-8"))
        files = [path / f["filename"] for f in state["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DatasetError("dataset", f"{path} has no readable state.json: {exc}") from None
    pa = _pyarrow()
    for file in files:
        if not file.is_file():
            raise DatasetError("dataset", f"{path.name}/state.json lists {file.name}, which is not in the folder")
        _check_size(file)
        try:
            with pa.memory_map(str(file)) as source, pa.ipc.open_stream(source) as reader:
                for batch in reader:
                    for start in range(0, batch.num_rows, ARROW_BATCH_ROWS):
                        yield from batch.slice(start, ARROW_BATCH_ROWS).to_pylist()
        except (pa.ArrowInvalid, OSError) as exc:
            raise DatasetError("dataset", f"{file.name} is not a readable Arrow file: {exc}") from None


__all__ = ["FORMATS", "dataset_bytes", "detect_format", "iter_rows"]
