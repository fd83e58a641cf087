"""QLoRA leaves a transformers-5 MoE router unquantized: the router is no exact nn.Linear (MixtralTopKRouter,
DeepseekV3TopkRouter ...: an nn.Module holding a 2-D weight), and transformers' bitsandbytes quantizer converts exact
nn.Linear modules only (estimate/core.py _is_quantized_linear, ModelSpec.router_exact_linear); prepare_model_for_kbit
training then holds it in fp32. The estimator counted it 4-bit: the weights were ~100 KB short of the simulator's on
tiny 3-layer models, and now equal them but for its fp32 buffers."""

from __future__ import annotations

import importlib

import pytest
from test_sim_moe_lora import DS, MIXTRAL

from vramfit.estimate import estimate
from vramfit.estimate.framework import scenario_profile
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario
from vramfit.sim import simulate


def _parts(result) -> dict[str, int]:
    return {c.name: c.bytes for c in result.components}


@pytest.mark.parametrize(("cfg", "buffers"), [(MIXTRAL, 1_024), (DS, 2_560)], ids=["mixtral", "deepseek_v3"])
def test_the_router_stays_unquantized_as_the_simulator_holds_it(config_file, cfg, buffers):
    """Weights held unquantized (norms, embeddings, head, the routers at 4 B): the simulator's but its RoPE
    inv_freq (and DeepSeek's three e_score_correction_bias) fp32 buffers, 512 B each."""
    sc = {"model": config_file(cfg), "method": "qlora", "precision": "bf16-true", "seq_len": 256}
    est, sim = _parts(estimate(sc)), _parts(simulate(sc, layers=3).result)
    assert est["weights"] == sim["weights"] - buffers


def test_a_router_of_type_exactly_nn_linear_is_quantized(config_file):
    """afmoe builds its router's ``gate`` as a plain nn.Linear (transformers v5.24.0 modeling_afmoe.py l. 140), read
    from the modules as such; the HF profile quantizes it and not Mixtral's, which a framework whose routers are
    nn.Linear (torchtune) quantizes."""
    afmoe = dict(model_type="afmoe", vocab_size=4096, hidden_size=512, intermediate_size=1024, moe_intermediate_size=256,
                 num_hidden_layers=3, num_dense_layers=1, num_attention_heads=8, num_key_value_heads=4, head_dim=64,
                 num_experts=8, num_experts_per_tok=2, num_shared_experts=1, global_attn_every_n_layers=2,
                 sliding_window=128)
    spec = resolve_model(config_file(afmoe)).spec
    assert spec.router_exact_linear
    mixtral = resolve_model(config_file(MIXTRAL, "mixtral")).spec
    assert not mixtral.router_exact_linear
    core = importlib.import_module("vramfit.estimate.core")
    params = importlib.import_module("vramfit.estimate.params")
    for model, quantized in ((spec, True), (mixtral, False)):
        sc = parse_scenario({"model": "generic:1B", "method": "qlora"})
        router = next(t for t in params.base_tensors(model) if t.kind == "router")
        assert core._is_quantized_linear(router, sc, scenario_profile(sc), model) is quantized
    tune = parse_scenario({"model": "generic:1B", "method": "qlora", "framework": "torchtune"})
    router = next(t for t in params.base_tensors(mixtral) if t.kind == "router")
    assert core._is_quantized_linear(router, tune, scenario_profile(tune), mixtral)  # torchtune's routers: nn.Linear
