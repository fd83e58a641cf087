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

from vramfit.estimate.attention import attention_core_saved, runs_eager_attention, sdpa_math_fallback
from vramfit.estimate.framework import FrameworkProfile, adapter_bytes, runs_under_autocast
from vramfit.estimate.params import Adapter
from vramfit.models.spec import Linear, ModelSpec, NormType
from vramfit.scenario import Attention, Method, Precision, Scenario

__all__ = ["block_saved", "runs_eager_attention", "sdpa_math_fallback", "Saved", "dtypes_for"]


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


@dataclass(frozen=True)
class Block:
    """What one block's walk needs, computed once: the inputs and the adapter look-ups."""

    spec: ModelSpec
    sc: Scenario
    profile: FrameworkProfile
    adapters: tuple[Adapter, ...]
    quantized: bool
    dt: Dtypes
    T: int  # tokens per micro-batch
    full: bool
    lora_dropout: float
    q_saves: bool  # the 4-bit matmul saves its input (bnb <= 0.43.1)
    # keyed by (name, in_features): Qwen 1 has two linears named c_proj (attention and MLP)
    adapted: dict[tuple[str, int], Adapter] = field(compare=False)
    n_adapters: dict[tuple[str, int], int] = field(compare=False)
    attn_names: frozenset[str] = frozenset()

    def group(self, name: str) -> list[Linear]:
        return [lin for lin in self.spec.block_linears if lin.group == name]


def _block(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, adapters: list[Adapter], quantized: bool) -> Block:
    per_layer = [ad for ad in adapters if ad.per_layer]
    n_adapters: dict[tuple[str, int], int] = {}
    for ad in per_layer:
        key = (ad.target, ad.in_features)
        n_adapters[key] = n_adapters.get(key, 0) + 1
    return Block(
        spec=spec, sc=sc, profile=profile, adapters=tuple(adapters), quantized=quantized,
        dt=dtypes_for(sc, profile), T=sc.micro_batch_size * sc.seq_len, full=sc.method is Method.FULL,
        lora_dropout=sc.lora_dropout if sc.lora_dropout is not None else profile.lora_dropout_default,
        q_saves=quantized and profile.qlora_saves_input,
        adapted={(ad.target, ad.in_features): ad for ad in per_layer}, n_adapters=n_adapters,
        attn_names=frozenset(lin.name for lin in spec.block_linears if lin.group == "attn"),
    )


def block_saved(
    spec: ModelSpec,
    sc: Scenario,
    profile: FrameworkProfile,
    adapters: list[Adapter],
    quantized: bool,
) -> Saved:
    """Bytes saved for backward by one decoder block in one micro-batch (no checkpointing).

    The walk follows the block's ops in order: norms, attention linears, attention core, MLP. A key
    is counted once, by the first op that saves it."""
    blk = _block(spec, sc, profile, adapters, quantized)
    out = Saved()
    mlp_in_key = _block_norms(blk, out)
    eager = runs_eager_attention(spec, sc, profile)
    _attention_linears(blk, out, eager)
    attention_core_saved(blk, out, bool(spec.fused_qkv) or profile.fused_qkv_lora, eager)
    _mlp_saved(blk, out, mlp_in_key)
    return out


# --- norms on the residual stream -------------------------------------------------------------
def _norm(blk: Block, out: Saved, key: str, src_key: str, src_bytes: int) -> None:
    """A norm over a (T, h) tensor whose storage is ``src_key``."""
    T, h, c = blk.T, blk.spec.hidden_size, blk.dt.compute
    layernorm = blk.spec.norm_type is NormType.LAYERNORM
    if layernorm or not blk.profile.rmsnorm_upcast:
        out.add(src_key, src_bytes * T * h)  # LayerNorm / lit-gpt RMSNorm save the input itself
        out.add(key + ".stats", 2 * 4 * T)  # fp32 mean and rstd per token (native_layer_norm)
        if not layernorm and blk.full:
            out.add(key + ".normed", c * T * h)
        return
    if blk.sc.compile:
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
    if blk.full:
        out.add(key + ".normed", (4 if blk.spec.norm_one_plus_weight else src_bytes) * T * h)


