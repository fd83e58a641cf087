"""A model that mixes dense and MoE layers recomputes, at each end of its backward, a block of that layer's own
kind (estimate/moe_lora.py position_kinds): DeepSeek-V3 with a dense first layer (``first_k_dense_replace``) under
bf16-mixed with checkpointing was +4.4 % against the simulator (transformers' own DeepseekV3ForCausalLM on fake
tensors) when one block's autocast copies held every linear of both kinds and its recompute the larger kind's."""

from __future__ import annotations

import importlib

import pytest
from test_sim_new_families import DS

from vramfit.estimate import estimate
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario
from vramfit.sim import simulate

step_mod = importlib.import_module("vramfit.estimate.step")
moe_lora = importlib.import_module("vramfit.estimate.moe_lora")

DENSE_FIRST = {**DS, "first_k_dense_replace": 1}  # layer 0 dense, layers 1-2 MoE
MIXED_CKPT = {"method": "lora", "seq_len": 512, "precision": "bf16-mixed", "gradient_checkpointing": "full"}


def test_each_end_casts_its_own_kinds_linears(config_file):
    """One block's 16-bit autocast copies: attention (1,769,472 params) with the router (8,192) and shared expert
    (786,432) in an MoE block, 5,128,192 B; with the dense MLP (6,291,456) in the dense layer 0, 16,121,856 B;
    every linear of both, 17,711,104 B, was counted at both ends before."""
    sc = parse_scenario({**MIXED_CKPT, "model": config_file(DENSE_FIRST)})
    spec = resolve_model(sc.model).spec
    assert moe_lora.position_kinds(spec, sc) == (True, False)  # the top block is MoE, the lowest dense
    step = step_mod.compute(spec, sc)
    assert step.kind_autocast == (5_128_192, 16_121_856)
    assert step.lowest_autocast == 16_121_856  # the dense layer 0's
    moe, dense = step.acts.kind_recompute
    assert moe == step.acts.recompute > dense  # the MoE block is the larger here


def test_full_fine_tuning_with_dense_layers_below_weighs_layer_0_too(config_file):
    """Full fine-tuning: the lowest position is the lowest MoE block, the dense layers' gradients not made yet
    (moe_kernel.lowest_block_pending), and the dense layer 0 is a position of its own with every gradient but its
    own and the embedding's: 56,445,440 B (the lowest MoE block: 38,728,704 B) in bf16; every layer MoE: no kinds."""
    full = parse_scenario({**MIXED_CKPT, "method": "full", "precision": "bf16-true", "model": config_file(DENSE_FIRST)})
    spec = resolve_model(full.model).spec
    assert moe_lora.position_kinds(spec, full) == (True, True)
    step = step_mod.compute(spec, full)
    assert (step.lowest_grads, step.layer0_grads) == (38_728_704, 56_445_440)
    every = parse_scenario({**MIXED_CKPT, "model": config_file({**DS, "first_k_dense_replace": 0})})
    assert moe_lora.position_kinds(resolve_model(every.model).spec, every) is None


@pytest.mark.parametrize(("sc", "bound"), [
    (MIXED_CKPT, 0.005),  # +4.4 % before
    ({**MIXED_CKPT, "precision": "bf16-true"}, 0.01),
    ({**MIXED_CKPT, "method": "full"}, 0.02),
])
def test_dense_first_deepseek_with_checkpointing_agrees(config_file, sc, bound):
    sc = {**sc, "model": config_file(DENSE_FIRST)}
    sim = simulate(sc, layers=3).result.peak.allocated_bytes
    est = estimate(sc).peak.allocated_bytes
    assert abs(est - sim) / sim <= bound, (est, sim)


def test_glm4_moe_dense_layer_0_position_agrees(config_file):
    """GLM-4-MoE read from transformers' modules (first_k_dense_replace=1: moe_layers (1, 2), first_moe_layer 1),
    full bf16 fine-tuning with checkpointing: the simulator peaks in the dense layer 0's backward; the lowest MoE
    block alone was 4.0 % short (146,812,928 B simulated)."""
    from test_sim_fsdp_dtype import GLM4_MOE

    sc = {"model": config_file(GLM4_MOE), "method": "full", "precision": "bf16-true", "gradient_checkpointing": "full",
          "seq_len": 512}
    sim = simulate(sc, layers=3).result.peak.allocated_bytes
    est = estimate(sc).peak.allocated_bytes
    assert abs(est - sim) / sim <= 0.01, (est, sim)
