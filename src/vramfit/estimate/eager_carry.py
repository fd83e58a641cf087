"""The allocator segments a loop that carries its outputs into the next forward adds under eager attention.

A loop that rebinds ``outputs = model(**batch)`` keeps the previous step's outputs (its fp32 logits, any returned KV
cache) until the next forward has returned (``profile.loop_carry`` OUTPUTS: meta-llama/llama-recipes@1e0f8a1f
utils/train_utils.py l. 88-89). Eager attention's (B, H, S, S) score tensors are the step's largest blocks: each
no-grad block forward and each recompute opens their segments, and every later request, the loss's fp32 logits
included, is served best fit from them (``get_free_block``, pytorch/pytorch@eb42ad6e
``c10/cuda/CUDACachingAllocator.cpp``; a block never grows past its own segment, ``try_merge_blocks``). The
previous step's logits, still referenced when the next step's block forwards run, sit in one of those score segments,
so the backward's three live fp32 score tensors no longer fit the segments the first step opened and open new ones,
which stay cached. ``vramfit simulate`` shows it on Llama-2-7B at 4 x 2,048 tokens, one GPU, with transformers
4.44's returned cache and ``logits.float()`` loss put back (tests/sim/test_sim_eager_carry.py): 1.63 GiB reserved
above allocated where the loop drops its outputs, 4.53 GiB where it carries them (33.45 GiB reserved; this module's
replay adds 3.25 GiB, the estimate reads 33.60).

This module replays one step's default-stream tensors op by op, twice, through the simulator's allocator
(:class:`vramfit.sim.cuda_allocator.CachingAllocatorModel`): once with the outputs freed at the end of their own step
(what :func:`vramfit.estimate.transients.step_transients` models), once carried into the next forward; the
difference of the reserved-over-allocated gaps is the carried outputs' fragmentation, added to the reserved figure.
Per block (full checkpointing: a no-grad forward, then the recompute and backward, top block first):

- the eager attention of transformers v4.44.2 models/llama/modeling_llama.py ``LlamaAttention.forward`` (the same
  ops in v5.24.0 ``eager_attention_forward``): ``matmul(q, k^T) / sqrt(d)`` (two score tensors in the compute
  dtype, the first freed), ``+ causal_mask`` (a third), ``softmax(w, dim=-1, dtype=float32)`` (torch v2.13.0
  aten/src/ATen/native/SoftMax.cpp: an fp32 copy of the input, then the fp32 output), ``.to(query_states.dtype)``,
  ``dropout`` (the input itself at p = 0), ``matmul(w, v)``; under grad ``_softmax`` keeps its output and the second
  matmul its 16-bit input (derivatives.yaml); the backward makes the probabilities' gradient, its fp32 cast,
  ``_softmax_backward_data``'s fp32 result, its 16-bit cast and the scaled gradient, each freeing its input
  (the order :func:`vramfit.estimate.block_extras._fp32_softmax_backward` describes);
- the block's other saved tensors (``Step.saved``) around it, the no-grad MLP working set
  (:func:`vramfit.estimate.transients.nograd_mlp_bytes`) and its backward, the checkpointed block inputs;
- the returned KV cache (:func:`vramfit.estimate.loss.returned_cache_bytes`): the no-grad forward's k and v, kept.
The loss is the step's own replay (:func:`vramfit.estimate.transients.step_transients`' loss functions), the carried
outputs freed where it frees what dies before backward (the model's forward has returned).
Only where every part is cited: an fp32 softmax (``spec.eager_softmax_fp32``), no attention dropout, sinks or
soft-capping, a dense model, full checkpointing; 0 elsewhere.
"""

from __future__ import annotations

from vramfit.estimate.attention import score_elements
from vramfit.estimate.wrap_step import _Program
from vramfit.scenario import Checkpointing

_STEPS = 2  # the carried outputs reach the second step's forward; later steps repeat it


def carried_outputs_segments(r) -> int:
    """Reserved bytes the carried outputs add (module docstring), whole 2 MiB units; 0 where it does not apply
    (``r``: a :class:`vramfit.estimate.step.Step`)."""
    from vramfit.estimate.constants import K_ROUND_LARGE
    from vramfit.estimate.profile_enums import LoopCarry

    if not (r.sc.keeps_outputs and r.profile.loop_carry is LoopCarry.OUTPUTS and _cited(r)):
        return 0
    unit = K_ROUND_LARGE.value
    return max(0, _gap(_program(r, True)) - _gap(_program(r, False))) // unit * unit


