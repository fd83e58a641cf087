"""Write changed scenario keys back into the user's config, in its own dialect.

ruamel.yaml's round-trip loader (imported here only) locates each key's value (line, column); only that
value's text is replaced, so every other byte of the file (comments, order, quoting, spacing) is kept.
A key the file does not have is added under its parent (or at the end). Nothing is written unless asked.
"""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path
from typing import Any

from vramfit.config_import.hf_common import HF_OPTIMIZER_NAMES
from vramfit.config_import.loader import fail, read_text
from vramfit.config_import.report import Imported

#: How each dialect spells gradient_checkpointing / loss values (None: cannot be said in that file).
CHECKPOINTING = {"axolotl": {"none": False, "full": True, "offload": "offload"}, "trl": {"none": False, "full": True},
                 "llamafactory": {"none": True, "full": False}, "torchtune": {"none": False, "full": True}}
LOSS = {"trl": {"fused": True, "standard": False}, "llamafactory": {"fused": True, "standard": False}}
_HF = ("axolotl", "trl", "llamafactory")


def file_values(imp: Imported, changes: dict[str, Any], scenario: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(dotted file key -> value to write, ["key=value" the dialect's file cannot hold])."""
    out: dict[str, Any] = {}
    left: list[str] = []
    for key, value in changes.items():
        fkey = imp.write_keys.get(key)
        v: Any = value
        if key == "gradient_checkpointing":
            v = CHECKPOINTING.get(imp.dialect, {}).get(value)
        elif key == "loss":
            v = LOSS.get(imp.dialect, {}).get(value)
        elif key == "optimizer":
            v = HF_OPTIMIZER_NAMES.get(value) if imp.dialect in _HF else None
        elif key == "grad_accum" and imp.dialect == "litgpt":
            v = int(value) * int(scenario["micro_batch_size"]) * int(scenario["num_gpus"])
        if fkey is None or v is None:
            left.append(f"{key}={value}")
        else:
            out[fkey] = v
    return out, left


def _scalar(value: Any, old: str) -> str:
    if isinstance(value, bool):
        text = "true" if value else "false"
        return text.capitalize() if old[:1].isupper() else text
    if isinstance(value, (int, float)):
        return str(value)
    text = str(value)
    return text if re.fullmatch(r"[A-Za-z_][\w.\-/]*", text) and text.lower() not in ("true", "false", "null") else json.dumps(text)


_VALUE = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\']|\'\')*\'|[^,}\]#\n]*?(?=\s*(?:#|,|}|]|$))')


def _locate(tree: Any, dotted: str) -> tuple[Any, str, int | None]:
    """(parent node, last key, index of the deepest existing ancestor's depth or None if the key exists)."""
    node, parts = tree, dotted.split(".")
    for i, part in enumerate(parts[:-1]):
        if not isinstance(node.get(part), dict):
            return node, part, i
        node = node[part]
    return node, parts[-1], None if parts[-1] in node else len(parts) - 1


def _edit(lines: list[str], tree: Any, dotted: str, value: Any, json_file: bool, path: Path) -> None:
    parent, last, missing = _locate(tree, dotted)
    parts = dotted.split(".")
    if missing is None:
        line, col = parent.lc.value(last)
        m = _VALUE.match(lines[line], col)
        if m is None or isinstance(parent[last], (dict, list)):
            raise fail(path, f"cannot rewrite {dotted} in place (not a plain value)")
        old = m.group(0)
        new = json.dumps(value) if json_file else _scalar(value, old)
        lines[line] = lines[line][:col] + new + lines[line][m.end():]
        return
    if json_file:
        raise fail(path, f"has no {dotted}; add it by hand (vramfit adds keys to YAML files only)")
    rest = parts[missing:]
    if missing == 0:
        block = [f"{'  ' * i}{p}:" for i, p in enumerate(rest[:-1])] + [f"{'  ' * (len(rest) - 1)}{rest[-1]}: {_scalar(value, '')}"]
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        lines.extend(b + "\n" for b in block)
        return
    line, col = parent.lc.key(next(iter(parent))) if parent else (None, None)
    if line is None:
        raise fail(path, f"cannot add {dotted} under an empty mapping")
    indent = " " * col
    block = [f"{indent}{'  ' * i}{p}:\n" for i, p in enumerate(rest[:-1])]
    block.append(f"{indent}{'  ' * (len(rest) - 1)}{rest[-1]}: {_scalar(value, '')}\n")
    lines[line:line] = block


def rewrite(imp: Imported, values: dict[str, Any]) -> str:
    """The source file's text with ``values`` (dotted file keys) set; every other line unchanged."""
    try:
        from ruamel.yaml import YAML
    except ModuleNotFoundError:
        raise fail(imp.path, "writing a config back needs ruamel.yaml: pip install 'vramfit[import]'") from None

    text = read_text(imp.path)
    tree = YAML(typ="rt").load(text)
    lines = text.splitlines(keepends=True)
    json_file = imp.path.suffix.lower() == ".json"
    for dotted, value in values.items():
        _edit(lines, tree, dotted, value, json_file, imp.path)
    return "".join(lines)


def write_back(imp: Imported, changes: dict[str, Any], scenario: dict[str, Any], dest: Path) -> tuple[str, list[str]]:
    """Write the changed file to ``dest``; (unified diff, changes the file cannot hold)."""
    values, left = file_values(imp, changes, scenario)
    old = read_text(imp.path)
    new = rewrite(imp, values) if values else old
    dest.write_text(new, encoding="utf-8")
    diff = "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        fromfile=str(imp.path), tofile=str(dest)))
    return diff, left
