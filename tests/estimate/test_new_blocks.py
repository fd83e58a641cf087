"""The activation walk of the new blocks: multi-head latent attention, attention sinks, shared
experts. Each test checks the exact tensors a field adds (T tokens, c bytes of bf16)."""

from __future__ import annotations

from dataclasses import replace

from vramfit.estimate.activations import block_saved
from vramfit.estimate.framework import PROFILES
from vramfit.models import spec_from_hf_config
from vramfit.scenario import parse_scenario

HF = next(p for p in (PROFILES.values() if isinstance(PROFILES, dict) else PROFILES)
          if p.runs_transformers_modeling)
DS = dict(
    model_type="deepseek_v3", hidden_size=1024, intermediate_size=2048, moe_intermediate_size=256,
    num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=8, n_routed_experts=8,
    n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=0, q_lora_rank=384,
    kv_lora_rank=256, qk_rope_head_dim=32, qk_nope_head_dim=64, v_head_dim=64, vocab_size=8192,
)
T, C = 512, 2


def saved(spec, **sc):
    scenario = parse_scenario({"model": "generic:1B", "method": "full", "seq_len": T,
                               "precision": "bf16-true", **sc})
    return block_saved(spec, scenario, HF, [], False).items


def test_mla_saves_latents_and_the_whole_kv_up_projection():
    items = saved(spec_from_hf_config(DS))
    assert items["q_a_norm.fp32_in"] == 4 * T * 384
    assert items["kv_a_norm.fp32_in"] == 4 * T * 256
    assert items["q_b_proj.in"] == C * T * 384  # q_b_proj's weight gradient needs the latent
    assert items["kv_b_proj.in"] == C * T * 256
    assert items["q"] == C * T * 8 * 96  # qk_nope + qk_rope
    assert items["kv_b_out"] == C * T * 8 * (64 + 64)  # v is a view of it
    assert items["attn.out"] == C * T * 8 * 64  # v_head_dim wide
    assert "v" not in items


def test_shared_expert_adds_a_dense_gated_mlp_per_token():
    spec = spec_from_hf_config(DS)
    with_shared = saved(spec)
    no_shared = saved(spec_from_hf_config({**DS, "n_shared_experts": 0}))
    for key in ("shared.gate_out", "shared.act_out", "shared.up_out", "shared.mid"):
        assert with_shared[key] == C * T * 256
    # and the 16-bit norm output its gate/up read: DeepSeek's router keeps its own fp32 copy
    # (DeepseekV3TopkRouter: F.linear(hidden_states.type(torch.float32), ...)), so without the shared
    # expert nothing keeps it
    assert with_shared["router.fp32_in"] == no_shared["router.fp32_in"] == 4 * T * 1024
    assert sum(with_shared.values()) - sum(no_shared.values()) == 4 * C * T * 256 + C * T * 1024


def test_attention_sinks_add_one_softmax_column():
    cfg = dict(model_type="gpt_oss", hidden_size=256, intermediate_size=256, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, head_dim=64, num_local_experts=4,
               num_experts_per_tok=2, vocab_size=1000)
    spec = spec_from_hf_config(cfg)
    sinks = saved(spec)
    assert sinks["attn.softmax_out"] == C * 4 * T * (T + 1)  # bf16 softmax, one sink column
    plain = saved(replace(spec, attention_sinks=False))
    assert plain["attn.softmax_out"] == C * 4 * T * T


def test_sink_softmax_backward_transient_in_bf16():
    from vramfit.estimate.block_extras import block_backward_transient

    cfg = dict(model_type="gpt_oss", hidden_size=256, intermediate_size=256, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, head_dim=64, num_local_experts=4,
               num_experts_per_tok=2, vocab_size=1000)
    spec = spec_from_hf_config(cfg)
    sc = parse_scenario({"model": "generic:1B", "method": "full", "seq_len": T, "precision": "bf16-true"})
    # softmax grad, its backward output and the zeros probs[..., :-1]'s backward scatters into
    assert block_backward_transient(spec, sc, HF) == 3 * C * 4 * T * (T + 1)


def test_vision_tower_weights_are_held():
    from vramfit.estimate import estimate

    def weights(model):
        est = estimate({"model": model, "method": "lora", "seq_len": 512})
        return dict(est.peak.breakdown)["weights"]

    # Qwen2.5-VL-7B's language model has Qwen2.5-7B's shapes; the 676,550,144 vision parameters
    # add their bf16 bytes to the frozen weights
    assert weights("Qwen/Qwen2.5-VL-7B-Instruct") - weights("Qwen/Qwen2.5-7B") == 2 * 676_550_144


GPT_OSS = dict(model_type="gpt_oss", hidden_size=256, intermediate_size=256, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, head_dim=64, num_local_experts=4,
               num_experts_per_tok=2, vocab_size=1000)


