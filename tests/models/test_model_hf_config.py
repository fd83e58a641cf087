"""spec_from_hf_config: module layouts of each model_type, and clear errors on bad configs."""

from __future__ import annotations

import copy

import pytest

from vramfit.errors import ModelError
from vramfit.models import SUPPORTED_MODEL_TYPES, load_catalog, spec_from_hf_config

BY_ID = {e["id"]: e for e in load_catalog()}


def config(model_id: str, **changes) -> dict:
    cfg = copy.deepcopy(BY_ID[model_id]["config"])
    cfg.update(changes)
    return cfg


def linears(spec) -> dict:
    return {(lin.group, lin.name): lin for lin in spec.block_linears}


def test_supported_model_types():
    assert set(SUPPORTED_MODEL_TYPES) == {
        "llama", "mistral", "mixtral", "qwen", "qwen2", "qwen3", "qwen3_moe", "gemma", "gemma2",
        "gemma3", "gemma3_text", "phi", "phi3", "falcon", "gpt_neox", "olmo2", "bloom",
        "deepseek_v2", "deepseek_v3", "gpt_oss", "llama4", "llama4_text", "llava", "llava_next", "llava_next_video", "qwen2_5_vl",
    }


def test_llama_gqa_and_untied_head():
    spec = spec_from_hf_config(config("meta-llama/Llama-2-70b-hf"))
    lin = linears(spec)
    assert (spec.num_attention_heads, spec.num_key_value_heads, spec.head_dim) == (64, 8, 128)
    assert lin["attn", "k_proj"].out_features == 1024 and not lin["attn", "q_proj"].bias
    assert spec.lm_head_params == 32000 * 8192 and not spec.tie_word_embeddings
    assert spec.gated_mlp and spec.norm_type == "rmsnorm"


def test_llama_biases_and_tied_embeddings():
    base = spec_from_hf_config(config("meta-llama/Llama-3.2-1B"))
    assert base.lm_head_params == 0 and base.tie_word_embeddings and base.head_dim == 64
    biased = spec_from_hf_config(config("meta-llama/Llama-3.2-1B", attention_bias=True,
                                        mlp_bias=True))
    lin = linears(biased)
    assert all(lin[k].bias for k in lin)
    extra = 16 * (2048 + 512 + 512 + 2048 + 8192 + 8192 + 2048)
    assert biased.num_params == base.num_params + extra


def test_qwen2_has_qkv_bias_only():
    lin = linears(spec_from_hf_config(config("Qwen/Qwen2.5-7B")))
    assert lin["attn", "q_proj"].bias and lin["attn", "k_proj"].bias and lin["attn", "v_proj"].bias
    assert not lin["attn", "o_proj"].bias and not lin["mlp", "down_proj"].bias


def test_qwen3_explicit_head_dim_and_qk_norm():
    spec = spec_from_hf_config(config("Qwen/Qwen3-0.6B"))
    # 16 heads of 128 in a 1024-wide model
    assert spec.head_dim == 128 and linears(spec)["attn", "q_proj"].out_features == 2048
    assert spec.block_norm_params == 2 * 1024 + 2 * 128


def test_qwen1_remote_code_layout():
    spec = spec_from_hf_config(config("Qwen/Qwen-7B"))
    lin = linears(spec)
    assert lin["attn", "c_attn"].out_features == 3 * 4096 and lin["attn", "c_attn"].bias
    assert not lin["attn", "c_proj"].bias
    assert lin["mlp", "w1"].out_features == 22016 // 2 == spec.intermediate_size
    assert lin["mlp", "c_proj"].in_features == 11008
    assert spec.extra["config_intermediate_size"] == 22016


def test_gemma_families_norms():
    g1 = spec_from_hf_config(config("google/gemma-7b"))
    g2 = spec_from_hf_config(config("google/gemma-2-9b"))
    g3 = spec_from_hf_config(config("google/gemma-3-12b-pt"))
    assert g1.block_norm_params == 2 * 3072 and g1.hidden_act == "gelu_pytorch_tanh"
    assert g2.block_norm_params == 4 * 3584
    assert g3.block_norm_params == 4 * 3840 + 2 * 256
    assert g1.lm_head_params == g2.lm_head_params == g3.lm_head_params == 0
    assert g2.layer_types[:2] == ("sliding_attention", "full_attention")
    assert g2.extra["attn_logit_softcapping"] == 50.0 and g2.sliding_window == 4096
    assert g3.layer_types[:6] == ("sliding_attention",) * 5 + ("full_attention",)
    assert len(g3.layer_types) == 48 and g3.sliding_window == 1024


