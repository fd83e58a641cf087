"""``POST /api/dataset``: a small uploaded dataset file (JSON Lines, JSON or CSV) -> its length histogram.

No tokenizer travels with a browser upload, so lengths are the characters-per-token approximation of
:mod:`vramfit.dataset.tokenize` (``exact_tokens`` is false and the answer says so). The file is written
to a private temporary file (the upload's own name is never used as a path) and removed afterwards.
With a scenario naming a catalog card, the answer adds the longest ``seq_len`` that card fits
(:func:`vramfit.plan.fit`), drawn on the page as a line over the histogram, and the spread its reserved figure takes
with these lengths in random order, truncated at the scenario's ``seq_len`` and padded to each micro-batch's longest
(:mod:`vramfit.dataset.spread`; ``reserved_spread`` null where the lengths do not vary or the scenario is a pasted
config.json).
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

from vramfit.dataset.limits import DatasetError
from vramfit.dataset.spread import spread_line
from vramfit.web.service import ApiError, check_scenario, error_message, parse_json_text

MAX_UPLOAD_BYTES = 4 * 2**20  # a browser sample, not a training set (the CLI reads files up to 200 GB)
SUFFIXES = (".jsonl", ".json", ".csv")
#: The multipart fields the upload takes: the file and, optionally, the scenario as JSON text.
FORM_FIELDS = ("file", "scenario")
#: The library's hints name CLI flags the page has no field for: said as the upload form can act on them
#: (the CLI keeps its own wording; vramfit.dataset is shared with it).
WEB_HINTS = (
    ("; give --tokenizer for exact counts",
     "; this page loads no tokenizer: `vramfit plan --dataset FILE --tokenizer MODEL` counts exactly"),
    (" Give --tokenizer for exact counts.",
     " This page loads no tokenizer: `vramfit plan --dataset FILE --tokenizer MODEL` counts exactly."),
    ("; name one with --field", "; rename the column that holds the text to one of those and upload the file again"),
    ("; name another column with --field", "; give that column what it names (or put the text in a 'text' column as "
     "a string) and upload the file again"),
)


def safe_name(filename: str | None, suffix: str) -> str:
    """The upload's own file name as the messages show it: its last path part, characters other than letters,
    digits, ``.``, ``-`` and ``_`` replaced, at most 80 characters, ending in ``suffix`` (``upload.jsonl`` when
    nothing is left). It names a file inside a private temporary folder only, never a path of the user's."""
    base = re.split(r"[/\\]", filename or "")[-1]
    stem = base[: -len(suffix)] if base.lower().endswith(suffix) else base
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", stem).strip("._")[:80] or "upload"
    return stem + suffix


def for_web(text: str, folder: str = "") -> str:
    """A message or note of vramfit.dataset as the upload form shows it: hints for the page, no temporary folder."""
    if folder:
        text = text.replace(folder.rstrip("/\\") + "/", "").replace(folder, "")
    for cli, web in WEB_HINTS:
        text = text.replace(cli, web)
    return text


def _web_error(exc: DatasetError, folder: str) -> DatasetError:
    """``exc`` with its message said for the page (same key and valid values)."""
    return DatasetError(exc.key, for_web(error_message(exc), folder), exc.valid)


def _scenario(scenario_text: str | None):
    """The checked scenario of the upload's ``scenario`` field, or None: none given, or a pasted config.json (no
    catalog entry for fit() to resize or for the spread to resolve)."""
    if not scenario_text:
        return None
    checked = check_scenario(parse_json_text(scenario_text, "scenario", "the scenario field"))
    return None if checked.pasted else checked.scenario


def _card(sc) -> dict[str, Any] | None:
    if sc is None or not sc.gpu:
        return None
    from vramfit.plan import fit
    from vramfit.web import service

    f = fit(sc, sc.gpu, calibration=service.CALIBRATION)  # the server's calibration, as /api/estimate applies it
    return {"gpu": sc.gpu, "name": f.gpu_name, "max_seq_len": f.max_seq_len}


def analyze_upload(filename: str, raw: bytes, scenario_text: str | None = None) -> dict[str, Any]:
    """The length report of an uploaded file (approximate tokens), plus the card's longest fitting sequence."""
    from vramfit.dataset import analyze_dataset

    suffix = Path(filename or "").suffix.lower()
    if suffix not in SUFFIXES:
        raise ApiError(422, "file", f"unknown dataset format {suffix or '(none)'!r}", list(SUFFIXES))
    if len(raw) > MAX_UPLOAD_BYTES:
        raise ApiError(413, "file", f"is larger than {MAX_UPLOAD_BYTES // 2**20} MiB; use `vramfit plan --dataset`")
    sc = _scenario(scenario_text)
    card = _card(sc)
    with tempfile.TemporaryDirectory(prefix="vramfit-upload-") as tmp:
        path = Path(tmp) / safe_name(filename, suffix)
        path.write_bytes(raw)
        try:
            r = analyze_dataset(path)
            spread = None if sc is None else _spread(path, sc)
        except DatasetError as exc:
            raise _web_error(exc, tmp) from None
    return {"file": Path(filename).name, "rows": r.rows, "exact_tokens": r.exact_tokens, "tokenizer": r.tokenizer,
            "fields": r.fields, "percentiles": r.percentiles,
            "histogram": [{"from": lo, "to": hi, "samples": n} for lo, hi, n in r.histogram],
            "suggested_max_length": r.suggested_max_length, "notes": [for_web(n) for n in r.notes], "card": card,
            "reserved_spread": spread, "reserved_spread_text": None if spread is None else spread_line(spread)}


def _spread(path: Path, sc) -> dict[str, Any] | None:
    """:func:`vramfit.dataset.spread.reserved_spread` of the scenario's estimate at the file's peak micro-batch (TRL's
    defaults as ``vramfit estimate --dataset`` takes them: truncated at ``seq_len``, padded to the longest)."""
    from vramfit.dataset import Policy, analyze_dataset, reserved_spread
    from vramfit.estimate import estimate
    from vramfit.web import service

    r = analyze_dataset(path, policy=Policy(micro_batch_size=sc.micro_batch_size, grad_accum=sc.grad_accum,
                                            max_length=sc.seq_len))
    return reserved_spread(estimate(sc, seq_len=r.peak_seq_len, calibration=service.CALIBRATION), r)
