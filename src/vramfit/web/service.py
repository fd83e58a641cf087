"""What the API does between the HTTP request and the library: bounded reading, checking, calling.

The rules that keep the server safe live here:

* a body is at most :data:`MAX_BODY_BYTES` and is parsed as JSON data only;
* ``model`` must be a catalog id or alias: the server never lets a request make the library read
  a local path or fetch from the Hub (``resolve_model`` is only reached with catalog names);
* a pasted ``config.json`` (``config_json``) is a JSON object read by
  :func:`vramfit.models.spec_from_hf_config`, bounded in size, depth, list lengths and layer count
  before it is read, and never executed.
"""

from __future__ import annotations

import difflib
import json
import math
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from functools import lru_cache
from typing import Any

from vramfit.errors import ModelError, ScenarioError, VramfitError
from vramfit.estimate import EstimateResult
from vramfit.models import ModelSpec, load_catalog, spec_from_hf_config
from vramfit.models.catalog import quantization_notes, release_of
from vramfit.plan.verdict import SAFETY_MARGIN, estimate_fits
from vramfit.safe_input import DuplicateKey, load_json_text, unique_pairs
from vramfit.scenario import Scenario, key_once, parse_scenario
from vramfit.units import GB
from vramfit.web.schemas import MAX_SWEEP_VALUES, SWEEP_KEYS

MAX_BODY_BYTES = 256 * 1024
MAX_CONFIG_DEPTH = 12
MAX_CONFIG_LIST = 1024
MAX_CONFIG_LAYERS = 1024
MAX_PARAMS = 10**13
#: The largest integer a request may hold: a signed 64-bit integer. No count or byte figure in the
#: API comes near it, larger ones cannot be floats exactly (floats end at 1.8e308) and Python refuses
#: to read integers of more than 4,300 digits (sys.get_int_max_str_digits) -- so the bound is checked
#: on the digits, before any conversion.
MAX_JSON_INT = 2**63 - 1
_LAYER_FIELDS = ("num_hidden_layers", "n_layer", "num_layers")


class ApiError(VramfitError):
    """A refused request: HTTP status, the field at fault and, where finite, the valid values."""

    def __init__(self, status: int, key: str, message: str, valid: list[str] | None = None):
        self.status = status
        self.key = key
        self.valid = valid
        super().__init__(f"{key}: {message}")

    def to_dict(self) -> dict[str, Any]:
        return {"error": str(self), "key": self.key, "valid": self.valid}


def error_message(exc: ScenarioError) -> str:
    """What ``exc`` says of its field: its text without the ``key: `` prefix and the `` (valid values: ...)``
    suffix (to say it again under another key, or for the page)."""
    body = str(exc).removeprefix(f"{exc.key}: ")
    return body.removesuffix(f" (valid values: {', '.join(exc.valid)})") if exc.valid else body


def renamed(exc: ScenarioError, key: str) -> ScenarioError:
    """``exc`` naming ``key``: the library names an input as the CLI's flag, the API as the body's field."""
    return ScenarioError(key, error_message(exc), exc.valid)


def checked_gpu(key: str, name: Any) -> str:
    """The catalog id of the GPU ``name`` (an id or alias); unknown, a 422 naming ``key`` (the body's field) whose
    valid values are the catalog's ids (GET /api/gpus describes them)."""
    from vramfit.gpus import get_gpu, list_gpus

    try:
        return get_gpu(name).gpu_id
    except ScenarioError as exc:
        raise ApiError(422, key, error_message(exc), sorted(g.gpu_id for g in list_gpus())) from None


def error_body(exc: VramfitError) -> dict[str, Any]:
    """The 422/413 body: ``{"error", "key", "valid"}`` (the message is the CLI's)."""
    if isinstance(exc, ApiError):
        return exc.to_dict()
    key = getattr(exc, "key", "scenario")
    valid = getattr(exc, "valid", None)
    return {"error": str(exc), "key": key, "valid": list(valid) if valid else None}


class _BigInt:
    """An integer literal beyond :data:`MAX_JSON_INT`, kept as its digit count to name its field."""

    __slots__ = ("digits",)

    def __init__(self, digits: int):
        self.digits = digits


def _parse_int(text: str) -> int | _BigInt:
    digits = len(text.lstrip("-"))
    if digits < 19 or (digits == 19 and abs(int(text)) <= MAX_JSON_INT):
        return int(text)
    return _BigInt(digits)


