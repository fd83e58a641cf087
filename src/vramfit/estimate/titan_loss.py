"""torchtitan 0.3's chunked loss (:attr:`LossLayout.TORCHTITAN_CHUNKED_LOSS`): the output layer and the
cross-entropy run per sequence chunk, each chunk's backward inside the loss call.

torchtitan v0.3.0 components/loss.py ``ChunkedLossWrapper.__call__`` (l. 630-782), with the model's
``_skip_lm_head`` set (trainer.py l. 513-535, models/common/decoder.py l. 245: the model returns the final norm's
output ``h``, B x S x D):

1. ``h`` is split on the sequence into ``num_chunks`` = 8 pieces made ``contiguous()`` (a copy of each unless one
   sequence per micro-batch: a dim-1 split of a (1, S, D) tensor is contiguous already) and detached into leaves;
   ``GradAccumulator`` allocates ``torch.zeros_like(h, dtype=torch.float32)`` (l. 498) for their gradients.
2. Under FSDP2 the output layer's unit is told not to reshard after forward or backward and not to reduce its
   gradients (``set_requires_gradient_sync(False)``) until the last chunk (l. 728-745).
3. Per chunk: ``logits = lm_head(h_chunk)`` (the compute dtype; the name stays bound until the next chunk's
   logits replace it, and the last until the call returns), the inner ``CrossEntropyLoss`` =
   ``cross_entropy(pred.flatten(0, 1).float(), ...)`` (l. 60-62: an fp32 copy, log_softmax's fp32 output saved),
   ``chunk_loss.backward()`` (the nll and log_softmax gradients in fp32, then the logits' gradient in the compute
   dtype, then the matmul's: the chunk's input gradient and the whole weight gradient), then
   ``grad_accumulator.add(h_chunk.grad)``. Compiled (``compile.components`` with "loss"), the inner loss is one
   kernel that saves its input and the log-sum-exp and returns the logits' gradient directly.
4. FSDP2 (torch v2.13.0 distributed/fsdp/_fully_shard/_fsdp_param.py ``to_accumulated_grad_if_needed`` l. 802-813,
   ``accumulate_unsharded_grad_if_needed`` l. 815-821; _fsdp_param_group.py ``post_backward`` l. 603-630): with
   gradient sync off, the first chunk's 16-bit weight gradient becomes an fp32 copy (the reduce dtype,
   ``mixed_precision_reduce`` float32) and every later one is added into it; at the last chunk ``foreach_reduce``
   (_fsdp_collectives.py l. 593-605) allocates the fp32 reduce-scatter input beside that sum, copies it in and
   frees the sum. The input stays referenced as the reduce-scatter state until the next unit's post-backward.
   So by the decoder's backward the output layer's gradient is its reduced shard: no whole head gradient is held
   in backward (:func:`head_reduced_in_loss`).
5. ``accumulated_grad = grad_accumulator.result().to(hidden_states.dtype)`` (a 16-bit copy beside the fp32 buffer)
   is saved by ``_DecoderOutputGradientBackProp`` (l. 838-863) and handed to the final norm in backward.

Not counted: the final norm's output is counted as the output layer's input (block_extras.model_extra_saved)
through backward, although it dies when the loss returns (B x S x D in 16 bits, 64 MiB at 8,192 tokens of
Llama-3.1-8B).
"""

from __future__ import annotations

from vramfit.estimate.constants import TORCHTITAN_LOSS_CHUNKS
from vramfit.estimate.framework import FrameworkProfile, LossLayout
from vramfit.models.spec import ModelSpec
from vramfit.scenario import Loss, Method, Parallelism, Scenario

#: the parallelisms under which torchtitan 0.3 makes the output layer an FSDP2 module: every one (v0.3.0
#: models/llama3/parallelize.py l. 69-90 "Always run apply_fsdp_to_decoder -- with shard_degree=1 it is a no-op for
#: the all-gather but still installs the MixedPrecisionPolicy"; DDP's replicas are the ["dp_replicate", "fsdp"] mesh,
#: HSDP with one shard: no apply_ddp in 0.3)
_FSDP_WRAPPED = (Parallelism.NONE, Parallelism.FSDP, Parallelism.FSDP_GRAD_OP, Parallelism.DDP)


def runs_titan_chunked_loss(sc: Scenario, profile: FrameworkProfile) -> bool:
    return _chunked(sc.loss, profile)


def _chunked(loss: Loss, profile: FrameworkProfile) -> bool:
    return loss is Loss.STANDARD and profile.standard_loss is LossLayout.TORCHTITAN_CHUNKED_LOSS


def loss_seq_multiple(profile: FrameworkProfile, loss: Loss, context_parallel: int = 1) -> int:
    """What ``seq_len`` must be a multiple of for the chunked loss to run: ``_chunk_local`` (v0.3.0 components/loss.py
    l. 668-673) checks ``torch._check(seq_len % num_chunks == 0, ... "ChunkedLossWrapper sequence length must be
    divisible by num_chunks")`` on the rank's local sequence, ``seq_len / context_parallel`` under context parallel
    ("CP: Further chunks the local sequence dimension", the class docstring); 1 for every other loss."""
    if not _chunked(loss, profile):
        return 1
    return TORCHTITAN_LOSS_CHUNKS.value * max(1, context_parallel)


