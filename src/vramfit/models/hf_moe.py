"""Config readers for the newer mixture-of-experts families: DeepSeek-V3 (multi-head latent
attention, shared experts, dense first layers) and gpt-oss (attention sinks, biased experts,
alternating sliding-window layers). Pure python, no torch.

Module layouts as transformers v5.24.0 builds them (``models/deepseek_v3/modeling_deepseek_v3.py``,
``models/gpt_oss/modeling_gpt_oss.py``); names are the modules' attribute names, which PEFT
``target_modules`` match.
"""

from __future__ import annotations

from dataclasses import replace

from vramfit.errors import ModelError
from vramfit.models.hf_config import (
    PEFT_QWEN2_MOE_NAMES,
    _Cfg,
    _common,
    _embeddings,
    _family,
    _heads,
    _layer_types,
)
from vramfit.models.spec import Linear, ModelSpec, NormType


def _mla_attention(c: _Cfg, hidden: int, heads: int) -> tuple[list[Linear], int, dict[str, int]]:
    """DeepseekV3Attention: (linears, latent norm params, spec fields)."""
    nope = c.int("qk_nope_head_dim")
    rope = c.int("qk_rope_head_dim")
    v_dim = c.int("v_head_dim")
    kv_rank = c.int("kv_lora_rank")
    # absent: the config classes' default, 1536 (transformers v5.24.0 configuration_deepseek_v2.py and
    # configuration_deepseek_v3.py); null: no query compression (q_proj)
    q_rank = c.int("q_lora_rank", default=0, minimum=0) if "q_lora_rank" in c.data else 1536
    bias = c.bool("attention_bias", default=False)
    qk = nope + rope
    if q_rank:
        q = [Linear("q_a_proj", hidden, q_rank, bias, "attn"),
             Linear("q_b_proj", q_rank, heads * qk, False, "attn")]
    else:
        q = [Linear("q_proj", hidden, heads * qk, False, "attn")]
    linears = [*q,
               Linear("kv_a_proj_with_mqa", hidden, kv_rank + rope, bias, "attn"),
               Linear("kv_b_proj", kv_rank, heads * (nope + v_dim), False, "attn"),
               Linear("o_proj", heads * v_dim, hidden, bias, "attn")]
    fields = {"head_dim": qk, "v_head_dim": v_dim, "q_lora_rank": q_rank, "kv_lora_rank": kv_rank,
              "qk_rope_head_dim": rope}
    return linears, q_rank + kv_rank, fields  # q_a_layernorm + kv_a_layernorm weights


