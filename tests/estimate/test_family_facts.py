"""Model-family facts are typed ModelSpec fields: flipping one moves the estimate, and the estimator
never tests ``model_type`` (issue 10 item 1)."""

import re
from dataclasses import replace
from pathlib import Path

import pytest

from vramfit.estimate.activations import block_saved
from vramfit.estimate.block_extras import model_extra_saved
from vramfit.estimate.core import model_state
from vramfit.estimate.framework import profile_for
from vramfit.estimate.loss import loss_memory
from vramfit.estimate.params import valid_target_names
from vramfit.models import resolve_model
from vramfit.models.hf_config import spec_from_hf_config
from vramfit.models.spec import NormType, PositionEncoding
from vramfit.scenario import Framework, parse_scenario

HF = profile_for(Framework.HF)
LLAMA = resolve_model("meta-llama/Llama-3.1-8B").spec
NEOX = resolve_model("stabilityai/stablelm-base-alpha-3b").spec


def _sc(**keys):
    return parse_scenario({"params": "1B", "method": "full", "seq_len": 1024, **keys})


def _saved(spec, **keys) -> int:
    return block_saved(spec, _sc(**keys), HF, [], quantized=False).total


# (field, flipped value, base spec, scenario keys): each flip must change one block's saved bytes
FLIPS = [
    ("norm_type", NormType.LAYERNORM, LLAMA, {}),
    ("norm_one_plus_weight", True, LLAMA, {}),
    ("qk_norm", True, LLAMA, {}),
    ("sandwich_norms", True, LLAMA, {}),
    ("parallel_attn_mlp", False, NEOX, {}),
    ("parallel_norms", 1, NEOX, {}),
    ("position_encoding", PositionEncoding.ALIBI, NEOX, {}),
    ("sdpa_supported", False, LLAMA, {}),
    ("eager_softmax_fp32", False, LLAMA, {"attention": "eager"}),
    ("attn_logit_softcapping", 50.0, LLAMA, {}),
    ("fused_qkv", "q_proj", LLAMA, {}),
    ("act_saved_tensors", 4, NEOX, {}),
    ("kv_broadcast_view", True, LLAMA, {}),
    ("attention_dropout", 0.1, LLAMA, {"attention": "eager"}),
    ("hidden_dropout", 0.1, LLAMA, {}),
]


@pytest.mark.parametrize(("name", "value", "spec", "keys"), FLIPS, ids=[f[0] + "-" + f[2].model_type for f in FLIPS])
def test_flipping_a_family_fact_moves_the_block_activations(name, value, spec, keys):
    assert getattr(spec, name) != value
    assert _saved(replace(spec, **{name: value}), **keys) != _saved(spec, **keys)


def test_embedding_norm_and_final_softcapping_move_the_rest_of_the_model():
    sc = _sc()
    with_norm = model_extra_saved(replace(LLAMA, embedding_norm=True), sc, HF, lm_head_trainable=True)
    base = model_extra_saved(LLAMA, sc, HF, lm_head_trainable=True)
    assert with_norm - base == 2 * 1024 * LLAMA.hidden_size  # the bf16 embedding output it saves
    capped = loss_memory(replace(LLAMA, final_logit_softcapping=30.0), sc, HF)
    assert capped.saved - loss_memory(LLAMA, sc, HF).saved == 2 * 1024 * LLAMA.vocab_size  # tanh output


def test_linear_subclass_stays_unquantized_under_transformers():
    sc = parse_scenario({"params": "1B", "method": "qlora"})
    plain, _ = model_state(LLAMA, sc, HF)
    subclass, _ = model_state(replace(LLAMA, linear_subclass=True), sc, HF)
    assert plain.quantized_base > 0 and subclass.quantized_base == 0


def test_fused_gate_up_offers_the_slice_names():
    phi3 = resolve_model("microsoft/Phi-3-mini-4k-instruct").spec
    assert phi3.fused_gate_up == "gate_up_proj" and phi3.fused_qkv == "qkv_proj"
    assert {"gate_proj", "up_proj", "q_proj"} <= set(valid_target_names(phi3))
    assert "gate_proj" not in valid_target_names(replace(phi3, fused_gate_up=""))