def _block_norms(blk: Block, out: Saved) -> str:
    """The block's norms; returns the key of the tensor the MLP reads."""
    spec, res = blk.spec, blk.dt.residual
    _norm(blk, out, "norm1", "block_in", res)
    if spec.parallel_attn_mlp:
        if spec.parallel_norms > 1:
            _norm(blk, out, "norm2", "block_in", res)
        return "attn_in" if spec.parallel_norms == 1 else "mlp_in"
    if spec.sandwich_norms:
        _norm(blk, out, "post_attn_norm", "attn_proj_out", blk.dt.compute)
        _norm(blk, out, "norm2", "resid_mid", res)
        _norm(blk, out, "post_mlp_norm", "mlp_out", blk.dt.compute)
    else:
        _norm(blk, out, "norm2", "resid_mid", res)
    return "mlp_in"


# --- linears: inputs saved for weight gradients, LoRA branches ----------------------------------
def _linear_input(blk: Block, out: Saved, lin: Linear, in_key: str, in_bytes: int, tokens: int) -> None:
    if blk.full or blk.q_saves:
        if blk.dt.autocast:
            out.add(f"{lin.name}.autocast_in", blk.dt.compute * tokens * lin.in_features)
        else:
            out.add(in_key, in_bytes * tokens * lin.in_features)
    ad = blk.adapted.get((lin.name, lin.in_features))
    if ad is not None:
        _lora_branches(blk, out, lin, ad, in_key, in_bytes, tokens)


def _lora_input(blk: Block, out: Saved, tag: str, in_key: str, x_bytes: int, width: int) -> None:
    """What one LoRA branch keeps of its input (``width`` = tokens x in_features elements)."""
    c, ab, profile = blk.dt.compute, blk.dt.adapter, blk.profile
    if blk.dt.autocast and blk.lora_dropout == 0:
        # under autocast lora_A runs in 16 bits: it saves autocast's 16-bit copy of its input
        # (PEFT's fp32 cast, if any, is not kept)
        if x_bytes == c:
            out.add(in_key, x_bytes * width)
        else:
            out.add(tag + ".autocast_in", c * width)
    elif blk.lora_dropout > 0:
        out.add(tag + ".dropout_mask", width)
        out.add(tag + ".dropout_out", (ab if profile.lora_casts_input else x_bytes) * width)
    elif profile.lora_casts_input and ab != x_bytes:
        out.add(tag + ".cast_in", ab * width)
    else:
        out.add(in_key, x_bytes * width)


def _lora_branches(blk: Block, out: Saved, lin: Linear, ad: Adapter, in_key: str, in_bytes: int, tokens: int) -> None:
    profile, ab, rank = blk.profile, blk.dt.adapter, blk.sc.lora_rank
    # lit-gpt runs one dropout and one lora_A for all enabled q/k/v slices of its fused qkv linear
    shared = profile.fused_qkv_lora and lin.group == "attn" and in_key == "attn_in"
    k = 1 if profile.fused_qkv_lora else blk.n_adapters[(lin.name, lin.in_features)]
    for i in range(k):
        tag = "attn_in.lora" if shared else f"{lin.name}.lora{i}"
        _lora_input(blk, out, tag, in_key, in_bytes, tokens * lin.in_features)
        if shared:
            fused = [x for x in blk.adapters if x.per_layer and x.target in blk.attn_names]
            out.add(tag + ".a_out", ab * tokens * rank * sum(x.slices for x in fused))
            # lit-gpt LoRAQKVLinear.zero_pad scatters lora_B's output with index_copy, whose
            # backward formula references `source` (derivatives.yaml: expand_as(source)), so
            # autograd saves that (T, enabled q/k/v width) tensor
            out.add(tag + ".zero_pad_source", ab * tokens * sum(x.out_features for x in fused))
        else:
            out.add(tag + ".a_out", ab * tokens * rank * ad.slices)


