"""A ``swift sft`` / ``swift rlhf`` / ``swift pt`` shell script (as in ms-swift's ``examples/**/*.sh``) read as the
mapping ms-swift builds from it: ``{"swift": "sft", "ENV": {...}, "model": ..., ...}``.

ms-swift's ``swift`` command (modelscope/ms-swift v4.5.2 swift/cli/main.py ``cli_main``) hands the arguments after
the subcommand to ``HfArgumentParser``; the environment variables ``NPROC_PER_NODE`` / ``NNODES`` start torchrun
(``get_torchrun_args``). So the script's environment prefix (``NPROC_PER_NODE=2 swift sft ...``) becomes ``ENV``,
the same key ms-swift's YAML/JSON config files use for it (``parse_yaml_args``: ``config.pop('ENV')``).

Only what the examples use is evaluated: ``name=value`` and ``export name=value`` lines, ``$name`` / ``${name}``,
``$(expr A op B)`` and ``$((A op B))`` with whole numbers; anything else is refused with one line naming it.
The script is never run.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from vramfit.config_import.loader import PASTED, fail, load_mapping

#: ``swift <subcommand>`` that trains (swift/cli/main.py ROUTE_MAPPING: pt, sft, rlhf; the rest infer/export/serve).
TRAINING = ("sft", "rlhf", "pt")
COMMAND = re.compile(r"(?:^|[\s;&|])swift\s+(sft|rlhf|pt|infer|export|deploy|eval|sample|rollout|merge-lora|app|web-ui)\b")
_ASSIGN = re.compile(r"^(?:export\s+)?([A-Za-z_]\w*)=(.*)$", re.S)
_ARITH = re.compile(r"\$\(\(\s*([^()]*?)\s*\)\)|\$\(\s*expr\s+([^()]*?)\s*\)")
_VAR = re.compile(r"\$\{(\w+)\}|\$(\w+)")
#: Largest magnitude evaluated (bash's arithmetic is 64-bit, so no script setting means more); beyond it Python's
#: whole numbers would grow without bound (and str() refuses over 4,300 digits)
_LIMIT = 2**63
#: Longest value a ``$name`` expansion may give (characters): ``B="$A$A"`` lines double a value each, so a short
#: script would otherwise expand past any memory; the longest ms-swift argument in its examples is under 1 kB
MAX_VALUE = 65_536


def _show(text: str) -> str:
    """A piece of the script quoted in a message: one line, at most 40 characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= 40 else flat[:40] + "..."


def looks_like_swift(text: str) -> bool:
    """True when the text holds a ``swift <subcommand>`` command line (a script or a pasted command)."""
    return COMMAND.search(text) is not None and any(COMMAND.search(line) for line in _logical_lines(text))


def _balanced(text: str) -> bool:
    try:
        shlex.split(text)
    except ValueError:
        return False
    return True


def _logical_lines(text: str) -> list[str]:
    """Lines with comments dropped, ``\\``-continued lines joined and a quoted value spanning lines kept whole."""
    joined = re.sub(r"\\\r?\n", " ", text)
    out: list[str] = []
    buffer = ""
    for line in joined.splitlines():
        stripped = line.strip()
        if not buffer and (not stripped or stripped.startswith("#")):
            continue
        buffer = f"{buffer}\n{line}" if buffer else stripped
        if buffer.count("\n") >= 40 or _balanced(buffer):  # a quote left open: give up after 40 lines
            out.append(buffer)
            buffer = ""
    return out + ([buffer] if buffer else [])


