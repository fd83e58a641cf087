"""Model construction: configs at a depth, layer plans, LoRA targets, the 4-bit base, tied weights."""

from __future__ import annotations

import pytest
import torch
from simconfigs import catalog_config, tiny
from torch._subclasses.fake_tensor import FakeTensorMode

from vramfit.errors import ModelError, ScenarioError
from vramfit.models.catalog import load_catalog
from vramfit.scenario import parse_scenario
from vramfit.sim.build import build_model, config_for_depth, materialize, num_layers_of
from vramfit.sim.extrapolate import layer_period, trace_depths


def test_config_for_depth_truncates_per_layer_lists():
    cfg = {"model_type": "gemma3_text", "num_hidden_layers": 6, "layer_types": ["a"] * 5 + ["b"], "x": [1, 2]}
    out = config_for_depth(cfg, 2)
    assert out["num_hidden_layers"] == 2 and out["layer_types"] == ["a", "a"] and out["x"] == [1, 2]
    assert cfg["num_hidden_layers"] == 6  # the input is not changed


@pytest.mark.parametrize("model_id,period", [
    ("meta-llama/Llama-3.1-8B", 1), ("google/gemma-2-2b", 2), ("google/gemma-3-4b-pt", 6),
    ("Qwen/Qwen3-30B-A3B", 1), ("bigscience/bloomz-7b1", 1),
])
def test_layer_period_follows_the_layer_pattern(model_id, period):
    cfg = catalog_config(model_id)
    assert layer_period(cfg) == period
    a, b = trace_depths(cfg)
    assert b - a == period and a >= 2 and b < num_layers_of(cfg)


def test_every_buildable_catalog_architecture_has_a_trace_plan():
    for entry in load_catalog():
        cfg = entry["config"]
        if cfg.get("model_type") == "qwen":
            with pytest.raises(ModelError, match="estimator"):
                trace_depths(cfg)
            continue
        depths = trace_depths(cfg)
        assert 1 <= len(depths) <= 2, entry["id"]


def test_lora_targets_are_checked_against_the_model():
    cfg = tiny("meta-llama/Llama-3.2-1B", layers=2)
    sc = parse_scenario({"model": "x", "lora_targets": ["q_proj", "v_proj"]})
    built = build_model(cfg, sc, 2)
    trainable = {n.split(".")[-4] for n, p in built.model.named_parameters() if p.requires_grad}
    assert trainable == {"q_proj", "v_proj"}
    with pytest.raises(ScenarioError, match="not a module"):
        build_model(cfg, parse_scenario({"model": "x", "lora_targets": ["query_key_value"]}), 2)


def test_qlora_builds_packed_4bit_weights_and_quant_state():
    cfg = tiny("meta-llama/Llama-3.2-1B", layers=1)
    built = build_model(cfg, parse_scenario({"model": "x", "method": "qlora"}), 1)
    q = built.causal_lm.model.layers[0].self_attn.q_proj.base_layer
    n = q.in_features * q.out_features
    assert q.weight.dtype == torch.uint8 and q.weight.numel() == n // 2
    assert q.absmax.dtype == torch.uint8 and q.absmax.numel() == n // 64  # double quantization
    assert q.nested_absmax.dtype == torch.float32
    # prepare_model_for_kbit_training made everything that is not 4-bit fp32
    assert built.causal_lm.model.norm.weight.dtype == torch.float32
    assert built.lm_head.weight.dtype == torch.float32
    lora = built.causal_lm.model.layers[0].self_attn.q_proj.lora_A["default"].weight
    assert lora.dtype == torch.float32 and lora.requires_grad


def test_kbit_prepare_no_leaves_the_unquantized_parameters_in_the_model_dtype():
    cfg = tiny("meta-llama/Llama-3.1-8B", layers=1)
    built = build_model(cfg, parse_scenario({"model": "x", "method": "qlora", "kbit_prepare": "no"}), 1)
    lm = built.causal_lm
    assert {lm.get_input_embeddings().weight.dtype, lm.get_output_embeddings().weight.dtype,
            lm.model.norm.weight.dtype} == {torch.bfloat16}
    assert not any(p.requires_grad for n, p in lm.named_parameters() if "lora_" not in n)
    assert any("kbit_prepare no" in a for a in built.assumptions)
    # bf16-true without the fp32 upcast runs as it says, without autocast, as the estimator does
    # (framework.runs_under_autocast); the prepared recipe runs under the Trainer's autocast
    assert built.autocast_dtype is None
    prepared = build_model(cfg, parse_scenario({"model": "x", "method": "qlora", "kbit_prepare": "yes"}), 1)
    assert prepared.autocast_dtype == torch.bfloat16
    mixed = build_model(cfg, parse_scenario({"model": "x", "method": "qlora", "kbit_prepare": "no",
                                             "precision": "bf16-mixed"}), 1)
    assert mixed.autocast_dtype == torch.bfloat16


