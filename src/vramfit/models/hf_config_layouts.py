"""Builders of the families whose module layout is not Llama's: Qwen 1 (remote code), Phi-1/1.5/2, Falcon,
GPT-NeoX and BLOOM. Split out of :mod:`vramfit.models.hf_config` (which registers them in ``_BUILDERS``); each
lists the modules transformers builds from the config, so the parameter count is exact."""

from __future__ import annotations

from vramfit.errors import ModelError
from vramfit.models.hf_config_cfg import _Cfg, _common, _embeddings, _family, _heads
from vramfit.models.spec import Linear, ModelSpec, NormType, PositionEncoding


def _qwen1(c: _Cfg) -> ModelSpec:
    """Qwen 1 (``QWenLMHeadModel``, remote code): fused c_attn with bias, w1/w2/c_proj MLP whose
    branches are each ``intermediate_size // 2`` wide."""
    hidden = c.int("hidden_size")
    layers = c.int("num_hidden_layers")
    vocab = c.int("vocab_size")
    heads = c.int("num_attention_heads")
    head_dim = c.int("kv_channels", default=128)
    ff = c.int("intermediate_size") // 2
    bias = not c.bool("no_bias", default=True)
    tie = c.bool("tie_word_embeddings", default=False)
    proj = heads * head_dim
    linears = (
        Linear("c_attn", hidden, 3 * proj, True, "attn"),
        Linear("c_proj", proj, hidden, bias, "attn"),
        Linear("w1", hidden, ff, bias, "mlp"),
        Linear("w2", hidden, ff, bias, "mlp"),
        Linear("c_proj", ff, hidden, bias, "mlp"),
    )
    common = _common(c)
    common["extra"]["config_intermediate_size"] = 2 * ff
    return ModelSpec(
        hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=heads, head_dim=head_dim, intermediate_size=ff, vocab_size=vocab,
        tie_word_embeddings=tie, hidden_act="silu", gated_mlp=True, block_linears=linears,
        block_norm_params=2 * hidden, final_norm_params=hidden, norm_type=NormType.RMSNORM,
        partial_rotary_factor=float(c.get("rotary_pct", default=1.0)), fused_qkv="c_attn",
        **_family(c, "silu"), **_embeddings(vocab, hidden, tie), **common,
    )


