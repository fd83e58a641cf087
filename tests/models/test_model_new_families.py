"""DeepSeek-V3 (MLA, shared experts, dense first layers), gpt-oss and Qwen2.5-VL config readers:
exact parameter counts (figures from transformers 5.24.0 built on the meta device,
tests/models/recount_params.py's method) and the spec fields the estimator reads."""

from __future__ import annotations

import pytest

from vramfit.errors import ModelError
from vramfit.models import spec_from_hf_config

TINY_DS = dict(
    model_type="deepseek_v3", hidden_size=256, intermediate_size=512, moe_intermediate_size=64,
    num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4, n_routed_experts=8,
    n_shared_experts=2, num_experts_per_tok=2, first_k_dense_replace=1, q_lora_rank=96,
    kv_lora_rank=64, qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32, vocab_size=1000,
)


def test_tiny_deepseek_v3_counts_exactly():
    assert spec_from_hf_config(TINY_DS).num_params == 2_839_424
    no_q_lora = {**TINY_DS, "num_hidden_layers": 3, "n_shared_experts": 1, "first_k_dense_replace": 0,
                 "q_lora_rank": None}
    assert spec_from_hf_config(no_q_lora).num_params == 2_203_584


def test_deepseek_v3_spec_fields():
    spec = spec_from_hf_config(TINY_DS)
    assert (spec.head_dim, spec.v_head_dim, spec.qk_rope_head_dim) == (48, 32, 16)
    assert (spec.q_lora_rank, spec.kv_lora_rank) == (96, 64)
    layers = {(lin.name, lin.group): lin.layers for lin in spec.block_linears}
    assert layers[("gate_up_proj", "expert")] == 3  # MoE from layer first_k_dense_replace on
    assert layers[("gate_proj", "dense_mlp")] == 1
    assert layers[("q_a_proj", "attn")] == 0  # every layer
    shared = [lin for lin in spec.block_linears if lin.group == "shared_expert"]
    assert [lin.out_features for lin in shared] == [128, 128, 256]  # 2 shared x 64 wide


def test_deepseek_v3_first_k_dense_beyond_depth_is_all_dense():
    # transformers: layer i is MoE when i >= first_k_dense_replace, so 5 over 4 layers = all dense
    spec = spec_from_hf_config({**TINY_DS, "first_k_dense_replace": 5})
    assert {lin.group for lin in spec.block_linears if lin.group != "attn"} == {"dense_mlp"}
    assert spec.num_params == 2_538_368  # transformers 5.24.0 on meta
    assert spec.num_experts == 0


def test_gpt_oss_sinks_and_layer_types():
    cfg = dict(model_type="gpt_oss", hidden_size=128, intermediate_size=128, num_hidden_layers=4,
               num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_local_experts=4,
               num_experts_per_tok=2, vocab_size=1000)
    spec = spec_from_hf_config(cfg)
    assert spec.attention_sinks and not spec.sdpa_supported
    assert spec.layer_types == ("sliding_attention", "full_attention") * 2
    # 2 RMSNorms of 128 and 4 sink logits per layer
    assert spec.block_norm_params == 260


def test_qwen2_5_vl_needs_its_vision_config():
    with pytest.raises(ModelError, match="vision_config"):
        spec_from_hf_config({"model_type": "qwen2_5_vl", "hidden_size": 64})


GEMMA3_VISION = {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
                 "model_type": "siglip_vision_model", "num_attention_heads": 16,
                 "num_hidden_layers": 27, "patch_size": 14, "vision_use_head": False}


def test_gemma3_multimodal_config_counts_its_siglip_tower():
    # google/gemma-3-4b-it config.json: the catalog's text config plus this vision_config;
    # transformers 5.24.0 Gemma3ForConditionalGeneration on meta: 4,300,079,472 (model card 4.3B)
    from vramfit.models import load_catalog

    text = next(e for e in load_catalog() if e["id"] == "google/gemma-3-4b-pt")["config"]
    spec = spec_from_hf_config({"model_type": "gemma3", "text_config": dict(text),
                                "vision_config": GEMMA3_VISION})
    assert spec.num_params == 4_300_079_472
    assert spec.vision_params == 419_816_304
    # without a vision_config (the catalog's text-only entry) nothing changes
    assert spec_from_hf_config({"model_type": "gemma3", "text_config": dict(text)}).vision_params == 0


def test_siglip_pooling_head_counted_when_used():
    # Gemma3Config() defaults (SigLIP base with its pooling head): 2,723,312,896 on meta
    assert spec_from_hf_config({"model_type": "gemma3", "text_config": {},
                                "vision_config": {}}).num_params == 2_723_312_896


DS_V2 = dict(model_type="deepseek_v2", hidden_size=1024, intermediate_size=2048, moe_intermediate_size=256,
             num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=8, n_routed_experts=8,
             n_shared_experts=1, num_experts_per_tok=2, q_lora_rank=None, kv_lora_rank=256, qk_rope_head_dim=32,
             qk_nope_head_dim=64, v_head_dim=64, vocab_size=8192, first_k_dense_replace=1, topk_method="greedy")


@pytest.mark.parametrize(("layout", "params"), [
    ({}, 42_852_096), ({"first_k_dense_replace": 0}, 43_646_720), ({"q_lora_rank": 384}, 42_558_336),
    ({"n_shared_experts": 2, "first_k_dense_replace": 2}, 42_843_904), ({"q_lora_rank": "absent"}, 48_754_944)])
def test_deepseek_v2_counts_exactly(layout, params):
    """DeepSeek-V2 has V3's module layout (MLA, fused routed experts, shared experts, dense first layers);
    an absent q_lora_rank is the config class default, 1536 (null: no query compression). Figures:
    transformers 5.24.0 DeepseekV2ForCausalLM on the meta device."""
    cfg = {**DS_V2, **layout}
    if cfg["q_lora_rank"] == "absent":
        del cfg["q_lora_rank"]
    assert spec_from_hf_config(cfg).num_params == params
