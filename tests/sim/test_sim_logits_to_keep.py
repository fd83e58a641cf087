"""Logits at the label positions only (logits_to_keep labels) in the simulator: ms-swift's boolean mask and cut
labels (sim/label_mask.py) handed to transformers' own forward, which keeps ``hidden_states[:, mask, :]`` before its
head, in training and in the evaluation pass; against the estimator (estimate/loss.py label_rows). Qwen2.5-0.5B
(vocabulary 151,936) at 1,024 tokens, a quarter of them labels: 256 labels, 257 logit rows."""

from __future__ import annotations

import pytest

from vramfit.estimate import estimate
from vramfit.scenario import parse_scenario
from vramfit.sim import simulate
from vramfit.sim.label_mask import keep_labels

T, V = 1024, 151936
BASE = {"model": "Qwen/Qwen2.5-0.5B", "seq_len": T, "gradient_checkpointing": "full", "method": "full",
        "framework_version": "transformers-4.53", "eval_batch_size": 1, "logits_to_keep": "labels",
        "label_share": 0.25}


def test_mask_is_swifts():
    import torch

    labels, keep = keep_labels(parse_scenario(BASE), torch.arange(T).unsqueeze(0))
    # positions 767..1022 precede a label, 1023 is the row's last: 257 rows; labels: -100 then the 256 answer tokens
    assert keep["logits_to_keep"].tolist() == list(range(767, T))
    assert labels.tolist() == [[-100, *range(768, T)]]
    # every token a label: the whole row, its first label dropped by the shift as ForCausalLMLoss does
    labels, keep = keep_labels(parse_scenario({**BASE, "label_share": 1}), torch.arange(T).unsqueeze(0))
    assert keep["logits_to_keep"].tolist() == list(range(T)) and labels.tolist() == [[-100, *range(1, T)]]


def test_all_keeps_the_inputs():
    import torch

    labels = torch.arange(T).unsqueeze(0)
    assert keep_labels(parse_scenario({**BASE, "logits_to_keep": "all"}), labels) == (labels, {})


@pytest.mark.slow
@pytest.mark.parametrize("loss", ["standard", "fused"])
def test_phases_match_the_simulator(loss):
    sc = {**BASE, "loss": loss}
    sim = {p.phase: p.allocated_bytes for p in simulate(sc, layers=(3, 4)).result.phases}
    est = {p.phase: p.allocated_bytes for p in estimate(sc).phases}
    # the fused loss's forward phase is left out: there the simulator's Liger stand-in holds the head's fp32 gradient,
    # which the estimator does not count, with every position's logits as well (3,346 vs 3,049 MB when written)
    for phase in ("forward", "evaluate") if loss == "standard" else ("evaluate",):
        assert abs(est[phase] / sim[phase] - 1) < 0.03, (phase, est[phase], sim[phase])
    # the eval pass no longer holds the whole logits: 2 + 4 + 4 bytes x 1,024 x V less 257 rows' worth
    whole = {p.phase: p.allocated_bytes for p in simulate({**sc, "logits_to_keep": "all"}, layers=(3, 4)).result.phases}
    assert whole["evaluate"] - sim["evaluate"] == pytest.approx(10 * (T - 257) * V, rel=0.02)


@pytest.mark.slow
def test_zero3_engine_takes_the_mask():
    """DeepSpeed's engine passes the mask to the model (sim/deepspeed_zero.py): the eval pass within 3 %."""
    sc = {**BASE, "loss": "fused", "num_gpus": 4, "parallelism": "zero3",
          "framework_version": "transformers-4.53+deepspeed-0.16"}
    sim = {p.phase: p.allocated_bytes for p in simulate(sc, layers=(3, 4)).result.phases}
    est = {p.phase: p.allocated_bytes for p in estimate(sc).phases}
    assert abs(est["evaluate"] / sim["evaluate"] - 1) < 0.03, (est["evaluate"], sim["evaluate"])
