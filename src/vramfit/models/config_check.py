"""Type and range checks of the ``config.json`` fields vramfit reads, before any of them is used.

:func:`check_config` runs first thing in :func:`vramfit.models.spec_from_hf_config`, the single entry
point of every config (catalog, local file, Hub, the web's pasted ``config_json``), so the CLI and
the web API refuse the same configs with the same messages. It bounds the shape of the data
(:data:`~vramfit.limits.MAX_CONFIG_DEPTH`, :data:`~vramfit.limits.MAX_CONFIG_LIST`), the type of
each field the builders read, and every size (:data:`~vramfit.limits.MAX_CONFIG_LAYERS`,
:data:`~vramfit.limits.MAX_CONFIG_SIZE`); :func:`check_spec` bounds the parameter count
(:data:`~vramfit.limits.MAX_PARAMS`). Fields vramfit does not read are not checked.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from vramfit import limits
from vramfit.errors import ModelError, ScenarioError
from vramfit.safe_input import check_depth, shown

#: Layer counts (bounded by MAX_CONFIG_LAYERS: per-layer lists are built from them).
LAYER_FIELDS = ("num_hidden_layers", "n_layer", "num_layers")
#: Whole-number sizes (bounded by MAX_CONFIG_SIZE); 0 is allowed here, the builders require >= 1
#: where the architecture needs it.
SIZE_FIELDS = (
    "hidden_size", "n_embed", "vocab_size", "intermediate_size", "num_attention_heads", "n_head",
    "num_key_value_heads", "head_dim", "kv_channels", "num_experts", "num_local_experts",
    "num_experts_per_tok", "moe_intermediate_size", "decoder_sparse_step", "sliding_window_pattern",
    "_sliding_window_pattern", "max_position_embeddings", "seq_length", "n_positions",
    "ffn_hidden_size", "num_kv_heads", "n_head_kv", "num_ln_in_parallel_attn",
    "query_pre_attn_scalar",
)
#: The number of routed experts, by family (Mixtral and gpt-oss; Qwen-MoE, OLMoE and others; DeepSeek).
EXPERT_FIELDS = ("num_local_experts", "num_experts", "n_routed_experts")
#: Sizes that must be at least 1 when given (a model of 0 positions would silence the past-context warning).
POSITIVE_FIELDS = ("sliding_window", "max_position_embeddings", "n_positions")
#: Fractions in (0, 1].
ROTARY_FIELDS = ("partial_rotary_factor", "rotary_pct")
#: Probabilities in [0, 1].
DROPOUT_FIELDS = ("attention_dropout", "attn_pdrop", "resid_pdrop", "hidden_dropout")
#: Any finite number.
NUMBER_FIELDS = ("rope_theta", "rope_local_base_freq", "attn_logit_softcapping", "final_logit_softcapping")
#: Names (short strings).
TEXT_FIELDS = ("model_type", "hidden_act", "hidden_activation", "activation", "torch_dtype", "dtype")
#: Objects (or null).
OBJECT_FIELDS = ("rope_scaling", "rope_parameters", "quantization_config", "text_config", "vision_config")
_MAX_TEXT = 100


def _fail(field: str, message: str, value: Any) -> ModelError:
    return ModelError(f"config.json field {field!r} {message}, got {shown(value)}")


def _whole(field: str, value: Any, lo: int, hi: int, limit: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(field, "must be an integer", value)
    if value < lo:
        raise _fail(field, f"must be an integer >= {lo}", value)
    if value > hi:
        raise _fail(field, f"must be an integer <= {hi:,} ({limit})", value)


def _number(field: str, value: Any, lo: float, hi: float, lo_open: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(field, "must be a number", value)
    try:
        x = float(value)
    except OverflowError:
        raise _fail(field, "must be a finite number", value) from None
    if not math.isfinite(x) or x < lo or (lo_open and x == lo) or x > hi:
        rng = f"in ({lo:g}, {hi:g}]" if lo_open else f"from {lo:g} to {hi:g}"
        raise _fail(field, f"must be a number {rng}" if math.isfinite(hi) else "must be a finite number", value)


#: Other fields bounded by their name, for architectures read from transformers' own modules
#: (``models.from_modules``: any model_type) whose size fields vramfit does not list.
_LAYER_NAME = re.compile(r"(^|_)(n_)?layers?$|^n_layer")
_SIZE_NAME = re.compile(r"hidden|embd|d_model|heads|intermediate|inner|ffn|d_ff|vocab|experts|_dim$|_size$")
_NOT_A_SIZE = re.compile(r"token|theta|eps|factor|range|scale|dropout|window|id$")


def _check_named_sizes(config: Mapping[str, Any]) -> None:
    for f, v in config.items():
        if isinstance(v, bool) or not isinstance(v, int) or f in LAYER_FIELDS or f in SIZE_FIELDS:
            continue
        # upper bounds only: some of these name an index (vision_feature_layer: -1)
        if _LAYER_NAME.search(f):
            _whole(f, v, -limits.MAX_CONFIG_LAYERS, limits.MAX_CONFIG_LAYERS, "MAX_CONFIG_LAYERS")
        elif _SIZE_NAME.search(f) and not _NOT_A_SIZE.search(f):
            _whole(f, v, -limits.MAX_CONFIG_SIZE, limits.MAX_CONFIG_SIZE, "MAX_CONFIG_SIZE")


def _check_fields(config: Mapping[str, Any]) -> None:
    _check_named_sizes(config)
    for f in LAYER_FIELDS:
        if config.get(f) is not None:
            _whole(f, config[f], 0, limits.MAX_CONFIG_LAYERS, "MAX_CONFIG_LAYERS")
    for f in SIZE_FIELDS:
        if config.get(f) is not None:
            _whole(f, config[f], 0, limits.MAX_CONFIG_SIZE, "MAX_CONFIG_SIZE")
    for f in POSITIVE_FIELDS:
        if config.get(f) is not None:
            _whole(f, config[f], 1, limits.MAX_CONFIG_SIZE, "MAX_CONFIG_SIZE")
    for f in ROTARY_FIELDS:
        if config.get(f) is not None:
            _number(f, config[f], 0.0, 1.0, lo_open=True)
    for f in DROPOUT_FIELDS:
        if config.get(f) is not None:
            _number(f, config[f], 0.0, 1.0, lo_open=False)
    for f in NUMBER_FIELDS:
        if config.get(f) is not None:
            _number(f, config[f], -math.inf, math.inf, lo_open=False)
    for f in TEXT_FIELDS:
        v = config.get(f)
        if v is not None and (not isinstance(v, str) or len(v) > _MAX_TEXT):
            raise _fail(f, f"must be a name (text of at most {_MAX_TEXT} characters)", v)
    for f in OBJECT_FIELDS:
        if config.get(f) is not None and not isinstance(config[f], Mapping):
            raise _fail(f, "must be an object", config[f])
    _check_lists(config)
    _check_experts(config)


def _check_experts(config: Mapping[str, Any]) -> None:
    """A token is routed to ``num_experts_per_tok`` of the experts: never more than there are."""
    per_tok = config.get("num_experts_per_tok")
    if not isinstance(per_tok, int) or isinstance(per_tok, bool):
        return
    for f in EXPERT_FIELDS:
        total = config.get(f)
        if isinstance(total, int) and not isinstance(total, bool) and 0 < total < per_tok:
            raise ModelError(f"config.json field 'num_experts_per_tok' ({per_tok}) must be at most {f!r} ({total}): "
                             "a token is routed to that many of the experts")


def _check_lists(config: Mapping[str, Any]) -> None:
    types = config.get("layer_types")
    if types is not None and (not isinstance(types, list) or not all(isinstance(t, str) and len(t) <= _MAX_TEXT for t in types)):
        raise _fail("layer_types", "must be a list of names, one per layer", types)
    dense = config.get("mlp_only_layers")
    if dense is not None and (not isinstance(dense, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < limits.MAX_CONFIG_LAYERS for i in dense)):
        raise _fail("mlp_only_layers", "must be a list of layer indices", dense)


def check_config(config: Any) -> None:
    """Refuse a config whose shape, field types or sizes vramfit cannot use (one ModelError)."""
    if not isinstance(config, Mapping):
        raise ModelError(f"config.json must be a JSON object, got {type(config).__name__}")
    try:
        check_depth("config.json", config)
    except ScenarioError as exc:
        raise ModelError(exc.message) from None
    if any(not isinstance(k, str) for k in config):
        raise ModelError("config.json keys must be strings")
    _check_fields(config)
    rope = config.get("rope_parameters")
    if isinstance(rope, Mapping) and rope.get("partial_rotary_factor") is not None:
        _number("rope_parameters.partial_rotary_factor", rope["partial_rotary_factor"], 0.0, 1.0, lo_open=True)
    for part in ("text_config", "vision_config"):
        sub = config.get(part)
        if not isinstance(sub, Mapping):
            continue
        if any(not isinstance(k, str) for k in sub):
            raise ModelError("config.json keys must be strings")
        try:
            _check_fields(sub)
        except ModelError as exc:
            raise ModelError(exc.message.removeprefix("model: ").replace("field '", f"field '{part}.", 1)) from None


def check_spec(spec: Any) -> Any:
    """Refuse an architecture of more than :data:`~vramfit.limits.MAX_PARAMS` parameters."""
    if spec.num_params > limits.MAX_PARAMS:
        raise ModelError(f"config.json describes {spec.num_params:,} parameters, more than "
                         f"{limits.MAX_PARAMS:,} (MAX_PARAMS)")
    return spec
