"""ZeRO-1/2's module order (estimate/zero12_partition.py ``module_order``) against the real parameter list of a tiny
transformers 5 model built on the meta device: an expert bank is one 3-D parameter per layer (v5.24.0
models/mixtral/modeling_mixtral.py MixtralExperts ``gate_up_proj``/``down_proj``), DeepSeek-V3's dense layers come
first (``first_k_dense_replace``) and Llama 4's MoE layers every ``interleave_moe_layer_step``-th. Weight-decay groups
as the HF Trainer makes them (trainer.py ``get_decay_parameter_names``)."""

import importlib
import re

import pytest

from vramfit.models.hf_config import spec_from_hf_config

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
partition = importlib.import_module("vramfit.estimate.zero12_partition")

MIXTRAL = {"model_type": "mixtral", "vocab_size": 128, "hidden_size": 64, "intermediate_size": 96,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4,
           "num_experts_per_tok": 2}
DEEPSEEK = {"model_type": "deepseek_v3", "vocab_size": 128, "hidden_size": 64, "intermediate_size": 96,
            "moe_intermediate_size": 32, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 4,
            "n_routed_experts": 4, "n_shared_experts": 1, "first_k_dense_replace": 1, "q_lora_rank": 16,
            "kv_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 8, "n_group": 1,
            "topk_group": 1, "num_experts_per_tok": 2}
LLAMA4 = {"model_type": "llama4_text", "vocab_size": 128, "hidden_size": 64, "intermediate_size": 32,
          "intermediate_size_mlp": 96, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
          "head_dim": 16, "num_local_experts": 4, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2}


def _real_layers(config: dict) -> tuple[list[list[int]], list[int]]:
    """Decay-group element counts per decoder layer (module order), and every other group's: embedding, head."""
    cfg = transformers.AutoConfig.for_model(**config)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    decay = set(transformers.Trainer.get_decay_parameter_names(None, model))
    layers: list[list[int]] = [[] for _ in range(config["num_hidden_layers"])]
    outside = []
    for name, p in model.named_parameters():
        if name not in decay:
            continue
        m = re.search(r"layers\.(\d+)\.", name)
        (layers[int(m.group(1))] if m else outside).append(p.numel())
    return layers, outside


def _spec_layers(config: dict) -> tuple[list[list[int]], list[int]]:
    """The same from ``module_order`` with banks (the spec's norms are one no-decay tensor closing each layer)."""
    spec = spec_from_hf_config(config)
    order = [n for n, decay in partition.module_order(spec, banks=True) if decay]
    per = [len(partition._layer_linears(spec, i, True)) for i in range(spec.num_hidden_layers)]
    layers, at = [], 1
    for k in per:
        layers.append(order[at:at + k])
        at += k
    return layers, [order[0]] + order[at:]


LLAMA4_IRREGULAR = {**LLAMA4, "moe_layers": [0, 2, 3]}
QWEN3_MOE_MIXED = {"model_type": "qwen3_moe", "vocab_size": 128, "hidden_size": 64, "intermediate_size": 96,
                   "moe_intermediate_size": 32, "num_hidden_layers": 4, "num_attention_heads": 4,
                   "num_key_value_heads": 2, "head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2,
                   "mlp_only_layers": [1], "decoder_sparse_step": 1}
CONFIGS = [MIXTRAL, DEEPSEEK, LLAMA4, LLAMA4_IRREGULAR, QWEN3_MOE_MIXED]


@pytest.mark.parametrize("config", CONFIGS, ids=["mixtral", "deepseek_v3", "llama4", "llama4_moe_layers", "qwen3_moe"])
def test_module_order_follows_the_real_parameters(config):
    """Element counts one by one, in order: Mixtral's router precedes its experts, DeepSeek-V3 and Llama 4 register
    ``experts`` before the router (modeling_deepseek_v3.py l. 209-210, modeling_llama4.py l. 162-164); Llama 4's
    irregular ``moe_layers`` list and Qwen3-MoE's ``mlp_only_layers`` put the dense layers where the config says."""
    real, real_outside = _real_layers(config)
    ours, ours_outside = _spec_layers(config)
    assert ours_outside == real_outside
    assert ours == real
    if config is MIXTRAL:
        assert ours == [[4096, 2048, 2048, 4096, 256, 4 * 192 * 64, 4 * 64 * 96]] * 2
    if config is DEEPSEEK:  # q_a, q_b, kv_a, kv_b, o; then the dense MLP, or experts, gate, shared expert
        assert ours[1] == [1024, 1024, 1536, 1024, 2048, 4 * 64 * 64, 4 * 64 * 32, 256, 2048, 2048, 2048]


def test_banks_are_one_parameter_per_layer_and_moe_layers_sit_where_the_config_puts_them():
    mixtral = spec_from_hf_config(MIXTRAL)
    banked = partition.module_order(mixtral, banks=True)
    looped = partition.module_order(mixtral)  # per-expert nn.Linear (transformers 4.x, other frameworks)
    assert len(looped) - len(banked) == 2 * (3 * 4 - 2)  # per layer: 3 x 4 expert linears -> gate_up, down banks
    assert sum(n for n, _ in banked) == sum(n for n, _ in looped)
    deepseek = spec_from_hf_config(DEEPSEEK)
    assert [partition._moe_layer(deepseek, i) for i in range(3)] == [False, True, True]
    llama4 = spec_from_hf_config(LLAMA4)
    assert [partition._moe_layer(llama4, i) for i in range(4)] == [False, True, False, True]
    irregular = spec_from_hf_config(LLAMA4_IRREGULAR)
    assert irregular.moe_layers == (0, 2, 3)
    assert [partition._moe_layer(irregular, i) for i in range(4)] == [True, False, True, True]
