"""torchtitan 0.3's chunked loss (estimate/titan_loss.py): the loop's tensors for Llama-3.1-8B, worked out by hand
from torchtitan v0.3.0 components/loss.py ChunkedLossWrapper and torch v2.13.0's FSDP2 gradient accumulation."""

from __future__ import annotations

from vramfit.estimate import estimate
from vramfit.estimate.step import compute
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario

SPEC = resolve_model("meta-llama/Llama-3.1-8B").spec
T, D, V = 8192, 4096, 128256
C = T // 8  # eight chunks of 1,024 tokens


def _sc(**keys):
    return parse_scenario({"model": "meta-llama/Llama-3.1-8B", "framework": "torchtitan", "method": "full",
                           "num_gpus": 8, "parallelism": "fsdp", "seq_len": T, "micro_batch_size": 1,
                           "gradient_checkpointing": "selective-op", **keys})


def test_the_loop_peaks_at_the_last_chunks_reduce_scatter():
    """bf16 logits of a chunk (2 x C x V) and its input gradient (2 x C x D), the fp32 sum of the weight gradients
    (4 x V x D) beside the fp32 reduce-scatter input it is copied into (4 x V x D) and that input's output, the
    head's gradient shard (an eighth of it on 8 GPUs), over the fp32 hidden-state gradient buffer (4 x T x D)."""
    loss = compute(SPEC, _sc()).loss
    buffer, logits, fp32_head = 4 * T * D, 2 * C * V, 4 * V * D
    assert loss.forward_peak == buffer + logits + 2 * C * D + 2 * fp32_head + fp32_head // 8 == 4_870_635_520
    # the eager cross-entropy moment is below it: logits, saved fp32 log_softmax output, two fp32 gradients
    assert buffer + 14 * C * V + fp32_head < loss.forward_peak
    # saved for backward: the 16-bit copy of the buffer; the reduce-scatter input waits for the next post-backward
    assert loss.saved == 2 * T * D
    assert loss.backward_peak == 2 * T * D + fp32_head + fp32_head // 8
    assert "high point: reduce-scatter" in loss.detail


def test_no_whole_logits_and_no_whole_head_gradient_in_backward():
    new, old = (compute(SPEC, _sc(**k)) for k in ({}, {"framework_version": "torchtitan-0.2.2"}))
    assert new.head_grad == 0 and old.head_grad == 2 * V * D  # v0.2.2: the bf16 gradient until the root reduces
    assert old.loss.saved == 4 * T * V  # v0.2.2 eager: log_softmax's fp32 output over the whole logits
    assert new.loss.forward_peak < old.loss.forward_peak
    # the model returns hidden states: a loop that keeps the outputs keeps no logits
    kept = compute(SPEC, _sc(keeps_outputs=True)).loss
    assert kept.kept == 0


