"""Per-rank activation memory under tensor, sequence, pipeline and context parallelism (Megatron-LM).

Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models"
(arXiv:2205.05198), sec. 4, for a GPT block with 16-bit activations and 1-byte dropout masks; ``s``
sequence, ``b`` micro-batch, ``h`` hidden, ``a`` heads, ``t`` tensor-parallel size, ``p`` pipeline stages:

- one layer, no parallelism (eq. 1): ``sbh (34 + 5as/h)``;
- tensor parallel (eq. 2): ``sbh (10 + 24/t + 5as/(ht))``: the layer-norm, dropout and residual
  inputs (10 sbh) stay whole on every rank;
- tensor + sequence parallel (eq. 4): ``sbh/t (34 + 5as/h)``;
- selective recomputation (sec. 5, with sequence parallel): ``34 sbh/t`` (the ``5as/h`` attention
  core is recomputed); full recomputation keeps each layer's input, ``2 sbh/t``;
- pipeline parallel with 1F1B (sec. 4.2.3): the first stage holds ``L/p`` layers for ``p`` micro-batches
  in flight, i.e. ``L`` layers' worth (eq. 5), whatever ``p``; the interleaved schedule with ``m``
  model chunks per stage multiplies that by ``1 + (p - 1)/(p m)``. The first stage also holds the
  input embedding (its weights and, per in-flight micro-batch, the ``sbh`` dropout mask and output):
  it is the most loaded rank;
- context parallel (Megatron-LM ``docs/source/api-guide/context_parallel.rst``): each of ``c`` ranks
  keeps the activations of ``s/c`` tokens, so ``s`` is divided by ``c``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Recompute(str, Enum):
    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"


@dataclass(frozen=True)
class Layout:
    """Model-parallel sizes of one run: tensor ``t``, pipeline ``p`` (``m`` chunks each), context ``c``."""

    t: int = 1
    p: int = 1
    c: int = 1
    sequence_parallel: bool = False
    interleave: int = 1  # m: model chunks per pipeline stage (1 = plain 1F1B)


def layer_activation_bytes(s: int, b: int, h: int, a: int, lay: Layout, recompute: Recompute = Recompute.NONE) -> float:
    """Activation bytes one transformer layer keeps for backward on one rank (Korthikanti et al. sec. 4-5)."""
    s = s / lay.c
    t = lay.t
    sbh = s * b * h
    if recompute is Recompute.FULL:
        return 2 * sbh / (t if lay.sequence_parallel else 1)
    attn_core = 5 * a * s / h
    if recompute is Recompute.SELECTIVE:
        attn_core = 0.0
    if lay.sequence_parallel or t == 1:
        return sbh / t * (34 + attn_core)
    return sbh * (10 + 24 / t + attn_core / t)


def first_stage_activation_bytes(s: int, b: int, h: int, a: int, layers: int, lay: Layout,
                                 recompute: Recompute = Recompute.NONE) -> float:
    """All activations the first pipeline stage holds at its peak (1F1B: ``L`` layers' worth; interleaved:
    times ``1 + (p-1)/(p m)``), eq. 5 of Korthikanti et al."""
    per = layer_activation_bytes(s, b, h, a, lay, recompute)
    total = per * layers  # L/p layers x p micro-batches in flight
    if lay.p > 1 and lay.interleave > 1:
        total *= 1 + (lay.p - 1) / (lay.p * lay.interleave)
    return total


def stage_params(layers: int, layer_params: int, embedding_params: int, lay: Layout) -> tuple[int, int]:
    """(first stage, middle stage) parameters per rank: ``L/p`` layers split ``t`` ways, plus the input
    embedding (vocab-parallel over ``t``, Megatron ``VocabParallelEmbedding``) on the first stage."""
    per_stage = -(-layers // lay.p) * layer_params // lay.t
    return per_stage + embedding_params // lay.t, per_stage
