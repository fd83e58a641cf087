"""Model families a user-driven review found estimated silently and wrongly (2026-12-07): hybrids whose decoder
layers hold a state-space or linear-attention mixer (their conv1d weight was read as a bank of 8,192 experts:
Qwen3-Next LoRA counted 10.7 B trainable parameters for PEFT's 3.4 B), and encoder-decoder models estimated as their
decoder alone (Whisper: 29.6 M of 37.8 M parameters). Both are refused in one line now, and a type transformers
cannot build gives the gist of its reason, not transformers' list of every class (~1,000 characters)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramfit import estimate
from vramfit.errors import ModelError

FIX = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize(("name", "where"), [
    ("jamba_small.json", "layers.0.mamba.conv1d"),
    ("qwen3_next_small.json", "layers.0.linear_attn.conv1d"),
])
def test_state_space_and_linear_attention_hybrids_are_refused(name, where):
    with pytest.raises(ModelError) as e:
        estimate({"model": str(FIX / name), "method": "lora"})
    msg = str(e.value)
    assert f"its decoder layers hold a convolution, {where}: a state-space or linear-attention mixer" in msg


def test_an_encoder_decoder_model_is_refused(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "whisper", "d_model": 384, "encoder_layers": 4, "decoder_layers": 4,
                               "encoder_attention_heads": 6, "decoder_attention_heads": 6, "vocab_size": 51865}))
    with pytest.raises(ModelError, match=r"an encoder-decoder model: vramfit models decoder-only transformers"):
        estimate({"model": str(cfg)})


def test_a_type_transformers_cannot_build_keeps_the_list_and_a_short_reason(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "t5", "d_model": 512, "num_layers": 6, "num_heads": 8, "d_ff": 2048,
                               "vocab_size": 32128, "d_kv": 64}))
    with pytest.raises(ModelError) as e:
        estimate({"model": str(cfg)})
    reason = str(e.value).split("(transformers cannot build it as a causal LM: ", 1)[1].split(")", 1)[0]
    assert 0 < len(reason) <= 201 and "llama" in e.value.valid  # transformers' whole class list was ~1,000 chars


def test_an_expert_width_the_config_calls_intermediate_size_is_read_from_the_bank(tmp_path):
    """OLMoE names one expert's width intermediate_size (no moe_intermediate_size): the spec read from transformers'
    modules had 0, so the speed model's elementwise traffic counted no MLP (plan/elementwise.py). 2 x 1,024 equals
    the hidden size here, so the fused gate/up bank is as wide as the hidden size too: the down bank decides."""
    from vramfit.models.hf_config import spec_from_hf_config

    olmoe = {"model_type": "olmoe", "hidden_size": 2048, "intermediate_size": 1024, "num_hidden_layers": 2,
             "num_attention_heads": 16, "num_key_value_heads": 16, "num_experts": 8, "num_experts_per_tok": 2,
             "vocab_size": 1024}
    spec = spec_from_hf_config(olmoe)
    assert "transformers modules" in spec.extra["read_from"] and spec.moe_intermediate_size == 1024


def test_lora_all_linear_on_a_tuple_returning_router_is_said_to_fail():
    """Llama4Router (and PhimoeTopKRouter) subclass nn.Linear but return a tuple: PEFT's all-linear wraps them and
    its LoRA layer fails on the output (the simulator's run); the estimate gave a figure without a word (a review)."""
    from vramfit.web.translate import untranslated

    said = [a for a in estimate({"model": "meta-llama/Llama-4-Scout-17B-16E", "method": "lora"}).assumptions
            if a.startswith("PEFT's all-linear wraps the router")]
    assert len(said) == 1 and untranslated(said) == []
    named = estimate({"model": "meta-llama/Llama-4-Scout-17B-16E", "method": "lora", "lora_targets": ["q_proj", "v_proj"]})
    assert not any(a.startswith("PEFT's all-linear wraps the router") for a in named.assumptions)
    qwen = estimate({"model": "Qwen/Qwen3-30B-A3B", "method": "lora"})  # a 2-D weight router, no nn.Linear
    assert not any(a.startswith("PEFT's all-linear wraps the router") for a in qwen.assumptions)


def test_a_linear_attention_model_without_a_convolution_is_refused_by_its_layer_types(tmp_path):
    """MiniMax's lightning attention holds no convolution; its config's layer_types name the linear-attention layers
    (a review: estimated as attention blocks, -5.3 % against the simulator at 4,096 tokens)."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "minimax", "hidden_size": 512, "intermediate_size": 1024,
                               "num_attention_heads": 8, "num_key_value_heads": 8, "head_dim": 64,
                               "num_hidden_layers": 4, "num_local_experts": 4, "num_experts_per_tok": 2,
                               "vocab_size": 1024, "layer_types": ["linear_attention", "full_attention"] * 2}))
    with pytest.raises(ModelError, match="its layer_types name 'linear_attention' layers, a linear-attention or"):
        estimate({"model": str(cfg)})
