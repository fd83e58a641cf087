"""Scenario keys as CLI options, generated once from the schema for every command that takes a scenario.

Each key of :class:`vramfit.scenario.Scenario` becomes ``--key-with-dashes``; values are validated by
:func:`vramfit.scenario.parse_scenario`, so the CLI, files and the web API share one set of errors.
"""

from __future__ import annotations

import inspect
import json
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import typer

from vramfit.cli.from_config import overlay
from vramfit.errors import ScenarioError
from vramfit.scenario import FIELDS, SCENARIO_KEYS, Kind, load_scenario_file, parse_scenario

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
        params.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=opt, annotation=Optional[str]))
    params.append(
        inspect.Parameter(
            "scenario_file",
            inspect.Parameter.KEYWORD_ONLY,
            default=typer.Option(None, "--scenario", help="YAML or JSON scenario file; flags override it.", rich_help_panel="Scenario"),
            annotation=Optional[Path],
        )
    )
    params.append(inspect.Parameter("from_file", inspect.Parameter.KEYWORD_ONLY, annotation=Optional[list[Path]], default=typer.Option(
        None, "--from", help="Training config (Axolotl, LLaMA-Factory, TRL, torchtune, litgpt); again for its DeepSpeed/accelerate/PEFT files. Flags override it.", rich_help_panel="Scenario")))
    params.append(inspect.Parameter("dialect", inspect.Parameter.KEYWORD_ONLY, annotation=Optional[str], default=typer.Option(
        None, "--dialect", help="The --from file's project: axolotl, llamafactory, trl, torchtune, litgpt (default: detected).", rich_help_panel="Scenario")))
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
        scenario_args = {k: kwargs.pop(k) for k in SCENARIO_KEYS if kwargs.get(k) is not None}
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


def _coerce(key: str, value: str) -> Any:
    """CLI strings to the types parse_scenario expects (lists for targets)."""
    if key == "lora_targets":
        return [v.strip() for v in value.split(",") if v.strip()] or value
    if key == "deepspeed_config" and value.lstrip().startswith("{"):
        try:
            return json.loads(value)
        except ValueError as exc:
            raise ScenarioError(key, f"inline JSON does not parse: {exc}") from None
    return value


def build_scenario(scenario_args: dict[str, Any], scenario_file: Path | None, required: bool = True):
    """Scenario from an optional file overlaid with flags; validated once."""
    data: dict[str, Any] = {}
    if scenario_file is not None:
        base = load_scenario_file(scenario_file)
        data = base.to_dict()
        data = {k: v for k, v in data.items() if v is not None}
        if "model" in scenario_args or "params" in scenario_args:
            data.pop("model", None)
            data.pop("params", None)
    for key, value in scenario_args.items():
        data[key] = _coerce(key, value) if isinstance(value, str) else value
    if not required and "model" not in data and "params" not in data:
        return None
    sc = parse_scenario(data)
    unused = [k for k in ("lora_rank", "lora_alpha", "lora_targets", "lora_dropout") if k in scenario_args]
    if unused and not sc.trains_adapters:
        import sys

        flags = ", ".join("--" + k.replace("_", "-") for k in unused)
        sys.stderr.write(f"note: {flags} ignored: --method full trains every weight, no LoRA adapters\n")
    return sc


def read_batch(path: Path) -> list[tuple[int, Any]]:
    """Lines of a JSON Lines file as (line number, parsed object or an error message)."""
    if not path.is_file():
        raise ScenarioError("batch", f"file not found: {path}")
    out: list[tuple[int, Any]] = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append((i, json.loads(line)))
        except json.JSONDecodeError as exc:
            out.append((i, ScenarioError("batch", f"line {i} is not JSON: {exc.msg}")))
    return out