def test_gemma3_multimodal_config_uses_text_part_with_defaults():
    text = BY_ID["google/gemma-3-4b-pt"]
    published = {
        "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
        "text_config": {"hidden_size": 2560, "intermediate_size": 10240,
                        "model_type": "gemma3_text", "num_hidden_layers": 34,
                        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                        "sliding_window": 1024},
        "vision_config": {"hidden_size": 1152, "model_type": "siglip_vision_model"},
    }
    spec = spec_from_hf_config(published)
    # the language model is the text entry's; the vision tower is counted on top (exact counts in
    # tests/models/test_model_new_families.py)
    assert spec.num_params - spec.vision_params == text["published_params"]
    assert spec.num_params == 4_045_522_944  # transformers 5.24.0 Gemma3ForConditionalGeneration on meta
    assert spec.model_type == "gemma3_text" and spec.extra["text_config_of"] == "gemma3"
    with pytest.raises(ModelError, match="text_config"):
        spec_from_hf_config({"model_type": "gemma3"})


def test_olmo2_qk_norm_over_full_width():
    spec = spec_from_hf_config(config("allenai/OLMo-2-1124-7B"))
    assert spec.block_norm_params == 2 * 4096 + 4096 + 4096


def test_phi_layernorm_biases_and_lm_head_bias():
    spec = spec_from_hf_config(config("microsoft/phi-2"))
    assert spec.norm_type == "layernorm" and spec.parallel_attn_mlp and not spec.gated_mlp
    assert all(lin.bias for lin in spec.block_linears)
    assert spec.lm_head_params == 51200 * 2560 + 51200
    assert spec.partial_rotary_factor == 0.4 and spec.block_norm_params == 2 * 2560


def test_phi3_fused_projections():
    lin = linears(spec_from_hf_config(config("microsoft/Phi-3-medium-4k-instruct")))
    assert lin["attn", "qkv_proj"].out_features == 5120 + 2 * 10 * 128
    assert lin["mlp", "gate_up_proj"].out_features == 2 * 17920


def test_falcon_multi_query_and_new_architecture():
    f7 = spec_from_hf_config(config("tiiuae/falcon-7b"))
    f40 = spec_from_hf_config(config("tiiuae/falcon-40b"))
    assert f7.num_key_value_heads == 1 and f7.block_norm_params == 2 * 4544
    assert linears(f7)["attn", "query_key_value"].out_features == 4544 + 2 * 64
    assert f40.num_key_value_heads == 8 and f40.block_norm_params == 2 * 2 * 8192
    assert linears(f40)["attn", "query_key_value"].out_features == (128 + 16) * 64
    assert f7.lm_head_params == 0 and f7.parallel_attn_mlp and f7.norm_type == "layernorm"


def test_gpt_neox_and_bloom():
    neox = spec_from_hf_config(config("stabilityai/stablelm-base-alpha-3b"))
    assert neox.partial_rotary_factor == 0.25 and neox.lm_head_params == 50688 * 4096
    bloom = spec_from_hf_config(config("bigscience/bloomz-7b1"))
    assert bloom.final_norm_params == 4 * 4096 and bloom.lm_head_params == 0
    assert bloom.extra["alibi"] is True
    renamed = config("bigscience/bloomz-7b1")
    renamed["n_embed"] = renamed.pop("hidden_size")
    assert spec_from_hf_config(renamed).num_params == bloom.num_params


def test_mixtral_experts_and_router():
    spec = spec_from_hf_config(config("mistralai/Mixtral-8x7B-v0.1"))
    lin = linears(spec)
    assert {name for group, name in lin if group == "expert"} == {"w1", "w2", "w3"}
    assert lin["expert", "w1"].count == 8 and lin["router", "gate"].out_features == 8
    assert (spec.num_experts, spec.num_experts_per_tok, spec.moe_intermediate_size) == (8, 2, 14336)


def test_qwen3_moe_layers():
    spec = spec_from_hf_config(config("Qwen/Qwen3-30B-A3B"))
    assert linears(spec)["expert", "up_proj"].out_features == 768
    assert spec.num_experts == 128 and spec.num_experts_per_tok == 8
    dense = spec_from_hf_config(config("Qwen/Qwen3-30B-A3B", mlp_only_layers=list(range(48))))
    assert dense.num_experts == 0 and linears(dense)["mlp", "up_proj"].out_features == 6144
    every_other = spec_from_hf_config(config("Qwen/Qwen3-30B-A3B", decoder_sparse_step=2))
    assert linears(every_other)["expert", "up_proj"].layers == 24
    assert linears(every_other)["dense_mlp", "up_proj"].layers == 24


