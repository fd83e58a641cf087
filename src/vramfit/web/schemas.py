"""Pydantic models of the web API bodies, built from the scenario's own keys and enums.

They *document* the API (the OpenAPI schema); validation itself is :func:`vramfit.scenario.parse_scenario`,
so the API's error messages are the CLI's. ``ScenarioIn`` is generated from the scenario's field table
(:data:`vramfit.scenario.FIELDS`: type, help, unit, default, valid values), the same table the CLI
options, the form labels and ``docs/scenario-reference.md`` come from.
"""

from __future__ import annotations

from dataclasses import MISSING, is_dataclass
from dataclasses import fields as dataclass_fields
from enum import Enum
from functools import cache
from types import UnionType
from typing import Any, Literal, Optional, Union, get_args, get_origin, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, create_model

from vramfit import scenario as S
from vramfit.config_import.detect import DIALECTS
from vramfit.estimate.result import Component, EstimateResult, FitInfo, ModelInfo, Peak, PhasePeak
from vramfit.gpus import GPUS_PER_NODE, list_gpus
from vramfit.models import load_catalog
from vramfit.plan.verdict import SAFETY_MARGIN, SAFETY_MARGIN_HELP

#: Scenario keys whose values are a finite set -> the enum that lists them (the scenario's field table).
ENUM_KEYS: dict[str, type[Enum]] = dict(S.CHOICE_KEYS)

#: Integer keys and their (min, max), as ``parse_scenario`` enforces them.
INT_KEYS: dict[str, tuple[int, int]] = dict(S.INT_LIMITS)

#: Boolean switches (optimizer_in_backward, compile, ...).
BOOL_KEYS: tuple[str, ...] = S.BOOL_KEYS

#: Keys a sweep may vary (numbers and finite choices).
SWEEP_KEYS: tuple[str, ...] = (*INT_KEYS, *ENUM_KEYS, "gpu")
MAX_SWEEP_VALUES = 64

#: What the web face adds to the table's help (it takes catalog ids only, never paths or the Hub).
_WEB_NOTE = {
    "model": "The web API takes a catalog id, alias or release name of one (GET /api/models), never a path or a Hub id.",
    "gpu": "A catalog id or alias (GET /api/gpus).",
    "params": "A number (7000000000, 7e9) or a string (\"7B\").",
    "lora_targets": "A list or one comma-separated string.",
    "modules_to_save": "A list or one comma-separated string.",
}


def _doc(f: S.FieldSpec) -> str:
    """The field table's help, its unit and default, and what the web face adds."""
    parts = [f.help]
    if f.unit:
        parts.append(f"Unit: {f.unit}.")
    parts.append(f"Default: {f.default_text()}.")
    if f.name in _WEB_NOTE:
        parts.append(_WEB_NOTE[f.name])
    return " ".join(parts)


def _scenario_field(f: S.FieldSpec, catalog_ids: list[str], gpu_ids: list[str]) -> tuple[Any, Any]:
    doc = _doc(f)
    if f.choices is not None:
        return Optional[Literal[tuple(f.valid)]], Field(None, description=doc)  # type: ignore[valid-type]
    if f.kind is S.Kind.INTEGER:
        lo, hi = INT_KEYS[f.name]
        return Optional[int], Field(None, ge=lo, le=hi, description=doc)
    if f.name == "model":
        return Optional[Literal[tuple(catalog_ids)]], Field(None, description=doc)  # type: ignore[valid-type]
    if f.name == "gpu":
        return Optional[Literal[tuple(gpu_ids)]], Field(None, description=doc)  # type: ignore[valid-type]
    if f.kind is S.Kind.COUNT:
        return Optional[int | str], Field(None, description=doc, examples=["7B"])
    if f.name == "lora_alpha":
        return Optional[float], Field(None, gt=0, description=doc)
    if f.name == "label_share":
        return Optional[float], Field(None, gt=0, le=1, description=doc)
    if f.name == "lora_dropout":
        return Optional[float], Field(None, ge=0, lt=1, description=doc)
    if f.kind is S.Kind.NAMES:
        example = ["embed_tokens", "lm_head"] if f.name == "modules_to_save" else ["q_proj", "v_proj"]
        return Optional[list[str] | str], Field(None, description=doc, examples=[example])
    if f.kind is S.Kind.BOOLEAN:
        return Optional[bool], Field(None, description=doc)
    return Optional[Any], Field(None, description=doc)  # a key this module does not know yet


