"""GLM-4-MoE (a family read from transformers' own modules, models/from_modules.py) against the simulator, which runs
transformers' Glm4MoeForCausalLM on fake tensors: LoRA, QLoRA and full fine-tuning, with and without checkpointing,
within 2 %. The tiny config has 2 x moe_intermediate_size = hidden_size, so the fused gate/up bank is as wide as
the hidden size: moe_lora.folded_bank_backward took it for the down bank (first match) and counted a bank gradient
twice the down bank's (LoRA bf16-mixed with checkpointing +4.45 %, QLoRA +5.12 % before). The router runs in fp32 and
returns fp32 top-k weights (modeling_glm4_moe.py l. 284-300), which promote the grouped experts' weighted product to
fp32 (integrations/moe.py l. 523): bf16-true LoRA with checkpointing was -3.0 %, full fine-tuning -2.2 %."""

from __future__ import annotations

import importlib

import pytest
from test_sim_fsdp_dtype import GLM4_MOE

from vramfit.estimate import estimate
from vramfit.estimate.framework import scenario_profile
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario
from vramfit.sim import simulate

moe_lora = importlib.import_module("vramfit.estimate.moe_lora")
block_extras = importlib.import_module("vramfit.estimate.block_extras")
params = importlib.import_module("vramfit.estimate.params")

CKPT = {"method": "lora", "seq_len": 512, "precision": "bf16-mixed", "gradient_checkpointing": "full"}


def test_router_facts_read_from_the_modules(config_file):
    """Glm4MoeTopkRouter multiplies an fp32 copy of its input and returns fp32 top-k weights."""
    spec = resolve_model(config_file(GLM4_MOE)).spec
    assert (spec.router_fp32, spec.routing_weights_fp32) == (True, True)


def test_folded_bank_backward_is_the_down_banks(config_file):
    """The down bank (8 x 256 x 512) and its (1,024 rows) input and output gradients in fp32: 4 x (1,048,576 +
    1,024 x 768) = 7,340,032 B; the gate/up bank (8 x 512 x 512, out 512 = hidden) gave 12,582,912 B."""
    sc = parse_scenario({**CKPT, "model": config_file(GLM4_MOE)})
    spec, profile = resolve_model(sc.model).spec, scenario_profile(sc)
    adapters = params.resolve_adapters(spec, sc, profile.fused_qkv_lora, profile.runs_transformers_modeling)
    assert moe_lora.folded_bank_backward(spec, sc, profile, adapters) == 7_340_032


def test_unpermute_backward_in_fp32(config_file):
    """bf16-true: three (1,024, 512) fp32 tensors (the simulator's clone, new_zeros and index_put), 6,291,456 B."""
    sc = parse_scenario({**CKPT, "precision": "bf16-true", "model": config_file(GLM4_MOE)})
    assert block_extras.unpermute_backward(resolve_model(sc.model).spec, sc, scenario_profile(sc)) == 6_291_456


@pytest.mark.parametrize("method", ["lora", "qlora", "full"])
@pytest.mark.parametrize("gc", ["none", "full"])
@pytest.mark.parametrize("precision", ["bf16-mixed", "bf16-true"])
def test_glm4_moe_agrees(config_file, method, gc, precision):
    sc = {**CKPT, "method": method, "gradient_checkpointing": gc, "precision": precision,
          "model": config_file(GLM4_MOE)}
    sim = simulate(sc, layers=3).result.peak.allocated_bytes
    est = estimate(sc).peak.allocated_bytes
    assert abs(est - sim) / sim <= 0.02, (est, sim)
