"""Tensors a forward makes beside the saved activations: autocast's 16-bit weight copies and the sliding-window
masks transformers builds (moved out of estimate/core.py, which keeps the model state and buffers)."""

from __future__ import annotations

from vramfit.estimate.allocator import round_allocation
from vramfit.estimate.framework import FrameworkProfile
from vramfit.models.spec import ModelSpec
from vramfit.scenario import Attention, Checkpointing, Method, Quantize, Scenario


def sliding_window_masks(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """Sliding-window layers whose window is shorter than the sequence get a real mask in
    transformers; SDPA then runs its memory-efficient kernel, which saves the 16-bit additive
    [B, 1, S, S] bias for backward in every such layer (not under checkpointing, which recomputes)."""
    window = spec.sliding_window
    if (
        not profile.runs_transformers_modeling  # transformers' masking (masking_utils); others use flash/flex
        or not window
        or sc.seq_len <= window
        or sc.attention is not Attention.SDPA
        or sc.gradient_checkpointing is not Checkpointing.NONE
    ):
        return 0
    if spec.layer_types:
        layers = sum(1 for t in spec.layer_types if t == "sliding_attention")
    else:
        layers = spec.num_hidden_layers
    return layers * round_allocation(sc.precision.compute_bytes * sc.micro_batch_size * sc.seq_len * sc.seq_len)


def autocast_copies(spec: ModelSpec, sc: Scenario, head_calls: int = 1) -> tuple[int, int]:
    """16-bit weight copies made by autocast: (extra at the end of forward, alive into backward).

    Autocast caches the cast of leaf tensors that require grad for the whole autocast region
    (ATen autocast_mode.cpp ``cached_cast``); frozen weights are cast at each use. Either copy is
    kept by the matmul's backward (the input gradient needs the weight) unless the block is
    checkpointed. 4-bit weights are de-quantized by bitsandbytes, never cast by autocast. The
    output layer's weight is cast even when tied to the embeddings; a frozen one once per call when
    the framework runs it ``head_calls`` times (lit-gpt's 128-token chunks, :func:`loss.head_calls`).
    """
    quantized = sc.quantize is not Quantize.NONE and sc.method is not Method.FULL
    block = 0 if quantized else sum(x.weight_params * spec.layers_of(x) for x in spec.block_linears)
    head = head_autocast_copy(spec, sc, head_calls)
    if sc.gradient_checkpointing is Checkpointing.NONE:
        return 0, 2 * block + head
    # checkpointed blocks save nothing; the trainable weights' cached copies live until the forward's
    # autocast region ends, the output layer's copy is saved by its matmul
    trainable = block if sc.method is Method.FULL else 0
    return 2 * trainable, head


def head_autocast_copy(spec: ModelSpec, sc: Scenario, head_calls: int = 1) -> int:
    """Bytes of the output layer's 16-bit autocast copies, which its matmul saves for backward whether or not the
    blocks are checkpointed (:func:`autocast_copies`): one per call of a frozen head (``head_calls``)."""
    return 2 * (spec.lm_head_params or spec.embedding_params) * (1 if sc.method is Method.FULL else head_calls)


def autocast_block_copies(spec: ModelSpec, sc: Scenario) -> int:
    """16-bit copies of one block's linear weights, alive in that block's backward under autocast.

    The output layer's and the upper blocks' copies are freed once their matmul backward has run (the
    graph releases a node's saved tensors after it runs, retain_graph=False); the block in backward keeps
    its own: saved in forward, or made again by its recompute, which torch.utils.checkpoint runs under the
    forward's autocast state (torch 2.13 torch/utils/checkpoint.py, ``device_autocast_ctx`` in
    ``_checkpoint_without_reentrant_generator``'s recompute_fn). 4-bit weights are de-quantized instead.
    """
    if sc.quantize is not Quantize.NONE and sc.method is not Method.FULL:
        return 0
    return 2 * sum(x.weight_params for x in spec.block_linears)
