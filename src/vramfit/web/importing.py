"""``POST /api/import``: a pasted training config (Axolotl, LLaMA-Factory, TRL, torchtune, litgpt, ms-swift script,
torchtitan TOML) as scenario keys plus the report of every key (read / default / ignored with reason / not modelled yet).

The text goes to :func:`vramfit.config_import.from_text`, which parses it as data only and refuses, never
opens, any file the config names; the body is bounded by :data:`~vramfit.web.service.MAX_BODY_BYTES`.
"""

from __future__ import annotations

import math
from typing import Any

from vramfit.errors import VramfitError
from vramfit.safe_input import shown
from vramfit.web.service import ApiError

MAX_ERROR_CHARS = 300  # an error is one line; a long YAML problem is cut here
#: The CLI's advice as the page says it (the page reads one pasted config and no file; the GPU count is a field).
WEB_HINTS = (
    ("; a pasted config cannot, paste without it or use the CLI's --from",
     "; the page reads no file: remove that key and paste the file's JSON into the DeepSpeed config field"),
    ("; pass the training config first and this file as a second --from (or name it in the config)",
     "; paste the training config here (a DeepSpeed JSON goes into the DeepSpeed config field)"),
    ("; pass --num-gpus", "; set the GPU count on the page"),
    ("; pass --dialect to say which", "; choose its format in the Format list"),
)


def web_words(text: str) -> str:
    """``text`` with the CLI's advice replaced by the page's (:data:`WEB_HINTS`)."""
    for cli, web in WEB_HINTS:
        text = text.replace(cli, web)
    return text


def _plain(value: Any) -> Any:
    """A JSON-safe copy of a config value (numbers, text, lists, mappings; anything else as text): a float JSON cannot
    hold (YAML's .nan and .inf, TOML's nan and inf, in a key the import reports but does not read) as its text."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(getattr(value, "value", value))


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= MAX_ERROR_CHARS else line[: MAX_ERROR_CHARS - 3] + "..."


def import_config(body: Any) -> dict[str, Any]:
    """``{text, dialect?}`` -> ``{dialect, scenario, report, defaults_source, eval_follows_micro}``; else one 422 line.

    ``eval_follows_micro``: the config evaluates at its micro-batch (``Imported.eval_follows_micro``), which the page
    sends back to /api/plan so that the cards that fit are evaluated at each micro-batch tried, as ``vramfit fit --from``."""
    from vramfit.config_import import DIALECTS, from_text
    from vramfit.config_import.report import KINDS, MISSING

    if not isinstance(body, dict):
        raise ApiError(422, "body", "the body must be a JSON object {text, dialect}")
    unknown = sorted(set(body) - {"text", "dialect"})
    if unknown:
        raise ApiError(422, unknown[0], "unknown key", ["text", "dialect"])
    text, dialect = body.get("text"), body.get("dialect")
    dialect = None if dialect == "" else dialect  # null or "": detect from the keys; 0, [], {}: refused below
    if not isinstance(text, str) or not text.strip():
        raise ApiError(422, "text", "paste a training config (YAML, JSON, TOML or a swift command)")
    if dialect is not None and (not isinstance(dialect, str) or dialect not in DIALECTS):
        raise ApiError(422, "dialect", (f"unknown dialect {_plain(dialect)!r}" if isinstance(dialect, str)
                                        else f"must be a dialect name or null, got {shown(_plain(dialect))}")
                       + f" (valid values: {', '.join(DIALECTS)})", list(DIALECTS))
    try:
        imp = from_text(text, dialect=dialect)
    except VramfitError as exc:
        raise ApiError(422, "text", _one_line(web_words(str(exc).removeprefix("from: ")))) from None
    order = {k: i for i, k in enumerate(KINDS)}
    report = [
        {"kind": e.kind, "key": e.key, "value": None if e.value is MISSING else _plain(e.value),
         "note": web_words(e.note) if e.note else e.note, "becomes": list(e.becomes)}
        for e in sorted(imp.entries, key=lambda e: order[e.kind])
    ]
    return {"dialect": imp.dialect, "scenario": _plain(imp.overrides), "report": report,
            "defaults_source": imp.defaults_source, "eval_follows_micro": imp.eval_follows_micro}