def test_trl_0_21_puts_embeddings_and_head_back_to_bf16_after_the_kbit_upcast():
    cfg = tiny("meta-llama/Llama-3.1-8B", layers=1)  # untied embeddings and head
    built = build_model(cfg, parse_scenario({"model": "x", "method": "qlora", "framework_version": "trl-0.21"}), 1)
    lm = built.causal_lm
    assert lm.get_input_embeddings().weight.dtype == torch.bfloat16
    assert lm.get_output_embeddings().weight.dtype == torch.bfloat16
    assert lm.model.norm.weight.dtype == torch.float32  # peft_module_casting_to_bf16 keeps the norms fp32
    assert any("peft_module_casting_to_bf16" in a for a in built.assumptions)
    fp16 = parse_scenario({"model": "x", "method": "qlora", "framework_version": "trl-0.21", "precision": "fp16-mixed"})
    assert build_model(cfg, fp16, 1).causal_lm.get_input_embeddings().weight.dtype == torch.float32  # no args.bf16


def test_falcon_linears_stay_unquantized_as_in_transformers():
    cfg = tiny("tiiuae/falcon-7b", layers=1)
    built = build_model(cfg, parse_scenario({"model": "x", "method": "qlora"}), 1)
    assert any("FalconLinear" in a for a in built.assumptions)


def test_qwen1_is_estimator_only_with_a_clear_message():
    with pytest.raises(ModelError, match="trust_remote_code"):
        build_model(catalog_config("Qwen/Qwen-7B"), parse_scenario({"model": "x"}), 1)


def test_other_frameworks_are_estimator_only():
    with pytest.raises(ScenarioError, match="framework"):
        build_model(tiny("meta-llama/Llama-3.2-1B", 1), parse_scenario({"model": "x", "framework": "torchtune"}), 1)


def test_tied_embeddings_stay_tied_on_fake_tensors():
    cfg = tiny("meta-llama/Llama-3.2-1B", layers=1)
    assert cfg.get("tie_word_embeddings")
    built = build_model(cfg, parse_scenario({"model": "x", "method": "full"}), 1)
    with FakeTensorMode(allow_non_fake_inputs=True):
        materialize(built, "cpu")
        assert built.lm_head.weight is built.causal_lm.get_input_embeddings().weight


def test_mixed_precision_keeps_fp32_weights_and_autocasts():
    built = build_model(tiny("meta-llama/Llama-3.2-1B", 1), parse_scenario({"model": "x", "method": "full",
                                                                             "precision": "bf16-mixed"}), 1)
    assert built.autocast_dtype is torch.bfloat16
    assert all(p.dtype == torch.float32 for p in built.model.parameters())


def test_a_vlm_language_model_builds_no_kv_cache():
    """The language model of a VLM reads use_cache from its own text_config (transformers v5.24.0
    merge_with_config_defaults): the simulator turns it off there too, as on the top-level config."""
    from vramfit.sim.build import hf_config

    cfg = hf_config({"model_type": "llava", "text_config": {"model_type": "llama", "use_cache": True},
                     "vision_config": {"model_type": "clip_vision_model"}})
    assert cfg.text_config.use_cache is False


@pytest.mark.parametrize(("attention", "checkpointing", "implementation", "said"), [
    ("flash", "none", "sdpa", "attention=flash is simulated with SDPA's fused kernel"),
    ("eager", "selective", "vramfit_selective_eager", "Selective"),
    ("sdpa", "selective", "vramfit_selective_sdpa", "Selective"),
])
def test_the_attention_implementation_the_model_is_built_with(attention, checkpointing, implementation, said):
    """build_model's _instantiate: flash runs as SDPA, selective checkpointing wraps the kernel, each said."""
    from vramfit.sim.checkpointing import SELECTIVE_ASSUMPTION

    built = build_model(tiny("meta-llama/Llama-3.2-1B", 1), parse_scenario(
        {"model": "x", "method": "full", "attention": attention, "gradient_checkpointing": checkpointing}), 1)
    assert built.causal_lm.config._attn_implementation == implementation
    assert said in " ".join(built.assumptions)
    assert (SELECTIVE_ASSUMPTION in built.assumptions) is (checkpointing == "selective")
    assert all(p.device.type == "meta" and p.dtype == torch.bfloat16 for p in built.model.parameters())


@pytest.mark.parametrize(("change", "said"), [({"torch_dtype": "float8"}, "AttributeError"),
                                               ({"rope_scaling": {"type": "weird", "factor": 2}}, "KeyError: 'weird'")])
def test_a_config_transformers_cannot_build_is_a_model_error_not_a_traceback(change, said):
    # values estimate reads past (it never builds the model) made simulate end in a Python traceback, exit code 1
    cfg = {**tiny("meta-llama/Llama-3.2-1B", layers=2, hidden=64, vocab=256), **change}
    sc = parse_scenario({"params": "1B", "method": "lora", "seq_len": 64})
    with pytest.raises(ModelError, match=f"transformers cannot (read|build).*{said}.*use `vramfit estimate`"):
        build_model(cfg, sc, layers=2)