def _find_big_int(value: Any, path: tuple[str, ...] = ()) -> tuple[tuple[str, ...], _BigInt] | None:
    """(path, marker) of the first out-of-range integer in parsed JSON, or None."""
    if isinstance(value, _BigInt):
        return path, value
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        found = _find_big_int(v, (*path, str(k)))
        if found:
            return found
    return None


def _refuse_big_ints(data: Any, key: str = "body") -> None:
    found = _find_big_int(data)
    if found is None:
        return
    path, big = found
    names = [p for p in path if not p.isdigit()] or [key]
    key = "config_json" if "config_json" in path else names[-1]
    where = f" at {'.'.join(path[path.index('config_json') + 1:])}" if key == "config_json" else ""
    raise ApiError(422, key, f"an integer of {big.digits} digits{where} is out of range "
                   f"(integers here are at most 2**63-1 = {MAX_JSON_INT:,})")


def parse_body(raw: bytes) -> Any:
    """JSON data from a request body already bounded by the caller; an integer beyond
    :data:`MAX_JSON_INT` is refused naming its field."""
    if len(raw) > MAX_BODY_BYTES:
        raise ApiError(413, "body", f"request body is larger than {MAX_BODY_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(422, "body", "request body is not UTF-8 text") from None
    return parse_json_text(text, "body", "request body")


def parse_json_text(text: str, key: str, what: str) -> Any:
    """JSON data from ``text`` (the body, or a JSON form field such as the upload's ``scenario``) as the API reads
    every request: a key given twice, deep nesting and integers beyond :data:`MAX_JSON_INT` are a 422 naming
    ``key`` (or the field the integer is in), never a 500. ``what`` names the text in messages."""
    big: list[bool] = []

    def parse_int(digits: str) -> int | _BigInt:
        out = _parse_int(digits)
        if isinstance(out, _BigInt):
            big.append(True)
        return out

    try:
        data = json.loads(text, parse_int=parse_int, object_pairs_hook=unique_pairs)
    except DuplicateKey as exc:
        raise ApiError(422, key, f"{what} {exc}") from None
    except json.JSONDecodeError as exc:
        raise ApiError(422, key, f"{what} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise ApiError(422, key, f"{what} is nested too deeply") from None
    if big:
        try:
            _refuse_big_ints(data, key)
        except RecursionError:
            raise ApiError(422, key, f"{what} is nested too deeply") from None
    return data


# ------------------------------------------------------------------------------ models
@lru_cache(maxsize=1)
def catalog_names() -> dict[str, str]:
    """Lower-cased catalog id or alias -> catalog id."""
    names: dict[str, str] = {}
    for entry in load_catalog():
        for name in (entry["id"], *entry.get("aliases", ())):
            names[name.lower()] = entry["id"]
    return names


def catalog_ids() -> list[str]:
    return [e["id"] for e in load_catalog()]


def _check_catalog_model(model: Any) -> None:
    if not isinstance(model, str) or not model.strip():
        raise ScenarioError("model", f"must be a catalog model id, got {model!r}")
    if model.strip().lower() in catalog_names() or release_of(model) is not None:  # a release name, as the CLI reads it
        return
    close = difflib.get_close_matches(model.strip().lower(), list(catalog_names()), n=3, cutoff=0.5)
    hint = f" (did you mean {', '.join(catalog_names()[c] for c in close)}?)" if close else ""
    raise ScenarioError(
        "model",
        f"{model!r} is not in the bundled catalog{hint}. The web API takes a catalog id, alias or release name "
        "(an id with release suffixes: -Instruct, -GPTQ, ...), "
        "a parameter count (params) or a pasted config.json (config_json)",
        catalog_ids(),
    )


def _check_config_shape(value: Any, depth: int = 0) -> None:
    """Bound a pasted config before any code reads it: depth, list lengths, layer counts."""
    if depth > MAX_CONFIG_DEPTH:
        raise ScenarioError("config_json", f"is nested more than {MAX_CONFIG_DEPTH} levels deep")
    if isinstance(value, dict):
        for k, v in value.items():
            if k in _LAYER_FIELDS and isinstance(v, int) and v > MAX_CONFIG_LAYERS:
                raise ScenarioError("config_json", f"{k}={v} is more layers than any real model "
                                    f"(at most {MAX_CONFIG_LAYERS} here)")
            _check_config_shape(v, depth + 1)
    elif isinstance(value, list):
        if len(value) > MAX_CONFIG_LIST:
            raise ScenarioError("config_json", f"has a list of {len(value)} items (at most {MAX_CONFIG_LIST})")
        for v in value:
            _check_config_shape(v, depth + 1)


def _check_spec_types(spec: ModelSpec) -> None:
    """The architecture read from a pasted config has the types its fields declare (a config value
    such as ``sliding_window: "abc"`` is copied through as given): whole numbers >= 0 (a window
    >= 1), finite floats >= 0, strings."""
    for f in dataclass_fields(spec):
        value, kind = getattr(spec, f.name), str(f.type)
        if value is None and "None" in kind:
            continue
        if kind.startswith("int"):
            ok = type(value) is int and value >= (1 if f.name == "sliding_window" else 0)
            what = "a whole number" + (" >= 1" if f.name == "sliding_window" else " >= 0")
        elif kind.startswith("float"):
            ok = type(value) in (int, float) and math.isfinite(value) and value >= 0
            what = "a finite number >= 0"
        elif kind in ("str", "bool"):
            ok, what = type(value).__name__ == kind, ("text" if kind == "str" else "true or false")
        elif kind == "tuple[str, ...]":
            ok, what = all(isinstance(v, str) for v in value), "a list of strings"
        else:
            continue
        if not ok:
            raise ScenarioError("config_json", f"{f.name} must be {what}, got {_short_repr(value)}")


def _short_repr(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def spec_from_pasted(config: Any) -> tuple[ModelSpec, str, tuple[str, ...]]:
    """(spec, label, notes) of a pasted config.json dict; errors are keyed ``config_json``. Text that is not JSON
    (the page sends the text JSON.parse refused) is said so, with the parser's line and column; JSON text is still
    refused by its type (the body carries the object itself)."""
    if isinstance(config, str) and config.strip():
        load_json_text("config_json", config, "the pasted config.json")
    if not isinstance(config, dict):
        raise ScenarioError("config_json", f"must be a JSON object (the content of config.json), "
                            f"got {type(config).__name__}")
    _check_config_shape(config)
    try:
        spec = spec_from_hf_config(config)
        if spec.vision is not None:  # the image and video token rules' fields, before any estimate reads them
            from vramfit.models.vlm_fields import check_vision_fields

            check_vision_fields(spec.vision.image_config)
    except ModelError as exc:
        raise ScenarioError("config_json", exc.message.removeprefix(f"{exc.key}: "), None) from None
    except (TypeError, ValueError, KeyError, AttributeError, ArithmeticError, RecursionError) as exc:
        raise ScenarioError("config_json", f"cannot be read as a Hugging Face config.json ({exc})") from None
    _check_spec_types(spec)
    if spec.num_params > MAX_PARAMS:
        raise ScenarioError("config_json", f"describes {spec.num_params:,} parameters (at most {MAX_PARAMS:,})")
    label = f"config.json ({spec.model_type}, {spec.num_params / GB:.3g}B)"
    notes = (f"{label}: a pasted config.json, read as data ({spec.num_hidden_layers} layers, hidden "
             f"{spec.hidden_size}, vocab {spec.vocab_size})", *quantization_notes(config))  # as the CLI's file says
    return spec, label, notes


# ---------------------------------------------------------------------------- scenarios
@dataclass(frozen=True)
class Checked:
    """A validated scenario, and the pasted architecture it uses (None: catalog or params)."""

    scenario: Scenario
    spec: ModelSpec | None = None
    label: str = ""
    notes: tuple[str, ...] = ()

    @property
    def pasted(self) -> bool:
        return self.spec is not None


def _deepspeed_inline(norm: dict[str, Any]) -> None:
    """The web takes a DeepSpeed config as its JSON (a mapping or its text), never a path: the server
    opens no file a request names (as config_import.hf_common.resolve_path refuses for pasted configs)."""
    ds = norm.get("deepspeed_config")
    if isinstance(ds, str) and ds.strip():
        if not ds.lstrip().startswith("{"):
            raise ScenarioError("deepspeed_config", "names a file; paste the DeepSpeed config's JSON instead")
        # bounded as every pasted text: deep nesting, 4,300-digit integers and keys given twice are one line
        norm["deepspeed_config"] = load_json_text("deepspeed_config", ds, "the pasted config")


def check_scenario(data: Any) -> Checked:
    """Validate a scenario body (scenario keys, plus ``config_json``) with ``parse_scenario``; an unknown ``gpu``
    is refused here, listing the catalog's ids."""
    if not isinstance(data, dict):
        raise ScenarioError("scenario", f"must be a mapping of scenario keys, got {type(data).__name__}")
    norm: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for key, value in data.items():
        if not isinstance(key, str):  # JSON keys are strings; kept for Python callers
            raise ScenarioError(str(key), "keys must be strings")
        name = key.strip().replace("-", "_")
        key_once(spelled, name, key)  # seq-len and seq_len both given: refused, as parse_scenario does
        norm[name] = value
    _deepspeed_inline(norm)
    config = norm.pop("config_json", None)
    if config is not None:
        if norm.get("model") is not None or norm.get("params") is not None:
            raise ScenarioError("config_json", "give one of model, params and config_json, not several")
        spec, label, notes = spec_from_pasted(config)
        norm["model"] = label
        checked = Checked(parse_scenario(norm), spec, label, notes)
    else:
        if norm.get("model") is not None:
            _check_catalog_model(norm["model"])
        elif norm.get("params") is None:  # the library's message names Hub ids and paths, which this API refuses
            raise ScenarioError("model", "is required: a catalog id or alias, a parameter count (params) or a pasted "
                                "config.json (config_json)", catalog_ids())
        checked = Checked(parse_scenario(norm))
    if checked.scenario.gpu:
        checked_gpu("gpu", checked.scenario.gpu)
    return checked


#: The user's calibration (:mod:`vramfit.calibration`) that ``create_app(calibration=...)`` serves with; None: none.
CALIBRATION = None


def run_estimate(checked: Checked, sc: Scenario | None = None) -> EstimateResult:
    """The estimate of a checked scenario (or of ``sc``, a variant of it), with the planner's card
    verdicts (``fits``, the one definition of :mod:`vramfit.plan.verdict`)."""
    sc = sc or checked.scenario
    if checked.pasted:
        return estimate_fits(sc, calibration=CALIBRATION, spec=checked.spec, label=checked.label, notes=checked.notes)
    return estimate_fits(sc, calibration=CALIBRATION)


def sweep_values(key: Any, values: Any) -> tuple[str, list[Any]]:
    if key not in SWEEP_KEYS:
        raise ScenarioError("key", f"cannot sweep {key!r}", list(SWEEP_KEYS))
    if not isinstance(values, list) or not values:
        raise ScenarioError("values", "must be a non-empty list")
    if len(values) > MAX_SWEEP_VALUES:
        raise ScenarioError("values", f"at most {MAX_SWEEP_VALUES} values, got {len(values)}")
    for v in values:
        if isinstance(v, (dict, list)) or v is None or (isinstance(v, float) and not math.isfinite(v)):
            raise ScenarioError("values", f"each value must be a finite number or a string, got {_short_repr(v)}")
    return key, values


def sweep_with_estimate(checked: Checked, key: str, values: list[Any]) -> dict[str, Any]:
    """The sweep computed point by point with the estimator (a pasted config: no catalog entry for the planner), in
    the planner's sweep shape (vramfit.plan.sweep.SweepPoint.to_dict): the same fields for either scenario; an invalid
    point carries its error."""
    points, cards = [], {}
    for value in values:
        try:
            sc = checked.scenario.replace(**{key: value})
            r = run_estimate(checked, sc)
        except VramfitError as exc:
            points.append({"value": value, "error": str(exc)})
            continue
        peak = r.peak.to_dict()
        points.append({"value": value, "peak": {k: peak[k] for k in ("allocated_bytes", "reserved_bytes", "device_bytes",
                                                                     "required_bytes", "phase")},
                       "components": {c.name: c.bytes for c in r.components}, "fits": {f.gpu_id: f.fits for f in r.fits},
                       "paging": {f.gpu_id: f.paging_bytes for f in r.fits if f.fits and f.paging_bytes},
                       "accuracy": r.accuracy})
        cards.update({f.gpu_id: {"gpu_id": f.gpu_id, "name": f.name, "usable_bytes": f.usable_bytes,
                                 "limit_bytes": f.limit_bytes} for f in r.fits})
    return {"scenario": checked.scenario.to_dict(), "key": key, "values": values, "points": points,
            "cards": list(cards.values()), "safety_margin": SAFETY_MARGIN}
