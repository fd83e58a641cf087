"""fit's sequence search under context parallelism probes only lengths that split into 2 x context_parallel chunks
(and, under torchtitan 0.3's chunked loss, each rank's share into its 8 chunks: 8 x context_parallel)."""

import pytest

from vramfit import estimate
from vramfit.errors import ScenarioError
from vramfit.gpus import get_gpu
from vramfit.plan.fit import fit, max_seq_len_within
from vramfit.plan.verdict import fits, limit_bytes
from vramfit.stage_keys import seq_len_step

CP = dict(model="meta-llama/Llama-3.1-8B", method="full", framework="torchtitan", num_gpus=8, parallelism="fsdp",
          context_parallel=2, gradient_checkpointing="full")
STEP = 16  # 8 loss chunks of each of the 2 ranks' halves (estimate/titan_loss.py loss_seq_multiple)


def test_longest_sequence_under_context_parallelism_is_found_and_valid():
    r = fit(CP, "h100-sxm")
    seq = r.max_seq_len
    assert seq is not None and seq % STEP == 0 and seq > 32_768  # the grid's 32,768 fits, so the longest is longer
    assert any(c.seq_len == 32_768 and c.fits for row in r.grid for c in row)
    limit = limit_bytes(get_gpu("h100-sxm"))
    assert fits(estimate(**CP, seq_len=seq, gpu="h100-sxm"), limit)
    assert not fits(estimate(**CP, seq_len=seq + STEP, gpu="h100-sxm"), limit)  # the next valid length does not
    with pytest.raises(ScenarioError):
        estimate(**CP, seq_len=seq + 1)  # lengths between are refused, not "too big"


def test_max_seq_len_within_steps_by_the_chunks():
    budget = 60 * 2**30
    seq = max_seq_len_within(CP, budget, counter="allocated")
    assert seq is not None and seq % STEP == 0 and seq > 2048
    at = estimate(**CP, seq_len=seq).peak.allocated_bytes
    assert at <= budget < estimate(**CP, seq_len=seq + STEP).peak.allocated_bytes
    assert max_seq_len_within(CP, budget) % STEP == 0  # the fit rule's search too


def test_seq_len_step():
    from vramfit.scenario import parse_scenario

    assert seq_len_step(parse_scenario({**CP, "context_parallel": 4})) == 32
    assert seq_len_step(parse_scenario({**CP, "context_parallel": 4, "framework_version": "torchtitan-0.2.2"})) == 8
    assert seq_len_step(parse_scenario({**CP, "context_parallel": 1})) == 8
    assert seq_len_step(parse_scenario({"model": "meta-llama/Llama-3.1-8B"})) == 1