def test_micro_batches_of_two_copy_the_chunks_and_lora_makes_no_head_gradient():
    two = compute(SPEC, _sc(micro_batch_size=2, seq_len=T // 2)).loss
    one = compute(SPEC, _sc()).loss
    # the same tokens: dim-1 chunks of a (2, S, D) tensor are not contiguous, so .contiguous() copies all of them
    assert two.forward_peak - one.forward_peak == 2 * T * D
    lora = compute(SPEC, _sc(method="lora")).loss
    buffer = 4 * T * D
    # no weight gradient: the cross-entropy moment (14 bytes a logit in eager) is the loop's high point
    assert lora.forward_peak == buffer + 14 * C * V
    compiled = compute(SPEC, _sc(method="lora", compile=True)).loss
    # compiled: the logits and their gradient, then the chunk's input gradient beside them at the matmul's backward
    assert compiled.forward_peak == buffer + 4 * C * V + 2 * C * D


def test_ddp_replicas_are_fsdp2_with_one_shard():
    """v0.3.0 has no apply_ddp: DDP's replicas are HSDP over one shard (models/llama3/parallelize.py l. 69-90), so the
    output layer is an FSDP2 unit there too, and its reduce-scatter of one shard outputs the whole fp32 gradient,
    which the replicas then all-reduce."""
    step = compute(SPEC, _sc(parallelism="ddp"))
    assert step.head_grad == 0
    fp32_head = 4 * V * D
    assert step.loss.backward_peak == step.loss.saved + 2 * fp32_head


def test_the_default_release_reads_below_v0_2_2_on_the_recipe():
    """torchtitan's llama3_8b recipe (v0.3.0 config_registry.py: local batch 1, 8,192 tokens, selective AC) on 8
    H100s: the whole-logits loss of v0.2.2 set its peak at the loss's backward; v0.3.0's at the chunk loop."""
    new = estimate({**_sc().to_dict(), "gpu": "h100-sxm"})
    old = estimate({**_sc().to_dict(), "gpu": "h100-sxm", "framework_version": "torchtitan-0.2.2"})
    assert new.peak.phase == "forward" and old.peak.phase == "backward-loss"
    # the README's figures
    assert [round(r.peak.allocated_bytes / 2**30, 2) for r in (new, old)] == [32.58, 41.17]
    both = [estimate({**_sc().to_dict(), "gpu": "h100-sxm", "compile": True, **k})
            for k in ({}, {"framework_version": "torchtitan-0.2.2"})]
    assert [round(r.peak.allocated_bytes / 2**30, 2) for r in both] == [30.58, 31.34]
    assert any(a.startswith("Release: torchtitan v0.3.0") for a in new.assumptions)


def test_the_norms_backward_prefetches_the_top_block():
    """The tail unit's one pre-backward fires on the final norm's output (the loss's lm_head calls register none):
    the top block's bf16 all-gather is in flight at the loss's backward under 0.3; v0.2.2's root unit, gathered since
    forward, prefetched nothing there."""
    from vramfit.estimate.fsdp2 import gathered_blocks, prefetched_at_loss_backward

    new, old = (compute(SPEC, _sc(**k)) for k in ({}, {"framework_version": "torchtitan-0.2.2"}))
    block = 2 * (2 * 4096 * 4096 + 2 * 1024 * 4096 + 3 * 14336 * 4096 + 2 * 4096)  # Llama-3.1-8B's block in bf16
    assert prefetched_at_loss_backward(new) == gathered_blocks(new) // 2 == block
    assert prefetched_at_loss_backward(old) == 0


def test_a_seq_len_the_chunks_cannot_split_is_refused():
    """v0.3.0 components/loss.py l. 668-673 ``_chunk_local``: ``torch._check(seq_len % num_chunks == 0, ...)`` on the
    rank's local sequence (seq_len / context_parallel): 8,190 tokens, or 8,200 over 2 context-parallel ranks (4,100
    each), raise at the first loss; torchtitan-0.2.2's whole-logits loss takes them."""
    import pytest

    from vramfit.errors import ScenarioError

    with pytest.raises(ScenarioError, match="multiple of 8, got 8190") as e:
        _sc(seq_len=8190)
    assert e.value.key == "seq_len"
    with pytest.raises(ScenarioError, match="multiple of 16, got 8200"):
        _sc(seq_len=8200, context_parallel=2)
    with pytest.raises(ScenarioError, match="multiple of 8, got 4"):
        _sc(seq_len=4)
    assert _sc(seq_len=8190, framework_version="torchtitan-0.2.2").seq_len == 8190
    assert _sc(seq_len=8208, context_parallel=2).seq_len == 8208


def test_fit_answers_a_seq_len_the_chunked_loss_runs():
    """fit's longest sequence is one the loss splits into its 8 chunks (it read 8,362 tokens, which torchtitan 0.3
    refuses at the first loss)."""
    from vramfit.plan.fit import fit

    keys = {"model": "meta-llama/Llama-3.1-8B", "framework": "torchtitan", "method": "full", "num_gpus": 8,
            "parallelism": "fsdp", "seq_len": T}
    seq = fit(keys, "h100-sxm").max_seq_len
    assert seq and seq % 8 == 0
    seq = fit({**keys, "context_parallel": 2}, "h100-sxm").max_seq_len
    assert seq and seq % 16 == 0


def test_the_refusal_has_portuguese():
    from vramfit.errors import ScenarioError
    from vramfit.web.translate import untranslated

    for keys in ({"seq_len": 8190}, {"seq_len": 8200, "context_parallel": 2}):
        try:
            _sc(**keys)
        except ScenarioError as e:
            assert untranslated([str(e)]) == [], str(e)
        else:
            raise AssertionError(keys)


def test_context_and_tensor_parallel_ranks_hold_the_whole_head_gradient_of_their_vocabulary():
    """Under context parallel each rank chunks its own T/c tokens but makes the output layer's whole weight gradient
    (V x D, summed in fp32, copied into the fp32 reduce-scatter input over the dp_shard x cp = 8 ranks); under tensor
    parallel the rows are V/t (loss parallel) but the hidden states are replicated, so the fp32 buffer is the rank's
    T x D whole (v0.3.0 components/loss.py ChunkedLossWrapper docstring, TP / SP and CP composability). The estimate
    divided the whole loss by t x c: 2,322.5 MiB at cp 2, where the rank holds 4,451.75 MiB."""
    head = 4 * V * D  # fp32, padded to 8 ranks: 128,256 rows divide
    cp = compute(SPEC, _sc(context_parallel=2)).loss
    c = T // 2 // 8
    assert cp.forward_peak == 4 * T // 2 * D + 2 * c * V + 2 * c * D + 2 * head + head // 8
    assert "chunks of 512 tokens" in cp.detail
    tp = compute(SPEC, _sc(tensor_parallel=2)).loss
    head = 4 * V // 2 * D  # V/2 rows a rank, reduce-scattered over dp_shard x cp = 4 ranks
    assert tp.forward_peak == 4 * T * D + 2 * C * V // 2 + 2 * C * D + 2 * head + head // 4
    assert tp.saved == 2 * T * D
