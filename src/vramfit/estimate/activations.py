"""Activation memory from the real computation: the tensors autograd saves for backward.

For one decoder block, each op of the Hugging Face (or torchtune / lit-gpt) implementation is walked
and the tensors its backward needs are counted once each (a tensor saved by several ops, or a view
that keeps its base alive, counts once). Rules used throughout (PyTorch autograd formulas,
``tools/autograd/derivatives.yaml``):

- ``linear``/``mm`` saves its input only if the weight needs a gradient; the weight is a parameter.
- ``mul(a, b)`` saves ``b`` if ``a`` needs grad and ``a`` if ``b`` needs grad.
- ``silu``, native ``gelu`` and ``pow`` save their input; ``tanh``, ``softmax`` and ``log_softmax``
  save their output; dtype casts, views, ``cat`` and ``add`` save nothing.
- SDPA flash / memory-efficient kernels save q, k, v, the output and the fp32 log-sum-exp.

Notation: T = micro_batch_size x seq_len tokens, h hidden, a/kv heads, d head_dim, I MLP width,
c bytes of the compute dtype.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vramfit.estimate.framework import FrameworkProfile, adapter_bytes, runs_under_autocast
from vramfit.estimate.params import Adapter
from vramfit.models.spec import Linear, ModelSpec, NormType, PositionEncoding
from vramfit.scenario import Attention, Method, Precision, Scenario


@dataclass
class Saved:
    """Named saved tensors of one block; a key is counted once however many ops save it."""

    items: dict[str, int] = field(default_factory=dict)

    def add(self, key: str, nbytes: int) -> None:
        if nbytes > 0 and key not in self.items:
            self.items[key] = nbytes

    @property
    def total(self) -> int:
        return sum(self.items.values())


@dataclass(frozen=True)
class Dtypes:
    compute: int  # activations / matmul outputs
    residual: int  # the residual stream between blocks
    norm_out: int  # output of the norms that feed linears
    adapter: int
    autocast: bool


def dtypes_for(scenario: Scenario, profile: FrameworkProfile) -> Dtypes:
    """Element sizes of the tensors in a block.

    ``-mixed``: fp32 weights under autocast, so the residual stream and norm outputs are fp32 and
    each linear casts its input to 16 bits. QLoRA under PEFT's ``prepare_model_for_kbit_training``:
    embeddings and norms are fp32 (peft other.py:202), so the residual stream is fp32 as well.
    """
    c = scenario.precision.compute_bytes
    fp32_stream = scenario.precision.mixed or scenario.precision is Precision.FP32 or (
        scenario.method is Method.QLORA and profile.qlora_unquantized_fp32
    )
    res = 4 if fp32_stream else c
    return Dtypes(
        compute=c,
        residual=res,
        norm_out=res,
        adapter=adapter_bytes(profile, scenario.precision),
        autocast=runs_under_autocast(scenario, profile),
    )


def mlp_width(spec: ModelSpec) -> int:
    for lin in spec.block_linears:
        if lin.group in ("mlp", "expert") and lin.out_features == spec.hidden_size:
            return lin.in_features
    return spec.moe_intermediate_size or spec.intermediate_size


def block_saved(
    spec: ModelSpec,
    sc: Scenario,
    profile: FrameworkProfile,
    adapters: list[Adapter],
    quantized: bool,
) -> Saved:
    """Bytes saved for backward by one decoder block in one micro-batch (no checkpointing)."""
    dt = dtypes_for(sc, profile)
    c = dt.compute
    b, s = sc.micro_batch_size, sc.seq_len
    T = b * s
    h, a, kv, d = spec.hidden_size, spec.num_attention_heads, spec.num_key_value_heads, spec.head_dim
    full = sc.method is Method.FULL
    out = Saved()
    # keyed by (name, in_features): Qwen 1 has two linears named c_proj (attention and MLP)
    adapted = {(ad.target, ad.in_features): ad for ad in adapters if ad.per_layer}
    n_adapters: dict[tuple[str, int], int] = {}
    for ad in adapters:
        if ad.per_layer:
            key = (ad.target, ad.in_features)
            n_adapters[key] = n_adapters.get(key, 0) + 1
    dropout = sc.lora_dropout if sc.lora_dropout is not None else profile.lora_dropout_default
    q_saves = quantized and profile.qlora_saves_input

    # --- norms on the residual stream -------------------------------------------------------
    layernorm = spec.norm_type is NormType.LAYERNORM
    gemma_norm = spec.norm_one_plus_weight

    def norm(key: str, src_key: str, src_bytes: int) -> None:
        """A norm over a (T, h) tensor whose storage is ``src_key``."""
        if layernorm or not profile.rmsnorm_upcast:
            out.add(src_key, src_bytes * T * h)  # LayerNorm / lit-gpt RMSNorm save the input itself
            out.add(key + ".stats", 2 * 4 * T)  # fp32 mean and rstd per token (native_layer_norm)
            if not layernorm and full:
                out.add(key + ".normed", c * T * h)
            return
        if sc.compile:
            # inductor fuses the norm into one kernel whose backward recomputes from the input and
            # the fp32 rstd (min-cut partitioner, torch/_functorch/partitioners.py)
            out.add(src_key, src_bytes * T * h)
            out.add(key + ".rstd", 4 * T)
            return
        # upcast RMSNorm: x.to(float32) (an alias when already fp32) is saved by pow and mul
        if src_bytes == 4:
            out.add(src_key, 4 * T * h)
        else:
            out.add(key + ".fp32_in", 4 * T * h)
        out.add(key + ".rstd", 4 * T)
        if full:
            out.add(key + ".normed", (4 if gemma_norm else src_bytes) * T * h)

    norm("norm1", "block_in", dt.residual)
    if spec.parallel_attn_mlp:
        if spec.parallel_norms > 1:
            norm("norm2", "block_in", dt.residual)
        mlp_in_key = "attn_in" if spec.parallel_norms == 1 else "mlp_in"
    else:
        if spec.sandwich_norms:
            norm("post_attn_norm", "attn_proj_out", c)
            norm("norm2", "resid_mid", dt.residual)
            norm("post_mlp_norm", "mlp_out", c)
        else:
            norm("norm2", "resid_mid", dt.residual)
        mlp_in_key = "mlp_in"

    # --- linears: inputs saved for weight gradients, LoRA branches -----------------------------
    def linear_input(lin: Linear, in_key: str, in_bytes: int, tokens: int) -> None:
        if full or q_saves:
            if dt.autocast:
                out.add(f"{lin.name}.autocast_in", c * tokens * lin.in_features)
            else:
                out.add(in_key, in_bytes * tokens * lin.in_features)
        ad = adapted.get((lin.name, lin.in_features))
        if ad is None:
            return
        # lit-gpt runs one dropout and one lora_A for all enabled q/k/v slices of its fused qkv linear
        shared = profile.fused_qkv_lora and lin.group == "attn" and in_key == "attn_in"
        k = 1 if profile.fused_qkv_lora else n_adapters[(lin.name, lin.in_features)]
        ab = dt.adapter
        x_bytes = in_bytes
        for i in range(k):
            tag = "attn_in.lora" if shared else f"{lin.name}.lora{i}"
            if dt.autocast and dropout == 0:
                # under autocast lora_A runs in 16 bits: it saves autocast's 16-bit copy of its input
                # (PEFT's fp32 cast, if any, is not kept)
                if x_bytes == c:
                    out.add(in_key, x_bytes * tokens * lin.in_features)
                else:
                    out.add(tag + ".autocast_in", c * tokens * lin.in_features)
            elif dropout > 0:
                out.add(tag + ".dropout_mask", tokens * lin.in_features)
                out.add(tag + ".dropout_out", (ab if profile.lora_casts_input else x_bytes) * tokens * lin.in_features)
            elif profile.lora_casts_input and ab != x_bytes:
                out.add(tag + ".cast_in", ab * tokens * lin.in_features)
            else:
                out.add(in_key, x_bytes * tokens * lin.in_features)
            if shared:
                fused = [a for a in adapters if a.per_layer and a.target in attn_names]
                out.add(tag + ".a_out", ab * tokens * sc.lora_rank * sum(a.slices for a in fused))
                # lit-gpt LoRAQKVLinear.zero_pad scatters lora_B's output with index_copy, whose
                # backward formula references `source` (derivatives.yaml: expand_as(source)), so
                # autograd saves that (T, enabled q/k/v width) tensor
                out.add(tag + ".zero_pad_source", ab * tokens * sum(a.out_features for a in fused))
            else:
                out.add(tag + ".a_out", ab * tokens * sc.lora_rank * ad.slices)

    lin_by_group: dict[str, list[Linear]] = {}
    for lin in spec.block_linears:
        lin_by_group.setdefault(lin.group, []).append(lin)

    attn_in_key = "attn_in"
    attn_lins = lin_by_group.get("attn", [])
    attn_names = {lin.name for lin in attn_lins}
    fused_qkv = bool(spec.fused_qkv) or profile.fused_qkv_lora
    o_lin = next((lin for lin in attn_lins if lin.out_features == h and lin.in_features == a * d), None)
    eager = runs_eager_attention(spec, sc, profile)
    # Flash and memory-efficient SDPA write their output in [B, S, H, D] memory layout, so the
    # `transpose(1, 2).contiguous()` before o_proj copies nothing: o_proj saves the SDPA output itself.
    # Eager attention's probs @ v is [B, H, S, D]: the transpose makes a new tensor.
    o_in_key = "attn_out" if eager or profile.attn_output_copied else "attn.out"
    for lin in attn_lins:
        if lin is o_lin:
            linear_input(lin, o_in_key, c, T)
        else:
            linear_input(lin, attn_in_key, dt.norm_out, T)

    # --- attention core ------------------------------------------------------------------------
    q_el, kv_el = T * a * d, T * kv * d
    if spec.qk_norm:  # q/k RMSNorm: fp32 copies of q and k saved (model-dtype input when compiled)
        qk_b = c if sc.compile else 4
        out.add("q_norm.fp32_in", qk_b * q_el)
        out.add("k_norm.fp32_in", qk_b * kv_el)
        if full:
            out.add("q_norm.normed", c * q_el)
            out.add("k_norm.normed", c * kv_el)
    # transformers passes enable_gqa to SDPA only without a mask; a sliding window shorter than the
    # sequence makes a mask, and then repeat_kv expands k and v to every head (sdpa_attention.py)
    windowed = bool(
        profile.runs_transformers_modeling and spec.sliding_window and not spec.layer_types
        and sc.seq_len > spec.sliding_window
    )
    expand = kv < a and (eager or profile.expands_kv_for_sdpa or windowed)
    k_saved = c * (q_el if expand else kv_el)
    if fused_qkv and not expand:
        # v (and q, k without rotary) are views of the fused projection output: the whole
        # (T, (a + 2 kv) d) storage stays alive; rotary makes q and k new tensors
        out.add("qkv_fused", c * (q_el + 2 * kv_el))
        if spec.position_encoding is PositionEncoding.ROPE:
            out.add("q", c * q_el)
            out.add("k", c * kv_el)
    else:
        out.add("q", c * q_el)
        out.add("k", k_saved)
        out.add("v", k_saved)
    if eager:
        scores = b * a * s * s
        upcast = spec.eager_softmax_fp32
        out.add("attn.softmax_out", (4 if upcast else c) * scores)  # softmax saves its output
        if spec.attention_dropout > 0:
            out.add("attn.dropout_mask", scores)  # bool mask
            out.add("attn.dropout_out", c * scores)  # saved by probs @ v
        elif upcast and c != 4:
            out.add("attn.probs", c * scores)  # the 16-bit cast saved by probs @ v
        if spec.attn_logit_softcapping:
            out.add("attn.softcap_tanh", c * scores)
    elif sdpa_math_fallback(spec, sc, profile):
        # SDPA's math kernel keeps the fp32 softmax probabilities [B, H, S, S] for backward
        out.add("attn.softmax_out", 4 * b * a * s * s)
    else:
        out.add("attn.out", c * q_el)
        out.add("attn.lse", 4 * b * a * s)
    if spec.hidden_dropout > 0:  # residual dropout after the attention and the MLP output projections
        out.add("resid_dropout_masks", 2 * T * h)

    # --- MLP -----------------------------------------------------------------------------------
    width = mlp_width(spec)
    mlp_lins = lin_by_group.get("mlp", []) + lin_by_group.get("expert", [])
    moe = bool(spec.num_experts)
    tokens = T * spec.num_experts_per_tok if moe else T
    if moe:
        router = lin_by_group.get("router", [])
        for lin in router:
            linear_input(lin, mlp_in_key, dt.norm_out, T)
        out.add("router.softmax_fp32", 4 * T * spec.num_experts)
        out.add("experts.gathered_in", c * tokens * h)
        out.add("experts.weighted_out", c * tokens * h)
    down = next((lin for lin in mlp_lins if lin.out_features == h), None)
    for lin in mlp_lins:
        if lin is down:
            linear_input(lin, "mlp_mid", c if not (quantized and profile.qlora_unquantized_fp32) else dt.norm_out, tokens)
        else:
            linear_input(lin, "experts.gathered_in" if moe else mlp_in_key, c if moe else dt.norm_out, tokens)
    act_saves = spec.act_saved_tensors if profile.runs_transformers_modeling else 1
    # bitsandbytes Linear4bit returns its input's dtype: with PEFT's fp32 norms the MLP runs in fp32
    m = dt.norm_out if (quantized and profile.qlora_unquantized_fp32) else c
    if spec.gated_mlp:
        out.add("mlp.gate_out", m * tokens * width)  # saved by the activation
        if not sc.compile:  # compiled: act(gate) is recomputed in backward, not saved
            out.add("mlp.act_out", m * tokens * width)  # saved by act * up
        out.add("mlp.up_out", m * tokens * width)
        if act_saves > 1:
            out.add("mlp.act_extra", (act_saves - 1) * m * tokens * width)
    else:
        out.add("mlp.fc1_out", act_saves * m * tokens * width)
    if moe and profile.runs_transformers_modeling and any(a.target in {x.name for x in mlp_lins} for a in adapters if a.per_layer):
        # peft LoRA on 3-D expert parameters (ParamWrapper) materialises W + delta W per expert
        # weight and the expert matmuls keep it for backward
        out.add("experts.merged_weights", c * sum(x.weight_params for x in mlp_lins if x.group == "expert"))
    return out


def runs_eager_attention(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> bool:
    """Eager attention also when the model cannot use SDPA: BLOOM (ALiBi) and, in transformers,
    models with attention-logit soft-capping (Gemma 2), which SDPA kernels cannot apply."""
    if sc.attention is Attention.EAGER or not spec.sdpa_supported:
        return True
    return profile.runs_transformers_modeling and bool(spec.attn_logit_softcapping)


def sdpa_math_fallback(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> bool:
    """When transformers' SDPA call can only run PyTorch's math kernel (fp32 probabilities kept):
    Falcon expands its single (or grouped) k/v head with a stride-0 view, which flash and
    memory-efficient kernels reject; and grouped-query attention in fp32 (`enable_gqa=True`, which
    the memory-efficient kernel does not take, while flash takes no fp32)."""
    if not profile.runs_transformers_modeling or spec.num_key_value_heads >= spec.num_attention_heads:
        return False
    return spec.kv_broadcast_view or sc.precision.compute_bytes == 4


def block_backward_transient(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """Largest working set of gradient tensors inside one block's backward, beyond saved tensors.

    Gated MLP: the gradient of ``act * up`` and the two gradients it produces (3 x T x I); plain
    MLP: 2 x T x I. Flash/SDPA backward: grad of the output, grads of q, k, v and the fp32 ``dq``
    accumulator of FlashAttention-2 (Dao 2023, Algorithm 2). Eager: grad of the probabilities and
    the fp32 softmax gradient (input and output).
    """
    dt = dtypes_for(sc, profile)
    c = dt.compute
    b, s = sc.micro_batch_size, sc.seq_len
    T = b * s
    a, kv, d = spec.num_attention_heads, spec.num_key_value_heads, spec.head_dim
    tokens = T * (spec.num_experts_per_tok if spec.num_experts else 1)
    width = mlp_width(spec)
    mlp = (3 if spec.gated_mlp else 2) * c * tokens * width
    if runs_eager_attention(spec, sc, profile) or sdpa_math_fallback(spec, sc, profile):
        attn = (c + 8) * b * a * s * s
    else:
        attn = c * T * d * (2 * a + 2 * kv) + 4 * T * a * d
    return max(mlp, attn)


def block_input_bytes(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """The block input a checkpointed block keeps (its ``hidden_states`` argument)."""
    dt = dtypes_for(sc, profile)
    return dt.residual * sc.micro_batch_size * sc.seq_len * spec.hidden_size


def model_extra_saved(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, lm_head_trainable: bool) -> int:
    """Saved tensors outside the blocks: the final norm, lm_head input, eager attention mask."""
    dt = dtypes_for(sc, profile)
    T = sc.micro_batch_size * sc.seq_len
    h = spec.hidden_size
    rms_upcast = profile.rmsnorm_upcast and spec.norm_type is NormType.RMSNORM
    total = 4 * T * h if rms_upcast else dt.residual * T * h
    if lm_head_trainable:
        total += dt.compute * T * h
    if sc.attention is Attention.EAGER:
        total += dt.compute * sc.micro_batch_size * sc.seq_len * sc.seq_len
    if spec.embedding_norm:  # word_embeddings_layernorm saves the embedding output
        total += dt.compute * T * h
    return total
