"""The simulator shards with FSDP2 where it does not trace FSDP1 itself (sim/fsdp.py ``traces_fsdp1``: full fine-tuning
and LoRA of an unquantized model under accelerate's FSDP1 are traced as FSDP1, tests/sim/test_sim_fsdp1.py). A QLoRA
scenario whose FSDP is FSDP1 (hf: accelerate's default ``fsdp_version``) is traced as accelerate's FSDP2 and says so,
and its estimate beside it is FSDP2's (sim/engine.py ``as_fsdp2``): before, `vramfit simulate` traced FSDP2 per-layer
units and set them against the FSDP1 estimate, -10.6 % on Llama-3.2-1B. The tied embedding's end of backward under
FSDP2 (estimate/fsdp2.py ``tied_end``) is checked against that trace."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from vramfit.choices import FsdpVersion
from vramfit.errors import ScenarioError
from vramfit.estimate import estimate
from vramfit.estimate.allocator import round_allocation
from vramfit.scenario import parse_scenario
from vramfit.sim import simulate
from vramfit.sim.engine import as_fsdp2

L1B = {"model": "meta-llama/Llama-3.2-1B", "method": "full", "precision": "bf16-true", "seq_len": 512,
       "num_gpus": 2, "parallelism": "fsdp"}
GiB = 2**30


LORA = {**L1B, "method": "lora", "lora_targets": ["q_proj", "v_proj"]}
QLORA = {**LORA, "method": "qlora"}


def test_fsdp1_qlora_is_traced_as_accelerates_fsdp2_and_says_so():
    for asked in ("auto", "1"):
        sc, note = as_fsdp2(parse_scenario({**QLORA, "fsdp_version": asked}))
        assert sc.fsdp_version is FsdpVersion.V2
        assert len(note) == 1 and "not the scenario's FSDP1" in note[0] and f"fsdp_version {asked}" in note[0]
    for same in ({**QLORA, "fsdp_version": "2"}, {**LORA, "framework": "torchtitan"}, {**QLORA, "num_gpus": 1,
                                                                                           "parallelism": "none"},
                 L1B, {**L1B, "fsdp_version": "1"}, LORA, {**LORA, "fsdp_version": "1"}):  # FSDP1 itself, unquantized
        sc = parse_scenario(same)
        assert as_fsdp2(sc) == (sc, [])


def test_lora_on_expert_banks_is_traced_as_fsdp2():
    """PEFT's LoRA on transformers 5's 3-D expert banks fails inside FSDP1's flattening on fake tensors (sim/fsdp.py
    _expert_banks): an MoE model's LoRA under FSDP1 runs as FSDP2 and says so; its full fine-tuning stays FSDP1."""
    moe = {**LORA, "model": "Qwen/Qwen3-30B-A3B", "lora_targets": "all-linear"}
    sc, note = as_fsdp2(parse_scenario(moe))
    assert sc.fsdp_version is FsdpVersion.V2 and "no MoE expert banks" in note[0]
    full = parse_scenario({**moe, "method": "full"})
    assert as_fsdp2(full) == (full, [])


def test_a_framework_that_runs_fsdp1_only_is_refused_by_name():
    with pytest.raises(ScenarioError) as err:
        as_fsdp2(parse_scenario({**LORA, "framework": "litgpt"}))
    assert err.value.key == "framework" and "FSDP1 only" in str(err.value)


@pytest.mark.slow
def test_the_tied_end_of_backward_matches_the_trace():
    """Llama-3.2-1B (tied) full fine-tuning on 2 GPUs at 1 x 512: the trace peaks where the embedding's gradient meets
    the output layer's (aten::add out of place), beside the gathered shared weight and the lowest block's flat
    reduce-scatter input; the estimate read 6.09 GiB against 6.45 before counting the three whole gradients."""
    result = simulate({**L1B, "fsdp_version": "2"})
    traced = result.result
    assert traced.scenario.fsdp_version is FsdpVersion.V2 and any("fsdp2_prepare_model" in a for a in traced.assumptions)
    est = estimate(traced.scenario)
    assert est.peak.phase == "backward-end-tied"
    assert est.peak.allocated_bytes == pytest.approx(traced.peak.allocated_bytes, rel=0.005)
    head = round_allocation(128256 * 2048 * 2)
    top = sorted((t.bytes for t in result.top_tensors), reverse=True)
    assert top[:4] == [head] * 4  # the gathered weight and the three gradients
    tied = dict(est.peak.breakdown)
    assert tied["temporaries"] == 3 * head  # the buffered head's, the embedding's and their sum
    shards = dict(next(p for p in est.phases if p.phase == "optimizer-step").breakdown)["gradients"]
    assert tied["gradients"] == shards - shards * 262_668_288 // 1_235_814_400  # every shard but the shared weight's


@pytest.mark.slow
def test_the_cli_sets_the_trace_against_the_same_runs_estimate():
    from vramfit.cli.main import app

    out = CliRunner().invoke(app, ["simulate", "--model", "meta-llama/Llama-3.2-1B", "--method", "qlora",
                                   "--lora-targets", "q_proj,v_proj", "--seq-len", "512", "--num-gpus", "2",
                                   "--parallelism", "fsdp", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    fsdp2 = estimate({**QLORA, "fsdp_version": "2"}).peak.allocated_bytes
    assert data["simulation"]["estimate_peak"]["allocated_bytes"] == fsdp2
    assert fsdp2 != estimate(QLORA).peak.allocated_bytes  # FSDP1's is another figure