def build_scenario_model() -> type[BaseModel]:
    """``ScenarioIn``: every scenario key (all optional; ``model`` or ``params`` is required),
    plus ``config_json``, the web's way to give a pasted ``config.json``."""
    catalog_ids = [e["id"] for e in load_catalog()]
    gpu_ids = [g.gpu_id for g in list_gpus()]
    fields: dict[str, Any] = {f.name: _scenario_field(f, catalog_ids, gpu_ids) for f in S.FIELDS}
    fields["config_json"] = (
        Optional[dict[str, Any]],
        Field(None, description="a pasted config.json (a JSON object), parsed as data and never "
              "executed; used instead of model and params"),
    )
    return create_model(
        "ScenarioIn",
        __config__=ConfigDict(extra="forbid", json_schema_extra={
            "description": "A training scenario (shared/design/scenario.md). Exactly one of model, "
            "params and config_json is required; omitted keys take the scenario defaults."}),
        **fields,
    )


ScenarioIn = build_scenario_model()


class PlanOptions(BaseModel):
    """The planner's own inputs: what a scenario cannot say (dataset, epochs, price).

    Validated by the planner itself (``vramfit.plan``), so the messages are those of ``vramfit plan``."""

    model_config = ConfigDict(extra="forbid")
    effective_batch: Optional[int | str] = Field(None, description="sequences per optimizer step (default: "
                                                 "the scenario's micro_batch_size x grad_accum x num_gpus)")
    dataset_tokens: Optional[int | str] = Field(None, description="tokens in the training set (50000000 or \"50M\")")
    epochs: Optional[float] = Field(1.0, gt=0, le=1000)
    budget_usd: Optional[float] = Field(None, gt=0)
    gpu_ids: Optional[list[str] | str] = Field(None, description="cards to consider (default: the scenario's gpu, "
                                               "or every card in the catalog)")
    max_gpus: Optional[int] = Field(GPUS_PER_NODE, ge=1, le=100_000,
                                    description=f"at most this many GPUs; above {GPUS_PER_NODE}, whole nodes of {GPUS_PER_NODE}")
    safety_margin: Optional[float] = Field(SAFETY_MARGIN, ge=0, lt=1, description=SAFETY_MARGIN_HELP)
    mfu: Optional[float] = Field(None, gt=0, le=1, description="time every FLOP at this fraction of the BF16 peak instead of the mechanism speed model")
    sort: Optional[str] = Field("cost", description="rank by cost (per token) or time (fastest first)")
    deadline_hours: Optional[float] = Field(None, gt=0, description="plans slower than this are ranked last")
    stacks: Optional[list[str] | str] = Field(None, description="only these software stacks: cuda, rocm, habana (a list, "
                                              "or comma-separated)")
    eval_follows_micro: Optional[bool] = Field(False, description="the run evaluates at its micro-batch (a config that "
                                               "leaves its evaluation batch to the default, as /api/import reports): "
                                               "each micro-batch tried is evaluated at that micro-batch")


class PlanIn(PlanOptions):
    """Planner request: the scenario and the planner's own inputs."""

    scenario: ScenarioIn  # type: ignore[valid-type]


class SweepIn(BaseModel):
    """One scenario key varied over a list of values; everything else as in ``scenario``."""

    model_config = ConfigDict(extra="forbid")
    scenario: ScenarioIn  # type: ignore[valid-type]
    key: Literal[SWEEP_KEYS]  # type: ignore[valid-type]
    values: list[int | str] = Field(..., min_length=1, max_length=MAX_SWEEP_VALUES)


