"""Import a training config (Axolotl, LLaMA-Factory, TRL/transformers, torchtune, litgpt) as a scenario.

``from_config(path, *companions, dialect=None)`` reads the file safely (see :mod:`.loader`), detects or
checks its dialect, maps every key (read / default filled / ignored / not modelled yet) and returns an
:class:`Imported` whose ``scenario`` is validated. Pure: no torch, no network; ruamel.yaml is imported
only by :mod:`.writeback`.
"""

from __future__ import annotations

from pathlib import Path

from vramfit.config_import.detect import DIALECTS, detect
from vramfit.config_import.loader import PASTED, fail, load_mapping, parse_mapping
from vramfit.config_import.report import Entry, Imported

__all__ = ["DIALECTS", "Entry", "Imported", "from_config", "from_text"]


def _reader(dialect: str):
    import importlib

    return importlib.import_module(f"vramfit.config_import.{dialect}").read


def from_config(path: str | Path, *companions: str | Path, dialect: str | None = None) -> Imported:
    """A training config (plus DeepSpeed/accelerate/PEFT/bitsandbytes files) as a validated scenario."""
    from vramfit.config_import.companions import apply

    p = Path(path)
    data = load_mapping(p)
    name = detect(p, data, dialect)
    imp = _reader(name)(p, data)
    for c in companions:
        if Path(c).resolve() == p.resolve():  # read again as a companion, its keys would clash with themselves
            raise fail(Path(c), "is the training config given again; give it once, then its DeepSpeed, accelerate, "
                                "PEFT adapter or BitsAndBytesConfig files")
        imp = apply(imp, Path(c))
    return imp


def from_text(text: str, dialect: str | None = None) -> Imported:
    """A pasted config (YAML or JSON text; TOML for torchtitan) as a validated scenario; files it names are refused,
    never opened. A torchtitan paste is read as TOML whatever it looks like, so its parse error is TOML's."""
    p = Path(PASTED)
    data = parse_mapping(text, p.with_name(PASTED + ".toml") if dialect == "torchtitan" else p)
    name = detect(p, data, dialect)
    return _reader(name)(p, data)
