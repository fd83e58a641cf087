"""The typed reader of a Hugging Face ``config.json`` dict (:class:`_Cfg`) and the helpers every family builder
shares (heads, layer types, embeddings, the config fields kept in ``ModelSpec.extra``, the family facts a config
states). Split out of :mod:`vramfit.models.hf_config`, which re-exports these names."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from vramfit.errors import ModelError

_MISSING = object()

# config fields copied into ModelSpec.extra (when set) for the estimators that need them
_EXTRA_KEYS = (
    "torch_dtype", "dtype", "rope_theta", "rope_scaling", "rope_parameters", "rope_local_base_freq",
    "attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar", "alibi",
    "quantization_config", "attention_dropout", "attn_pdrop", "resid_pdrop", "hidden_dropout",
)


# --- family facts (typed ModelSpec fields; the estimator never tests model_type) -----------------
# tensors saved by transformers' python-composed tanh GELU (transformers v5.24.0 activations.py
# NewGELUActivation / FastGELUActivation: x, tanh(.), 0.5x and 1 + tanh)
_COMPOSITE_ACT_SAVES = {"gelu_new": 4, "gelu_fast": 4}


def _dropout(c: _Cfg, *names: str) -> float:
    """The first positive dropout probability among ``names`` (0.0 when none is set)."""
    for n in names:
        v = c.data.get(n)
        if isinstance(v, (int, float)) and v > 0:
            return float(v)
    return 0.0


def _family(c: _Cfg, act: str) -> dict[str, Any]:
    """Facts shared by every builder: activation saves, soft-capping and dropouts from the config."""
    return {
        "act_saved_tensors": _COMPOSITE_ACT_SAVES.get(act, 1),
        "attn_logit_softcapping": c.data.get("attn_logit_softcapping") or None,
        "final_logit_softcapping": c.data.get("final_logit_softcapping") or None,
        "attention_dropout": _dropout(c, "attention_dropout", "attn_pdrop"),
        "hidden_dropout": _dropout(c, "resid_pdrop", "hidden_dropout"),
    }


class _Cfg:
    """A config dict with typed, validated look-ups that raise :class:`ModelError`."""

    def __init__(self, data: Mapping[str, Any], model_type: str):
        self.data = data
        self.model_type = model_type

    def get(self, *names: str, default: Any = _MISSING) -> Any:
        for name in names:
            value = self.data.get(name)
            if value is not None:
                return value
        if default is _MISSING:
            alt = f" (or {', '.join(names[1:])})" if len(names) > 1 else ""
            raise ModelError(
                f"config.json of model_type {self.model_type!r} is missing the required field "
                f"{names[0]!r}{alt}"
            )
        return default

    def int(self, *names: str, default: Any = _MISSING, minimum: int = 1) -> int:
        value = self.get(*names, default=default)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ModelError(
                f"config.json field {names[0]!r} must be an integer >= {minimum}, got {value!r}"
            )
        return value

    def bool(self, *names: str, default: Any = _MISSING) -> bool:
        value = self.get(*names, default=default)
        if not isinstance(value, bool):
            raise ModelError(f"config.json field {names[0]!r} must be true or false, got {value!r}")
        return value

    def rope_fraction(self, *names: str) -> float:
        rope = self.data.get("rope_parameters")
        if isinstance(rope, Mapping) and rope.get("partial_rotary_factor") is not None:
            return float(rope["partial_rotary_factor"])
        return float(self.get(*names, default=1.0))


# ------------------------------------------------------------------------------------ helpers
def _heads(c: _Cfg, hidden: int) -> tuple[int, int, int]:
    """(num_attention_heads, num_key_value_heads, head_dim), validated."""
    heads = c.int("num_attention_heads", "n_head")
    kv = c.int("num_key_value_heads", default=heads)
    if heads % kv:
        raise ModelError(
            f"num_attention_heads ({heads}) is not a multiple of num_key_value_heads ({kv})"
        )
    if c.data.get("head_dim") is not None:
        head_dim = c.int("head_dim")
    elif hidden % heads:
        raise ModelError(
            f"hidden_size ({hidden}) is not a multiple of num_attention_heads ({heads}) "
            "and config.json gives no head_dim"
        )
    else:
        head_dim = hidden // heads
    return heads, kv, head_dim


def _layer_types(c: _Cfg, layers: int, default: Callable[[int], str] | None) -> tuple[str, ...]:
    given = c.data.get("layer_types")
    if given is not None:
        if not isinstance(given, list) or len(given) != layers:
            raise ModelError(
                f"config.json 'layer_types' must list one entry per layer ({layers})"
            )
        return tuple(str(t) for t in given)
    return tuple(default(i) for i in range(layers)) if default else ()


def _common(c: _Cfg) -> dict[str, Any]:
    extra = {k: c.data[k] for k in _EXTRA_KEYS if c.data.get(k) is not None}
    return {
        "model_type": c.model_type,
        "max_position_embeddings": int(
            c.get("max_position_embeddings", "seq_length", "n_positions", default=0)
        ),
        "extra": extra,
    }


def _embeddings(vocab: int, hidden: int, tie: bool, lm_head_bias: bool = False) -> dict[str, int]:
    lm_head = 0 if tie else vocab * hidden + (vocab if lm_head_bias else 0)
    return {"embedding_params": vocab * hidden, "lm_head_params": lm_head}


