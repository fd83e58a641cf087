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
from vramfit.config_import.torchtune import LOSS_COMPONENTS as TT_LOSS_COMPONENTS
from vramfit.config_import.torchtune import OPTIMIZERS as TT_OPTIMIZERS

#: How each dialect spells a scenario value as file keys. A key the file lacks is written only when its
#: dialect default differs from the value wanted (so an absent "off" switch stays absent).
_GC_TT = {"none": {"enable_activation_checkpointing": False, "enable_activation_offloading": False},
          "full": {"enable_activation_checkpointing": True, "enable_activation_offloading": False},
          "offload": {"enable_activation_checkpointing": True, "enable_activation_offloading": True}}
CHECKPOINTING: dict[str, dict[str, dict[str, Any]]] = {
    "axolotl": {"none": {"gradient_checkpointing": False, "activation_offloading": False},
                "full": {"gradient_checkpointing": True, "activation_offloading": False},
                "offload": {"gradient_checkpointing": "offload", "activation_offloading": False}},
    "trl": {"none": {"gradient_checkpointing": False, "activation_offloading": False},
            "full": {"gradient_checkpointing": True, "activation_offloading": False},
            "offload": {"gradient_checkpointing": True, "activation_offloading": True}},
    # LLaMA-Factory's use_unsloth_gc keeps block inputs on the host (config_import/llamafactory.py)
    "llamafactory": {"none": {"disable_gradient_checkpointing": True, "use_unsloth_gc": False},
                     "full": {"disable_gradient_checkpointing": False, "use_unsloth_gc": False},
                     "offload": {"disable_gradient_checkpointing": False, "use_unsloth_gc": True}},
    "torchtune": _GC_TT,
}
LOSS: dict[str, dict[str, dict[str, Any]]] = {
    "trl": {"fused": {"use_liger_kernel": True}, "standard": {"use_liger_kernel": False}},
    "llamafactory": {"fused": {"enable_liger_kernel": True}, "standard": {"enable_liger_kernel": False}},
    "torchtune": {f: {"loss._component_": c} for f, c in TT_LOSS_COMPONENTS.items()},
}
_HF = ("axolotl", "trl", "llamafactory")
_TT_OPT = {v: k for k, v in reversed(list(TT_OPTIMIZERS.items()))}  # first listed name wins
#: torch.optim's own keyword arguments (torch v2.13.0 torch/optim/adamw.py ``AdamW.__init__``): a torchtune file that
#: moves to a bitsandbytes or torchao optimizer drops them, whose constructors take no such argument (TypeError)
_TORCH_ONLY_OPT_KEYS = ("optimizer.fused", "optimizer.foreach", "optimizer.capturable", "optimizer.differentiable")
DROP = object()  # a file key removed, its line deleted
#: litgpt's optimizer as a class path, which ``optimizer`` (a string) and ``optimizer.class_path`` both take
#: (Lightning-AI/litgpt@26857050 litgpt/utils.py ``instantiate_torch_optimizer``: a dotted name is imported as written)
_LITGPT_OPT = {"adamw": "torch.optim.AdamW", "sgd": "torch.optim.SGD", "adamw-8bit": "bitsandbytes.optim.AdamW8bit",
               "paged-adamw": "bitsandbytes.optim.PagedAdamW", "paged-adamw-8bit": "bitsandbytes.optim.PagedAdamW8bit"}


def _spelled(imp: Imported, key: str, value: Any) -> dict[str, Any] | None:
    """File keys and values for one scenario key, or None when the dialect cannot say it."""
    if key == "gradient_checkpointing":
        spelled = CHECKPOINTING.get(imp.dialect, {}).get(value)
        # the name the file uses: transformers 5.24's activation_checkpointing wins over the deprecated alias
        # (training_args.py), so the alias written beside it would change nothing (config_import/trl.py)
        name = imp.write_keys.get("gradient_checkpointing", "gradient_checkpointing")
        return spelled and {(name if k == "gradient_checkpointing" else k): v for k, v in spelled.items()}
    if key == "loss":
        return LOSS.get(imp.dialect, {}).get(value)
    if key == "optimizer" and imp.dialect == "litgpt":
        name = _LITGPT_OPT.get(value)
        return name and {"optimizer.class_path" if any(e.key == "optimizer.class_path" for e in imp.entries)
                         else "optimizer": name}
    if key == "optimizer":
        name = HF_OPTIMIZER_NAMES.get(value) if imp.dialect in _HF else _TT_OPT.get(value) if imp.dialect == "torchtune" else None
        fkey = imp.write_keys.get("optimizer") or ("optimizer._component_" if imp.dialect == "torchtune" else None)
        if name is None or fkey is None:
            return None
        dropped = {k: DROP for k in _TORCH_ONLY_OPT_KEYS if imp.dialect == "torchtune" and not name.startswith("torch.")
                   and any(e.key == k for e in imp.entries)}
        return {fkey: name, **dropped}
    fkey = imp.write_keys.get(key)
    return None if fkey is None or (imp.dialect == "litgpt" and key == "grad_accum") else {fkey: value}


def _needed(imp: Imported, fkey: str, value: Any) -> bool:
    """False for a key the file lacks whose dialect default already is ``value``."""
    e = next((e for e in imp.entries if e.key == fkey), None)
    if value is DROP:
        return e is not None and e.kind != "default"
    if e is None:
        return value is not False
    return e.kind != "default" or e.value != value


