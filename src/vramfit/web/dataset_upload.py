"""``POST /api/dataset``: a small uploaded dataset file (JSON Lines, JSON or CSV) -> its length histogram.

No tokenizer travels with a browser upload, so lengths are the characters-per-token approximation of
:mod:`vramfit.dataset.tokenize` (``exact_tokens`` is false and the answer says so). The file is written
to a private temporary file (the upload's own name is never used as a path) and removed afterwards.
With a scenario naming a catalog card, the answer adds the longest ``seq_len`` that card fits
(:func:`vramfit.plan.fit`), drawn on the page as a line over the histogram.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from vramfit.web.service import ApiError, check_scenario

MAX_UPLOAD_BYTES = 4 * 2**20  # a browser sample, not a training set (the CLI reads files up to 200 GB)
SUFFIXES = (".jsonl", ".json", ".csv")


def _card(scenario_text: str | None) -> dict[str, Any] | None:
    if not scenario_text:
        return None
    try:
        data = json.loads(scenario_text)
    except json.JSONDecodeError as exc:
        raise ApiError(422, "scenario", f"is not valid JSON ({exc.msg})") from None
    checked = check_scenario(data)
    sc = checked.scenario
    if not sc.gpu or checked.pasted:  # a pasted config.json has no catalog entry for fit() to resize
        return None
    from vramfit.plan import fit

    f = fit(sc, sc.gpu)
    return {"gpu": sc.gpu, "name": f.gpu_name, "max_seq_len": f.max_seq_len}


def analyze_upload(filename: str, raw: bytes, scenario_text: str | None = None) -> dict[str, Any]:
    """The length report of an uploaded file (approximate tokens), plus the card's longest fitting sequence."""
    from vramfit.dataset import analyze_dataset

    suffix = Path(filename or "").suffix.lower()
    if suffix not in SUFFIXES:
        raise ApiError(422, "file", f"unknown dataset format {suffix or '(none)'!r}", list(SUFFIXES))
    if len(raw) > MAX_UPLOAD_BYTES:
        raise ApiError(413, "file", f"is larger than {MAX_UPLOAD_BYTES // 2**20} MiB; use `vramfit plan --dataset`")
    card = _card(scenario_text)
    with tempfile.TemporaryDirectory(prefix="vramfit-upload-") as tmp:
        path = Path(tmp) / f"upload{suffix}"
        path.write_bytes(raw)
        r = analyze_dataset(path)
    return {"file": Path(filename).name, "rows": r.rows, "exact_tokens": r.exact_tokens, "tokenizer": r.tokenizer,
            "fields": r.fields, "percentiles": r.percentiles,
            "histogram": [{"from": lo, "to": hi, "samples": n} for lo, hi, n in r.histogram],
            "suggested_max_length": r.suggested_max_length, "notes": r.notes, "card": card}
