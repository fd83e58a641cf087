"""Scenario keys as CLI options, generated once from the schema for every command that takes a scenario.

Each key of :class:`vramfit.scenario.Scenario` becomes ``--key-with-dashes``; values are validated by
:func:`vramfit.scenario.parse_scenario`, so the CLI, files and the web API share one set of errors.
"""

from __future__ import annotations

import inspect
import itertools
import json
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Optional

import typer

from vramfit.cli.from_config import overlay
from vramfit.errors import ScenarioError, VramfitError
from vramfit.limits import MAX_BATCH_LINE_BYTES
from vramfit.safe_input import (
    decode_utf8,
    load_data_file,
    load_json_text,
    one_line,
    path_kind,
    shown,
    user_path,
)
from vramfit.scenario import FIELDS, SCENARIO_KEYS, Kind, parse_scenario

#: How each kind of value reads in ``--help`` (the help text lists a choice's values).
_METAVAR = {Kind.CHOICE: "CHOICE", Kind.INTEGER: "INTEGER", Kind.NUMBER: "NUMBER", Kind.BOOLEAN: "true|false", Kind.TEXT: "TEXT",
            Kind.COUNT: "COUNT", Kind.NAMES: "NAMES"}

SCENARIO_OPTION_NAMES = tuple(k for k in SCENARIO_KEYS)


def _help_for(f) -> str:
    """The table's help sentence, then the valid values or range and the unit."""
    text = f.help
    if f.valid and f.kind is Kind.CHOICE:
        text += " One of: " + ", ".join(f.valid) + "."
    elif f.range_text():
        text += f" Range: {f.range_text()}" + (f" {f.unit}" if f.unit else "") + "."
    elif f.unit and f.kind is not Kind.COUNT:  # a count already says what it counts
        text += f" In {f.unit}."
    return text


def _metavar(f) -> str:
    return _METAVAR[f.kind]


def scenario_parameters() -> list[inspect.Parameter]:
    """inspect.Parameters (typer options) for every scenario key, from the scenario's field table.

    Values stay strings here: :func:`parse_scenario` checks them, so the CLI's errors are the API's.
    """
    params = []
    for f in FIELDS:
        opt = typer.Option(
            None, "--" + f.name.replace("_", "-"), help=_help_for(f), metavar=_metavar(f),
            show_default=f.default_text(), rich_help_panel="Scenario",
        )
        # a list, so that a flag given twice is refused (click keeps the last of a single-valued option silently)
        params.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=opt, annotation=Optional[list[str]]))
    params.append(
        inspect.Parameter(
            "scenario_file",
            inspect.Parameter.KEYWORD_ONLY,
            default=typer.Option(None, "--scenario", help="YAML or JSON scenario file; flags override it.", rich_help_panel="Scenario"),
            annotation=Optional[Path],
        )
    )
    params.append(inspect.Parameter("from_file", inspect.Parameter.KEYWORD_ONLY, annotation=Optional[list[Path]], default=typer.Option(
        None, "--from", help="Training config (Axolotl, LLaMA-Factory, TRL, torchtune, litgpt, ms-swift script/config/args.json, torchtitan TOML); again for its DeepSpeed/accelerate/PEFT files. Flags override it.", rich_help_panel="Scenario")))
    params.append(inspect.Parameter("dialect", inspect.Parameter.KEYWORD_ONLY, annotation=Optional[str], default=typer.Option(
        None, "--dialect", help="The --from file's project: axolotl, llamafactory, trl, torchtune, litgpt, swift, torchtitan (default: detected).", rich_help_panel="Scenario")))
    return params