def test_gpt_neox_use_parallel_residual_reaches_the_activations():
    """Reproduction from issue 10: flipping use_parallel_residual changed the spec only."""
    config = dict(resolve_model("stabilityai/stablelm-base-alpha-3b").config)
    parallel = spec_from_hf_config({**config, "use_parallel_residual": True})
    sequential = spec_from_hf_config({**config, "use_parallel_residual": False})
    assert parallel.parallel_attn_mlp and not sequential.parallel_attn_mlp
    T, h = 1024, parallel.hidden_size
    # sequential: norm2 reads the mid-block residual (a new bf16 tensor kept), parallel: the block input
    assert _saved(sequential) - _saved(parallel) == 2 * T * h


def test_config_reader_fills_the_facts():
    gemma2 = resolve_model("google/gemma-2-9b").spec
    assert gemma2.sandwich_norms and gemma2.norm_one_plus_weight and gemma2.attn_logit_softcapping == 50.0
    assert resolve_model("Qwen/Qwen3-8B").spec.qk_norm
    bloom = resolve_model("bigscience/bloomz-7b1").spec
    assert bloom.position_encoding is PositionEncoding.ALIBI and bloom.embedding_norm and not bloom.sdpa_supported
    phi = resolve_model("microsoft/phi-2").spec
    assert phi.parallel_attn_mlp and phi.parallel_norms == 1 and phi.act_saved_tensors == 4
    falcon7, falcon40 = (resolve_model(m).spec for m in ("tiiuae/falcon-7b", "tiiuae/falcon-40b"))
    assert (falcon7.parallel_norms, falcon40.parallel_norms) == (1, 2)
    assert falcon7.kv_broadcast_view and falcon7.linear_subclass and falcon7.fused_qkv == "query_key_value"
    assert LLAMA.norm_type is NormType.RMSNORM and not LLAMA.qk_norm and LLAMA.fused_qkv == ""


def test_estimator_never_tests_model_type():
    est = Path(__file__).resolve().parents[2] / "src" / "vramfit" / "estimate"
    # the one allowed form: a look-up in a profile's typed table keyed by model_type (a framework's per-family
    # behaviour, e.g. FrameworkProfile.fp16_forced_fp32_model_types, cited there), never a literal name
    pattern = re.compile(r"model_type\s*(==|!=|in\b(?!\s+profile\.\w+_model_types\b)|not in\b)|\.extra\b")
    offenders = [f"{p.name}:{i}" for p in est.glob("*.py")
                 for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert offenders == []


def test_eager_forward_softmax_reads_the_family_facts():
    """The tensors bound at the top block's eager softmax in forward (block_extras.eager_forward_softmax), per score
    of (B, H, S, S) = 1 x 32 x 1024 x 1024: Llama-style bf16 binds the masked scores, softmax's fp32 copy and its
    fp32 output (2 + 4 + 4); BLOOM's baddbmm scores stay bound too (+2) and, checkpointed, the block below's
    returned probabilities (+2); under autocast the fp32 mask makes the masked scores fp32 (no copy) and RoPE's
    fp32 query makes the cast a no-op (4 + 4), while ALiBi's 16-bit query adds the probabilities (2 + 4 + 4 + 2)."""
    from vramfit.estimate.block_extras import eager_forward_softmax

    n = 32 * 1024 * 1024
    real = resolve_model("bigscience/bloomz-7b1").spec
    assert (real.eager_forward_scores, real.block_returns_attention_probs) == (2, True)
    assert (LLAMA.eager_forward_scores, LLAMA.block_returns_attention_probs) == (1, False)
    spec = replace(LLAMA, num_attention_heads=32)
    bloom = replace(spec, eager_forward_scores=2, block_returns_attention_probs=True,
                    position_encoding=PositionEncoding.ALIBI)
    true, mixed = {"attention": "eager"}, {"attention": "eager", "precision": "bf16-mixed"}
    assert eager_forward_softmax(spec, _sc(**true), HF) == 10 * n
    assert eager_forward_softmax(bloom, _sc(**true), HF) == 12 * n
    assert eager_forward_softmax(bloom, _sc(gradient_checkpointing="full", **true), HF) == 14 * n
    assert eager_forward_softmax(spec, _sc(**mixed), HF) == 8 * n
    assert eager_forward_softmax(bloom, _sc(**mixed), HF) == 12 * n
    assert eager_forward_softmax(spec, _sc(attention="sdpa"), HF) == 0
    assert eager_forward_softmax(spec, _sc(**true), profile_for(Framework.LITGPT)) == 0