class ImportIn(BaseModel):
    """A pasted training config; the server parses it as data and never opens a file it names."""

    model_config = ConfigDict(extra="forbid")
    text: str = Field(..., description="the config's text: YAML, JSON, TOML (torchtitan) or a `swift` shell command")
    dialect: Optional[str] = Field(None, description="one of " + ", ".join(DIALECTS)
                                                     + " (default: detected from the keys)")


class ErrorOut(BaseModel):
    """A request the server refuses: the field at fault and, where finite, its valid values."""

    error: str = Field(..., description="the message, as the CLI prints it")
    key: str = Field(..., description="the field at fault (a scenario key, or body/config_json/...)")
    valid: Optional[list[str]] = Field(None, description="the valid values, where they are a finite set")


class _Out(BaseModel):
    """Response models require the fields of the contract (scenario.md) and allow more."""

    model_config = ConfigDict(extra="allow")


def _json_type(tp: Any) -> Any:
    """The JSON shape of a result field's type, as its ``to_dict()`` writes it."""
    origin, args = get_origin(tp), get_args(tp)
    if tp is S.Scenario:
        return dict[str, Any]
    if is_dataclass(tp):
        return out_model(tp)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        inner = args[0]
        if get_origin(inner) is tuple:  # named pairs ((name, bytes), ...) are written as a mapping
            return dict[str, get_args(inner)[1]]
        return list[_json_type(inner)]
    if origin in (Union, UnionType):
        return Optional[tuple(_json_type(a) for a in args if a is not type(None))[0]]
    return tp


#: The names the API schema has always used for the result dataclasses.
_OUT_NAMES = {Component: "ComponentOut", Peak: "PeakOut", PhasePeak: "PhaseOut", ModelInfo: "ModelOut",
              FitInfo: "FitOut", EstimateResult: "EstimateOut"}


@cache
def out_model(cls: type) -> type[BaseModel]:
    """The response model of a result dataclass, generated from its fields (never copied by hand)."""
    hints = get_type_hints(cls)
    fields: dict[str, Any] = {}
    for f in dataclass_fields(cls):
        tp = _json_type(hints[f.name])
        if f.default is MISSING and f.default_factory is MISSING:
            fields[f.name] = (tp, ...)
        else:
            default = f.default if f.default is not MISSING else f.default_factory()
            fields[f.name] = (tp, list(default) if isinstance(default, tuple) else default)
    return create_model(_OUT_NAMES.get(cls, f"{cls.__name__}Out"), __base__=_Out, __doc__=cls.__doc__, **fields)


ComponentOut, PeakOut, PhaseOut, ModelOut, FitOut, EstimateOut = (
    out_model(c) for c in (Component, Peak, PhasePeak, ModelInfo, FitInfo, EstimateResult))


class ModelEntryOut(BaseModel):
    id: str
    display_name: str
    family: str
    params: int
    aliases: list[str]
    source: str


class GpuOut(BaseModel):
    gpu_id: str
    name: str
    vendor: str
    memory_gb: float
    usable_bytes: int
    # the catalog's dense 16-bit tensor peak (gpus.csv bf16_fp16_dense_tflops): FP16's on a card without BF16
    bf16_tflops: Optional[float] = Field(description="dense BF16 tensor peak, TFLOPS; on a card without BF16 "
                                         "(supports_bf16 false: Turing, Volta) its FP16 peak")
    supports_bf16: Optional[bool] = Field(None, description="the card computes in BF16 (null: the catalog does not say)")
    interconnect: str
    price_low: Optional[float]
    price_high: Optional[float]


REQUEST_MODELS: tuple[type[BaseModel], ...] = (ScenarioIn, PlanIn, SweepIn, ImportIn)
