"""Pydantic models of the web API bodies, built from the scenario's own keys and enums.

They *document* the API (the OpenAPI schema); validation itself is :func:`vramfit.scenario.parse_scenario`,
so the API's error messages are the CLI's. ``ScenarioIn`` is generated from
:data:`vramfit.scenario.SCENARIO_KEYS` and the scenario enums, so a key added to the scenario
appears here (a test fails if a key has no schema entry).
"""

from __future__ import annotations

from dataclasses import fields
from enum import Enum
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, create_model

from vramfit import scenario as S
from vramfit.gpus import list_gpus
from vramfit.models import load_catalog

_DEFAULTS = {f.name: f.default for f in fields(S.Scenario)}

#: Scenario keys whose values are a finite set -> the enum that lists them (from the dataclass).
ENUM_KEYS: dict[str, type[Enum]] = {k: type(v) for k, v in _DEFAULTS.items() if isinstance(v, Enum)}

#: Integer keys and their (min, max), as ``parse_scenario`` enforces them.
INT_KEYS: dict[str, tuple[int, int | None]] = {
    k: getattr(S, "_INT_LIMITS", {}).get(k, (1, None))
    for k, v in _DEFAULTS.items() if isinstance(v, int) and not isinstance(v, (bool, Enum))
}

#: Boolean switches (optimizer_in_backward, compile, ...).
BOOL_KEYS: tuple[str, ...] = tuple(k for k, v in _DEFAULTS.items() if isinstance(v, bool))

#: Keys a sweep may vary (numbers and finite choices).
SWEEP_KEYS: tuple[str, ...] = (*INT_KEYS, *ENUM_KEYS, "gpu")
MAX_SWEEP_VALUES = 64

_DOC = {
    "model": "a catalog model id or alias (GET /api/models); the web API never reads paths or the Hub",
    "params": "instead of model: a parameter count (7000000000, 7e9 or \"7B\"), a generic dense decoder",
    "lora_rank": "adapter rank r",
    "lora_alpha": "LoRA scaling (no memory effect; default 2 x rank)",
    "lora_targets": "module names (q_proj, v_proj, ...) or \"all-linear\"; a list or a comma-separated string",
    "optimizer_in_backward": "optimizer step per parameter during backward (torchtune)",
    "compile": "torch.compile of the model and loss",
    "micro_batch_size": "sequences per GPU per forward/backward",
    "seq_len": "tokens per sequence",
    "grad_accum": "micro-batches per optimizer step",
    "num_gpus": "GPUs taking part",
    "gpu": "the card it should fit (GET /api/gpus)",
    "lora_dropout": "LoRA dropout (default: the framework's)",
}


def _scenario_field(key: str, catalog_ids: list[str], gpu_ids: list[str]) -> tuple[Any, Any]:
    doc = _DOC.get(key, key.replace("_", " "))
    if key in ENUM_KEYS:
        values = tuple(m.value for m in ENUM_KEYS[key])
        return Optional[Literal[values]], Field(None, description=doc)  # type: ignore[valid-type]
    if key in INT_KEYS:
        lo, hi = INT_KEYS[key]
        return Optional[int], Field(None, ge=lo, le=hi, description=doc)
    if key == "model":
        return Optional[Literal[tuple(catalog_ids)]], Field(None, description=doc)  # type: ignore[valid-type]
    if key == "gpu":
        return Optional[Literal[tuple(gpu_ids)]], Field(None, description=doc)  # type: ignore[valid-type]
    if key == "params":
        return Optional[int | str], Field(None, description=doc, examples=["7B"])
    if key == "lora_alpha":
        return Optional[float], Field(None, gt=0, description=doc)
    if key == "lora_dropout":
        return Optional[float], Field(None, ge=0, lt=1, description=doc)
    if key == "lora_targets":
        return Optional[list[str] | str], Field(None, description=doc, examples=[["q_proj", "v_proj"]])
    if key in BOOL_KEYS:
        return Optional[bool], Field(None, description=doc)
    return Optional[Any], Field(None, description=doc)  # a key this module does not know yet


def build_scenario_model() -> type[BaseModel]:
    """``ScenarioIn``: every scenario key (all optional; ``model`` or ``params`` is required),
    plus ``config_json``, the web's way to give a pasted ``config.json``."""
    catalog_ids = [e["id"] for e in load_catalog()]
    gpu_ids = [g.gpu_id for g in list_gpus()]
    fields: dict[str, Any] = {k: _scenario_field(k, catalog_ids, gpu_ids) for k in S.SCENARIO_KEYS}
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
    max_gpus: Optional[int] = Field(8, ge=1, le=100_000, description="at most this many GPUs (one node: 8)")
    safety_margin: Optional[float] = Field(0.05, ge=0, lt=1, description="memory kept free on each card")
    mfu: Optional[float] = Field(None, gt=0, le=1, description="model FLOPs utilisation assumed")
    sort: Optional[str] = Field("cost", description="rank by cost (per token) or time (fastest first)")
    deadline_hours: Optional[float] = Field(None, gt=0, description="plans slower than this are ranked last")
    stacks: Optional[str] = Field(None, description="only these software stacks: cuda, rocm, habana (comma-separated)")


class PlanIn(PlanOptions):
    """Planner request: the scenario and the planner's own inputs."""

    scenario: ScenarioIn  # type: ignore[valid-type]


class SweepIn(BaseModel):
    """One scenario key varied over a list of values; everything else as in ``scenario``."""

    model_config = ConfigDict(extra="forbid")
    scenario: ScenarioIn  # type: ignore[valid-type]
    key: Literal[SWEEP_KEYS]  # type: ignore[valid-type]
    values: list[int | str] = Field(..., min_length=1, max_length=MAX_SWEEP_VALUES)


class ErrorOut(BaseModel):
    """A request the server refuses: the field at fault and, where finite, its valid values."""

    error: str = Field(..., description="the message, as the CLI prints it")
    key: str = Field(..., description="the field at fault (a scenario key, or body/config_json/...)")
    valid: Optional[list[str]] = Field(None, description="the valid values, where they are a finite set")


class _Out(BaseModel):
    """Response models require the fields of the contract (scenario.md) and allow more."""

    model_config = ConfigDict(extra="allow")


class ComponentOut(_Out):
    name: str
    bytes: int
    phase: str
    counted_in: Optional[str] = None
    detail: Optional[str] = None


class PeakOut(_Out):
    allocated_bytes: int
    reserved_bytes: int
    device_bytes: int
    phase: Optional[str] = None
    breakdown: Optional[dict[str, int]] = Field(None, description="allocated bytes of each part at the peak")


class PhaseOut(_Out):
    phase: str
    allocated_bytes: int


class ModelOut(_Out):
    id: str
    num_params: int
    num_trainable_params: int
    origin: Optional[str] = None


class FitOut(_Out):
    gpu_id: str
    name: str
    usable_bytes: int
    fits: bool
    headroom_bytes: int


class EstimateOut(_Out):
    """The result object of scenario.md: per-GPU bytes, the breakdown and the assumptions."""

    scenario: dict[str, Any]
    model: ModelOut
    peak: PeakOut
    components: list[ComponentOut]
    phases: list[PhaseOut] = []
    host_bytes: int = 0
    fits: list[FitOut] = []
    assumptions: list[str]


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
    bf16_tflops: Optional[float]
    interconnect: str
    price_low: Optional[float]
    price_high: Optional[float]


REQUEST_MODELS: tuple[type[BaseModel], ...] = (ScenarioIn, PlanIn, SweepIn)
