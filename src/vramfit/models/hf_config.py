"""Read a Hugging Face ``config.json`` (as a dict) into a :class:`ModelSpec`. Pure python, no torch.

Each supported ``model_type`` is mapped to the exact module layout that transformers (or, for
Qwen 1, the model's own remote code) builds from that config, so that ``ModelSpec.num_params``
equals ``sum(p.numel() for p in model.parameters())`` of the real model. Fields that the
transformers config class fills with a default when absent get the same default here; fields
that define the shape (``hidden_size``, ``num_hidden_layers`` ...) are required.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from vramfit.errors import ModelError
from vramfit.models.config_check import check_config, check_spec

# the config reader and the helpers every builder shares (models/hf_config_cfg.py), re-exported for hf_moe and
# hf_vlm, and the other layouts' builders (models/hf_config_layouts.py)
from vramfit.models.hf_config_cfg import _Cfg, _common, _embeddings, _family, _heads, _layer_types
from vramfit.models.hf_config_layouts import _bloom, _falcon, _gpt_neox, _phi, _qwen1
from vramfit.models.spec import Linear, ModelSpec, NormType

# model_type -> (family builder name, tie_word_embeddings default of its transformers config)
_LLAMA_LIKE = {
    "llama": False, "mistral": False, "mixtral": False, "qwen2": False, "qwen3": False,
    "qwen3_moe": False, "gemma": True, "gemma2": True, "gemma3_text": True, "olmo2": False,
    "phi3": False,
}
# families with builders in their own modules (vramfit.models.hf_moe, vramfit.models.hf_vlm)
_OTHER_MODULE_TYPES = ("deepseek_v2", "deepseek_v3", "gpt_oss", "llama4", "llama4_text", "llava", "llava_next", "llava_next_video",
                       "qwen2_5_vl")
SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(
    sorted([*_LLAMA_LIKE, "gemma3", "qwen", "phi", "falcon", "gpt_neox", "bloom", *_OTHER_MODULE_TYPES])
)

# Gemma3TextConfig defaults that the published multimodal Gemma 3 configs rely on: their
# text_config lists only what differs from these.
_GEMMA3_TEXT_DEFAULTS = {
    "model_type": "gemma3_text", "vocab_size": 262208, "hidden_size": 2304,
    "intermediate_size": 9216, "num_hidden_layers": 26, "num_attention_heads": 8,
    "num_key_value_heads": 4, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
    "max_position_embeddings": 131072, "sliding_window": 4096, "sliding_window_pattern": 6,
    "query_pre_attn_scalar": 256, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
}

# --- family facts (typed ModelSpec fields; the estimator never tests model_type) -----------------
_GEMMA_NORM = ("gemma", "gemma2", "gemma3_text")  # GemmaRMSNorm: x * (1 + w) in fp32
_QK_NORM = ("qwen3", "qwen3_moe", "olmo2", "gemma3_text")  # q_norm / k_norm modules
_SANDWICH_NORM = ("gemma2", "gemma3_text")  # post_attention + post_feedforward norms as well
# the last transformers 4.x minor whose <Family>Attention builds its own <Family>RotaryEmbedding with cos/sin buffers of
# max_position_embeddings rows (estimate/rope_v4.py): llama v4.40.2 (`_cos_cached`, gone in v4.41.2), mistral v4.41.2
# (gone in v4.42.4), qwen2 v4.44.2 (gone in v4.45.2), mixtral v4.47.1 (models/mixtral/modeling_mixtral.py l. 186-201,
# `self.rotary_emb = MixtralRotaryEmbedding(...)` l. 299; gone in v4.48.1, one MixtralRotaryEmbedding(config) per model)
_ROPE_CACHE_V4_LAST = {"llama": 40, "mistral": 41, "qwen2": 44, "mixtral": 47}


def spec_from_hf_config(config: dict) -> ModelSpec:
    """Return the :class:`ModelSpec` of a decoder-only model described by its ``config.json``."""
    check_config(config)  # types, sizes and shape first (vramfit.limits): one validation for CLI and web
    model_type = config.get("model_type")
    if not model_type:
        raise ModelError(
            "config.json has no 'model_type' field", valid=SUPPORTED_MODEL_TYPES
        )
    if model_type == "gemma3":
        text = config.get("text_config")
        if not isinstance(text, Mapping):
            raise ModelError("config.json of model_type 'gemma3' is missing 'text_config'")
        merged = {**_GEMMA3_TEXT_DEFAULTS, **text, "model_type": "gemma3_text"}
        spec = _llama_like(_Cfg(merged, "gemma3_text"))
        spec.extra["text_config_of"] = "gemma3"
        vision = config.get("vision_config")
        if isinstance(vision, Mapping):  # the multimodal checkpoint carries its SigLIP tower
            from vramfit.models.hf_vlm import gemma3_vision_params, gemma3_vision_tower

            spec = replace(spec, vision_params=gemma3_vision_params(vision, spec.hidden_size),
                           vision=gemma3_vision_tower(config))
        return check_spec(spec)
    builder = _builders().get(model_type)
    if builder is None:  # any other decoder transformers ships, read from its real modules
        from vramfit.models.from_modules import spec_from_transformers

        try:
            from vramfit.models.hf_vlm import attach_tower

            spec = spec_from_transformers(dict(config), f"unsupported model_type {model_type!r}")
            return check_spec(attach_tower(spec, config))
        except ModelError as exc:
            raise ModelError(str(exc).removeprefix(f"{exc.key}: "), valid=SUPPORTED_MODEL_TYPES) from None
    return check_spec(_with_checkpoint_format(builder(_Cfg(config, model_type)), config))


def _with_checkpoint_format(spec: ModelSpec, config: Mapping) -> ModelSpec:
    """MXFP4 expert banks in the checkpoint (quantization_config quant_method "mxfp4", transformers v5.24.0
    quantizers/auto.py AUTO_QUANTIZER_MAPPING): de-quantized at load, which costs a transient (estimate/mxfp4_load.py)."""
    quant = config.get("quantization_config")
    if isinstance(quant, Mapping) and quant.get("quant_method") == "mxfp4" and spec.num_experts:
        return replace(spec, experts_mxfp4=True)
    return spec


# ------------------------------------------------------------------ Llama-style decoders
#: peft v0.21.2 utils/transformers_weight_conversion.py _MOE_TARGET_MODULE_MAPPING["qwen2_moe"] (the
#: names moved to target_parameters; ModelSpec.peft_moe_names)
PEFT_QWEN2_MOE_NAMES = ("gate", "gate_proj", "up_proj", "down_proj")
def _moe_layout(c: _Cfg, layers: int) -> list[int]:
    """The sparse layers of a Qwen3-MoE style config: layer i is MoE when it is not in
    ``mlp_only_layers`` and ``(i + 1) % decoder_sparse_step == 0`` (transformers v5.24.0
    models/qwen3_moe/modeling_qwen3_moe.py Qwen3MoeDecoderLayer); the others hold a dense MLP."""
    experts = c.int("num_experts", "num_local_experts", default=0, minimum=0)
    step = c.int("decoder_sparse_step", default=1)
    dense_only = c.get("mlp_only_layers", default=[])
    if not isinstance(dense_only, list):
        raise ModelError("config.json 'mlp_only_layers' must be a list of layer indices")
    return [i for i in range(layers) if i not in dense_only and experts > 0 and (i + 1) % step == 0]


def _llama_attention(c: _Cfg, hidden: int, q_out: int, kv_out: int) -> list[Linear]:
    mt = c.model_type
    attn_bias = False if mt in ("mistral", "mixtral", "phi3") else c.bool(
        "attention_bias", default=False
    )
    if mt == "phi3":
        return [Linear("qkv_proj", hidden, q_out + 2 * kv_out, False, "attn"),
                Linear("o_proj", q_out, hidden, False, "attn")]
    qkv_bias = True if mt == "qwen2" else attn_bias
    return [Linear("q_proj", hidden, q_out, qkv_bias, "attn"),
            Linear("k_proj", hidden, kv_out, qkv_bias, "attn"),
            Linear("v_proj", hidden, kv_out, qkv_bias, "attn"),
            Linear("o_proj", q_out, hidden, attn_bias, "attn")]


def _llama_mlp(c: _Cfg, hidden: int, inter: int, layers: int) -> tuple[list[Linear], dict[str, int]]:
    """The MLP (or MoE) linears and the MoE fields of the spec."""
    mt = c.model_type
    if mt == "mixtral":
        experts = c.int("num_local_experts")
        moe = {"num_experts": experts, "num_experts_per_tok": c.int("num_experts_per_tok"),
               "moe_intermediate_size": inter, "peft_moe_names": ("gate", "w1", "w3", "w2")}
        return [Linear("gate", hidden, experts, False, "router"),
                Linear("w1", hidden, inter, False, "expert", experts),
                Linear("w3", hidden, inter, False, "expert", experts),
                Linear("w2", inter, hidden, False, "expert", experts)], moe
    moe_layers = _moe_layout(c, layers) if mt == "qwen3_moe" else []
    sparse = len(moe_layers)
    if sparse:
        experts = c.int("num_experts", "num_local_experts")
        per_tok = c.int("num_experts_per_tok")
        moe_inter = c.int("moe_intermediate_size")
        moe = {"num_experts": experts, "num_experts_per_tok": per_tok, "moe_intermediate_size": moe_inter,
               "peft_moe_names": PEFT_QWEN2_MOE_NAMES}
        k = 0 if sparse == layers else sparse  # Linear.layers: 0 = every layer
        if k:
            moe["moe_layers"] = tuple(moe_layers)
        # module order: Qwen3MoeSparseMoeBlock.__init__ registers ``experts`` before ``gate`` (transformers v5.24.0
        # modeling_qwen3_moe.py l. 274-275)
        out = [Linear("gate_proj", hidden, moe_inter, False, "expert", experts, layers=k),
               Linear("up_proj", hidden, moe_inter, False, "expert", experts, layers=k),
               Linear("down_proj", moe_inter, hidden, False, "expert", experts, layers=k),
               Linear("gate", hidden, experts, False, "router", layers=k)]
        if k:  # the dense layers' Qwen3MoeMLP at intermediate_size
            out += [Linear(n, i, o, False, "dense_mlp", layers=layers - sparse)
                    for n, i, o in (("gate_proj", hidden, inter), ("up_proj", hidden, inter), ("down_proj", inter, hidden))]
        return out, moe
    if mt == "phi3":
        return [Linear("gate_up_proj", hidden, 2 * inter, False, "mlp"),
                Linear("down_proj", inter, hidden, False, "mlp")], {}
    mlp_bias = c.bool("mlp_bias", default=False) if mt == "llama" else False
    return [Linear("gate_proj", hidden, inter, mlp_bias, "mlp"),
            Linear("up_proj", hidden, inter, mlp_bias, "mlp"),
            Linear("down_proj", inter, hidden, mlp_bias, "mlp")], {}


def _llama_norm_params(mt: str, hidden: int, hd: int, q_out: int, kv_out: int) -> int:
    if mt in _SANDWICH_NORM:
        norms = 4 * hidden  # input, post_attention, pre_feedforward, post_feedforward
    else:
        norms = 2 * hidden  # input + post_attention (OLMo 2: post_attention + post_feedforward)
    if mt in ("qwen3", "qwen3_moe", "gemma3_text"):
        norms += 2 * hd  # q_norm, k_norm over one head
    elif mt == "olmo2":
        norms += q_out + kv_out  # q_norm, k_norm over the full projection width
    return norms


def _llama_sliding(c: _Cfg, layers: int) -> tuple[int | None, tuple[str, ...]]:
    """(sliding_window, layer_types) as each family's transformers config defines them."""
    mt = c.model_type
    sliding, layer_types = None, ()
    if mt in ("mistral", "mixtral", "phi3"):
        sliding = c.get("sliding_window", default=None)
    elif mt in ("qwen2", "qwen3", "qwen3_moe"):
        if c.bool("use_sliding_window", default=False):
            sliding = c.get("sliding_window", default=None)
        # Qwen3-MoE has no layer_types and no max_window_layers: every layer slides (transformers v5.24.0
        # models/qwen3_moe/configuration_qwen3_moe.py l. 94-95 and __post_init__ l. 110 keep sliding_window whenever
        # use_sliding_window; modeling_qwen3_moe.py l. 149 and 185 pass it to every layer's attention, l. 473 builds
        # one create_sliding_window_causal_mask for all layers)
        if sliding is not None and mt != "qwen3_moe":
            # transformers v5.24.0 models/qwen2/configuration_qwen2.py __post_init__ l. 87-93 (qwen3 alike): only
            # the layers from max_window_layers on slide
            first = c.int("max_window_layers", default=28)
            layer_types = _layer_types(c, layers, lambda i: "sliding_attention" if i >= first else "full_attention")
    elif mt == "gemma2":
        sliding = c.int("sliding_window", default=4096)
        layer_types = _layer_types(
            c, layers, lambda i: "sliding_attention" if (i + 1) % 2 else "full_attention"
        )
    elif mt == "gemma3_text":
        sliding = c.int("sliding_window", default=4096)
        pattern = c.int("sliding_window_pattern", "_sliding_window_pattern", default=6)
        layer_types = _layer_types(
            c, layers, lambda i: "sliding_attention" if (i + 1) % pattern else "full_attention"
        )
    return sliding, layer_types or _layer_types(c, layers, None)