def _deepseek_v3(c: _Cfg) -> ModelSpec:
    """DeepSeek-V3 / R1: MLA, ``n_routed_experts`` fused experts + ``n_shared_experts`` shared MLP,
    dense MLPs in the first ``first_k_dense_replace`` layers. The multi-token-prediction layer
    (``num_nextn_predict_layers``) is not built by transformers and not counted."""
    hidden = c.int("hidden_size")
    layers = c.int("num_hidden_layers")
    vocab = c.int("vocab_size")
    heads = c.int("num_attention_heads")
    inter = c.int("intermediate_size")
    experts = c.int("n_routed_experts")
    moe_inter = c.int("moe_intermediate_size")
    shared = c.int("n_shared_experts", default=0, minimum=0) * moe_inter
    # layers from first_k_dense_replace on are MoE: a larger value makes every layer dense
    dense = min(c.int("first_k_dense_replace", default=0, minimum=0), layers)
    tie = c.bool("tie_word_embeddings", default=False)
    attn, latent_norms, mla = _mla_attention(c, hidden, heads)
    sparse = layers - dense
    mlp = []  # Linear.layers = 0 means every layer, so a kind held by no layer is left out
    if sparse:  # module order: DeepseekV3MoE.__init__ registers ``experts`` before ``gate`` (modeling_deepseek_v3.py l. 209-210)
        mlp += [Linear("gate_up_proj", hidden, 2 * moe_inter, False, "expert", experts, layers=sparse),
                Linear("down_proj", moe_inter, hidden, False, "expert", experts, layers=sparse),
                Linear("gate", hidden, experts, False, "router", layers=sparse)]
    if shared and sparse:
        mlp += [Linear("gate_proj", hidden, shared, False, "shared_expert", layers=sparse),
                Linear("up_proj", hidden, shared, False, "shared_expert", layers=sparse),
                Linear("down_proj", shared, hidden, False, "shared_expert", layers=sparse)]
    if dense:  # the dense layers' MLP (not walked for activations: the MoE block is)
        mlp += [Linear("gate_proj", hidden, inter, False, "dense_mlp", layers=dense),
                Linear("up_proj", hidden, inter, False, "dense_mlp", layers=dense),
                Linear("down_proj", inter, hidden, False, "dense_mlp", layers=dense)]
    act = str(c.get("hidden_act", default="silu"))
    return ModelSpec(
        num_key_value_heads=heads, intermediate_size=inter, vocab_size=vocab, hidden_size=hidden,
        num_hidden_layers=layers, num_attention_heads=heads, tie_word_embeddings=tie, hidden_act=act,
        gated_mlp=True, block_linears=tuple(attn + mlp), block_norm_params=2 * hidden + latent_norms,
        final_norm_params=hidden, norm_type=NormType.RMSNORM, num_experts=experts if sparse else 0,
        num_experts_per_tok=c.int("num_experts_per_tok"), moe_intermediate_size=moe_inter,
        peft_moe_names=PEFT_QWEN2_MOE_NAMES if sparse else (), router_fp32=True, first_moe_layer=dense if sparse else 0,
        moe_layers=tuple(range(dense, layers)) if dense and sparse else (),
        # transformers v5.24.0 modeling_deepseek_v3.py l. 551 DeepseekV3PreTrainedModel._keep_in_fp32_modules_strict =
        # ["e_score_correction_bias", "gate.weight"] (modeling_deepseek_v2.py l. 483: ["gate.weight"]); the bias is
        # a buffer, and the router is also built fp32 (DeepseekV3TopkRouter.__init__, dtype=torch.float32)
        fp32_kept_strict=("gate",) if sparse else (),
        **mla, **_family(c, act), **_embeddings(vocab, hidden, tie),
        **_common(c),
    )


def _gpt_oss(c: _Cfg) -> ModelSpec:
    """gpt-oss: biased q/k/v/o, one learned sink logit per head, a biased router and biased fused
    experts, alternating sliding-window and full-attention layers."""
    hidden = c.int("hidden_size")
    layers = c.int("num_hidden_layers")
    vocab = c.int("vocab_size")
    heads, kv, hd = _heads(c, hidden)  # gpt-oss configs give head_dim (64)
    inter = c.int("intermediate_size")
    experts = c.int("num_local_experts")
    tie = c.bool("tie_word_embeddings", default=False)
    bias = c.bool("attention_bias", default=True)
    linears = (
        Linear("q_proj", hidden, heads * hd, bias, "attn"),
        Linear("k_proj", hidden, kv * hd, bias, "attn"),
        Linear("v_proj", hidden, kv * hd, bias, "attn"),
        Linear("o_proj", heads * hd, hidden, bias, "attn"),
        Linear("router", hidden, experts, True, "router"),
        Linear("gate_up_proj", hidden, 2 * inter, True, "expert", experts),
        Linear("down_proj", inter, hidden, True, "expert", experts),
    )
    family = _family(c, "silu")
    # GptOssExperts._apply_gate: clamp(gate), clamp(up), gate * sigmoid(alpha * gate), (up + 1) * glu
    # keep the gate_up output, the clamped gate, sigmoid's output, glu and up + 1: 6 (T, I) tensors
    # where a plain SwiGLU keeps 3, so 3 more beyond gate/act/up
    family["act_saved_tensors"] = 4
    return ModelSpec(
        hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=kv, head_dim=hd, intermediate_size=inter, vocab_size=vocab,
        tie_word_embeddings=tie, hidden_act="swiglu_clamp", gated_mlp=True, block_linears=linears,
        block_norm_params=2 * hidden + heads,  # input + post_attention norms, and self_attn.sinks
        final_norm_params=hidden, norm_type=NormType.RMSNORM, num_experts=experts,
        num_experts_per_tok=c.int("num_experts_per_tok"), moe_intermediate_size=inter,
        sliding_window=c.int("sliding_window", default=128),
        # transformers v5.24.0 modeling_gpt_oss.py l. 390 GptOssPreTrainedModel._keep_in_fp32_modules =
        # ["post_attention_layernorm", "input_layernorm", "norm"]: every RMSNorm, on fp16 loads only
        fp32_kept_fp16=("block_norms", "final_norm"),
        layer_types=_layer_types(c, layers, lambda i: "sliding_attention" if i % 2 == 0 else "full_attention"),
        # transformers v5.24.0 models/gpt_oss/modeling_gpt_oss.py GptOssPreTrainedModel: _supports_sdpa = False,
        # _supports_flash_attn = True (the sinks go to the kernel as s_aux, e.g. vllm-flash-attn3)
        attention_sinks=True, sdpa_supported=False, flash_supported=True,
        eager_softmax_fp32=False,  # softmax(combined_logits, dtype=combined_logits.dtype)
        experts_v4_indexed_loop=True,  # transformers v4.55.0 GptOssExperts.forward (spec.py)
        **family, **_embeddings(vocab, hidden, tie), **_common(c),
    )


