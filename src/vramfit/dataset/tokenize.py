"""Token counts per row: the row rendered as the trainer renders it, then counted.

With a tokenizer (a local ``tokenizer.json``, or a folder holding it; read with the ``tokenizers``
library, never downloaded) the count is exact. Rendering follows TRL's ``SFTTrainer._prepare_dataset``
(huggingface/trl 1.16.0 ``trl/trainer/sft_trainer.py``):

- plain text and non-conversational prompt/completion: the EOS token is appended when missing
  (``add_eos``), then tokenized with the tokenizer's special tokens (``processing_class(text=...)``,
  ``add_special_tokens`` defaulting to True);
- messages (and conversational prompt/completion, counted as prompt + completion): the chat template
  is rendered and tokenized without adding special tokens again (``apply_chat_template``,
  ``add_special_tokens=False``). The template is the folder's ``chat_template.jinja`` or the
  ``chat_template`` of ``tokenizer_config.json``, rendered in a Jinja sandbox set up as
  transformers 5.24.0 ``utils/chat_template_utils.py`` ``_compile_jinja_template`` does.

Without a tokenizer the count is ``ceil(characters / CHARS_PER_TOKEN)``, an approximation that the
report flags; messages without a template are rendered in the ChatML layout, also flagged.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from vramfit.dataset.fields import Fields, Kind, messages_of, text_of
from vramfit.dataset.limits import MAX_RENDERED_CHARS, MAX_TOKENIZER_BYTES, DatasetError
from vramfit.estimate.constants import Constant

CHARS_PER_TOKEN = Constant(
    4.0, "characters per token",
    "OpenAI Help Center, 'What are tokens and how to count them?': 1 token ~= 4 chars in English",
    "English prose with a GPT-style BPE; code, other languages and small vocabularies use fewer characters "
    "per token. Give --tokenizer for exact counts.",
)
#: ChatML (used by Qwen and others) stands in for a missing template: one header and one end marker per turn.
CHATML = "<|im_start|>{role}\n{content}<|im_end|>\n"


def _special(value) -> str | None:
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def _read_json(path: Path) -> dict:
    if path.stat().st_size > MAX_TOKENIZER_BYTES:
        raise DatasetError("tokenizer", f"{path.name} is over {MAX_TOKENIZER_BYTES:,} bytes")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise DatasetError("tokenizer", f"{path} is not JSON: {exc}") from None


def _jinja_template(source: str):
    try:
        import jinja2
        from jinja2 import nodes
        from jinja2.ext import Extension, loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise DatasetError("tokenizer", "chat templates need jinja2: pip install 'vramfit[dataset]'") from None

    class Generation(Extension):  # {% generation %} marks assistant tokens; the text renders as is
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.Scope(body).set_lineno(lineno)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters["tojson"] = lambda x, indent=None, **_: json.dumps(x, ensure_ascii=False, indent=indent)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: "1970-01-01"
    try:
        return env.from_string(source)
    except jinja2.TemplateError as exc:
        raise DatasetError("tokenizer", f"the chat template does not parse: {exc}") from None


@dataclass
class Encoder:
    """Counts the tokens of rows; ``exact`` is False for the characters-per-token approximation."""

    tokenizer: object | None = None
    template: object | None = None
    bos: str | None = None
    eos: str | None = None
    chars_per_token: float = CHARS_PER_TOKEN.value
    source: str = "approximation"

    @property
    def exact(self) -> bool:
        return self.tokenizer is not None

    def render(self, row: dict, fields: Fields, n: int) -> str:
        """The text the trainer tokenizes for ``row`` (the ``n``-th, for error messages)."""
        where = f"row {n}"
        if fields.kind is Kind.TEXT and not fields.conversational:
            return self._with_eos(text_of(row[fields.columns[0]], where))
        if not fields.conversational:
            return self._with_eos(text_of(row[fields.columns[0]], where) + text_of(row[fields.columns[1]], where))
        msgs = [m for c in fields.columns for m in messages_of(row[c], where)]
        if self.template is None:
            return "".join(CHATML.format(role=m.get("role", ""), content=m.get("content") or "") for m in msgs)
        try:
            text = self.template.render(messages=msgs, bos_token=self.bos or "", eos_token=self.eos or "",
                                        add_generation_prompt=False, tools=None)
        except Exception as exc:  # a template's raise_exception or a missing key: the user's data or template
            raise DatasetError("tokenizer", f"{where}: the chat template failed: {exc}") from None
        if len(text) > MAX_RENDERED_CHARS:
            raise DatasetError("dataset", f"{where} renders to over {MAX_RENDERED_CHARS:,} characters")
        return text

    def _with_eos(self, text: str) -> str:
        return text if not self.eos or text.endswith(self.eos) else text + self.eos

    def count(self, texts: list[str], fields: Fields) -> list[int]:
        """Token counts of rendered ``texts`` (special tokens added for plain text only, as TRL does)."""
        if self.tokenizer is None:
            return [math.ceil(len(t) / self.chars_per_token) for t in texts]
        special = not fields.conversational
        return [len(e.ids) for e in self.tokenizer.encode_batch(texts, add_special_tokens=special)]


def load_encoder(path: str | Path | None, chars_per_token: float | None = None) -> Encoder:
    """An :class:`Encoder` from a local tokenizer file or folder, or the approximation without one."""
    if path is None:
        cpt = CHARS_PER_TOKEN.value if chars_per_token is None else float(chars_per_token)
        if not 0.5 <= cpt <= 20:
            raise DatasetError("chars_per_token", f"must be from 0.5 to 20, got {chars_per_token!r}")
        return Encoder(chars_per_token=cpt, source=f"approximation: {cpt:g} characters per token")
    p = Path(path)
    if not p.exists():
        raise DatasetError("tokenizer", f"not found: {p} (a local tokenizer.json or a folder holding one; "
                           "nothing is downloaded)")
    folder = p if p.is_dir() else p.parent
    file = p / "tokenizer.json" if p.is_dir() else p
    if not file.is_file():
        raise DatasetError("tokenizer", f"{p} holds no tokenizer.json (a fast tokenizer file is needed)")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise DatasetError("tokenizer", "reading a tokenizer needs the tokenizers library: pip install 'vramfit[dataset]'") from None
    if file.stat().st_size > MAX_TOKENIZER_BYTES:
        raise DatasetError("tokenizer", f"{file.name} is over {MAX_TOKENIZER_BYTES:,} bytes")
    try:
        tok = Tokenizer.from_file(str(file))
    except Exception as exc:  # the Rust library raises plain Exception for any malformed file
        raise DatasetError("tokenizer", f"{file} is not a tokenizers file: {str(exc)[:200]}") from None
    cfg = _read_json(folder / "tokenizer_config.json") if (folder / "tokenizer_config.json").is_file() else {}
    source = cfg.get("chat_template")
    if isinstance(source, list):  # named templates: transformers uses "default"
        source = next((t.get("template") for t in source if t.get("name") == "default"), None)
    if (folder / "chat_template.jinja").is_file():
        source = (folder / "chat_template.jinja").read_text(encoding="utf-8")
    return Encoder(tokenizer=tok, template=_jinja_template(source) if source else None,
                   bos=_special(cfg.get("bos_token")), eos=_special(cfg.get("eos_token")), source=str(file))
