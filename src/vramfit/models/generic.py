"""A generic dense Llama-style decoder of a requested size (sizes like ``"7B"`` are parsed by ``vramfit.units``).

Shape rule (fitted on the Llama 2 / Llama 3 family: 7B is 4096 wide and 32 deep, 13B 5120 x 40,
405B 16384 x 126, i.e. ``num_hidden_layers ~ hidden_size / 128`` and, with the MLP at ~8/3 of the
width, ``N ~ 12 * L * h^2 ~ 12 * h^3 / 128``):

1. ``hidden_size ~ cbrt(N * 128 / 12)``, built from heads of ``head_dim`` 128 (64 below 1024
   wide). Up to 32 heads every head has its own K/V (multi-head, like Llama 2 7B/13B); above,
   the head count is rounded to a multiple of 8 and 8 KV heads are shared (GQA, like Llama 2 70B
   and Llama 3).
2. ``intermediate_size`` starts at 8/3 of the width, rounded up to a multiple of 256 (SwiGLU).
3. ``num_hidden_layers`` is the whole number of such blocks that best fills the budget left after
   the untied 32000-token embeddings and lm_head.
4. ``intermediate_size`` is then re-fitted (multiple of 256) so the total lands on the request;
   the result is within 2% of it from 100M to 10T parameters.
"""

from __future__ import annotations

import math

from vramfit.errors import ModelError, ScenarioError
from vramfit.models.hf_config import spec_from_hf_config
from vramfit.models.spec import ModelSpec
from vramfit.units import MAX_PARAMS, parse_param_count  # noqa: F401 - counts are parsed in Core

GENERIC_VOCAB = 32000
MIN_GENERIC_PARAMS = 100_000_000
def _round_up(x: float, multiple: int) -> int:
    return max(multiple, math.ceil(x / multiple) * multiple)


def generic_config(num_params: int | str) -> dict:
    """The ``config.json`` (model_type llama) of a generic decoder of about ``num_params``."""
    n = parse_param_count(num_params)
    if n < MIN_GENERIC_PARAMS:
        raise ModelError(
            f"a generic model needs at least {MIN_GENERIC_PARAMS:,} parameters (its 32000-token "
            f"embeddings alone take tens of millions), got {n:,}",
            key="params",
        )
    raw = (n * 128 / 12) ** (1 / 3)
    head_dim = 128 if raw >= 1024 else 64
    heads = max(2, round(raw / head_dim))
    if heads > 32:
        heads = round(heads / 8) * 8
    kv = heads if heads <= 32 else 8
    hidden = heads * head_dim

    embeddings = 2 * GENERIC_VOCAB * hidden + hidden  # embed_tokens + lm_head + final norm
    attn = 2 * hidden * hidden + 2 * hidden * kv * head_dim + 2 * hidden  # + 2 RMSNorms
    inter = _round_up(8 * hidden / 3, 256)
    budget = n - embeddings
    layers = max(1, round(budget / (attn + 3 * hidden * inter)))
    inter = max(256, round((budget / layers - attn) / (3 * hidden) / 256) * 256)
    return {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "intermediate_size": inter,
        "max_position_embeddings": 4096,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "num_key_value_heads": kv,
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": GENERIC_VOCAB,
    }


def generic_spec(num_params: int | str) -> ModelSpec:
    """A generic dense Llama-style :class:`ModelSpec` with about ``num_params`` parameters."""
    try:
        return spec_from_hf_config(generic_config(num_params))
    except ModelError as exc:  # its shapes round up (10T became 10,008,049,006,592 parameters): the user's field
        if "MAX_PARAMS" not in exc.message:
            raise
        raise ScenarioError("params", f"a generic decoder of {parse_param_count(num_params):,} parameters rounds up to "
                            f"more than {MAX_PARAMS:,} (MAX_PARAMS); give a smaller count") from exc