def _llama4_moe_indices(c: _Cfg, layers: int) -> list[int]:
    """The MoE layers (Llama4TextConfig: ``moe_layers`` or every ``interleave_moe_layer_step``-th layer)."""
    given = c.data.get("moe_layers")
    if given is not None:
        if not isinstance(given, list):
            raise ModelError("config.json 'moe_layers' must be a list of layer indices")
        return sorted({i for i in given if isinstance(i, int) and 0 <= i < layers})
    step = c.int("interleave_moe_layer_step", default=1)
    return list(range(step - 1, layers, step))


def _llama4_moe_layers(c: _Cfg, layers: int) -> int:
    """How many layers are MoE."""
    return len(_llama4_moe_indices(c, layers))


def _llama4_qk_norm_layers(c: _Cfg, layers: int) -> int:
    """Layers with Llama4TextL2Norm on q and k: ``use_qk_norm`` on the RoPE layers (Llama4TextConfig
    ``no_rope_layers``: 1 = RoPE; by default every ``no_rope_layer_interval``-th layer, 4, skips it; transformers
    v5.24.0 models/llama4/configuration_llama4.py and modeling_llama4.py Llama4TextAttention)."""
    if not c.bool("use_qk_norm", default=True):
        return 0
    given = c.data.get("no_rope_layers")
    if isinstance(given, list) and given:
        return sum(1 for x in given[:layers] if x)
    every = c.int("no_rope_layer_interval", default=4)
    return sum(1 for i in range(layers) if (i + 1) % every != 0)


