"""What an import did with each key: read (and what it became), default filled (and whose), ignored (and
why), not modelled yet. :class:`KeyReader` walks one config; every leaf key must end in one of these."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vramfit.config_import.loader import fail
from vramfit.scenario import Scenario, parse_scenario

MISSING: Any = object()

KINDS = ("read", "default", "ignored", "not modelled yet")


@dataclass
class Entry:
    kind: str  # one of KINDS
    key: str  # dotted key in the file
    value: Any  # as in the file, or the default filled in
    note: str = ""  # why it is ignored / not modelled, or where a default comes from
    becomes: list[str] = field(default_factory=list)  # scenario keys it set, as "key=value"

    def line(self) -> str:
        val = "" if self.value is MISSING else f": {_short(self.value)}"
        to = f" → {', '.join(self.becomes)}" if self.becomes else ""
        if self.kind == "default":
            return f"default  {self.key}{val}{to or ' (no effect on its own)'}  [{self.note}]"
        if self.kind == "read":
            why = f"  [{self.note}]" if self.note and to else ""  # a read value's consequence worth saying
            return f"read     {self.key}{val}{to or (f' ({self.note})' if self.note else ' (no effect on its own)')}{why}"
        if self.kind == "ignored":
            return f"ignored  {self.key} ({self.note})"
        return f"not modelled yet: {self.key}{val}: {self.note}" + (f" → {', '.join(self.becomes)}" if self.becomes else "")


def _short(v: Any) -> str:
    text = str(v)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass
class Imported:
    """A training config turned into scenario keys, with the mapping of every key."""

    path: Path
    dialect: str
    overrides: dict[str, Any]  # scenario keys the config sets (or its dialect's defaults set)
    entries: list[Entry]
    defaults_source: str  # the dialect's defaults: project, file and pinned version
    write_keys: dict[str, str] = field(default_factory=dict)  # scenario key -> dotted key in the file
    companions: tuple[Path, ...] = ()  # DeepSpeed / accelerate / PEFT / bitsandbytes files read too
    flags: dict[str, Any] = field(default_factory=dict)  # CLI flags given on top (written back with a change)
    #: the file's eval batch is its micro batch (litgpt always; Axolotl's eval_batch_size and torchtune's batch_size_val
    #: when not given): a new micro batch moves it, unless the eval batch is written out (write_keys)
    eval_follows_micro: bool = False
    #: the dialect turns reentrant checkpointing off under FSDP2 itself (LLaMA-Factory): a companion accelerate config
    #: that selects FSDP2 sets use_reentrant no (config_import/llamafactory.py ``_reentrant``)
    reentrant_off_under_fsdp2: bool = False
    #: the file key that turns the Trainer's own checkpointing on (TrainingArguments.gradient_checkpointing, which TRL
    #: and Axolotl pass): transformers refuses it together with FSDP's activation checkpointing (hf_common
    #: ``double_checkpointing``), given or by default; empty where it is off or the dialect checkpoints the model itself
    trainer_checkpointing: str = ""
    #: the Trainer's bf16 or fp16 is on (TRL), so accelerate runs with mixed precision: under FSDP it keeps the trainable
    #: parameters in fp32 (config_import/trainer_layout.py ``fsdp_upcast``)
    trainer_mixed: bool = False

    @property
    def scenario(self) -> Scenario:
        return parse_scenario(self.overrides)

    def lines(self) -> list[str]:
        head = f"imported {self.dialect} config {self.path} (defaults: {self.defaults_source})"
        extra = [f"  also read {p}" for p in self.companions]
        order = {k: i for i, k in enumerate(KINDS)}
        body = [f"  {e.line()}" for e in sorted(self.entries, key=lambda e: order[e.kind])]
        return [head, *extra, *body]

    def not_modelled(self) -> list[Entry]:
        return [e for e in self.entries if e.kind == "not modelled yet"]


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Leaf keys as dotted paths (lists are leaves)."""
    out: dict[str, Any] = {}
    for k, v in data.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


