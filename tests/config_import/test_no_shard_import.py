"""FSDP1 NO_SHARD in an HF/accelerate config imports as fsdp-no-shard (it was ddp: FSDP's wrapping is not DDP's),
and a NO_SHARD plan exports as it (estimate/no_shard.py)."""

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from vramfit import from_config
from vramfit.errors import ScenarioError
from vramfit.plan import plan
from vramfit.plan.export import export_plan

FIX = Path(__file__).parent / "fixtures"



@pytest.mark.parametrize("strategy", ["NO_SHARD", "3"])  # accelerate takes the name or FSDP1's enum number
def test_no_shard_imports_as_fsdp_no_shard(strategy, accelerate_config):
    sc = from_config(FIX / "trl_sft_qlora.yaml", accelerate_config(fsdp_sharding_strategy=strategy)).scenario
    assert (sc.num_gpus, sc.parallelism.value, sc.offload.value) == (4, "fsdp-no-shard", "none")


def test_no_shard_with_offload_is_one_clear_line(accelerate_config):
    path = accelerate_config(fsdp_sharding_strategy="NO_SHARD", fsdp_offload_params=True)
    with pytest.raises(ScenarioError) as ei:
        from_config(FIX / "trl_sft_qlora.yaml", path)
    msg = str(ei.value)
    assert "NO_SHARD" in msg and "\n" not in msg


def test_a_no_shard_plan_exports_the_no_shard_strategy():
    r = plan({"model": "Qwen/Qwen2.5-0.5B", "method": "lora", "parallelism": "fsdp-no-shard", "num_gpus": 2},
             gpu_ids=["rtx4090"], effective_batch=8)
    # the planner offers no NO_SHARD plan of its own (DDP is the plain data-parallel choice it enumerates)
    assert "fsdp-no-shard" not in {p.parallelism for p in r.plans} and "ddp" in {p.parallelism for p in r.plans}
    p = next(p for p in r.plans if p.num_gpus == 2)
    p = replace(p, parallelism="fsdp-no-shard", scenario={**p.scenario, "parallelism": "fsdp-no-shard"})
    cfg = yaml.safe_load(export_plan(p, "accelerate").files["accelerate.yaml"])
    assert cfg["distributed_type"] == "FSDP"
    assert cfg["fsdp_config"]["fsdp_sharding_strategy"] == "NO_SHARD"
    assert cfg["fsdp_config"]["fsdp_offload_params"] is False