def _llama_like(c: _Cfg) -> ModelSpec:
    mt = c.model_type
    hidden = c.int("hidden_size")
    layers = c.int("num_hidden_layers")
    vocab = c.int("vocab_size")
    inter = c.int("intermediate_size")
    heads, kv, hd = _heads(c, hidden)
    tie = c.bool("tie_word_embeddings", default=_LLAMA_LIKE[mt])
    act = str(c.get("hidden_activation", "hidden_act", default="silu"))
    if mt == "gemma" and act == "gelu":
        act = "gelu_pytorch_tanh"  # transformers maps Gemma's legacy "gelu" to the tanh form
    q_out, kv_out = heads * hd, kv * hd
    attn = _llama_attention(c, hidden, q_out, kv_out)
    mlp, moe = _llama_mlp(c, hidden, inter, layers)
    sliding, layer_types = _llama_sliding(c, layers)
    return ModelSpec(
        hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=kv, head_dim=hd, intermediate_size=inter, vocab_size=vocab,
        tie_word_embeddings=tie, hidden_act=act, gated_mlp=True, block_linears=tuple(attn + mlp),
        block_norm_params=_llama_norm_params(mt, hidden, hd, q_out, kv_out), final_norm_params=hidden,
        norm_type=NormType.RMSNORM, sliding_window=sliding, layer_types=layer_types,
        partial_rotary_factor=c.rope_fraction("partial_rotary_factor"),
        norm_one_plus_weight=mt in _GEMMA_NORM, qk_norm=mt in _QK_NORM,
        sandwich_norms=mt in _SANDWICH_NORM, sliding_mask_copies_v4=mt == "gemma3_text",
        rope_cache_v4_last=_ROPE_CACHE_V4_LAST.get(mt, 0),
        fused_qkv="qkv_proj" if mt == "phi3" else "", fused_gate_up="gate_up_proj" if mt == "phi3" else "",
        rope_concat=mt == "phi3",
        **moe, **_family(c, act), **_embeddings(vocab, hidden, tie), **_common(c),
    )



def _builders() -> dict[str, Callable[[_Cfg], ModelSpec]]:
    """Every builder; the other modules import this one's helpers, so they are imported here."""
    from vramfit.models import hf_moe, hf_vlm

    return {**_BUILDERS, **hf_moe.BUILDERS, **hf_vlm.BUILDERS}


_BUILDERS: dict[str, Callable[[_Cfg], ModelSpec]] = {
    **{mt: _llama_like for mt in _LLAMA_LIKE},
    "qwen": _qwen1, "phi": _phi, "falcon": _falcon, "gpt_neox": _gpt_neox, "bloom": _bloom,
}
