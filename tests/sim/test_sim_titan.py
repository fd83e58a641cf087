"""torchtitan's mechanisms on the simulator (issue 13): FSDP2 MixedPrecisionPolicy(param_dtype=bf16) with no
autocast, and op-level selective activation checkpointing (every second mm output and SDPA's outputs saved), run on
fake tensors for a tiny Llama and compared with the estimator's torchtitan profile. Pinned to torchtitan 0.2.2 (the
model's whole logits and loss_fn; the blocks and the root as units): 0.3's chunked loss is test_sim_titan_chunked.py."""

from __future__ import annotations

import pytest
from simconfigs import titan_llama

from vramfit.estimate import estimate, resolve_spec
from vramfit.estimate.block_extras import op_sac_saved
from vramfit.estimate.framework import scenario_profile
from vramfit.scenario import parse_scenario
from vramfit.sim import simulate

LAYERS = 2


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> str:
    return titan_llama(tmp_path_factory.mktemp("titan"), LAYERS, hidden=256, vocab=2048)


def _sc(model: str, gc: str) -> dict:
    return {"model": model, "framework": "torchtitan", "method": "full", "precision": "bf16-mixed", "num_gpus": 2,
            "parallelism": "fsdp", "seq_len": 2048, "attention": "flash", "gradient_checkpointing": gc,
            "framework_version": "torchtitan-0.2.2"}


@pytest.mark.parametrize("gc", ["selective-op", "full", "none"])
def test_estimator_agrees_with_the_simulated_torchtitan_step(llama, gc):
    sim = simulate(_sc(llama, gc), layers=LAYERS)
    est = estimate(_sc(llama, gc)).peak
    assert any("no autocast" in a for a in sim.result.assumptions)
    assert est.allocated_bytes == pytest.approx(sim.result.peak.allocated_bytes, rel=0.03), (
        dict(sim.result.peak.breakdown), dict(est.breakdown))


def test_the_op_policy_keeps_exactly_the_estimators_tensors(llama):
    """Selective-op minus full checkpointing, on the simulator: per layer, the outputs of q, v, gate and down
    (the 1st, 3rd, 5th, 7th mm) and SDPA's output and log-sum-exp, as estimate/activations.py op_sac_saved; the
    policy saves every output of the flash op, so also its philox seed and offset (two 512-byte blocks per layer,
    which the estimator leaves out)."""
    acts = {gc: dict(simulate(_sc(llama, gc), layers=LAYERS).result.peak.breakdown)["activations"]
            for gc in ("selective-op", "full")}
    sc = parse_scenario(_sc(llama, "selective-op"))
    spec = resolve_spec(sc)[1]
    assert acts["selective-op"] - acts["full"] == LAYERS * (op_sac_saved(spec, sc, scenario_profile(sc)) + 2 * 512)