class KeyReader:
    """Consumes a config's keys; :meth:`finish` refuses any key nobody read, ignored or reported."""

    def __init__(self, path: Path, dialect: str, data: dict[str, Any], source: str):
        self.path, self.dialect, self.source = path, dialect, source
        self.data = data  # the mapping as written (a key whose value is a whole companion config: deepspeed)
        self.flat = flatten(data)
        self.entries: dict[str, Entry] = {}
        self.out: dict[str, Any] = {}
        self.eval_follows_micro = False  # see Imported.eval_follows_micro
        self.reentrant_off_under_fsdp2 = False  # see Imported.reentrant_off_under_fsdp2
        self.trainer_checkpointing = ""  # see Imported.trainer_checkpointing
        self.trainer_mixed = False  # see Imported.trainer_mixed

    def has(self, key: str) -> bool:
        return key in self.flat or any(k.startswith(key + ".") for k in self.flat)

    def get(self, key: str, default: Any = MISSING, source: str | None = None) -> Any:
        """The key's value (recorded as read), else its default (recorded with its source), else None."""
        if key in self.flat and (self.flat[key] is not None or default is MISSING):
            self.entries[key] = Entry("read", key, self.flat[key])
            return self.flat[key]
        if default is not MISSING:
            self.entries[key] = Entry("default", key, default, source or self.source)
            return default
        return None

    def required(self, key: str) -> Any:
        """The value of a key the config must give (its model), read as :meth:`get`; absent or empty: refused."""
        value = self.get(key)
        if value is None and self.has(key):  # a mapping, flattened into keys under it
            raise self.error(f"{key} must be one value (a model id or a path), got a mapping")
        if not value:
            raise self.error(f"{key} is required")
        return value

    def sub(self, prefix: str) -> dict[str, Any]:
        """Leaves under ``prefix.`` (unconsumed), keyed by the rest of the path."""
        return {k[len(prefix) + 1:]: v for k, v in self.flat.items() if k.startswith(prefix + ".")}

    def set(self, key: str, scenario_key: str, value: Any) -> None:
        """Record that ``key`` made ``scenario_key = value``."""
        self.out[scenario_key] = value
        if key in self.entries:
            shown = value.value if hasattr(value, "value") else value
            self.entries[key].becomes.append(f"{scenario_key}={_short(shown)}")

    def ignore(self, pattern: str, reason: str) -> None:
        pattern = pattern.removesuffix(".*")  # "x.*" ignores x and everything under it
        for k in self.flat:
            if k not in self.entries and (fnmatch.fnmatchcase(k, pattern) or k.startswith(pattern + ".")):
                self.entries[k] = Entry("ignored", k, self.flat[k], reason)

    def not_modelled(self, key: str, what: str) -> None:
        """Keys under ``key`` not read yet: reported as not modelled yet (or ignored when off)."""
        for k in [k for k in self.flat if (k == key or k.startswith(key + ".")) and k not in self.entries]:
            off = self.flat[k] in (False, None, "", [], 0)
            self.entries[k] = Entry("ignored", k, self.flat[k], "off") if off else Entry("not modelled yet", k, self.flat[k], what)

    def mark(self, key: str, what: str) -> None:
        """A key already read that vramfit cannot model fully: reported as not modelled yet, with its effect."""
        e = self.entries.get(key) or Entry("read", key, self.flat.get(key, MISSING))
        e.kind, e.note = "not modelled yet", what
        self.entries[key] = e

    def error(self, message: str):
        return fail(self.path, message)

    def close(self, ignored: list[tuple[str, str]]) -> None:
        """Mark ``ignored`` patterns; refuse any key left that nobody read, ignored or reported."""
        for pattern, reason in ignored:
            self.ignore(pattern, reason)
        unknown = [k for k in self.flat if k not in self.entries]
        if unknown:
            more = f" (and {len(unknown) - 1} more: {', '.join(unknown[1:4])})" if len(unknown) > 1 else ""
            raise self.error(f"unknown {self.dialect} key '{unknown[0]}'{more}; vramfit does not know what it does "
                             f"to memory; remove it or check the spelling")

    def finish(self, ignored: list[tuple[str, str]], write_keys: dict[str, str],
               companions: tuple[Path, ...] = (), extra: list[Entry] | None = None) -> Imported:
        self.close(ignored)
        out = {k: (v.value if hasattr(v, "value") else v) for k, v in self.out.items()}
        entries = list(self.entries.values()) + list(extra or [])
        imp = Imported(self.path, self.dialect, out, entries, self.source, write_keys, companions,
                       eval_follows_micro=self.eval_follows_micro and bool(out.get("eval_batch_size")),
                       reentrant_off_under_fsdp2=self.reentrant_off_under_fsdp2,
                       trainer_checkpointing=self.trainer_checkpointing, trainer_mixed=self.trainer_mixed)
        try:  # validate once, here, so the error names the file (a model may still come from --model)
            parse_scenario(out if out.get("model") or out.get("params") else {**out, "model": "placeholder"})
        except ValueError as exc:
            raise self.error(f"gives an invalid scenario: {exc}") from None
        return imp
