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
from vramfit.scenario import _ENUM_KEYS, SCENARIO_KEYS, load_scenario_file, parse_scenario

_HELP = {
    "model": "Model id (catalog or Hugging Face Hub) or path to a config.json.",
    "params": "Instead of --model: a generic dense decoder of this size, e.g. 7B.",
    "lora_rank": "LoRA rank r.",
    "lora_alpha": "LoRA alpha (no memory effect).",
    "lora_targets": "Comma-separated module names, or all-linear.",
    "lora_dropout": "LoRA dropout probability (default: the framework's).",
    "optimizer_in_backward": "Run the optimizer step per parameter during backward (true/false).",
    "micro_batch_size": "Sequences per GPU per forward/backward.",
    "grad_accum": "Micro-batches per optimizer step.",
    "num_gpus": "GPUs taking part (one node).",
    "gpu": "GPU id or alias (4090, h200) the run should fit (see `vramfit gpus`).",
    "seq_len": "Tokens per sequence (4k = 4096).",
    "quantize_experts": "QLoRA on mixture-of-experts: quantize the experts too? auto = as the framework does "
                        "(transformers 5 + bitsandbytes: no, fused 3-D experts stay unquantized; torchtune, litgpt: yes).",
}

SCENARIO_OPTION_NAMES = tuple(k for k in SCENARIO_KEYS)


def _precision_help() -> str:
    """The precisions' meanings and each framework's default (from the framework profiles)."""
    from vramfit.estimate.framework import PROFILES
    from vramfit.scenario import Precision

    text = "bf16-true: " + Precision.BF16_TRUE.meaning + "; bf16-mixed: " + Precision.BF16_MIXED.meaning + ". Default: "
    parts = []
    for fw, prof in PROFILES.items():
        d = dict(prof.default_precision)
        common = max(set(d.values()), key=list(d.values()).count)
        odd = ", ".join(f"{m.value} {p.value}" for m, p in d.items() if p is not common)
        parts.append(f"{fw.value} {common.value}" + (f" ({odd})" if odd else ""))
    return text + "; ".join(parts) + " (what each framework does when not told; see README)."


def _help_for(key: str) -> str:
    text = _precision_help() if key == "precision" else _HELP.get(key, "")
    if key in _ENUM_KEYS:
        text = (text + " " if text else "") + "One of: " + ", ".join(_ENUM_KEYS[key].values()) + "."
    return text


def scenario_parameters() -> list[inspect.Parameter]:
    """inspect.Parameters (typer options) for every scenario key, all optional strings."""
    params = []
    for key in SCENARIO_KEYS:
        opt = typer.Option(None, "--" + key.replace("_", "-"), help=_help_for(key), rich_help_panel="Scenario")
        params.append(inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=opt, annotation=Optional[str]))
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
