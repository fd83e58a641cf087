"""The tied embedding's two gradients at the end of backward: autograd sums them out of place where the output layer's
gradient is a view (estimate/loss.py head_grad_is_view), so three V x H tensors meet (estimate/contributions.py
``_tied_sum``). Checked against this project's H100 run (benchmarks/data/measured/vramfit_h100.jsonl)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramfit import estimate
from vramfit.estimate.allocator import round_allocation
from vramfit.scenario import parse_scenario

MEASURED = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "measured" / "vramfit_h100.jsonl"
V, H = 128256, 3072  # Llama-3.2-3B, tied


def _row(entry: str, metric: str = "allocated") -> dict:
    for line in MEASURED.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if row["notes"].endswith(entry) and row["measured"]["metric"] == metric:
            return row
    raise LookupError(entry)


def _grads(sc: dict, phase: str) -> int:
    return dict(next(p for p in estimate(parse_scenario(sc)).phases if p.phase == phase).breakdown)["gradients"]


def _tied(**extra) -> dict:
    return {"model": "meta-llama/Llama-3.2-3B", "method": "full", "precision": "bf16-true", "micro_batch_size": 2,
            "seq_len": 512, "gradient_checkpointing": "full", "gpu": "h100-sxm", **extra}


def test_the_measured_tied_full_fine_tune_is_met():
    row = _row("l3b-full-s512-ckpt")
    assert row["measured"]["bytes"] == 27_348_395_008
    peak = estimate(parse_scenario(row["scenario"])).peak
    assert peak.phase == "backward-end-tied"
    assert abs(peak.allocated_bytes / row["measured"]["bytes"] - 1) < 0.001  # -2.9 % without the sum


@pytest.mark.parametrize(("extra", "sums"), [
    ({}, 1),  # bf16 weights: the head's gradient is a view, summed out of place
    ({"precision": "bf16-mixed"}, 0),  # fp32 weights under autocast: ToCopyBackward hands on a new tensor
    ({"loss": "fused"}, 0),  # the fused loss makes the head's gradient itself
], ids=["bf16-true", "bf16-mixed", "fused"])
def test_three_or_two_weight_sized_gradients_at_the_tied_end(extra, sums):
    sc = _tied(**extra)
    per = 4 if sc["precision"] == "bf16-mixed" else 2
    head = round_allocation(V * H * per)
    # the optimizer step holds every gradient once; the tied end adds the buffered head's and, out of place, the sum
    assert _grads(sc, "backward-end-tied") - _grads(sc, "optimizer-step") == (1 + sums) * head


def test_untied_and_lora_runs_have_no_tied_end():
    for sc in (_tied(model="meta-llama/Llama-3.1-8B"), _tied(method="lora")):
        assert all(p.phase != "backward-end-tied" for p in estimate(parse_scenario(sc)).phases)


def test_a_chunked_head_sums_into_its_own_earlier_sum_in_place():
    """torchtune's chunked loss: the first merge of the output chunks' gradients is out of place (its backward-loss
    phase, estimate/loss.py projection_stage), so the embedding's gradient meets a fresh sum and is added in place."""
    sc = _tied(framework="torchtune", loss="chunked")
    head = round_allocation(V * H * 2)
    assert _grads(sc, "backward-end-tied") - _grads(sc, "optimizer-step") == head
