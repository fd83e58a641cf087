"""The optimizer step's memory traffic per trainable parameter follows the optimizer's real state format
(plan/throughput.py ``optimizer_traffic_per_param``), and the stack check names bitsandbytes only for its optimizers."""

from __future__ import annotations

import pytest

from vramfit.plan.rental import needs
from vramfit.plan.throughput import optimizer_traffic_per_param
from vramfit.scenario import parse_scenario

_BASE = {"model": "meta-llama/Llama-3.1-8B", "method": "full", "seq_len": 512, "micro_batch_size": 1}


def _traffic(**keys) -> float:
    return optimizer_traffic_per_param(parse_scenario({**_BASE, **keys}))


def test_adamw_reads_weight_gradient_and_two_moments_and_writes_three():
    # torch AdamW: exp_avg, exp_avg_sq in the parameter's dtype; 4 reads + 3 writes of that width
    assert _traffic(precision="bf16-true", optimizer="adamw") == 7 * 2
    assert _traffic(precision="bf16-mixed", optimizer="adamw") == 7 * 4  # AMP: fp32 weights, gradients, moments


def test_bitsandbytes_8bit_adamw_moves_its_16_bit_weight_and_gradient_and_two_uint8_states_with_absmax():
    # p and g in bf16 (2 B each; p read and written), two uint8 states read and written, an fp32 absmax per 256 each
    assert _traffic(precision="bf16-true", optimizer="adamw-8bit") == pytest.approx(3 * 2 + 2 * (2 + 2 * 4 / 256))
    assert _traffic(precision="bf16-true", optimizer="adamw-8bit") == pytest.approx(10.0625)


def test_stateless_and_one_state_optimizers_move_less_than_adamw():
    assert _traffic(precision="bf16-true", optimizer="sgd") == 3 * 2  # no state: read p, g; write p
    assert _traffic(precision="bf16-true", optimizer="sgd-momentum") == 3 * 2 + 2 * 2  # one bf16 buffer
    assert _traffic(precision="bf16-true", optimizer="lion") == 3 * 2 + 2 * 4  # Lion's fp32 state (bitsandbytes)


def test_only_bitsandbytes_optimizers_need_the_bitsandbytes_stack():
    assert "bnb-optimizer" in needs({"optimizer": "adamw-8bit"})
    assert "bnb-optimizer" in needs({"optimizer": "paged-adamw"})
    assert "bnb-optimizer" in needs({"optimizer": "lion"})  # bitsandbytes' Lion (estimate/profile_fields.py)
    assert "bnb-optimizer" not in needs({"optimizer": "adamw-8bit-torchao"})  # torchao's own kernels
    assert "bnb-optimizer" not in needs({"optimizer": "adamw-4bit"})
    assert "bnb-optimizer" not in needs({"optimizer": "adamw"})
