"""Logits at the label positions only (scenario keys logits_to_keep and label_share, estimate/loss.py label_rows).

ms-swift from 46ad5ca56 (v3.5.0) passes the model a boolean ``logits_to_keep`` mask of the label positions when a
forward holds one row (micro-batch 1, or packing/padding_free), in training and evaluation alike
(swift/trainers/mixin.py get_logits_to_keep @3debbef8e); the forward keeps ``hidden_states[:, mask, :]`` before its
head (Liger-Kernel v0.6.1 model/qwen2.py l. 205-206, transformers v4.53 Qwen2ForCausalLM). Figures: the catalog's
Qwen2.5-3B (vocabulary 151,936, hidden 2,048) at 8,192 tokens, a quarter of them labels: the mask keeps the 2,048
positions before a label and the last one, 2,049 rows.
"""

from __future__ import annotations

import pytest

from vramfit.errors import ScenarioError
from vramfit.estimate import estimate
from vramfit.estimate.loss import label_rows
from vramfit.scenario import LogitsToKeep, parse_scenario

T, V, H = 8192, 151936, 2048
EX = {"model": "Qwen/Qwen2.5-3B", "method": "full", "precision": "bf16-true", "seq_len": T, "grad_accum": 8,
      "gradient_checkpointing": "full", "attention": "flash", "loss": "fused", "optimizer": "adamw",
      "framework_version": "transformers-4.53", "eval_batch_size": 1}
LABELS = {"logits_to_keep": "labels", "label_share": 0.25}


def _phase(result, name: str) -> dict[str, int]:
    return {p.phase: dict(p.breakdown) for p in result.phases}.get(name, {})


def test_defaults_keep_every_position():
    sc = parse_scenario({"model": "Qwen/Qwen2.5-3B"})
    assert sc.logits_to_keep is LogitsToKeep.ALL and sc.label_share == 1.0
    assert label_rows(sc) is sc
    # label_share alone changes nothing: every position's logits are computed
    assert estimate({**EX, "label_share": 0.25}).peak.allocated_bytes == estimate(EX).peak.allocated_bytes


@pytest.mark.parametrize("bad", [0, -0.1, 1.5, "half"])
def test_label_share_is_a_fraction(bad):
    with pytest.raises(ScenarioError, match="label_share"):
        parse_scenario({"model": "Qwen/Qwen2.5-3B", "label_share": bad})


def test_rows_are_the_label_positions_of_one_row():
    sc = parse_scenario({**EX, **LABELS, "micro_batch_size": 2})
    kept = label_rows(sc)
    # the mask is over one row: ceil(0.25 x 2 x 8192) labels, plus the row's last position, as one sequence
    assert (kept.micro_batch_size, kept.seq_len) == (1, 4097)
    assert label_rows(parse_scenario({**EX, **LABELS, "stage": "dpo"})).seq_len == T  # SFT's trainer only


def test_evaluation_makes_logits_for_label_positions_only():
    whole, kept = (_phase(estimate({**EX, **x}), "evaluate")["eval_forward"] for x in ({}, LABELS))
    # bf16 logits, ForCausalLMLoss's fp32 upcast and log_softmax's fp32 output, over 2,049 rows instead of 8,192
    assert whole == (2 + 4 + 4) * T * V
    assert kept == (2 + 4 + 4) * (T // 4 + 1) * V


def test_fused_training_loss_runs_on_the_kept_rows():
    f = _phase(estimate({**EX, **LABELS, "eval_batch_size": 0}), "forward")["logits_loss"]
    # Liger's fused linear cross-entropy over 2,049 rows: the hidden states' bf16 gradient (2 x 2,049 x 2,048) and
    # one chunk of next_power_of_2(ceil(2049 / ceil(151936 / 2048))) = 32 rows: bf16 logits, fp32 copy and gradient
    assert f == 2 * (T // 4 + 1) * H + 32 * V * (2 + 4 + 4)


def test_share_one_is_the_whole_row():
    assert estimate({**EX, "logits_to_keep": "labels"}).peak.allocated_bytes == estimate(EX).peak.allocated_bytes
