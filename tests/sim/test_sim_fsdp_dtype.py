"""Parameters transformers keeps in fp32 in a 16-bit load (DeepSeek-V3's router, gpt-oss's norms on fp16): counted at
4 B with their gradients and optimizer states, and the FSDP setups that refuse them told in one line, by the estimator
and by the simulator, instead of FSDP2's raw AssertionError (estimate/fsdp_dtype.py)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest
from test_sim_moe_lora import DS, GPT_OSS

from vramfit.errors import ScenarioError
from vramfit.estimate import estimate
from vramfit.sim import simulate

FSDP2 = {"num_gpus": 4, "parallelism": "fsdp", "fsdp_version": 2, "seq_len": 256}
REFUSED = "precision: a bf16 load of this model keeps gate in fp32 (transformers' _keep_in_fp32_modules), and FSDP2"


def _parts(result) -> dict[str, int]:
    return {c.name: c.bytes for c in result.components}


def test_full_fine_tuning_of_a_bf16_deepseek_under_fsdp2_is_refused_in_one_line(config_file):
    sc = {**FSDP2, "model": config_file(DS), "method": "full", "precision": "bf16-true"}
    for run in (estimate, lambda s: simulate(s, layers=3)):
        with pytest.raises(ScenarioError) as err:
            run(sc)
        assert str(err.value).startswith(REFUSED)
        assert err.value.valid == ["bf16-mixed", "fp16-mixed", "fp32"]


def test_the_refusal_is_what_torch_fsdp2_raises(config_file, monkeypatch):
    """Without the check the simulator runs torch's own fully_shard and hits the uniform-dtype assertion, which it
    reports as one line naming precision too (sim/engine.py _uniform_dtype_refusal, for models no spec lists)."""
    fsdp_dtype = importlib.import_module("vramfit.estimate.fsdp_dtype")
    monkeypatch.setattr(fsdp_dtype, "check_uniform_dtype", lambda *a: None)
    sc = {**FSDP2, "model": config_file(DS), "method": "full", "precision": "bf16-true"}
    with pytest.raises(ScenarioError) as err:
        simulate(sc, layers=3)
    assert str(err.value).startswith("precision: this model keeps some parameters in fp32 in a 16-bit load, and "
                                     "FSDP2 needs one dtype for the trainable parameters of each unit (FSDP expects "
                                     "uniform original parameter dtype but got {torch.")


def test_fsdp1_refuses_even_a_frozen_fp32_router(config_file):
    """FSDP1 flattens frozen parameters too: LoRA on a bf16 DeepSeek fails under fsdp_version 1."""
    with pytest.raises(ScenarioError, match=r"FSDP1 flattens each unit's parameters, frozen ones too"):
        estimate({**FSDP2, "fsdp_version": 1, "model": config_file(DS), "method": "lora", "precision": "bf16-true"})


def test_torch_fsdp1_rejects_mixed_dtypes_with_every_parameter_frozen():
    """The mechanism the FSDP1 refusal rests on, on torch's FSDP1 itself (one gloo process, use_orig_params=True)."""
    code = (
        "import os, torch, torch.distributed as dist\n"
        "os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT='29541')\n"
        "dist.init_process_group('gloo', rank=0, world_size=1)\n"
        "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
        "m = torch.nn.Sequential(torch.nn.Linear(4, 4).bfloat16(), torch.nn.Linear(4, 4)).requires_grad_(False)\n"
        "try:\n    FSDP(m, use_orig_params=True, device_id=torch.device('cpu'))\n"
        "except ValueError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
    assert out.strip() == "Must flatten tensors with uniform dtype but got torch.bfloat16 and torch.float32"


@pytest.mark.parametrize("sc", [{"method": "lora", "precision": "bf16-true"},
                                {"method": "full", "precision": "bf16-mixed"}])
def test_lora_and_mixed_precision_run_under_fsdp2(config_file, sc):
    """Frozen params are not in FSDP2's check and PEFT's adapters are all fp32; -mixed makes every weight fp32."""
    sc = {**FSDP2, "model": config_file(DS), **sc}
    assert simulate(sc, layers=3).result.peak.allocated_bytes > 0
    assert estimate(sc).peak.allocated_bytes > 0


def test_the_fp32_router_its_gradient_and_states_are_counted_at_4_bytes(config_file):
    """One GPU, bf16 full fine-tuning of the tiny DeepSeek-V3 (3 layers of 8 x 1024 router weights, 24,576 elements):
    the gradients equal the simulator's to the byte (49,152 B short before: the router's grads counted at 2 B); the
    weights are 2,560 B short of it, five 512-B fp32 buffers (three e_score_correction_bias, two RoPE inv_freq)."""
    sc = {"model": config_file(DS), "method": "full", "precision": "bf16-true", "seq_len": 256}
    est, sim = _parts(estimate(sc)), _parts(simulate(sc, layers=3).result)
    assert est["gradients"] == sim["gradients"] == 86_755_840
    assert est["weights"] == sim["weights"] - 2_560 == 86_755_840


def test_gpt_oss_keeps_its_norms_fp32_on_fp16_loads_only(config_file):
    """gpt-oss's _keep_in_fp32_modules apply to fp16 loads: 3 layers of 2,064 norm (+ sink) elements and the final
    norm's 1,024 at 4 B instead of 2 (512-B rounded: 3 x 4,096 + 2,048 B); bf16 FSDP2 runs, fp16 is refused."""
    model = config_file(GPT_OSS)
    bf16, fp16 = (_parts(estimate({"model": model, "method": "full", "precision": p, "seq_len": 256}))
                  for p in ("bf16-true", "fp16-true"))
    assert fp16["weights"] - bf16["weights"] == fp16["gradients"] - bf16["gradients"] == 14_336
    assert estimate({**FSDP2, "model": model, "method": "full", "precision": "bf16-true"}).peak.allocated_bytes > 0
    with pytest.raises(ScenarioError, match=r"a fp16 load of this model keeps block_norms, final_norm in fp32"):
        estimate({**FSDP2, "model": model, "method": "full", "precision": "fp16-true"})


CATALOG_FULL = {"model": "deepseek-ai/DeepSeek-V3", "method": "full", "precision": "bf16-true", "num_gpus": 8,
                "parallelism": "fsdp", "fsdp_version": 2}


def test_the_cli_says_it_in_one_line_with_exit_2():
    from typer.testing import CliRunner

    from vramfit.cli.main import app

    r = CliRunner().invoke(app, ["estimate", "--model", "deepseek-ai/DeepSeek-V3", "--method", "full", "--precision",
                                 "bf16-true", "--num-gpus", "8", "--parallelism", "fsdp", "--fsdp-version", "2"])
    assert r.exit_code == 2
    assert r.output.strip().splitlines()[-1].startswith(f"error: {REFUSED}")


def test_the_api_answers_422_naming_precision():
    from fastapi.testclient import TestClient

    from vramfit.web import create_app

    with TestClient(create_app(), base_url="http://localhost") as client:
        r = client.post("/api/estimate", json=CATALOG_FULL)
    assert r.status_code == 422
    assert r.json()["key"] == "precision" and r.json()["error"].startswith(REFUSED)


GLM4_MOE = dict(architectures=["Glm4MoeForCausalLM"], model_type="glm4_moe", hidden_size=512, intermediate_size=1024,
                moe_intermediate_size=256, num_hidden_layers=3, num_attention_heads=8, num_key_value_heads=4,
                head_dim=64, n_routed_experts=8, n_shared_experts=1, num_experts_per_tok=2, n_group=1, topk_group=1,
                first_k_dense_replace=1, vocab_size=4096, torch_dtype="bfloat16")


FAMILIES = {"deepseek_v3": DS, "gpt_oss": GPT_OSS, "glm4_moe": GLM4_MOE}


def _verdict(run, sc: dict) -> str:
    try:
        run(sc)
    except ScenarioError as err:
        assert err.key == "precision"
        return "refused"
    return "runs"


@pytest.mark.parametrize(("family", "method", "precision", "verdict"), [
    ("deepseek_v3", "full", "bf16-true", "refused"), ("deepseek_v3", "full", "fp16-true", "refused"),
    ("deepseek_v3", "lora", "bf16-true", "runs"),
    ("gpt_oss", "full", "bf16-true", "runs"), ("gpt_oss", "full", "fp16-true", "refused"),
    ("glm4_moe", "full", "bf16-true", "refused"), ("glm4_moe", "full", "fp16-true", "refused"),
    ("glm4_moe", "lora", "bf16-true", "runs"), ("glm4_moe", "full", "bf16-mixed", "runs"),
])
def test_the_estimator_gives_the_verdict_torch_fsdp2_gives_on_the_simulated_load(
        config_file, monkeypatch, family, method, precision, verdict):
    """Every family of the catalog whose transformers v5.24.0 class keeps modules fp32 (DeepSeek-V3
    modeling_deepseek_v3.py l. 551, gpt-oss modeling_gpt_oss.py l. 390; no other catalog family has a list), and
    GLM-4-MoE read from transformers' modules (modeling_glm4_moe.py l. 460 ``_keep_in_fp32_modules_strict`` and its
    router built fp32, l. 269): the estimator's refusal is what torch's own fully_shard does to the simulated
    16-bit load (the load keeps the dtype plan's parameters fp32, sim/build.py _keep_in_fp32) with the
    estimator's check taken out of the simulator."""
    sc = {**FSDP2, "model": config_file(FAMILIES[family]), "method": method, "precision": precision}
    assert _verdict(estimate, sc) == verdict
    monkeypatch.setattr(importlib.import_module("vramfit.estimate.fsdp_dtype"), "check_uniform_dtype", lambda *a: None)
    assert _verdict(lambda s: simulate(s, layers=3), sc) == verdict


def test_glm4_moe_read_from_its_modules_lists_its_fp32_router(config_file):
    """The reader of transformers' modules takes the router's 2-D ``weight`` (Glm4MoeTopkRouter, no nn.Linear) as a
    router linear, not a norm, and lists it as kept fp32; the full-fine-tuning refusal is the DeepSeek one."""
    from vramfit.models import resolve_model

    spec = resolve_model(config_file(GLM4_MOE)).spec
    assert [(x.name, x.in_features, x.out_features, x.layers) for x in spec.block_linears if x.group == "router"] == [
        ("gate", 512, 8, 2)]
    assert (spec.fp32_kept_strict, spec.fp32_kept_fp16, spec.block_norm_params) == (("gate",), (), 1024)
    sc = {**FSDP2, "model": config_file(GLM4_MOE), "method": "full", "precision": "bf16-true"}
    for run in (estimate, lambda s: simulate(s, layers=3)):
        with pytest.raises(ScenarioError) as err:
            run(sc)
        assert str(err.value).startswith(REFUSED)


def test_the_fp32_router_of_glm4_moe_is_counted_at_4_bytes_as_the_simulator_holds_it(config_file):
    """One GPU, bf16 full fine-tuning of the tiny GLM-4-MoE: 2 MoE layers of 8 x 512 router weights (8,192 elements)
    held at 4 B (16,384 B short at 2 B): the weights are the simulator's but four 512-B fp32 buffers (two
    e_score_correction_bias, RoPE's inv_freq and original_inv_freq), the Adam states twice the weights."""
    sc = {"model": config_file(GLM4_MOE), "method": "full", "precision": "bf16-true", "seq_len": 256}
    est, sim = _parts(estimate(sc)), _parts(simulate(sc, layers=3).result)
    assert est["weights"] == sim["weights"] - 2_048 == 30_448_640
    assert est["optimizer_state"] == 2 * est["weights"]