def _arith(path: Path, expr: str, variables: dict[str, str]) -> str:
    """``expr A op B [op C ...]`` / ``$((...))`` with whole numbers, + - * / % (shell precedence, left to right)."""
    text = _VAR.sub(lambda m: variables.get(m.group(1) or m.group(2), "?"), expr.replace("\\*", "*"))
    tokens = re.findall(r"\d+|[-+*/%]|\S", text)
    ok = len(tokens) % 2 == 1 and all(t.isascii() and t.isdigit() for t in tokens[::2]) and all(t in "+-*/%" for t in tokens[1::2])
    if not ok:
        raise fail(path, f"cannot evaluate '{_show(expr)}' (vramfit evaluates + - * / % of whole numbers and set variables "
                         "only); write the value")
    if any(len(t) > 19 for t in tokens[::2]):
        raise fail(path, f"'{_show(expr)}' holds a number over 19 digits (bash's arithmetic is 64-bit); write the value")
    terms: list = [int(tokens[0])]
    for op, num in zip(tokens[1::2], (int(t) for t in tokens[2::2]), strict=True):
        if op in "/%" and num == 0:
            raise fail(path, f"'{_show(expr)}' divides by zero")
        if op in "*/%":
            terms[-1] = {"*": terms[-1] * num, "/": terms[-1] // num, "%": terms[-1] % num}[op]
            if abs(terms[-1]) >= _LIMIT:
                raise fail(path, f"'{_show(expr)}' exceeds bash's 64-bit arithmetic; write the value")
        else:
            terms += [op, num]
    total = terms[0]
    for op, num in zip(terms[1::2], terms[2::2], strict=True):
        total = total + num if op == "+" else total - num
    return str(total)


def _subst(path: Path, text: str, variables: dict[str, str]) -> str:
    grown = [len(text)]

    def var(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        if name not in variables:
            raise fail(path, f"uses ${_show(name)}, which the script does not set; write its value")
        grown[0] += len(variables[name])  # checked as it grows: 10**5 references to a long value never get built
        if grown[0] > MAX_VALUE:
            raise fail(path, f"'{_show(text)}' expands to over {MAX_VALUE:,} characters; write the value")
        return variables[name]

    text = _ARITH.sub(lambda m: _arith(path, m.group(1) or m.group(2), variables), text)
    if "$(" in text or "`" in text:
        raise fail(path, f"runs a command inside the line ({_show(text)}); vramfit does not run scripts, write the value")
    return _VAR.sub(var, text)


def _value(raw: str) -> Any:
    low = raw.lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(raw)
        except ValueError:
            pass
    return raw


def _arguments(path: Path, words: list[str]) -> dict[str, Any]:
    """``--key v1 [v2 ...]`` pairs; a lone ``--flag`` is true (HfArgumentParser's bool ``nargs='?'``)."""
    out: dict[str, Any] = {}
    key = None
    for w in words:
        if w.startswith("--"):
            name, eq, val = w[2:].partition("=")
            key = name.replace("-", "_")
            if key in out:
                raise fail(path, f"--{_show(key)} is given twice")
            out[key] = [val] if eq else []
        elif key is None:
            raise fail(path, f"'{_show(w)}' after the swift subcommand is not an --argument (a config file comes first)")
        else:
            out[key].append(w)
    return {k: True if not v else _value(v[0]) if len(v) == 1 else [_value(x) for x in v] for k, v in out.items()}


def parse_script(text: str, path: Path) -> dict[str, Any]:
    """The mapping of the script's one ``swift`` training command (see the module docstring)."""
    variables: dict[str, str] = {}
    exported: dict[str, str] = {}
    found: list[tuple[str, dict[str, str], list[str]]] = []
    for line in _logical_lines(text):
        m = _ASSIGN.match(line)
        if m and not COMMAND.search(line) and _balanced(m.group(2)) and len(shlex.split(m.group(2))) <= 1:
            value = (shlex.split(m.group(2)) or [""])[0]
            variables[m.group(1)] = value if "'" in m.group(2)[:1] else _subst(path, value, variables)
            if line.startswith("export"):
                exported[m.group(1)] = variables[m.group(1)]
            continue
        if not COMMAND.search(line):
            continue
        line = _ARITH.sub(lambda m: _arith(path, m.group(1) or m.group(2), variables), line)
        try:
            words = shlex.split(line)
        except ValueError as exc:
            raise fail(path, f"cannot split the swift command line: {exc}") from None
        env: dict[str, str] = dict(exported)
        while words and _ASSIGN.match(words[0]):
            k, v = _ASSIGN.match(words[0]).groups()
            env[k] = _subst(path, v, variables)
            words.pop(0)
        if len(words) < 2 or words[0] != "swift":
            first = _show(words[0]) if words else ""
            raise fail(path, f"the swift command must start the line (after NAME=value settings), got '{first}'")
        found.append((words[1], env, [_subst(path, w, {**variables, **env}) for w in words[2:]]))
    if not found:
        raise fail(path, "holds no 'swift sft', 'swift rlhf' or 'swift pt' command (command lines are read for ms-swift "
                         "only; for TRL, Axolotl, LLaMA-Factory or torchtune give the YAML or JSON config)")
    if len(found) > 1:
        raise fail(path, f"holds {len(found)} swift commands; keep the one to estimate")
    sub, env, words = found[0]
    if sub not in TRAINING:
        raise fail(path, f"runs 'swift {_show(sub)}', which does not train (valid values: {', '.join(TRAINING)})")
    config = _config_file(path, words.pop(0)) if words and not words[0].startswith("--") else {}
    # swift/cli/main.py parse_yaml_args: the file's keys become arguments before the ones after it (argparse keeps
    # the last), its ENV only fills variables the environment does not set
    out: dict[str, Any] = {"swift": sub, **{k: v for k, v in config.items() if k != "ENV"}, **_arguments(path, words)}
    file_env = config.get("ENV") or {}
    if not isinstance(file_env, dict):
        raise fail(path, f"the config file's ENV must be a mapping of environment variables, got {_show(repr(file_env))}")
    env_all = {**file_env, **{k: _value(v) for k, v in env.items()}}
    if env_all:
        out["ENV"] = env_all
    return out


def _config_file(path: Path, name: str) -> dict[str, Any]:
    """``swift sft FILE.yaml|.json`` (swift/cli/main.py parse_yaml_args): the file, next to the script or in the
    working directory."""
    if not name.endswith((".yaml", ".yml", ".json")):
        raise fail(path, f"'{_show(name)}' after the swift subcommand is neither an --argument nor a .yaml/.json config")
    if path.name == PASTED:
        raise fail(path, f"names a config file ({_show(name)}); a pasted command cannot, paste that file instead")
    p = Path(name).expanduser()
    for cand in ([p] if p.is_absolute() else [path.parent / p, Path.cwd() / p]):
        if cand.is_file():
            return load_mapping(cand)
    raise fail(path, f"config file '{_show(name)}' not found (looked next to the script and in the working directory)")
