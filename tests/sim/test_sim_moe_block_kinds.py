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


#: DeepSeek-V2-Lite's published config.json (deepseek-ai/DeepSeek-V2-Lite): layer 0 dense, 26 MoE layers of 64 experts
V2_LITE = {"model_type": "deepseek_v2", "hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408,
           "num_hidden_layers": 27, "num_attention_heads": 16, "num_key_value_heads": 16, "n_routed_experts": 64,
           "n_shared_experts": 2, "num_experts_per_tok": 6, "first_k_dense_replace": 1, "moe_layer_freq": 1,
           "kv_lora_rank": 512, "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
           "v_head_dim": 128, "vocab_size": 102400, "max_position_embeddings": 163840, "tie_word_embeddings": False,
           "norm_topk_prob": False, "topk_method": "greedy", "n_group": 1, "topk_group": 1, "scoring_func": "softmax",
           "rms_norm_eps": 1e-06, "rope_theta": 10000, "routed_scaling_factor": 1.0, "hidden_act": "silu",
           "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707, "mscale_all_dim": 0.707,
                            "original_max_position_embeddings": 4096, "type": "yarn"}}


def test_lora_with_folded_expert_banks_peaks_at_the_lowest_moe_block(config_file):
    """LoRA under PEFT's ParamWrapper folds the adapters into the expert banks, which the MoE blocks' backward holds:
    below the dense layer 0 (first_k_dense_replace 1) the lowest MoE block runs its backward with nearly every
    gradient made, so it, not layer 0, is the lowest position (a review: the simulator peaks in layers.1.mlp.experts'
    baddbmm outputs; the estimate took layer 0's dense block and read 3.3 % short, -21.3 GiB on DeepSeek-V3)."""
    sc = {"model": config_file(V2_LITE), "method": "lora", "seq_len": 512, "gradient_checkpointing": "full"}
    sim = simulate(sc).result.peak.allocated_bytes
    est = estimate(sc).peak.allocated_bytes
    assert abs(est - sim) / sim <= 0.01, (est, sim)  # -3.3 % before


def test_a_forward_that_branches_on_a_tensor_value_is_one_line(config_file):
    """transformers' Phi-3.5-MoE with longrope reads a tensor's value in its forward (`if ... and seq_len:`), which
    fake tensors cannot know: one ModelError line, not 64 frames of DataDependentOutputException (a review)."""
    from vramfit.errors import ModelError

    phimoe = {"model_type": "phimoe", "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
              "num_key_value_heads": 2, "num_hidden_layers": 2, "num_local_experts": 4, "num_experts_per_tok": 2,
              "vocab_size": 1024, "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
              "attention_bias": True, "lm_head_bias": True, "tie_word_embeddings": False, "sliding_window": 131072,
              "rope_scaling": {"type": "longrope", "short_factor": [1.0] * 32, "long_factor": [1.5] * 32,
                               "short_mscale": 1.24, "long_mscale": 1.24, "original_max_position_embeddings": 4096}}
    with pytest.raises(ModelError, match="fake tensors cannot run .* it branches on a tensor's value"):
        simulate({"model": config_file(phimoe), "method": "lora", "seq_len": 128})
