"""Read a training config file safely: size cap, one YAML/JSON mapping, no tags, anchors or aliases.

Training configs are a few kilobytes; a file over :data:`MAX_BYTES` is refused before it is read.
YAML is scanned as events first (PyYAML's safe parser), so an alias "billion laughs" bomb or a
``!!python/object`` tag is refused before anything is constructed; duplicate keys are refused too
(PyYAML would keep the last one silently, which hides a contradiction).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from vramfit import limits
from vramfit.errors import ScenarioError
from vramfit.safe_input import DuplicateKey, parse_error, unique_pairs, yaml_key_twice

#: Largest config file read (bytes). The largest published example configs are under 20 kB.
MAX_BYTES = 1_048_576


def fail(path: Path | str, message: str) -> ScenarioError:
    """The one-line error of an import: ``from: <file>: <message>``."""
    return ScenarioError("from", f"{path}: {message}")


def read_text(path: Path) -> str:
    if not path.is_file():
        raise fail(path, "file not found" if not path.exists() else "is a directory or a device, not a file")
    try:  # no permission, an I/O error, a file gone since the look above: one line, never a traceback
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise fail(path, f"is {size:,} bytes; a training config is at most {MAX_BYTES:,} bytes")
        with path.open("rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        raise fail(path, f"cannot read it: {exc.strerror or type(exc).__name__}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise fail(path, "is not UTF-8 text (not a YAML or JSON config)") from None


def _check_events(path: Path, text: str) -> None:
    import yaml

    docs = depth = 0
    for ev in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1  # refused before composing: PyYAML builds nested nodes by recursion
            if depth > limits.MAX_CONFIG_DEPTH:
                raise fail(path, f"is nested too deeply (more than {limits.MAX_CONFIG_DEPTH} levels: MAX_CONFIG_DEPTH)")
        elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
        if isinstance(ev, yaml.AliasEvent) or getattr(ev, "anchor", None):
            raise fail(path, "YAML anchors and aliases (&name, *name) are not accepted; write the values out")
        if isinstance(ev, yaml.ScalarEvent):
            explicit = ev.tag is not None and not ev.implicit[0] and not ev.implicit[1]
        else:
            explicit = getattr(ev, "tag", None) is not None and not getattr(ev, "implicit", True)
        if explicit:
            raise fail(path, f"YAML tags ({ev.tag}) are not accepted; write plain values")
        if isinstance(ev, yaml.DocumentStartEvent):
            docs += 1
            if docs > 1:
                raise fail(path, "holds several YAML documents; give one config per file")


def _strict_loader():
    import yaml

    class StrictLoader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            if twice := yaml_key_twice(self, node):
                raise ValueError(f"key {twice[0]!r} is given twice (line {twice[1]})")
            return super().construct_mapping(node, deep=deep)

    return StrictLoader


#: The name a pasted config goes by in messages; files it names are never opened (see hf_common.resolve_path).
PASTED = "<pasted config>"


def load_mapping(path: Path) -> dict[str, Any]:
    """The file's top-level mapping (YAML or JSON), or one clear :class:`ScenarioError`."""
    return parse_mapping(read_text(path), path)


def parse_mapping(text: str, path: Path) -> dict[str, Any]:
    """A config's text as its top-level mapping; ``path`` names it in messages (``.json``: parsed as JSON)."""
    import yaml

    if len(text.encode("utf-8")) > MAX_BYTES:
        raise fail(path, f"is over {MAX_BYTES:,} bytes; a training config is smaller")
    kind = text_kind(text, path)
    if kind == "toml":
        data = _toml(text, path)
    elif kind == "shell":
        from vramfit.config_import.swift_shell import parse_script

        data = parse_script(text, path)
    elif kind == "json":
        try:
            data = json.loads(text, object_pairs_hook=unique_pairs)
        except DuplicateKey as exc:
            raise fail(path, str(exc)) from None
        except ValueError as exc:
            raise fail(path, parse_error(exc, "is not valid JSON: ")) from None
        except RecursionError:  # issue 12: deep nesting is one line, not a traceback
            raise fail(path, "is not valid JSON: nested too deeply") from None
    else:
        try:
            _check_events(path, text)
            data = yaml.load(text, Loader=_strict_loader())  # noqa: S506 - SafeLoader subclass
        except ScenarioError:  # _check_events' own one line (a ValueError too): not wrapped twice
            raise
        except RecursionError:
            raise fail(path, f"is nested too deeply (more than {limits.MAX_CONFIG_DEPTH} levels: MAX_CONFIG_DEPTH)") from None
        except ValueError as exc:  # also an integer of 4,300+ digits (no word of sys.set_int_max_str_digits)
            raise fail(path, parse_error(exc)) from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 1})" if mark is not None else ""
            raise fail(path, f"is not valid YAML{where}: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(data, dict):
        raise fail(path, f"must hold a mapping of config keys, got {type(data).__name__}")
    _check_depth(path, data)
    return data


def _check_depth(path: Path, data: Any) -> None:
    """JSON and TOML parse deep nesting that the readers would recurse through (YAML is checked before composing,
    :func:`_check_events`): more than ``MAX_CONFIG_DEPTH`` levels is one line, walked without recursion."""
    stack = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limits.MAX_CONFIG_DEPTH:
            raise fail(path, f"is nested too deeply (more than {limits.MAX_CONFIG_DEPTH} levels: MAX_CONFIG_DEPTH)")
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


#: A TOML table header on a line of its own (torchtitan's job configs): ``[training]``, ``[quantize.linear.float8]``.
_TOML_TABLE = re.compile(r"^\[[A-Za-z_][\w.]*\]\s*(#.*)?$", re.M)


def text_kind(text: str, path: Path) -> str:
    """How a config's text is parsed: by its suffix (.json, .yaml/.yml, .toml, .sh), else by its look (a pasted
    config): TOML table headers, a ``swift sft|rlhf|pt`` command line, else YAML (which JSON also is)."""
    suffix = path.suffix.lower()
    known = {".json": "json", ".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".sh": "shell"}
    if suffix in known:
        return known[suffix]
    from vramfit.config_import.swift_shell import looks_like_swift

    if _TOML_TABLE.search(text):
        return "toml"
    return "shell" if looks_like_swift(text) else "yaml"


def _toml(text: str, path: Path) -> dict[str, Any]:
    import tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise fail(path, f"is not valid TOML: {exc}") from None


