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

from vramfit.estimate import dora
from vramfit.estimate.attention import attention_core_saved, runs_eager_attention, sdpa_math_fallback
from vramfit.estimate.deepspeed import zero3_linear_saves_inputs
from vramfit.estimate.framework import FrameworkProfile
from vramfit.estimate.moe_kernel import weight_copies_saved
from vramfit.estimate.moe_lora import (
    expert_bytes,
    folded_expert_weights,
    fused_expert_bank,
    shared_experts_saved,
)
from vramfit.estimate.norms import NormSite, norm_saved
from vramfit.estimate.params import Adapter, mlp_down
from vramfit.estimate.saved import Dtypes, Saved, dtypes_for, forced_fp32
from vramfit.models.spec import Linear, ModelSpec
from vramfit.scenario import Method, Scenario

__all__ = ["block_saved", "runs_eager_attention", "sdpa_math_fallback", "Saved", "dtypes_for", "forced_fp32"]


def mlp_width(spec: ModelSpec) -> int:
    down = mlp_down(spec, (lin for lin in spec.block_linears if lin.group in ("mlp", "expert")))
    return down.in_features if down else spec.moe_intermediate_size or spec.intermediate_size


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
    saves_inputs: bool  # every nn.Linear saves its input (ZeRO-3's memory-efficient linear)
    # keyed by (name, in_features): Qwen 1 has two linears named c_proj (attention and MLP)
    adapted: dict[tuple[str, int], Adapter] = field(compare=False)
    n_adapters: dict[tuple[str, int], int] = field(compare=False)
    attn_names: frozenset[str] = frozenset()
    # PEFT ParamWrappers on the fused experts (Adapter.param_wrapper): folded into the weight, so the
    # expert matmuls save their inputs as in full fine-tuning and no LoRA branch runs
    wrapped_experts: bool = False
    expert_bytes: int = 2  # of the expert weights and the expert path (moe_lora.expert_bytes)

    def group(self, name: str) -> list[Linear]:
        return [lin for lin in self.spec.block_linears if lin.group == name]