def _cited(r) -> bool:
    from vramfit.estimate.attention import runs_eager_attention
    from vramfit.estimate.unsloth import replays_step

    spec, sc = r.spec, r.sc
    return (runs_eager_attention(spec, sc, r.profile) and spec.eager_softmax_fp32 and not spec.attention_dropout
            and not spec.attention_sinks and not spec.attn_logit_softcapping and not spec.num_experts
            and sc.gradient_checkpointing is Checkpointing.FULL and not replays_step(spec, sc, r.profile))


def _gap(events: tuple[int, ...]) -> int:
    from vramfit.estimate.allocator import transient_reserved

    peak, reserved = transient_reserved(events)
    return reserved - peak


def _program(r, carry: bool) -> tuple[int, ...]:
    """``_STEPS`` steps' events; ``carry``: each step's outputs die in the next step's loss, else at their own end."""
    p = _Program()
    prev: list[int] = []
    for _ in range(_STEPS):
        outputs = _step(p, r, prev)
        prev = outputs if carry else []
        if not carry:
            p.free(outputs)
    p.free(prev)
    return tuple(p.events)


def _step(p: _Program, r, prev: list[int]) -> list[int]:
    """One step's events (module docstring); the handles of the outputs the loop keeps."""
    from vramfit.estimate.block_extras import block_input_bytes
    from vramfit.estimate.hf_upcast_loss import _hf_upcast_in_model_loss, _upcasts_in_model
    from vramfit.estimate.loss import returned_cache_bytes
    from vramfit.estimate.transients import _loss_from_figures, nograd_mlp_bytes

    sc, spec = r.sc, r.spec
    layers = spec.num_hidden_layers
    block_in = block_input_bytes(spec, sc, r.profile)
    mlp, width = nograd_mlp_bytes(r), 3 if spec.gated_mlp else 2
    kv = returned_cache_bytes(spec, sc, r.profile) // (2 * layers)
    attn, rest = _saved(r)
    x, held, cache = p.alloc(block_in), [], []
    for _ in range(layers):  # the no-grad forward
        q, k, v = (p.alloc(n) for n in attn[-3:])
        _scores(p, r, grad=False)
        p.free(q)
        if kv:
            cache += k + v  # the cache is the block's k and v
        else:
            p.free(k + v)
        work = p.alloc(width * mlp, mlp)
        out = p.alloc(block_in)
        p.free(work)
        held.append(x)
        x = out
    loss = _hf_upcast_in_model_loss if _upcasts_in_model(r) else _loss_from_figures
    kept = loss(r, p.alloc, p.free, prev)
    p.free(x)
    for h in reversed(held):  # the recompute and backward, top block first
        recomputed = [k for n in attn for k in p.alloc(n)]
        probs = _scores(p, r, grad=True)
        mlp_saved = [k for n in rest for k in p.alloc(n)]
        p.free(p.alloc(width * mlp, mlp))
        p.free(mlp_saved)
        _scores_backward(p, r, probs)
        p.free(recomputed + h)
    return kept + cache


def _saved(r) -> tuple[list[int], list[int]]:
    """The block's large-pool saved tensors besides the scores: up to and including q, k, v (in that order last);
    the MLP's side (the second norm and after)."""
    from vramfit.estimate.constants import K_SMALL_SIZE

    items = [(k, n) for k, n in r.saved.items.items() if n > K_SMALL_SIZE.value and not k.startswith("attn.")]
    qkv = [dict(items).get(k, 0) for k in ("q", "k", "v")]
    names = [k for k, _ in items]
    cut = names.index("norm2.fp32_in") if "norm2.fp32_in" in names else len(items)
    first = [n for k, n in items[:cut] if k not in ("q", "k", "v")]
    return first + qkv, [n for k, n in items[cut:] if k not in ("q", "k", "v")]


def _scores(p: _Program, r, grad: bool):
    """The eager attention's score tensors (module docstring); under grad the kept fp32 output and 16-bit cast."""
    n, c = score_elements(r.spec, r.sc), r.sc.precision.compute_bytes
    product = p.alloc(c * n)
    scaled = p.alloc(c * n)
    p.free(product)
    masked = p.alloc(c * n)
    p.free(scaled)
    upcast = p.alloc(4 * n)
    out = p.alloc(4 * n)
    p.free(upcast)
    probs = p.alloc(c * n)
    p.free(masked)
    if grad:
        return out, probs
    p.free(out + probs)
    return None


def _scores_backward(p: _Program, r, kept) -> None:
    n, c = score_elements(r.spec, r.sc), r.sc.precision.compute_bytes
    out, probs = kept
    grad = p.alloc(c * n)
    p.free(probs)
    wide = p.alloc(4 * n)
    p.free(grad)
    back = p.alloc(4 * n)
    p.free(wide + out)
    narrow = p.alloc(c * n)
    p.free(back)
    scaled = p.alloc(c * n)
    p.free(narrow + scaled)


__all__ = ["carried_outputs_segments"]