def _phi(c: _Cfg) -> ModelSpec:
    """Phi-1 / 1.5 / 2: biased q/k/v/dense and fc1/fc2, one LayerNorm, parallel attn+MLP."""
    hidden = c.int("hidden_size")
    layers = c.int("num_hidden_layers")
    vocab = c.int("vocab_size")
    inter = c.int("intermediate_size")
    heads, kv, hd = _heads(c, hidden)
    tie = c.bool("tie_word_embeddings", default=False)
    linears = (
        Linear("q_proj", hidden, heads * hd, True, "attn"),
        Linear("k_proj", hidden, kv * hd, True, "attn"),
        Linear("v_proj", hidden, kv * hd, True, "attn"),
        Linear("dense", heads * hd, hidden, True, "attn"),
        Linear("fc1", hidden, inter, True, "mlp"),
        Linear("fc2", inter, hidden, True, "mlp"),
    )
    # qk_layernorm adds LayerNorms on q and k; their saved tensors are not modelled (qk_norm models
    # the fp32-upcast RMSNorm of Qwen 3 / OLMo 2), so qk_norm stays False
    norms = 2 * hidden + (4 * (hidden // heads) if c.bool("qk_layernorm", default=False) else 0)
    act = str(c.get("hidden_act", default="gelu_new"))
    return ModelSpec(
        hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=kv, head_dim=hd, intermediate_size=inter, vocab_size=vocab,
        tie_word_embeddings=tie, hidden_act=act,
        gated_mlp=False, block_linears=linears, block_norm_params=norms,
        final_norm_params=2 * hidden, norm_type=NormType.LAYERNORM, parallel_attn_mlp=True,
        parallel_norms=1,  # PhiDecoderLayer: one input_layernorm feeds attention and MLP
        partial_rotary_factor=c.rope_fraction("partial_rotary_factor"),
        **_family(c, act), **_embeddings(vocab, hidden, tie, lm_head_bias=True), **_common(c),
    )


def _falcon(c: _Cfg) -> ModelSpec:
    """Falcon: fused query_key_value (multi-query for 7B, grouped with ``num_kv_heads`` in the
    new decoder architecture of 40B/180B), LayerNorms with bias, tied lm_head."""
    hidden = c.int("hidden_size")
    layers = c.int("num_hidden_layers")
    vocab = c.int("vocab_size")
    heads = c.int("num_attention_heads", "n_head")
    if hidden % heads:
        raise ModelError(f"hidden_size ({hidden}) is not a multiple of num_attention_heads")
    hd = hidden // heads
    new_arch = c.bool("new_decoder_architecture", default=False)
    if new_arch:
        kv = c.int("num_kv_heads", "n_head_kv", default=heads)
    else:
        kv = 1 if c.bool("multi_query", default=True) else heads
    bias = c.bool("bias", default=False)
    ffn = c.int("ffn_hidden_size", default=4 * hidden)
    parallel = c.bool("parallel_attn", default=True)
    tie = c.bool("tie_word_embeddings", default=True)
    linears = (
        Linear("query_key_value", hidden, (heads + 2 * kv) * hd, bias, "attn"),
        Linear("dense", hidden, hidden, bias, "attn"),
        Linear("dense_h_to_4h", hidden, ffn, bias, "mlp"),
        Linear("dense_4h_to_h", ffn, hidden, bias, "mlp"),
    )
    n_ln = c.int("num_ln_in_parallel_attn", default=2 if new_arch else 1)
    lns = 2 if (not parallel or n_ln == 2) else 1
    common = _common(c)
    common["max_position_embeddings"] = common["max_position_embeddings"] or 2048
    act = str(c.get("activation", default="gelu"))
    return ModelSpec(
        hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=kv, head_dim=hd, intermediate_size=ffn, vocab_size=vocab,
        tie_word_embeddings=tie, hidden_act=act,
        gated_mlp=False, block_linears=linears, block_norm_params=lns * 2 * hidden,
        final_norm_params=2 * hidden, norm_type=NormType.LAYERNORM, parallel_attn_mlp=parallel,
        parallel_norms=lns, fused_qkv="query_key_value", kv_broadcast_view=True, linear_subclass=True,
        **_family(c, act), **_embeddings(vocab, hidden, tie), **common,
    )


def _gpt_neox(c: _Cfg) -> ModelSpec:
    """GPT-NeoX (StableLM-Alpha, Pythia): fused biased query_key_value, LayerNorms with bias."""
    hidden = c.int("hidden_size")
    layers = c.int("num_hidden_layers")
    vocab = c.int("vocab_size")
    inter = c.int("intermediate_size")
    heads, _, hd = _heads(c, hidden)
    bias = c.bool("attention_bias", default=True)
    tie = c.bool("tie_word_embeddings", default=False)
    linears = (
        Linear("query_key_value", hidden, 3 * hidden, bias, "attn"),
        Linear("dense", hidden, hidden, bias, "attn"),
        Linear("dense_h_to_4h", hidden, inter, True, "mlp"),
        Linear("dense_4h_to_h", inter, hidden, True, "mlp"),
    )
    act = str(c.get("hidden_act", default="gelu"))
    return ModelSpec(
        hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=heads, head_dim=hd, intermediate_size=inter, vocab_size=vocab,
        tie_word_embeddings=tie, hidden_act=act,
        gated_mlp=False, block_linears=linears, block_norm_params=4 * hidden,
        final_norm_params=2 * hidden, norm_type=NormType.LAYERNORM,
        parallel_attn_mlp=c.bool("use_parallel_residual", default=True),
        parallel_norms=2,  # GPTNeoXLayer: input_layernorm and post_attention_layernorm
        partial_rotary_factor=c.rope_fraction("rotary_pct", "partial_rotary_factor"),
        fused_qkv="query_key_value", rope_concat=True,
        **_family(c, act), **_embeddings(vocab, hidden, tie), **_common(c),
    )


def _bloom(c: _Cfg) -> ModelSpec:
    """BLOOM: ALiBi (no position parameters), biased fused query_key_value, LayerNorm after the
    word embeddings (counted in ``final_norm_params``), tied lm_head."""
    hidden = c.int("hidden_size", "n_embed")
    layers = c.int("num_hidden_layers", "n_layer")
    vocab = c.int("vocab_size")
    heads = c.int("num_attention_heads", "n_head")
    if hidden % heads:
        raise ModelError(f"hidden_size ({hidden}) is not a multiple of num_attention_heads")
    tie = c.bool("tie_word_embeddings", default=True)
    inter = 4 * hidden
    linears = (
        Linear("query_key_value", hidden, 3 * hidden, True, "attn"),
        Linear("dense", hidden, hidden, True, "attn"),
        Linear("dense_h_to_4h", hidden, inter, True, "mlp"),
        Linear("dense_4h_to_h", inter, hidden, True, "mlp"),
    )
    common = _common(c)
    common["extra"].update(final_norm_includes="ln_f + word_embeddings_layernorm", alibi=True)
    return ModelSpec(
        hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=heads, head_dim=hidden // heads, intermediate_size=inter,
        vocab_size=vocab, tie_word_embeddings=tie, hidden_act="gelu", gated_mlp=False,
        block_linears=linears, block_norm_params=4 * hidden, final_norm_params=4 * hidden,
        norm_type=NormType.LAYERNORM, position_encoding=PositionEncoding.ALIBI, embedding_norm=True,
        sdpa_supported=False,  # transformers v5.24.0 BloomPreTrainedModel has no _supports_sdpa
        flash_supported=False,  # nor _supports_flash_attn (PreTrainedModel's default: False)
        fused_qkv="query_key_value", eager_forward_scores=2, block_returns_attention_probs=True,
        **_family(c, "gelu"), **_embeddings(vocab, hidden, tie), **common,
    )