@pytest.mark.parametrize(("layout", "params"), [
    ({}, 4_455_168), ({"decoder_sparse_step": 2}, 3_664_640), ({"mlp_only_layers": [0]}, 4_059_904),
    ({"decoder_sparse_step": 2, "mlp_only_layers": [1]}, 3_269_376)])
def test_qwen3_moe_mixed_dense_layers_count_exactly(layout, params):
    """Layer i is MoE unless in mlp_only_layers or (i + 1) % decoder_sparse_step != 0; the dense layers hold
    an intermediate_size MLP (figures: transformers 5.24.0 Qwen3MoeForCausalLM on the meta device)."""
    tiny = dict(model_type="qwen3_moe", hidden_size=256, intermediate_size=512, moe_intermediate_size=128,
                num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=64, num_experts=8,
                num_experts_per_tok=2, vocab_size=1000)
    assert spec_from_hf_config({**tiny, **layout}).num_params == params


@pytest.mark.parametrize("bad", [None, [], "config", 42], ids=["none", "list", "str", "int"])
def test_config_must_be_a_dict(bad):
    with pytest.raises(ModelError, match="JSON object"):
        spec_from_hf_config(bad)


def test_missing_model_type_lists_supported():
    with pytest.raises(ModelError, match="model_type") as err:
        spec_from_hf_config({"hidden_size": 8})
    assert "llama" in err.value.valid


def test_unknown_model_type_lists_supported():
    with pytest.raises(ModelError, match="unsupported model_type 't5'") as err:
        spec_from_hf_config({"model_type": "t5"})
    assert err.value.valid == list(SUPPORTED_MODEL_TYPES)
    assert "qwen3_moe" in str(err.value)


@pytest.mark.parametrize(
    ("model_id", "field"),
    [("meta-llama/Llama-2-7b-hf", "hidden_size"), ("Qwen/Qwen-7B", "intermediate_size"),
     ("tiiuae/falcon-7b", "num_hidden_layers"), ("mistralai/Mixtral-8x7B-v0.1",
                                                  "num_local_experts"),
     ("Qwen/Qwen3-30B-A3B", "moe_intermediate_size"), ("microsoft/phi-2", "vocab_size")],
)
def test_missing_field_is_named(model_id, field):
    cfg = config(model_id)
    del cfg[field]
    with pytest.raises(ModelError, match=f"missing the required field '{field}'"):
        spec_from_hf_config(cfg)


@pytest.mark.parametrize(
    ("changes", "message"),
    [({"num_key_value_heads": 5}, "not a multiple of num_key_value_heads"),
     ({"hidden_size": 4100}, "not a multiple of num_attention_heads"),
     ({"num_hidden_layers": 0}, "must be an integer >= 1"),
     ({"max_position_embeddings": 0}, "'max_position_embeddings' must be an integer >= 1"),
     ({"vocab_size": "32000"}, "must be an integer"),
     ({"tie_word_embeddings": "no"}, "must be true or false"),
     ({"layer_types": ["full_attention"]}, "one entry per layer")],
)
def test_invalid_values(changes, message):
    with pytest.raises(ModelError, match=message):
        spec_from_hf_config(config("meta-llama/Llama-2-7b-hf", **changes))


def test_qwen3_moe_with_a_window_slides_on_every_layer_as_transformers_configures_it():
    """Qwen2 takes ``layer_types`` from max_window_layers; Qwen3-MoE's config has neither, so with
    use_sliding_window every layer attends through the window (transformers v5.24.0 configuration_qwen3_moe.py)."""
    from transformers import Qwen2Config, Qwen3MoeConfig

    from vramfit.models import resolve_model

    window = {"use_sliding_window": True, "sliding_window": 1024, "max_window_layers": 12}
    moe = spec_from_hf_config({**resolve_model("Qwen/Qwen3-30B-A3B").config, **window})
    assert (moe.sliding_window, moe.layer_types) == (1024, ())
    assert not hasattr(Qwen3MoeConfig(**window), "layer_types")
    dense_cfg = {**resolve_model("Qwen/Qwen2.5-0.5B").config, **window}
    dense = spec_from_hf_config(dense_cfg)
    assert dense.layer_types == tuple(Qwen2Config(**{**dense_cfg, "layer_types": None}).layer_types)
    assert dense.layer_types.count("sliding_attention") == 24 - 12
