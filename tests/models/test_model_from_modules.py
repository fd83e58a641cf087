"""Any decoder transformers ships: the spec read from its real modules on the meta device. Counts
equal transformers' own ``sum(p.numel() for p in model.parameters())`` (computed here too)."""

from __future__ import annotations

import sys

import pytest

from vramfit.errors import ModelError
from vramfit.models import spec_from_hf_config

pytest.importorskip("torch")
pytest.importorskip("transformers")

TINY = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=1000)
CASES = {
    "olmo": {**TINY, "num_key_value_heads": 4},
    "starcoder2": TINY,
    "granite": TINY,
    "qwen2_moe": {**TINY, "moe_intermediate_size": 64, "shared_expert_intermediate_size": 128,
                  "num_experts": 8, "num_experts_per_tok": 2},
}
LLAMA4 = {**TINY, "num_hidden_layers": 4, "intermediate_size": 128, "intermediate_size_mlp": 512,
          "num_local_experts": 4, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2, "head_dim": 64}


def transformers_count(cfg: dict) -> int:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**cfg))
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("model_type", CASES)
def test_count_equals_transformers(model_type):
    cfg = {"model_type": model_type, **CASES[model_type]}
    spec = spec_from_hf_config(cfg)
    assert spec.num_params == transformers_count(cfg)
    assert spec.extra["read_from"].startswith("transformers modules")


def test_expected_counts_and_layout():
    qwen2_moe = spec_from_hf_config({"model_type": "qwen2_moe", **CASES["qwen2_moe"]})
    assert qwen2_moe.num_params == 2_586_624
    groups = {(lin.name, lin.group) for lin in qwen2_moe.block_linears}
    assert {("shared_expert_gate", "shared_expert"), ("gate_up_proj", "expert"), ("q_proj", "attn")} <= groups
    # banks stored (experts, out, in) as nn.functional.linear takes them (is_transposed=False), read as (in, out)
    banks = {lin.name: (lin.in_features, lin.out_features) for lin in qwen2_moe.block_linears if lin.group == "expert"}
    assert banks == {"gate_up_proj": (256, 2 * 64), "down_proj": (64, 256)}
    assert qwen2_moe.gated_mlp  # act(gate) * up over the fused bank



def test_llama4_text_builder_matches_transformers():
    # the torch-free builder (vramfit.models.hf_moe) against the real modules
    cfg = {"model_type": "llama4_text", **LLAMA4}
    llama4 = spec_from_hf_config(cfg)
    assert llama4.num_params == transformers_count(cfg) == 3_072_256
    # interleave_moe_layer_step=2: two of four layers are MoE, two keep the dense MLP
    assert {(lin.group, lin.layers) for lin in llama4.block_linears if lin.name == "gate_proj"} == {
        ("dense_mlp", 2), ("shared_expert", 2)}


@pytest.mark.parametrize(("extra", "layers"), [({}, 3), ({"no_rope_layer_interval": 2}, 2),
                                               ({"no_rope_layers": [1, 0, 0, 1]}, 2), ({"use_qk_norm": False}, 0)])
def test_llama4_qk_norm_layers_are_transformers(extra, layers):
    """Llama4TextL2Norm sits on the RoPE layers only when use_qk_norm (Llama4TextAttention.qk_norm)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = {"model_type": "llama4_text", **LLAMA4, **extra}
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**cfg))
    real = sum(hasattr(layer.self_attn, "qk_norm") for layer in model.model.layers)
    assert spec_from_hf_config(cfg).qk_l2_norm_layers == real == layers


def test_not_a_transformer_decoder_is_a_clear_error():
    with pytest.raises(ModelError, match="unsupported model_type 't5'") as err:
        spec_from_hf_config({"model_type": "t5"})
    assert "llama" in err.value.valid


def test_without_torch_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    with pytest.raises(ModelError, match=r"install the 'sim' extra"):
        spec_from_hf_config({"model_type": "granite", **TINY})


@pytest.mark.parametrize(("model_type", "extra", "facts"), [
    # F.linear(hidden_states.type(torch.float32), ...), sigmoid scores kept fp32 (modeling_glm4_moe.py l. 284-300)
    ("glm4_moe", {"n_routed_experts": 8, "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1}, (True, True)),
    # fp32 linear under autocast off, weights cast back: routing_weights.to(hidden_states.dtype) (l. 349-356)
    ("ernie4_5_moe", {"moe_num_experts": 8}, (True, False)),
    # 16-bit linear, softmax(dtype=float) and top-k weights cast back to the logits' dtype (modeling_qwen2_moe.py l. 322-327)
    ("qwen2_moe", {"num_experts": 8}, (False, False)),
    # 16-bit linear, softmax(router_logits.float()) weights returned fp32 (modeling_mixtral.py l. 104-111)
    ("mixtral", {"num_local_experts": 8}, (False, True)),
])
def test_router_dtypes_read_from_the_router(model_type, extra, facts):
    """ModelSpec.router_fp32 / routing_weights_fp32 from the model's own router run on a bf16 meta input."""
    from vramfit.models.from_modules import spec_from_transformers

    cfg = {**TINY, "model_type": model_type, "moe_intermediate_size": 64, "num_experts_per_tok": 2, **extra}
    spec = spec_from_transformers(cfg, "test")
    assert (spec.router_fp32, spec.routing_weights_fp32) == facts
    dense = spec_from_transformers({**TINY, "model_type": "olmo", "num_key_value_heads": 4}, "test")
    assert (dense.router_fp32, dense.routing_weights_fp32) == (False, False)


def test_a_config_read_from_modules_prints_nothing_on_stderr(tmp_path):
    """Reading a qwen2_moe config imports peft, hence bitsandbytes, whose CPU backend logged 'Failed to load CPU
    gemm_4bit_forward from kernels-community' on stderr under every such estimate."""
    import json
    import subprocess

    pytest.importorskip("bitsandbytes")
    cfg = {"model_type": "qwen2_moe", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 4, "intermediate_size": 512, "moe_intermediate_size": 128,
           "shared_expert_intermediate_size": 512, "num_experts": 8, "num_experts_per_tok": 2, "vocab_size": 1000}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = subprocess.run([sys.executable, "-m", "vramfit.cli.main", "estimate", "--model", str(tmp_path / "config.json"), "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["model"]["num_params"] > 0
    assert "gemm_4bit_forward" not in r.stderr and "kernels" not in r.stderr, r.stderr