def _pinned_eval(imp: Imported, changes: dict[str, Any], scenario: dict[str, Any]) -> dict[str, Any]:
    """The eval batch to write when the micro batch changes and the file's eval batch follows it
    (``Imported.eval_follows_micro``); a dialect with no eval key (litgpt) cannot keep another: reported as left.
    Nothing where the scenario evaluates at its new micro batch (the planner's variants under that rule,
    ``Evaluator.eval_follows_micro``): the file, left to follow, evaluates there."""
    if "micro_batch_size" not in changes or "eval_batch_size" in changes or not imp.eval_follows_micro:
        return {}
    if scenario["eval_batch_size"] == scenario["micro_batch_size"]:
        return {}
    return {"eval_batch_size": scenario["eval_batch_size"]}


def _litgpt_implied(key: str, value: Any, scenario: dict[str, Any]) -> bool:
    """litgpt's scripts take the sharding and checkpointing from ``devices`` (FSDPStrategy with activation
    checkpointing above one device, config_import/litgpt.py ``_devices``): nothing to write for them."""
    from vramfit.estimate.framework import profile_for
    from vramfit.scenario import Framework

    many = int(scenario["num_gpus"]) > 1
    ckpt = profile_for(Framework.LITGPT).scripts_checkpointing(int(scenario["num_gpus"])).value
    return (key, value) in (("parallelism", "fsdp" if many else "none"), ("gradient_checkpointing", ckpt))


def file_values(imp: Imported, changes: dict[str, Any], scenario: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(dotted file key -> value to write, ["key=value" the dialect's file cannot hold])."""
    out: dict[str, Any] = {}
    left: list[str] = []
    pinned = _pinned_eval(imp, changes, scenario)
    if pinned and "eval_batch_size" in imp.write_keys:  # written even where it equals the old default (which moves)
        out[imp.write_keys["eval_batch_size"]] = pinned["eval_batch_size"]
    elif pinned:
        left.append(f"eval_batch_size={pinned['eval_batch_size']} (the file evaluates at its micro batch)")
    for key, value in changes.items():
        spelled = _spelled(imp, key, value)
        if imp.dialect == "litgpt" and _litgpt_implied(key, value, scenario):
            continue
        if spelled is None and not (imp.dialect == "litgpt" and key == "grad_accum"):
            left.append(f"{key}={value}")
        out.update({k: v for k, v in (spelled or {}).items() if _needed(imp, k, v)})
    if imp.dialect == "litgpt" and {"grad_accum", "micro_batch_size"} & set(changes):
        # litgpt derives the accumulation from global_batch_size / (micro_batch_size x devices)
        out["train.global_batch_size"] = int(scenario["grad_accum"]) * int(scenario["micro_batch_size"]) * int(scenario["num_gpus"])
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


def _edit(lines: list[str], tree: Any, dotted: str, value: Any, json_file: bool, path: Path) -> tuple[int, list[str]] | None:
    """Replace the value in place (returns None), or the (line index, lines) to insert for a missing key."""
    parent, last, missing = _locate(tree, dotted)
    parts = dotted.split(".")
    if missing is None:
        line, col = parent.lc.value(last)
        m = _VALUE.match(lines[line], col)
        if m is None or isinstance(parent[last], (dict, list)):
            raise fail(path, f"cannot rewrite {dotted} in place (not a plain value)")
        if value is DROP:  # the key's own line goes (a block-style ``key: value`` line)
            if json_file or not lines[line].lstrip().startswith(f"{last}:"):
                raise fail(path, f"remove {dotted} by hand (vramfit deletes block-style YAML lines only)")
            lines[line] = ""
            return None
        new = json.dumps(value) if json_file else _scalar(value, m.group(0))
        lines[line] = lines[line][:col] + new + lines[line][m.end():]
        return None
    if json_file:
        raise fail(path, f"has no {dotted}; add it by hand (vramfit adds keys to YAML files only)")
    rest = parts[missing:]
    if missing == 0:  # a new top-level key: at the end of the file
        indent, at = "", len(lines)
    else:  # under its parent, before the parent's first key
        if not parent:
            raise fail(path, f"cannot add {dotted} under an empty mapping")
        at, col = parent.lc.key(next(iter(parent)))
        indent = " " * col
    block = [f"{indent}{'  ' * i}{p}:\n" for i, p in enumerate(rest[:-1])]
    block.append(f"{indent}{'  ' * (len(rest) - 1)}{rest[-1]}: {_scalar(value, '')}\n")
    return at, block


def rewrite(imp: Imported, values: dict[str, Any]) -> str:
    """The source file's text with ``values`` (dotted file keys) set; every other line unchanged."""
    if imp.path.suffix.lower() in (".sh", ".toml"):  # a shell script or a TOML job config: not rewritten
        raise fail(imp.path, "vramfit writes YAML and JSON configs back, not shell scripts or TOML; apply the change "
                             "by hand or drop --write-to")
    try:
        from ruamel.yaml import YAML
    except ModuleNotFoundError:
        raise fail(imp.path, "writing a config back needs ruamel.yaml: pip install 'vramfit[import]'") from None

    text = read_text(imp.path)
    tree = YAML(typ="rt").load(text)
    lines = text.splitlines(keepends=True)
    json_file = imp.path.suffix.lower() == ".json"
    inserts = [op for k, v in values.items() if (op := _edit(lines, tree, k, v, json_file, imp.path)) is not None]
    if lines and not lines[-1].endswith("\n") and any(at == len(lines) for at, _ in inserts):
        lines[-1] += "\n"
    grouped: dict[int, list[str]] = {}
    for at, block in inserts:  # keys added at one place keep the order they were given in
        grouped.setdefault(at, []).extend(block)
    for at in sorted(grouped, reverse=True):  # bottom-up: the line numbers found by ruamel stay valid
        lines[at:at] = grouped[at]
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
