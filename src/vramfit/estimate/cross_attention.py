"""Llama 3.2 Vision's cross-attention decoder layers when the step has images (``VisionTower.cross_attention_layers``).

transformers v5.24.0 models/mllama/modeling_mllama.py ``MllamaCrossAttentionDecoderLayer``: the text side is
a decoder block (input RMSNorm, q_proj, o_proj, post-attention RMSNorm, gated MLP) over the T text tokens, but
k_proj and v_proj read the projected vision features of every tile (V rows per sample: images x tiles x
patches + CLS, ``MllamaModel.forward`` reshapes the projector output to (-1, patches, hidden)); q and k pass
per-head RMSNorms (``q_norm``, ``k_norm``) and no rotary; the attention takes a float
``cross_attention_mask`` (B, 1, S, V), so transformers repeats k and v to every query head
(integrations/sdpa_attention.py ``use_gqa_in_sdpa``: GQA in SDPA only without a mask). Both branch outputs
are scaled by ``tanh(gate)``: with the gates trained (full fine-tuning) ``mul`` saves each branch output
(tools/autograd/derivatives.yaml). Without images ``MllamaTextModel.forward`` skips these layers.
"""

from __future__ import annotations

import dataclasses

from vramfit.estimate import activations as act
from vramfit.estimate.allocator import round_allocation
from vramfit.estimate.framework import FrameworkProfile
from vramfit.estimate.params import Adapter
from vramfit.models.spec import ModelSpec
from vramfit.scenario import Checkpointing, Method, Quantize, Scenario

_KV_KEYS = ("k", "v", "k_norm.fp32_in", "k_norm.normed")


def cross_layer_saved(spec: ModelSpec, lm: Scenario, profile: FrameworkProfile, adapters: list[Adapter],
                      vision_rows: int) -> dict[str, int]:
    """What one cross-attention layer saves (``lm``: the language model's scenario, ``vision_rows``: V per
    sample). The decoder walk with q/k norms, k/v items re-counted over V rows instead of T."""
    quantized = lm.quantize is not Quantize.NONE and lm.method is not Method.FULL
    walked = dataclasses.replace(spec, qk_norm=True)
    items = dict(act.block_saved(walked, lm, profile, adapters, quantized).items)
    T, V = lm.seq_len, vision_rows  # per sample: every item is linear in micro_batch_size x seq_len rows
    expand = spec.num_attention_heads // spec.num_key_value_heads if spec.num_key_value_heads else 1
    for key, nbytes in list(items.items()):
        if key.startswith(("k_proj.", "v_proj.")) or key in _KV_KEYS:
            items[key] = nbytes * V // T * (expand if key in ("k", "v") else 1)
    if lm.method is Method.FULL:  # the two tanh gates save the attention and (masked) MLP outputs
        c, rows = lm.precision.compute_bytes, lm.micro_batch_size * lm.seq_len
        items["gate_attn.in"] = c * rows * spec.hidden_size
        items["gate_mlp.in"] = c * rows * spec.hidden_size
    return items


def cross_attention_activations(spec: ModelSpec, lm: Scenario, profile: FrameworkProfile, adapters: list[Adapter],
                                vision_rows: int) -> tuple[int, int]:
    """(bytes the cross-attention layers add to the language model's kept activations over the same number of
    self-attention layers, the bytes one of them recomputes under checkpointing). Beside the layers: the
    projected vision features k_proj/v_proj read (saved once for their weight gradients, or as every
    checkpointed layer's input) and the cross-attention mask every layer's attention saves."""
    n = spec.vision.cross_attention_layers
    quantized = lm.quantize is not Quantize.NONE and lm.method is not Method.FULL
    self_layer = act.block_saved(spec, lm, profile, adapters, quantized).items
    cross = cross_layer_saved(spec, lm, profile, adapters, vision_rows)
    per_self = sum(round_allocation(v) for v in self_layer.values())
    per_cross = sum(round_allocation(v) for v in cross.values())
    c, B = lm.precision.compute_bytes, lm.micro_batch_size
    states = round_allocation(c * B * vision_rows * spec.hidden_size)
    # (B, 1, S, V) in the model's dtype (``dtype=self.dtype``: its first parameter's, fp32 once PEFT's
    # prepare_model_for_kbit_training or a mixed-precision master copy made the parameters fp32)
    mask = round_allocation(act.dtypes_for(lm, profile).residual * B * lm.seq_len * vision_rows)
    ckpt = lm.gradient_checkpointing is not Checkpointing.NONE
    kv_copied = any(k.startswith(("k_proj.", "v_proj.")) and k.endswith("cast_in") for k in cross)
    keeps_states = lm.method is Method.FULL or ckpt or not kv_copied
    shared = mask + (states if keeps_states else 0)
    if lm.gradient_checkpointing is Checkpointing.NONE:
        return n * (per_cross - per_self) + shared, 0
    return shared, per_cross

