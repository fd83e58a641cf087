"""Which column holds the training text: plain text, chat messages, or a prompt and a completion.

The three shapes and their names follow TRL's SFT dataset formats (huggingface/trl 1.16.0
``trl/data_utils.py``: ``is_conversational`` looks for ``messages``/``prompt``/``completion`` lists of
``{"role", "content"}``; ``maybe_convert_to_chatml`` turns ``conversations`` of ``{"from", "value"}``
into messages; ``SFTConfig.dataset_text_field`` defaults to ``"text"``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from vramfit.dataset.limits import DatasetError

_FROM_VALUE_ROLES = {"human": "user", "gpt": "assistant", "system": "system", "user": "user", "assistant": "assistant"}


class Kind(str, Enum):
    TEXT = "text"
    MESSAGES = "messages"
    PROMPT_COMPLETION = "prompt-completion"


@dataclass(frozen=True)
class Fields:
    """How to read one row: the kind and the column name(s)."""

    kind: Kind
    columns: tuple[str, ...]
    conversational: bool  # messages, or prompt/completion given as message lists

    def describe(self) -> str:
        return f"{self.kind.value} ({', '.join(self.columns)})"


def _is_messages(value) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) for m in value)


def detect_fields(row: dict, field: str | None = None) -> Fields:
    """The :class:`Fields` of a dataset from its first row, or of the named ``field``."""
    cols = sorted(row)
    if field:
        if "," in field:
            p, c = (x.strip() for x in field.split(",", 1))
            if p == c:
                raise DatasetError("field", f"names the column {p!r} twice; give one column (text or messages) or "
                                   "two different ones (prompt,completion)")
            if p not in row or c not in row:
                raise DatasetError("field", f"columns {p!r} and {c!r} not both in the dataset", cols)
            return Fields(Kind.PROMPT_COMPLETION, (p, c), _is_messages(row[p]))
        if field not in row:
            raise DatasetError("field", f"no column {field!r} in the dataset", cols)
        value = row[field]
        if _is_messages(value):
            return Fields(Kind.MESSAGES, (field,), True)
        if isinstance(value, str):
            return Fields(Kind.TEXT, (field,), False)
        raise DatasetError("field", f"column {field!r} holds {type(value).__name__}, not text or a list of messages")
    for name in ("messages", "conversations"):
        if _is_messages(row.get(name)):
            return Fields(Kind.MESSAGES, (name,), True)
    if "prompt" in row and "completion" in row:
        return Fields(Kind.PROMPT_COMPLETION, ("prompt", "completion"), _is_messages(row["prompt"]))
    if isinstance(row.get("text"), str):
        return Fields(Kind.TEXT, ("text",), False)
    for name in ("text", "messages", "conversations"):  # the column is there, its value is not text
        if name in row:
            want = "text" if name == "text" else "a list of messages ({role, content} objects)"
            raise DatasetError("field", f"column {name!r} holds {type(row[name]).__name__}, not {want}; name another "
                               "column with --field", cols)
    raise DatasetError("field", "no text field found (looked for messages, conversations, prompt+completion, text); "
                       "name one with --field", cols)


def messages_of(value, where: str) -> list[dict]:
    """Chat messages as ``{"role", "content"}`` dicts (``from``/``value`` converted as TRL does)."""
    if not _is_messages(value):
        got = "an empty list" if isinstance(value, list) and not value else (
            "a list of other values" if isinstance(value, list) else type(value).__name__)
        raise DatasetError("field", f"{where}: expected a list of messages ({{role, content}} objects), got {got}")
    out = []
    for m in value:
        if "role" in m:
            out.append(m)
        elif "from" in m and "value" in m:
            out.append({"role": _FROM_VALUE_ROLES.get(m["from"], m["from"]), "content": m["value"]})
        else:
            raise DatasetError("field", f"{where}: a message has neither role/content nor from/value: {sorted(m)}")
    return out


def text_of(value, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise DatasetError("field", f"{where}: expected text, got {type(value).__name__}")
    return value
