"""A rotary that ends in ``torch.cat`` (transformers v5.24.0 Phi-3, GPT-NeoX: spec.rope_concat) leaves q
[B, H, S, D]-contiguous; flash writes its output in q's layout, so the ``transpose(1, 2).contiguous()`` before o_proj
copies it, and where o_proj (or its LoRA A under autocast) saves its input, that copy is a tensor of its own beside
SDPA's saved output (estimate/activations.py). The simulator's Phi-3-mini QLoRA at 4 x 1,024 unchecked: a
(4, 1024, 32, 96) bf16 clone in every layer; the estimate read -2.8 % without it."""

from __future__ import annotations

import pytest

from vramfit.estimate import estimate
from vramfit.estimate.step import compute
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario
from vramfit.sim import simulate

PHI3 = {"model": "microsoft/Phi-3-mini-4k-instruct", "method": "qlora", "seq_len": 1024, "micro_batch_size": 4}


def test_the_family_fact():
    assert resolve_model("microsoft/Phi-3-mini-4k-instruct").spec.rope_concat
    assert resolve_model("stabilityai/stablelm-base-alpha-3b").spec.rope_concat  # GPT-NeoX
    assert not resolve_model("meta-llama/Llama-3.2-1B").spec.rope_concat  # rotate_half, no cat: q keeps [B, S, H, D]


def test_o_projs_input_is_a_copy_of_its_own():
    saved = compute(resolve_model(PHI3["model"]).spec, parse_scenario(PHI3)).saved.items
    assert saved["attn_out"] == saved["attn.out"] == 4 * 1024 * 3072 * 2
    llama = {**PHI3, "model": "meta-llama/Llama-3.2-1B"}
    assert "attn_out" not in compute(resolve_model(llama["model"]).spec, parse_scenario(llama)).saved.items
    # lit-gpt runs its own model, whose layout this transformers fact does not describe
    lit = compute(resolve_model(PHI3["model"]).spec, parse_scenario({**PHI3, "framework": "litgpt"})).saved.items
    assert "attn_out" not in lit


def test_the_estimate_meets_the_trace():
    sim = simulate(PHI3).result.peak
    est = estimate(PHI3).peak
    assert est.allocated_bytes == pytest.approx(sim.allocated_bytes, rel=0.003)
