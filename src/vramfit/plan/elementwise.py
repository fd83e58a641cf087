"""Memory-bound (elementwise) traffic of a training step per token, split from :mod:`vramfit.plan.throughput`.

What the speed model times at the card's memory bandwidth besides de-quantization: the eager ops of a
decoder block and the loss, and the LoRA adapters' skinny matmuls and adds.
"""

from __future__ import annotations

from vramfit.models.spec import ModelSpec
from vramfit.scenario import Checkpointing, Method, Quantize, Scenario


def elementwise_bytes_per_token(spec: ModelSpec) -> int:
    """Bytes the memory-bound ops of one forward move per token (all layers, then the loss).

    Counted from the operations of a transformers decoder block in eager mode (e.g.
    ``LlamaDecoderLayer``, transformers v4.44): each RMSNorm upcasts to fp32 and runs ~5 kernels
    (about 40 bytes per element), two residual adds (read 2, write 1 element), RoPE on q and k
    (read + write), the MLP activation (SiLU then multiply: read 3, write 2 elements of the MLP width,
    or read 1 write 1 ungated) at 2 bytes per element. The loss reads the bf16 logits, upcasts them and
    runs log-softmax: about 16 bytes per vocabulary entry per token.
    """
    h = spec.hidden_size
    inter = spec.moe_intermediate_size * max(1, spec.num_experts_per_tok) if spec.num_experts else spec.intermediate_size
    dq, dkv = spec.num_attention_heads * spec.head_dim, spec.num_key_value_heads * spec.head_dim
    norms = 2 * 40 * h
    elems = 2 * 3 * h + 2 * (dq + dkv) + (5 if spec.gated_mlp else 2) * inter
    return spec.num_hidden_layers * (norms + 2 * elems) + 16 * spec.vocab_size


def lora_bytes_per_token_fwd(sc: Scenario, lora_params: int) -> int:
    """Memory-bound bytes of the adapters in one forward, per token (bf16, 2 bytes per element).

    peft ``lora.Linear.forward`` (peft v0.11): ``result + lora_B(lora_A(dropout(x))) * scaling``. Per
    adapted linear (in -> out) a token reads its input for ``lora_A`` (in elements), and the skinny
    ``lora_B`` output is written, scaled and added to the base output (about 3 x out); dropout > 0
    copies the input (read + write, 2 x in). The sum of ``in + out`` over all adapters is the adapter
    parameter count / rank, so ``(2 + dropout) x lora_params / rank`` elements, a symmetric-shape reading.
    """
    if not lora_params or sc.method is Method.FULL:
        return 0
    dropout = sc.lora_dropout if sc.lora_dropout is not None else 0.0
    return 2 * (2 + (1 if dropout > 0 else 0)) * lora_params // sc.lora_rank


#: bitsandbytes 4-bit bases, whose PEFT LoRA layer is ``peft.tuners.lora.bnb.Linear4bit``
_BNB_4BIT = (Quantize.NF4, Quantize.NF4_DQ, Quantize.FP4, Quantize.FP4_DQ)


def lora_4bit_clone_bytes_per_token(sc: Scenario, lora_params: int, clones: bool) -> int:
    """Bytes per token of one forward that the defensive clone of a 4-bit base's output moves.

    peft tuners/lora/bnb.py ``Linear4bit.forward`` (v0.10.0 and v0.11.1 l. 458, v0.21.2): ``result = self.base_layer(x)`` then
    ``result = result.clone()`` ("As per Tim Dettmers, for 4bit, we need to defensively clone here") before
    the adapters are added: each adapted 4-bit linear's output is read and written once more (2 bytes per
    element). Its backward (``CloneBackward``) passes the gradient through, so only forward passes (and
    a recompute) pay it. The output widths of all adapters sum to about half of ``lora_params / rank``,
    the symmetric-shape reading of :func:`lora_bytes_per_token_fwd`. ``clones``: the framework profile's
    ``lora_4bit_clones_output``.
    """
    if not (clones and lora_params and sc.method is Method.QLORA and sc.quantize in _BNB_4BIT):
        return 0
    return 2 * 2 * (lora_params // sc.lora_rank) // 2


def lora_clone_bytes(sc: Scenario, lora_params: int) -> int:
    """:func:`lora_4bit_clone_bytes_per_token` over a micro-batch's passes: the forward, and the recompute
    under full or offloaded checkpointing; 0 where the framework profile does not clone."""
    from vramfit.estimate.framework import scenario_profile

    passes = 1 + (1 if sc.gradient_checkpointing in (Checkpointing.FULL, Checkpointing.OFFLOAD) else 0)
    return passes * lora_4bit_clone_bytes_per_token(sc, lora_params, scenario_profile(sc).lora_4bit_clones_output)


def dora_traffic(spec: ModelSpec, sc: Scenario) -> tuple[int, int]:
    """(bytes per forward call, bytes per token of one forward) that DoRA adds to LoRA's memory-bound traffic, over
    every adapted linear (estimate/dora.py: peft v0.21.2 ``DoraLinearLayer``/``DoraLinearVariant``). (0, 0) without DoRA.

    Per call, not per token: ``get_lora_weight`` writes ``x_eye = torch.eye(in)`` in the adapters' dtype and
    ``lora_A``'s matmul reads it (2 x in x in elements), ``lora_B`` writes ``lora_weight`` (in x out) and it is cast to
    the input's dtype (read, write) where the dtypes differ; ``get_weight_norm`` scales it (read, write), adds the base
    weight (read two, write one) and takes ``linalg.norm`` (read one). Per token: ``(mag_norm_scale - 1) * base_result
    + mag_norm_scale * lora_result * scaling`` and the add into the result, five elementwise ops over ``out`` (12
    element reads and writes) where plain LoRA's ``result + lora_B(...) * scaling`` moves 3
    (:func:`lora_bytes_per_token_fwd`)."""
    if not sc.dora or sc.method is Method.FULL:
        return 0, 0
    from vramfit.estimate.framework import adapter_bytes, scenario_profile
    from vramfit.estimate.params import resolve_adapters

    profile = scenario_profile(sc)
    a, x = adapter_bytes(profile, sc.precision), sc.precision.compute_bytes
    cast = a + x if a != x else 0
    per_call = per_token = 0
    for ad in resolve_adapters(spec, sc, profile.fused_qkv_lora, profile.runs_transformers_modeling):
        n = ad.per_layer * (ad.layers or spec.num_hidden_layers)
        i, o = ad.in_features, ad.out_features
        per_call += n * (2 * a * i * i + (a + cast + 6 * x) * i * o)
        per_token += n * 9 * x * o
    return per_call, per_token
