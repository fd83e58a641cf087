"""Reading untrusted input: files, JSON, YAML, numbers and paths, each bounded by :mod:`vramfit.limits`.

Every function here raises :class:`~vramfit.errors.ScenarioError` (or returns) — never a
traceback-producing exception — whatever the input: files that are missing, directories, too large
or not UTF-8; JSON or YAML that is malformed, nested without end, full of aliases (billion laughs)
or holds integers of thousands of digits; paths that name an unknown user (``~nosuchuser``) or are
too long for the file system. Error messages quote values through :func:`shown` (cut at
:data:`~vramfit.limits.MAX_SHOWN_CHARS`) and never quote a file's contents.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import secrets
from pathlib import Path
from typing import Any

from vramfit import limits
from vramfit.errors import ScenarioError


def shown(value: Any, limit: int = limits.MAX_SHOWN_CHARS) -> str:
    """``repr(value)`` for an error message: one line, at most ``limit`` characters (then "…")."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**limit:
        return f"an integer of about {int(abs(value).bit_length() * 0.30103) + 1:,} digits"
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # ints beyond sys.get_int_max_str_digits, deep nesting
        return f"a {type(value).__name__} too large to show"
    text = text.replace("\n", "\\n").replace("\r", "\\r")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def one_line(text: str, limit: int = limits.MAX_ERROR_CHARS) -> str:
    """A message as one line of at most ``limit`` characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


_KEYLIKE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,39}$")


def key_label(key: Any) -> str:
    """A mapping key for an error message: itself if it looks like a key name, else ``"scenario"``
    (a key read from an arbitrary file may be a line of that file, a secret: never echo it)."""
    if isinstance(key, str) and _KEYLIKE.match(key.strip()):
        return key.strip()
    return "scenario"


# --------------------------------------------------------------------------------- paths
def user_path(key: str, text: str | Path) -> Path:
    """A path from the user: ``~`` expanded, lengths bounded; never touches the file system."""
    raw = str(text)
    if "\x00" in raw:
        raise ScenarioError(key, "a path cannot contain a NUL character")
    if len(raw) > limits.MAX_MODEL_CHARS:
        raise ScenarioError(key, f"a path of {len(raw):,} characters is longer than the limit "
                            f"(MAX_MODEL_CHARS = {limits.MAX_MODEL_CHARS:,})")
    if any(len(part) > limits.MAX_NAME_CHARS for part in re.split(r"[/\\]", raw)):
        raise ScenarioError(key, f"a file or directory name in {shown(raw)} is longer than "
                            f"{limits.MAX_NAME_CHARS} characters (MAX_NAME_CHARS, the file system's limit)")
    try:
        return Path(raw).expanduser()
    except RuntimeError:  # "Could not determine home directory": ~nosuchuser
        user = raw[1:].split("/", 1)[0]
        raise ScenarioError(key, f"cannot expand '~{shown(user)[1:-1]}': no such user") from None


def path_kind(key: str, path: Path) -> str:
    """``"file"``, ``"dir"``, ``"other"`` or ``"missing"``, without raising on odd paths."""
    try:
        if path.is_file():
            return "file"
        if path.is_dir():
            return "dir"
        return "other" if path.exists() else "missing"
    except (OSError, ValueError) as exc:
        raise ScenarioError(key, f"cannot use the path {shown(str(path))}: {_reason(exc)}") from None


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or type(exc).__name__


def read_text_file(key: str, path: str | Path, max_bytes: int = limits.MAX_FILE_BYTES,
                   limit_name: str = "MAX_FILE_BYTES") -> str:
    """The text of a UTF-8 file of at most ``max_bytes`` bytes; errors name ``key`` and the path."""
    p = user_path(key, path)
    kind = path_kind(key, p)
    if kind == "missing":
        raise ScenarioError(key, f"file not found: {shown(str(p))}")
    if kind != "file":
        raise ScenarioError(key, f"{shown(str(p))} is a directory or a device, not a file")
    try:
        with open(p, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise ScenarioError(key, f"cannot read {shown(str(p))}: {_reason(exc)}") from None
    if len(data) > max_bytes:
        raise ScenarioError(key, f"{shown(str(p))} is larger than {max_bytes:,} bytes ({limit_name})")
    return decode_utf8(key, data, shown(str(p)))


def decode_utf8(key: str, data: bytes, where: str) -> str:
    """``data`` as text, or an error giving the offset of the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError(key, f"{where} is not UTF-8 text (byte {exc.start} is 0x{data[exc.start]:02x})") from None


