"""FSDP1 FULL_SHARD's gathered units moment by moment (estimate/fsdp1_moments.py), on Llama-3.1-8B full fine-tuning
over 8 GPUs: the root alone at the logits, the top block prefetched in the loss's backward, two blocks in a block's
backward, one below the lowest; the unshard stream keeps the two blocks' segments reserved throughout. The simulator's
FSDP1 traces check the same moments at tensor level (tests/sim/test_sim_fsdp1.py)."""

from vramfit.estimate import estimate

SC = {"model": "meta-llama/Llama-3.1-8B", "method": "full", "precision": "bf16-true", "seq_len": 2048,
      "micro_batch_size": 1, "num_gpus": 8, "parallelism": "fsdp", "gradient_checkpointing": "full"}
BLOCK = 218_112_000  # one decoder block's parameters
ROOT = 2 * 128_256 * 4096 + 4096  # embedding, lm_head, final norm


def _comm(result) -> dict[str, int]:
    return {p.phase: dict(p.breakdown).get("comm_buffers", 0) for p in result.phases}


def test_gathered_units_by_moment():
    r = estimate(SC)
    comm = _comm(r)
    assert comm["forward"] == 2 * ROOT  # the logits beside the root alone: every block resharded after its forward
    assert comm["backward-loss"] == 2 * (ROOT + BLOCK)  # the root's pre-backward prefetched the top block
    assert comm["backward-block"] == 2 * (ROOT + 2 * BLOCK)  # a block and the one below it (BACKWARD_PRE)
    # every shard made, the lowest block's whole gradients and its gather; no recompute left (its post-backward)
    end = dict(next(p for p in r.phases if p.phase == "backward-end").breakdown)
    assert end["comm_buffers"] == 2 * (ROOT + BLOCK) and "activations" not in end


def test_the_unshard_stream_keeps_two_blocks_reserved_whatever_the_peak_moment():
    for kw in ({}, {"seq_len": 16384}):  # a block's backward, then the loss's at long context
        r = estimate({**SC, **kw})
        held = dict(r.peak.breakdown).get("comm_buffers", 0)
        idle = 2 * (ROOT + 2 * BLOCK) - held
        assert r.peak.reserved_bytes - r.peak.allocated_bytes >= idle


def test_fsdp2_and_grad_op_keep_their_own_models():
    for kw in ({"fsdp_version": "2"}, {"parallelism": "fsdp-grad-op"}):
        comm = _comm(estimate({**SC, **kw}))
        assert comm["forward"] != 2 * ROOT


def test_no_sync_micro_batches_make_their_gradients_beside_the_held_ones():
    """FSDP1's no_sync accumulation holds every unit's whole gradient between micro-batches, and each micro-batch still
    makes its new ones as without accumulation: a unit's parameters are views of its flat parameter, so their
    gradients wait for the split's backward and its cat before the held gradient takes them (estimate/step_grads.py
    _gradient_timing). In a block's backward: every held gradient, the output layer's whole one and the top block's
    weight gradients beside their cat."""
    r = estimate({**SC, "grad_accum": 2})
    grads = {p.phase: dict(p.breakdown).get("gradients", 0) for p in r.phases}
    assert grads["forward"] == 2 * 8_030_261_248  # every parameter's gradient whole, in bf16
    assert grads["backward-block"] - grads["forward"] == 2 * 128_256 * 4096 + 2 * (2 * BLOCK)