def _attention_linears(blk: Block, out: Saved, eager: bool) -> None:
    spec = blk.spec
    attn_lins = blk.group("attn")
    o_lin = next(
        (x for x in attn_lins if x.out_features == spec.hidden_size
         and x.in_features == spec.num_attention_heads * spec.head_dim),
        None,
    )
    # Flash and memory-efficient SDPA write their output in [B, S, H, D] memory layout, so the
    # `transpose(1, 2).contiguous()` before o_proj copies nothing: o_proj saves the SDPA output itself.
    # Eager attention's probs @ v is [B, H, S, D]: the transpose makes a new tensor.
    o_in_key = "attn_out" if eager or blk.profile.attn_output_copied else "attn.out"
    for lin in attn_lins:
        if lin is o_lin:
            _linear_input(blk, out, lin, o_in_key, blk.dt.compute, blk.T)
        else:
            _linear_input(blk, out, lin, "attn_in", blk.dt.norm_out, blk.T)


# --- MLP ----------------------------------------------------------------------------------------
def _mlp_linears(blk: Block, out: Saved, mlp_in_key: str, tokens: int) -> list[Linear]:
    """Router and MLP/expert linear inputs; returns the MLP linears."""
    spec, c, dt = blk.spec, blk.dt.compute, blk.dt
    moe = bool(spec.num_experts)
    mlp_lins = blk.group("mlp") + blk.group("expert")
    if moe:
        for lin in blk.group("router"):
            _linear_input(blk, out, lin, mlp_in_key, dt.norm_out, blk.T)
        out.add("router.softmax_fp32", 4 * blk.T * spec.num_experts)
        out.add("experts.gathered_in", c * tokens * spec.hidden_size)
        out.add("experts.weighted_out", c * tokens * spec.hidden_size)
    fp32_mlp = blk.quantized and blk.profile.qlora_unquantized_fp32
    down = next((lin for lin in mlp_lins if lin.out_features == spec.hidden_size), None)
    for lin in mlp_lins:
        if lin is down:
            _linear_input(blk, out, lin, "mlp_mid", dt.norm_out if fp32_mlp else c, tokens)
        else:
            _linear_input(blk, out, lin, "experts.gathered_in" if moe else mlp_in_key, c if moe else dt.norm_out, tokens)
    return mlp_lins


def _mlp_saved(blk: Block, out: Saved, mlp_in_key: str) -> None:
    spec, profile = blk.spec, blk.profile
    moe = bool(spec.num_experts)
    tokens = blk.T * spec.num_experts_per_tok if moe else blk.T
    width = mlp_width(spec)
    mlp_lins = _mlp_linears(blk, out, mlp_in_key, tokens)
    act_saves = spec.act_saved_tensors if profile.runs_transformers_modeling else 1
    # bitsandbytes Linear4bit returns its input's dtype: with PEFT's fp32 norms the MLP runs in fp32
    m = blk.dt.norm_out if (blk.quantized and profile.qlora_unquantized_fp32) else blk.dt.compute
    if spec.gated_mlp:
        out.add("mlp.gate_out", m * tokens * width)  # saved by the activation
        if not blk.sc.compile:  # compiled: act(gate) is recomputed in backward, not saved
            out.add("mlp.act_out", m * tokens * width)  # saved by act * up
        out.add("mlp.up_out", m * tokens * width)
        if act_saves > 1:
            out.add("mlp.act_extra", (act_saves - 1) * m * tokens * width)
    else:
        out.add("mlp.fc1_out", act_saves * m * tokens * width)
    names = {x.name for x in mlp_lins}
    if moe and profile.runs_transformers_modeling and any(a.target in names for a in blk.adapters if a.per_layer):
        # peft LoRA on 3-D expert parameters (ParamWrapper) materialises W + delta W per expert
        # weight and the expert matmuls keep it for backward
        out.add("experts.merged_weights", blk.dt.compute * sum(x.weight_params for x in mlp_lins if x.group == "expert"))


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