def _block(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, adapters: list[Adapter], quantized: bool) -> Block:
    # the walk is of the MoE block: adapters only on the dense layers' MLP (DeepSeek-V3's first
    # layers, group "dense_mlp") are not in it
    walked = {(x.name, x.in_features, x.out_features) for x in spec.block_linears if x.group != "dense_mlp"}
    per_layer = [ad for ad in adapters if ad.per_layer and not ad.param_wrapper and not ad.vision and (
        not ad.layers or (ad.target, ad.in_features, ad.out_features) in walked)]
    n_adapters: dict[tuple[str, int], int] = {}
    for ad in per_layer:
        key = (ad.target, ad.in_features)
        n_adapters[key] = n_adapters.get(key, 0) + 1
    return Block(
        spec=spec, sc=sc, profile=profile, adapters=tuple(adapters), quantized=quantized,
        dt=dtypes_for(sc, profile, spec), T=sc.micro_batch_size * sc.seq_len, full=sc.method is Method.FULL,
        lora_dropout=profile.lora_dropout(sc.lora_dropout),
        q_saves=quantized and profile.qlora_saves_input,
        saves_inputs=zero3_linear_saves_inputs(spec, sc, quantized),
        adapted={(ad.target, ad.in_features): ad for ad in per_layer}, n_adapters=n_adapters,
        attn_names=frozenset(lin.name for lin in spec.block_linears if lin.group == "attn"),
        wrapped_experts=any(ad.param_wrapper and ad.per_layer > 1 for ad in adapters),
        expert_bytes=expert_bytes(spec, sc, profile, quantized),
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
    out.mlp_start = len(out.items)
    _mlp_saved(blk, out, mlp_in_key)
    return out


# --- norms on the residual stream -------------------------------------------------------------
def _norm(blk: Block, out: Saved, key: str, src_key: str, src_bytes: int) -> None:
    """A norm over a (T, h) tensor whose storage is ``src_key``."""
    norm_saved(out, NormSite(blk.spec, blk.profile, blk.sc.compile, blk.T, blk.dt.compute, blk.full), key, src_key,
               src_bytes)


def _block_norms(blk: Block, out: Saved) -> str:
    """The block's norms; returns the key of the tensor the MLP reads."""
    spec, res = blk.spec, blk.dt.residual
    _norm(blk, out, "norm1", "block_in", res)
    if spec.parallel_attn_mlp:
        if spec.parallel_norms > 1:
            _norm(blk, out, "norm2", "block_in", res)
        return "attn_in" if spec.parallel_norms == 1 else "mlp_in"
    before = set(out.items)
    if spec.sandwich_norms:
        _norm(blk, out, "post_attn_norm", "attn_proj_out", blk.dt.compute)
        _norm(blk, out, "norm2", "resid_mid", res)
        _norm(blk, out, "post_mlp_norm", "mlp_out", blk.dt.compute)
    else:
        _norm(blk, out, "norm2", "resid_mid", res)
    out.after_attention = tuple(k for k in out.items if k not in before)
    return "mlp_in"


# --- linears: inputs saved for weight gradients, LoRA branches ----------------------------------
def _linear_input(blk: Block, out: Saved, lin: Linear, in_key: str, in_bytes: int, tokens: int) -> None:
    if blk.profile.lora_fused_autograd and not blk.full:
        # Unsloth LoRA_QKV / LoRA_W / LoRA_MLP save the input X only (fast_lora.py save_for_backward)
        if (lin.name, lin.in_features) in blk.adapted:
            out.add(in_key, in_bytes * tokens * lin.in_features)
        return
    if blk.wrapped_experts and lin.group in ("expert", "router"):
        # the folded weight needs a gradient: the expert matmul keeps its (gathered) input
        out.add(in_key, in_bytes * tokens * lin.in_features)
        return
    if lin.group == "expert" and not blk.full and fused_expert_bank(blk):
        # a frozen 3-D expert bank: the grouped matmul (aten::_grouped_mm, torch 2.13 derivatives.yaml) keeps
        # its input only for the weight's gradient, so none (the simulator's saved_tensors_hooks agree)
        return
    if blk.full or blk.q_saves or blk.saves_inputs:
        # a 16-bit copy per linear: autocast's cast of F.linear's input; the 4-bit matmul instead keeps its own input
        # A, which bitsandbytes 0.43.1 nn/modules.py Linear4bit.forward makes with `x = x.to(self.compute_dtype)` (a
        # copy only when the dtypes differ, else x itself) and autograd/_functions.py MatMul4Bit (no custom_fwd)
        # keeps as `ctx.tensors = (A, B)`; PEFT's LoRA wrapper hands x itself to the base layer (peft v0.11.1
        # tuners/lora/bnb.py Linear4bit.forward `result = self.base_layer(x, ...)`, dropout on the LoRA branch
        # only), so q, k and v (gate and up) keep one storage (tests/estimate/test_bnb_shared_input.py)
        q_only = blk.q_saves and not (blk.full or blk.saves_inputs)
        copy = in_bytes != blk.dt.compute if q_only else blk.dt.autocast
        key = f"{_cast_key(blk, lin.name, in_key)}.autocast_in" if copy else in_key
        out.add(key, (blk.dt.compute if copy else in_bytes) * tokens * lin.in_features)
        if blk.q_saves:
            out.q_inputs.add(key)
    ad = blk.adapted.get((lin.name, lin.in_features))
    if ad is not None:
        _lora_branches(blk, out, lin, ad, in_key, in_bytes, tokens)


def _cast_key(blk: Block, tag: str, in_key: str) -> str:
    """Whose copy a dtype cast of a linear's input is: each linear's own when eager; one per distinct input when
    compiled, since AOTAutograd runs common-subexpression elimination on the joint graph before partitioning it
    (torch/_functorch/config.py ``cse = True``, partitioners.py ``min_cut_rematerialization_partition`` ->
    ``fx_graph_cse``): PEFT's fp32 casts of q, k and v's shared input are one tensor, gate and up's another. Traced
    with the min-cut partitioner on a transformers Llama layer with PEFT LoRA on every linear (fp32 adapters, bf16
    base): 37,848 B per token eager, 26,072 compiled (tests/sim/test_sim_compiled_op_sac.py). Only the inputs
    several linears read are shared (the attention's and the MLP's); a single reader's copy keeps its own name, which
    estimate/cross_attention.py and estimate/vision.py look for."""
    return in_key if blk.sc.compile and in_key in ("attn_in", "mlp_in") else tag


def _lora_input(blk: Block, out: Saved, tag: str, in_key: str, x_bytes: int, width: int) -> None:
    """What one LoRA branch keeps of its input (``width`` = tokens x in_features elements)."""
    c, ab, profile = blk.dt.compute, blk.dt.adapter, blk.profile
    if blk.dt.autocast and blk.lora_dropout == 0:
        # under autocast lora_A runs in 16 bits: it saves autocast's 16-bit copy of its input
        # (PEFT's fp32 cast, if any, is not kept). PEFT casts the input to lora_A's dtype first (peft 0.21.2
        # tuners/lora/layer.py Linear.forward: `x = self._cast_input_dtype(x, lora_A.weight.dtype)`), so a
        # 16-bit input to fp32 adapters goes up to fp32 and autocast makes lora_A a fresh 16-bit copy;
        # bitsandbytes layers skip that cast under autocast (tuners/lora/bnb.py Linear4bit.forward:
        # `requires_conversion = not torch.is_autocast_enabled()`)
        upcast = profile.lora_casts_input and ab != c and not blk.quantized
        if x_bytes == c and not upcast:
            out.add(in_key, x_bytes * width)
        else:
            out.add(_cast_key(blk, tag, in_key) + ".autocast_in", c * width)
    elif blk.lora_dropout > 0:
        out.add(tag + ".dropout_mask", width)  # native_dropout's bool mask (CUDA fused dropout)
        # under autocast lora_A runs in 16 bits and saves autocast's copy of the dropout output, the
        # (fp32) output itself dies at once (ATen autocast_mode.h: linear/conv1d in AT_FORALL_LOWER_PRECISION_FP)
        kept = c if blk.dt.autocast else (ab if profile.lora_casts_input else x_bytes)
        out.add(tag + ".dropout_out", kept * width)
    elif profile.lora_casts_input and ab != x_bytes:
        out.add(_cast_key(blk, tag, in_key) + ".cast_in", ab * width)
    else:
        out.add(in_key, x_bytes * width)


def _lora_branches(blk: Block, out: Saved, lin: Linear, ad: Adapter, in_key: str, in_bytes: int, tokens: int) -> None:
    profile, ab, rank = blk.profile, blk.dt.adapter, blk.sc.lora_rank
    # lora_B saves lora_A's output: autocast's 16-bit matmul output under autocast (the simulator traces a
    # (T, r) bf16 tensor per branch for HF bf16-mixed LoRA), else the adapter dtype
    a_out = blk.dt.compute if blk.dt.autocast else ab
    # lit-gpt runs one dropout and one lora_A for all enabled q/k/v slices of its fused qkv linear
    shared = profile.fused_qkv_lora and lin.group == "attn" and in_key == "attn_in"
    k = 1 if profile.fused_qkv_lora else blk.n_adapters[(lin.name, lin.in_features)]
    for i in range(k):
        tag = "attn_in.lora" if shared else f"{lin.name}.lora{i}"
        _lora_input(blk, out, tag, in_key, in_bytes, tokens * lin.in_features)
        if shared:
            _fused_qkv_lora(blk, out, tag, a_out, tokens)
        else:
            out.add(tag + ".a_out", a_out * tokens * rank * ad.slices)
        if ad.dora:  # its base and LoRA outputs (estimate/dora.py)
            dora.saved(blk, out, tag, ad, in_bytes, a_out, tokens)


def _fused_qkv_lora(blk: Block, out: Saved, tag: str, a_out: int, tokens: int) -> None:
    """lit-gpt@8641822 lit_gpt/lora.py LoRAQKVLinear.forward: one lora_A for the enabled q/k/v slices
    (``after_A``, T x k*r, saved by the conv1d that applies lora_B), then ``zero_pad`` scatters the conv1d
    output into a zeros tensor of the whole qkv width with ``index_copy``, whose backward formula references
    ``source`` (derivatives.yaml: ``grad.index_select(dim, index).expand_as(source)``): autograd keeps that
    (T, enabled width) tensor, in autocast's 16 bits under autocast (conv1d runs in the lower precision).
    With q, k and v all enabled ``zero_pad`` returns its input: nothing is scattered."""
    spec = blk.spec
    fused = [x for x in blk.adapters if x.per_layer and x.target in blk.attn_names]
    out.add(tag + ".a_out", a_out * tokens * blk.sc.lora_rank * sum(x.slices for x in fused))
    enabled = sum(x.out_features for x in fused)
    whole = (spec.num_attention_heads + 2 * spec.num_key_value_heads) * spec.head_dim
    if enabled < whole:
        out.add(tag + ".zero_pad_source", a_out * tokens * enabled)


def _attention_linears(blk: Block, out: Saved, eager: bool) -> None:
    spec = blk.spec
    attn_lins = blk.group("attn")
    # the output projection reads the attention output and comes last in the block (q, k, v, o): searched from
    # the end, since a square q_proj (a * d == hidden) has the same shape
    o_lin = next(
        (x for x in reversed(attn_lins) if x.out_features == spec.hidden_size
         and x.in_features == spec.num_attention_heads * spec.v_dim),
        None,
    )
    # Flash and memory-efficient SDPA write their output in [B, S, H, D] memory layout, so the
    # `transpose(1, 2).contiguous()` before o_proj copies nothing: o_proj saves the SDPA output itself.
    # Eager attention's probs @ v is [B, H, S, D]: the transpose makes a new tensor; so does a cast of an fp32
    # kernel output to 16 bits (Dtypes.attn; unsloth-zoo@ce232d6c qwen3_moe_float32.py `attn_output.to(float16)`)
    # A rotary that ends in torch.cat (spec.rope_concat) leaves q [B, H, S, D]-contiguous, and flash (16-bit q/k/v,
    # head dim <= 256) writes its output in q's layout: the copy is made there too. The simulator's Phi-3-mini, QLoRA
    # 4 x 1,024 unchecked: a (4, 1024, 32, 96) bf16 clone saved by o_proj beside SDPA's output in every layer (the
    # estimate read -2.8 %); full fine-tuning alike. A fact of transformers' modelling (lit-gpt's model is its own)
    flash_like_q = (spec.rope_concat and blk.profile.runs_transformers_modeling and blk.dt.attn == 2
                    and spec.head_dim <= 256)
    o_in_key = ("attn_out" if eager or blk.profile.attn_output_copied or blk.dt.attn != blk.dt.compute or flash_like_q
                else "attn.out")
    for lin in attn_lins:
        if lin is o_lin:
            _linear_input(blk, out, lin, o_in_key, blk.dt.compute, blk.T)
        elif lin.in_features != spec.hidden_size:
            # MLA up-projections (q_b_proj, kv_b_proj) read their latent norm's 16-bit output
            _linear_input(blk, out, lin, f"{lin.name}.in", blk.dt.compute, blk.T)
        else:
            _linear_input(blk, out, lin, "attn_in", blk.dt.norm_out, blk.T)
    _latent_norms(blk, out)


def _latent_norms(blk: Block, out: Saved) -> None:
    """MLA's q_a_layernorm and kv_a_layernorm over the (T, rank) latents: upcast RMSNorms that keep
    the fp32 input and rstd (and the normed tensor for their weight gradient in full fine-tuning)
    (transformers v5.24.0 models/deepseek_v3/modeling_deepseek_v3.py DeepseekV3RMSNorm)."""
    spec, T = blk.spec, blk.T
    for key, rank in (("q_a_norm", spec.q_lora_rank), ("kv_a_norm", spec.kv_lora_rank)):
        if not rank:
            continue
        out.add(key + ".fp32_in", 4 * T * rank)
        out.add(key + ".rstd", 4 * T)
        if blk.full:
            out.add(key + ".normed", blk.dt.compute * T * rank)


# --- MLP ----------------------------------------------------------------------------------------
def _mlp_linears(blk: Block, out: Saved, mlp_in_key: str, tokens: int) -> list[Linear]:
    """Router and MLP/expert linear inputs; returns the MLP linears."""
    spec, c, dt = blk.spec, blk.dt.compute, blk.dt
    moe = bool(spec.num_experts)
    mlp_lins = blk.group("mlp") + blk.group("expert")
    if moe:
        for lin in blk.group("router"):
            if spec.router_fp32:
                _linear_input(blk, out, lin, "router.fp32_in", 4, blk.T)
            else:
                _linear_input(blk, out, lin, mlp_in_key, dt.norm_out, blk.T)
        out.add("router.softmax_fp32", 4 * blk.T * spec.num_experts)
        e = blk.expert_bytes
        if blk.full or not fused_expert_bank(blk):  # else only for a ParamWrapper's folded weight (_linear_input)
            out.add("experts.gathered_in", e * tokens * spec.hidden_size)
        out.add("experts.weighted_out", e * tokens * spec.hidden_size)
    fp32_mlp = blk.quantized and blk.profile.qlora_unquantized_fp32
    down = mlp_down(spec, mlp_lins)
    for lin in mlp_lins:
        if lin is down and blk.profile.lora_fused_autograd and not blk.full:
            continue  # LoRA_MLP recomputes h = act(e) * g in backward (fast_lora.py)
        if lin is down:
            _linear_input(blk, out, lin, "mlp_mid", dt.norm_out if fp32_mlp else c, tokens)
        else:
            _linear_input(blk, out, lin, "experts.gathered_in" if moe else mlp_in_key,
                          blk.expert_bytes if moe else dt.norm_out, tokens)
    return mlp_lins


def _mlp_saved(blk: Block, out: Saved, mlp_in_key: str) -> None:
    spec, profile = blk.spec, blk.profile
    moe = bool(spec.num_experts)
    tokens = blk.T * spec.expert_rows_per_token if moe else blk.T
    width = mlp_width(spec)
    mlp_lins = _mlp_linears(blk, out, mlp_in_key, tokens)
    act_saves = spec.act_saved_tensors if profile.runs_transformers_modeling else 1
    # bitsandbytes Linear4bit returns its input's dtype: with PEFT's fp32 norms the MLP runs in fp32
    shared_m = m = blk.dt.norm_out if (blk.quantized and profile.qlora_unquantized_fp32) else blk.dt.mlp
    if moe and fused_expert_bank(blk):
        m = max(m, blk.expert_bytes)  # fp32 banks under -mixed: the grouped matmuls return fp32
    if spec.gated_mlp:
        out.add("mlp.gate_out", m * tokens * width)  # saved by the activation
        # compiled, or Unsloth's LoRA_MLP (saves X, e, g only): act(gate) is recomputed in backward
        if not (blk.sc.compile or (profile.lora_fused_autograd and not blk.full)):
            out.add("mlp.act_out", m * tokens * width)  # saved by act * up
        out.add("mlp.up_out", m * tokens * width)
        if act_saves > 1 and not profile.lora_fused_autograd:
            out.add("mlp.act_extra", (act_saves - 1) * m * tokens * width)
    else:
        out.add("mlp.fc1_out", act_saves * m * tokens * width)
    shared_experts_saved(blk, out, mlp_in_key, shared_m)
    if moe and blk.wrapped_experts:
        folded_expert_weights(blk, out, mlp_lins)
    # transformers 4's indexed per-expert loop keeps a copy of every hit expert's weights (estimate/moe_kernel.py);
    # under autocast its matmul keeps autocast's 16-bit cast of the copy
    copies = weight_copies_saved(spec, blk.sc, profile, blk.dt.compute if blk.dt.autocast else blk.expert_bytes)
    if copies:
        out.add("experts.weight_copies", copies)