def _llama4_text(c: _Cfg) -> ModelSpec:
    """Llama 4 text model: routed experts (fused 3-D banks) + a shared expert on the MoE layers, a
    wider dense MLP (``intermediate_size_mlp``) on the others, chunked attention on the RoPE layers
    (transformers v5.24.0 models/llama4/modeling_llama4.py Llama4TextDecoderLayer)."""
    hidden = c.int("hidden_size")
    layers = c.int("num_hidden_layers")
    vocab = c.int("vocab_size")
    heads, kv, hd = _heads(c, hidden)
    inter = c.int("intermediate_size")
    dense_inter = c.int("intermediate_size_mlp")
    experts = c.int("num_local_experts")
    bias = c.bool("attention_bias", default=False)
    tie = c.bool("tie_word_embeddings", default=False)
    moe = _llama4_moe_layers(c, layers)
    dense = layers - moe
    linears = [Linear("q_proj", hidden, heads * hd, bias, "attn"),
               Linear("k_proj", hidden, kv * hd, bias, "attn"),
               Linear("v_proj", hidden, kv * hd, bias, "attn"),
               Linear("o_proj", heads * hd, hidden, bias, "attn")]
    if moe:  # module order: Llama4TextMoe.__init__ registers ``experts``, ``router``, ``shared_expert`` (l. 162-164)
        linears += [Linear("gate_up_proj", hidden, 2 * inter, False, "expert", experts, layers=moe),
                    Linear("down_proj", inter, hidden, False, "expert", experts, layers=moe),
                    Linear("router", hidden, experts, False, "router", layers=moe),
                    Linear("gate_proj", hidden, inter, False, "shared_expert", layers=moe),
                    Linear("up_proj", hidden, inter, False, "shared_expert", layers=moe),
                    Linear("down_proj", inter, hidden, False, "shared_expert", layers=moe)]
    if dense:
        linears += [Linear("gate_proj", hidden, dense_inter, False, "dense_mlp", layers=dense),
                    Linear("up_proj", hidden, dense_inter, False, "dense_mlp", layers=dense),
                    Linear("down_proj", dense_inter, hidden, False, "dense_mlp", layers=dense)]
    chunk = c.get("attention_chunk_size", default=8192)
    act = str(c.get("hidden_act", default="silu"))
    return ModelSpec(
        hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
        head_dim=hd, intermediate_size=inter, vocab_size=vocab, tie_word_embeddings=tie, hidden_act=act,
        gated_mlp=True, block_linears=tuple(linears), block_norm_params=2 * hidden,  # qk L2 norm: no weight
        final_norm_params=hidden, norm_type=NormType.RMSNORM, num_experts=experts if moe else 0,
        num_experts_per_tok=c.int("num_experts_per_tok", default=1), moe_intermediate_size=inter,
        experts_run_every_token=bool(moe), router_linear_subclass=bool(moe),  # Llama4Router(nn.Linear), l. 141
        sliding_window=chunk if isinstance(chunk, int) and chunk > 0 else None,
        layer_types=_layer_types(c, layers, None), qk_l2_norm_layers=_llama4_qk_norm_layers(c, layers),
        first_moe_layer=min(_llama4_moe_indices(c, layers), default=0),
        moe_layers=tuple(_llama4_moe_indices(c, layers)) if moe and dense else (),
        **_family(c, act), **_embeddings(vocab, hidden, tie), **_common(c),
    )


def llama4_vision_params(vision: dict, text_hidden: int) -> int:
    """Llama4VisionModel and Llama4MultiModalProjector (transformers v5.24.0 modeling_llama4.py)."""
    v = _Cfg({"hidden_size": 768, "intermediate_size": 5632, "num_hidden_layers": 34, "num_channels": 3,
              "image_size": 448, "patch_size": 14, "projector_input_dim": 4096, "projector_output_dim": 4096,
              "vision_output_dim": 7680, **vision}, "llama4_vision_model")
    h, inter, p = v.int("hidden_size"), v.int("intermediate_size"), v.int("patch_size")
    patches = (v.int("image_size") // p) ** 2
    embed = h + (patches + 1) * h + v.int("num_channels") * p * p * h  # class, positions, unfold linear
    layer = 4 * (h * h + h) + (h * inter + inter) + (inter * h + h) + 2 * 2 * h
    adapter = inter * v.int("projector_input_dim") + v.int("projector_output_dim") ** 2  # vision_adapter
    projector = v.int("vision_output_dim") * text_hidden  # multi_modal_projector.linear_1, no bias
    return embed + 2 * 2 * h + v.int("num_hidden_layers") * layer + adapter + projector


def _llama4(c: _Cfg) -> ModelSpec:
    """Llama4ForConditionalGeneration: the text model in ``text_config`` plus the vision tower."""
    text = c.data.get("text_config")
    if not isinstance(text, dict):
        raise ModelError("config.json of model_type 'llama4' is missing 'text_config'")
    spec = _llama4_text(_Cfg({**text, "model_type": "llama4_text"}, "llama4_text"))
    vision = c.data.get("vision_config")
    extra = llama4_vision_params(vision, spec.hidden_size) if isinstance(vision, dict) else 0
    return replace(spec, model_type="llama4", vision_params=extra)


BUILDERS = {"deepseek_v2": _deepseek_v3, "deepseek_v3": _deepseek_v3, "gpt_oss": _gpt_oss, "llama4": _llama4, "llama4_text": _llama4_text}