def with_scenario_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add every scenario option to a typer command whose function takes ``scenario_args: dict``.

    The wrapped function receives ``scenario_args`` (the non-empty flags) and ``scenario_file``.
    """
    sig = inspect.signature(func)
    hints = typing.get_type_hints(func)  # resolve string annotations (postponed evaluation)
    own = [
        p.replace(annotation=hints.get(name, p.annotation))
        for name, p in sig.parameters.items()
        if name not in ("scenario_args", "scenario_file")
    ]

    def wrapper(**kwargs: Any) -> Any:
        scenario_args = {k: _once(k, kwargs.pop(k)) for k in SCENARIO_KEYS if kwargs.get(k)}
        for k in SCENARIO_KEYS:
            kwargs.pop(k, None)
        scenario_file = kwargs.pop("scenario_file", None)
        scenario_args = overlay(kwargs.pop("from_file", None), kwargs.pop("dialect", None), scenario_args)
        return func(scenario_args=scenario_args, scenario_file=scenario_file, **kwargs)

    wrapper.__name__ = func.__name__
    wrapper.__doc__ = func.__doc__
    wrapper.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=[p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own] + scenario_parameters()
    )
    return wrapper


def _once(key: str, values: list[str]) -> str:
    """The value of a scenario flag given once; given more than once it is refused, naming the values."""
    if len(values) > 1:
        given = ", ".join(shown(v) for v in values[:4])
        raise ScenarioError(key, f"--{key.replace('_', '-')} is given {len(values)} times ({given}); give it once")
    return values[0]


def _coerce(key: str, value: str) -> Any:
    """CLI strings to the types parse_scenario expects (lists for targets)."""
    if key == "lora_targets":
        return [v.strip() for v in value.split(",") if v.strip()] or value
    if key == "deepspeed_config" and value.lstrip().startswith("{"):
        # bounded as every JSON input (safe_input.load_json_text): deep nesting was a RecursionError traceback, a
        # 5,000-digit integer quoted Python's sys.set_int_max_str_digits
        return load_json_text(key, value, "the inline JSON")
    return value


def build_scenario(scenario_args: dict[str, Any], scenario_file: Path | None, required: bool = True):
    """Scenario from an optional file overlaid with flags; validated once."""
    data = _file_keys(scenario_file, scenario_args) if scenario_file is not None else {}
    for key, value in scenario_args.items():
        data[key] = _coerce(key, value) if isinstance(value, str) else value
    if not required and scenario_file is None and "model" not in data and "params" not in data:
        return None
    sc = parse_scenario(data)
    unused = [k for k in ("lora_rank", "lora_alpha", "lora_targets", "lora_dropout") if k in scenario_args]
    if unused and not sc.trains_adapters:
        import sys

        flags = ", ".join("--" + k.replace("_", "-") for k in unused)
        sys.stderr.write(f"note: {flags} ignored: --method full trains every weight, no LoRA adapters\n")
    return sc


def _file_keys(scenario_file: Path, scenario_args: dict[str, Any]) -> dict[str, Any]:
    """The keys a scenario file sets, as written, less those a flag overrides (a flag's model or params replaces both).

    Flags go over the file's own keys, not over a parsed scenario: defaults (parallelism for num_gpus, quantize for
    method, a stage's keys) then follow from the combination, as with flags alone, and the result is validated once.
    """
    raw = load_data_file("scenario", scenario_file)
    if not isinstance(raw, dict):
        parse_scenario(raw)  # the file's own error: empty, or not a mapping
    given = set(scenario_args)
    if given & {"model", "params"}:
        given |= {"model", "params"}
    return {k: v for k, v in raw.items() if not (isinstance(k, str) and k.strip().replace("-", "_") in given)}


def read_batch(path: Path) -> Iterator[tuple[int, Any]]:
    """Lines of a JSON Lines file as (line number, parsed object or a ScenarioError), one per line.

    The file is read one line at a time (each at most MAX_BATCH_LINE_BYTES), so it may be any size;
    a blank, non-UTF-8, malformed, too deep or too long line is an error item, never an abort.
    """
    p = user_path("batch", path)
    kind = path_kind("batch", p)
    if kind != "file":
        raise ScenarioError("batch", f"file not found: {shown(str(p))}" if kind == "missing"
                            else f"{shown(str(p))} is a directory or a device, not a file")
    try:
        fh = open(p, "rb")  # noqa: SIM115 - closed below; the generator owns it
    except OSError as exc:
        raise ScenarioError("batch", f"cannot read {shown(str(p))}: {exc.strerror or type(exc).__name__}") from None
    with fh:
        for i in itertools.count(1):
            try:  # an I/O error mid-file (a file on a failing disk or a network share): one line, not a traceback
                raw = fh.readline(MAX_BATCH_LINE_BYTES + 1)
                item = _batch_item(i, raw, fh) if raw else None
            except OSError as exc:
                raise ScenarioError("batch", f"cannot read {shown(str(p))} at line {i}: "
                                    f"{exc.strerror or type(exc).__name__}") from None
            if not raw:
                return
            yield i, item


def _batch_item(i: int, raw: bytes, fh: Any) -> Any:
    if len(raw) > MAX_BATCH_LINE_BYTES and not raw.endswith(b"\n"):
        while (rest := fh.readline(MAX_BATCH_LINE_BYTES)) and not rest.endswith(b"\n"):
            pass  # skip the rest of the long line, bounded memory
        return ScenarioError("batch", f"line {i} is longer than {MAX_BATCH_LINE_BYTES:,} bytes (MAX_BATCH_LINE_BYTES)")
    try:
        text = decode_utf8("batch", raw, f"line {i}")
    except ScenarioError as exc:
        return exc
    if not text.strip():
        return ScenarioError("batch", f"line {i} is blank (one scenario object per line)")
    try:
        return load_json_text("batch", text, f"line {i}")
    except ScenarioError as exc:
        return exc


def batch_line(item: Any, scenario_args: dict[str, Any], run: Callable[[Any], Any]) -> str:
    """One output line of ``--batch``: the result as JSON, or ``{"error": ...}``, whatever the item."""
    if isinstance(item, ScenarioError):
        return json.dumps({"error": item.message})
    try:
        if isinstance(item, dict):
            item = {**item, **scenario_args}
        return json.dumps(run(item).to_dict(), allow_nan=False)
    except VramfitError as exc:
        return json.dumps({"error": one_line(str(exc))})
    except Exception as exc:  # noqa: BLE001 - one line per input line, always (issue 12): report it
        return json.dumps({"error": f"internal error on this line ({type(exc).__name__}); please report it"})