def writable_file(key: str, path: str | Path) -> Path:
    """An output file path whose folder exists and which is not itself a folder (checked before work)."""
    p = user_path(key, path)
    if path_kind(key, p) == "dir":
        raise ScenarioError(key, f"{shown(str(p))} is a directory; give a file name")
    parent = p.parent if str(p.parent) else Path(".")
    if path_kind(key, parent) != "dir":
        raise ScenarioError(key, f"the folder {shown(str(parent))} does not exist")
    return p


def write_text_file(key: str, path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all: a new temp file beside it (exclusive create, so no other file
    is touched), renamed over it, keeping a link's target and the file's mode; a device (``/dev/stdout``) is written
    directly. Every OS error (a folder, a path inside a file, no permission, a full disk) is one line naming ``key``."""
    p = user_path(key, path)
    kind = path_kind(key, p)
    if kind == "dir":
        raise ScenarioError(key, f"{shown(str(p))} is a directory; give a file name")
    if path_kind(key, p.parent) in ("file", "other"):
        raise ScenarioError(key, f"cannot write {shown(str(p))}: {shown(str(p.parent))} is a file, not a folder")
    if kind == "other":
        try:
            p.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise ScenarioError(key, f"cannot write {shown(str(p))}: {_reason(exc)}") from None
        return
    p = p.resolve() if p.is_symlink() else p  # a link's target is what the user keeps: it is replaced, not the link
    tmp = p.with_name(f".{p.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "x", encoding="utf-8") as fh:
            fh.write(text)
        if p.exists():  # the user's permissions stay (a 0600 file stays 0600)
            os.chmod(tmp, p.stat().st_mode & 0o7777)
        os.replace(tmp, p)
    except OSError as exc:
        with contextlib.suppress(OSError):  # no temp file left behind
            tmp.unlink()
        raise ScenarioError(key, f"cannot write {shown(str(p))}: {_reason(exc)}") from None


def holds_other(path: Path, text: str) -> bool:
    """``path`` exists and holds something other than ``text``: writing there would lose it (the same text written
    again, or an empty file, loses nothing)."""
    data = text.encode("utf-8")
    try:
        size = path.stat().st_size if path.exists() else 0
        return size > 0 and (size != len(data) or path.read_bytes() != data)
    except OSError:
        return path.exists()


# ------------------------------------------------------------------------------ JSON / YAML
def check_depth(key: str, value: Any, max_depth: int = limits.MAX_CONFIG_DEPTH,
                max_list: int = limits.MAX_CONFIG_LIST) -> None:
    """Refuse data nested deeper than ``max_depth`` or with a list longer than ``max_list``
    (iterative: never recurses, whatever the depth)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth >= max_depth:
                raise ScenarioError(key, f"is nested more than {max_depth} levels deep (MAX_CONFIG_DEPTH)")
            children = list(item.values()) if isinstance(item, dict) else item
            if isinstance(item, list) and len(item) > max_list:
                raise ScenarioError(key, f"has a list of {len(item):,} items (at most {max_list:,}: MAX_CONFIG_LIST)")
            stack.extend((c, depth + 1) for c in children)


#: Python's refusal of an integer of more than ``sys.get_int_max_str_digits()`` (4,300) digits, as messages say it
#: (its own text advises ``sys.set_int_max_str_digits``, a setting of the interpreter, not of the input).
TOO_MANY_DIGITS = "holds a number too large to read (over 4,300 digits)"


def parse_error(exc: BaseException, prefix: str = "") -> str:
    """A parser's error as one line of a message: ``prefix`` and the first line of its text, :data:`TOO_MANY_DIGITS`
    for an integer Python refuses to read, or ``nested too deeply`` for a RecursionError."""
    if isinstance(exc, RecursionError):
        return f"{prefix}nested too deeply"
    text = str(exc)
    if "integer string conversion" in text:
        return prefix + TOO_MANY_DIGITS
    return prefix + (text.splitlines()[0][:200] if text.strip() else type(exc).__name__)


class DuplicateKey(ValueError):
    """A mapping that gives one key twice: JSON and YAML parsers keep the last silently, so it is refused."""


def unique_pairs(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    """``json.loads``' ``object_pairs_hook``: the mapping, or :class:`DuplicateKey` for a key given twice."""
    out: dict[Any, Any] = {}
    for k, v in pairs:
        if k in out:
            raise DuplicateKey(f"gives the key {shown(k)} twice")
        out[k] = v
    return out


def yaml_key_twice(loader: Any, node: Any) -> tuple[Any, int] | None:
    """The first key a YAML mapping node gives twice, with its line (1-based), else None: PyYAML keeps the last one
    silently. Unhashable keys are left to the loader's own error."""
    seen: set = set()
    for key_node, _ in node.value:
        name = loader.construct_object(key_node, deep=True)
        try:
            if name in seen:
                return name, key_node.start_mark.line + 1
            seen.add(name)
        except TypeError:
            continue
    return None


def load_json_text(key: str, text: str, where: str = "the text") -> Any:
    """JSON data (no NaN/Infinity), depth-checked; malformed input is one line naming ``key``."""
    def no_constant(name: str) -> Any:
        raise ScenarioError(key, f"{where} holds {name}, which is not a JSON number")

    try:
        data = json.loads(text, parse_constant=no_constant, object_pairs_hook=unique_pairs)
    except DuplicateKey as exc:
        raise ScenarioError(key, f"{where} {exc}") from None
    except json.JSONDecodeError as exc:
        raise ScenarioError(key, f"{where} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise ScenarioError(key, f"{where} is nested too deeply (more than {limits.MAX_CONFIG_DEPTH} levels: "
                            "MAX_CONFIG_DEPTH)") from None
    except ValueError as exc:  # an integer beyond sys.get_int_max_str_digits (4,300 digits)
        if isinstance(exc, ScenarioError):
            raise
        raise ScenarioError(key, f"{where} {TOO_MANY_DIGITS}") from None
    check_depth(key, data)
    return data


def load_yaml_text(key: str, text: str, where: str = "the text") -> Any:
    """YAML data without aliases (a billion-laughs file is refused at its first ``*alias``)."""
    import yaml

    class _NoAliasLoader(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                raise ScenarioError(key, f"{where} uses a YAML alias (*name); write the value out instead")
            return super().compose_node(parent, index)

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if twice := yaml_key_twice(self, node):
                raise ScenarioError(key, f"{where} gives the key {shown(twice[0])} twice (line {twice[1]})")
            return super().construct_mapping(node, deep=deep)

    try:
        data = yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 - a SafeLoader subclass
    except ScenarioError:
        raise
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where_in = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        raise ScenarioError(key, f"{where} is not valid YAML: {exc.problem or exc.context}{where_in}") from None
    except RecursionError:
        raise ScenarioError(key, f"{where} is nested too deeply (MAX_CONFIG_DEPTH = {limits.MAX_CONFIG_DEPTH})") from None
    except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:
        raise ScenarioError(key, f"{where} is not valid YAML ({type(exc).__name__})") from None
    check_depth(key, data)
    return data


def load_data_file(key: str, path: str | Path) -> Any:
    """A bounded JSON (``.json``) or YAML (any other name) file, as data."""
    p = user_path(key, path)
    text = read_text_file(key, p)
    if p.suffix.lower() == ".json":
        return load_json_text(key, text, shown(str(p)))
    return load_yaml_text(key, text, shown(str(p)))


# --------------------------------------------------------------------------------- numbers
def number_text(key: str, value: Any) -> Any:
    """Refuse a number written with more than :data:`~vramfit.limits.MAX_NUMBER_CHARS` characters
    (before int()/float() spend time on it); other values pass through unchanged."""
    if isinstance(value, str) and len(value.strip()) > limits.MAX_NUMBER_CHARS:
        raise ScenarioError(key, f"a number of {len(value.strip()):,} characters is longer than the "
                            f"limit (MAX_NUMBER_CHARS = {limits.MAX_NUMBER_CHARS})")
    return value


def ascii_digits(key: str, text: str, what: str = "a number") -> None:
    """Refuse a number written in other digits than 0-9: Python's int() and float() read Arabic-Indic (``٣٢``) or
    fullwidth (``３２``) digits, which no config file or flag of the tools means."""
    if not text.isascii():
        raise ScenarioError(key, f"must be {what} written with the digits 0-9, got {shown(text)}")


def to_float(key: str, value: Any, what: str = "a number") -> float:
    """A finite float from an int, float or numeric string; ints of 10^309 and more, NaN, inf,
    bools and other types are one ScenarioError naming ``key``."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ScenarioError(key, f"must be {what}, got {shown(value)}")
    number_text(key, value)
    if isinstance(value, str):
        ascii_digits(key, value, what)
    try:
        out = float(value)
    except (ValueError, OverflowError):
        raise ScenarioError(key, f"must be {what}" + (" (at most 1.8e308)" if isinstance(value, int) else "")
                            + f", got {shown(value)}") from None
    if not math.isfinite(out):
        raise ScenarioError(key, f"must be {what} (finite), got {shown(value)}")
    return out