def head_reduced_in_loss(sc: Scenario, profile: FrameworkProfile) -> bool:
    """Whether the output layer's weight gradient is reduced to its shard inside the loss call (module docstring,
    4), so that the decoder's backward holds none of it whole."""
    return runs_titan_chunked_loss(sc, profile) and sc.parallelism in _FSDP_WRAPPED


def titan_chunked_loss(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, vocab: int, logits_bytes: int,
                       compiled: bool, tp: int = 1, cp: int = 1):
    """The loss's figures (estimate/loss.py ``LossMemory``) for :attr:`LossLayout.TORCHTITAN_CHUNKED_LOSS`: the
    chunk loop's high point as the forward's, the saved 16-bit gradient of the hidden states and the
    reduce-scatter input as the backward's (module docstring). On a rank of ``tp`` tensor- and ``cp``
    context-parallel ranks (estimate/ranks.py, ``sc`` the FSDP mesh's view): the rank's own ``seq_len / cp``
    tokens, chunked locally (the class docstring: "CP: Further chunks the local sequence dimension"), on hidden
    states replicated over TP ("each chunk enters the lm_head as Replicate() input"), so the fp32 buffer and the
    16-bit gradient are not split ``tp`` ways; the output layer's ``vocab / tp`` rows (loss parallel, ColwiseParallel
    ``Shard(-1)``), whose weight gradient every context-parallel rank makes whole before the reduce-scatter."""
    from vramfit.estimate.fsdp2 import _padded, reduce_bytes
    from vramfit.estimate.loss import LossMemory
    from vramfit.estimate.step_grads import _grad_dtype_bytes

    n = TORCHTITAN_LOSS_CHUNKS.value
    vocab = -(-vocab // tp)  # _LossParallelCrossEntropy: ceil(global_vocab_size / tp_world_size) rows a rank
    T = -(-sc.micro_batch_size * sc.seq_len // cp)
    D, lb, cb = spec.hidden_size, logits_bytes, sc.precision.compute_bytes
    c = -(-T // n)  # torchtitan checks seq_len % num_chunks == 0 (l. 670-673); rounded up here
    cV = c * vocab
    buffer = 4 * T * D  # GradAccumulator's fp32 buffer
    copies = cb * T * D if sc.micro_batch_size > 1 else 0  # the contiguous chunks (1)
    # eager: the next chunk's logits beside the last ones, the fp32 copy and log_softmax's output (forward), or
    # the logits, the saved output and the nll and log_softmax gradients (backward); compiled: the logits and
    # their gradient, with the log-sum-exp
    ce = cV * lb * 2 + 4 * c if compiled else cV * max(2 * lb + 8, lb + 12)
    wrapped = sc.parallelism in _FSDP_WRAPPED
    # autograd's weight gradient in the 16-bit compute dtype and the reduce dtype fp32 under FSDP2's
    # MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) (v0.3.0 distributed/fsdp.py l. 165-169)
    gb, rb = _grad_dtype_bytes(sc, profile), reduce_bytes(sc, profile)
    VD = vocab * D if sc.method is Method.FULL else 0  # the output layer trains in full fine-tuning only
    # the FSDP shard group; none under DDP, whose replicas all-reduce a whole reduce-scatter output of one shard
    world = max(1, sc.shard_group) if sc.parallelism not in (Parallelism.NONE, Parallelism.DDP) else 1
    rs_in = _padded(vocab * D, vocab, world) * rb if VD and wrapped else 0  # padded on dim 0 (fsdp2.py, 1)
    summed = VD * rb if n > 1 else 0  # the sum of the chunks' weight gradients after the first (4)
    # the reduce-scatter output, allocated beside its input (_fsdp_collectives.py l. 611-612) and kept as the head's
    # sharded gradient from then on: 1/world of the padded input, in the reduce dtype (4). The simulator's 0.3 step
    # (tests/sim/test_sim_titan_chunked.py, vocab 32,768 at 256 tokens) holds it at the last chunk: -7.3 % without it
    rs_out = rs_in // world
    moments = {
        "cross-entropy": ce + summed,
        # the logits and their gradient, the chunk's input gradient and the new weight gradient beside the sum
        "output-layer backward": 2 * lb * cV + cb * c * D + VD * gb + summed,
        # the last chunk's reduce-scatter input beside the sum it copies, the last logits and the chunk's input
        # gradient (added to the buffer after backward returns) still bound
        "reduce-scatter": lb * cV + cb * c * D + summed + rs_in + rs_out,
        # after the loop: the 16-bit copy of the fp32 buffer (5), the input kept, the last logits bound
        "16-bit hidden-state gradient": lb * cV + cb * T * D + rs_in + rs_out,
    }
    if VD and rb != gb:  # the first chunk's gradient and its fp32 copy (4)
        moments["first fp32 copy"] = lb * cV + cb * c * D + VD * (gb + rb)
    high = max(moments, key=moments.get)
    saved = cb * T * D
    kind = "compiled" if compiled else "eager"
    return LossMemory(saved, buffer + copies + moments[high], saved + rs_in + rs_out,
                      f"torchtitan's chunked loss: lm_head and {kind} cross-entropy over {n} chunks of {c} tokens, "
                      f"each chunk's backward in the loss (high point: {high})")