def test_fp32_sinks_make_the_softmax_fp32_and_probs_v_keep_a_16_bit_copy():
    """QLoRA: PEFT upcasts the sinks to fp32, torch.cat promotes the scores, and autocast's probs @ v
    keeps a bf16 copy of the (S, S) slice."""
    spec = spec_from_hf_config(GPT_OSS)
    scenario = parse_scenario({"model": "generic:1B", "method": "qlora", "seq_len": T, "precision": "bf16-true"})
    items = block_saved(spec, scenario, HF, [], True).items
    assert items["attn.softmax_out"] == 4 * 4 * T * (T + 1)
    assert items["attn.probs"] == C * 4 * T * T


def test_frozen_expert_bank_keeps_no_gathered_input():
    """aten::_grouped_mm keeps its input only for the weight's gradient: LoRA on gpt-oss (experts not
    adapted) keeps the routed output but not the gathered input; full fine-tuning keeps both."""
    spec = spec_from_hf_config(GPT_OSS)
    lora = parse_scenario({"model": "generic:1B", "method": "lora", "seq_len": T, "precision": "bf16-true"})
    frozen = block_saved(spec, lora, HF, [], False).items
    assert "experts.gathered_in" not in frozen
    assert frozen["experts.weighted_out"] == C * 2 * T * 256
    assert saved(spec)["experts.gathered_in"] == C * 2 * T * 256


def test_dense_first_layers_are_walked_as_a_dense_mlp():
    from vramfit.estimate.moe_lora import dense_layers

    spec = spec_from_hf_config({**DS, "first_k_dense_replace": 1})
    block, n = dense_layers(spec)
    assert n == 1 and block.num_experts == 0
    assert sorted((x.name, x.out_features) for x in block.block_linears if x.group == "mlp") == [
        ("down_proj", 1024), ("gate_proj", 2048), ("up_proj", 2048)]
    items = saved(block)
    assert items["mlp.gate_out"] == items["mlp.up_out"] == C * T * 2048  # intermediate_size, every token
    assert not any(k.startswith(("experts.", "router.", "shared.")) for k in items)
    assert dense_layers(spec_from_hf_config(DS)) is None  # every layer MoE


def test_qlora_quantizes_dense_and_shared_down_proj_but_not_the_expert_bank():
    """DeepSeek's dense and shared-expert down_proj are nn.Linear (4-bit), the experts' down_proj a 3-D
    bank of the same name (left to fp32): the quantized base holds exactly the nn.Linear weights."""
    from vramfit.estimate.core import _is_quantized_linear
    from vramfit.estimate.params import base_tensors

    spec = spec_from_hf_config({**DS, "first_k_dense_replace": 1})
    sc = parse_scenario({"model": "generic:1B", "method": "qlora"})
    quantized = {(t.name, t.shape) for t in base_tensors(spec) if _is_quantized_linear(t, sc, HF, spec)}
    assert ("down_proj", (1024, 2048)) in quantized and ("down_proj", (1024, 256)) in quantized  # dense, shared
    assert not any(t.kind == "expert" and _is_quantized_linear(t, sc, HF, spec) for t in base_tensors(spec))


def test_mixed_precision_expert_path_is_fp32_and_gets_no_autocast_copy():
    """bf16-mixed: the fp32 expert banks run transformers' grouped matmul, which autocast does not cover, so
    the routed tensors are fp32 and only the attention/router linears get 16-bit copies."""
    from vramfit.estimate.moe_lora import autocast_cast_spec

    spec = spec_from_hf_config(GPT_OSS)
    mixed = parse_scenario({"model": "generic:1B", "method": "lora", "seq_len": T, "precision": "bf16-mixed"})
    items = block_saved(spec, mixed, HF, [], False).items
    assert items["mlp.gate_out"] == 4 * 2 * T * 256 and items["experts.weighted_out"] == 4 * 2 * T * 256
    cast = autocast_cast_spec(spec, HF)
    assert {x.group for x in cast.block_linears} == {"attn", "router"}


def test_llama4_experts_run_every_token():
    """Llama4TextMoe: the tokens repeated num_experts times, one bmm per bank (16 experts, top-1)."""
    cfg = dict(model_type="llama4_text", hidden_size=512, intermediate_size=1024, intermediate_size_mlp=2048,
               num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=128,
               num_local_experts=16, num_experts_per_tok=1, vocab_size=8192, interleave_moe_layer_step=2)
    spec = spec_from_hf_config(cfg)
    assert spec.expert_rows_per_token == 16
    items = saved(spec)
    assert items["mlp.gate_out"] == C * 16 * T * 1024 and items["experts.gathered_in"] == C * 16 * T * 512
