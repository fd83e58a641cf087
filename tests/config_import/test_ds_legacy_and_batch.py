"""A DeepSpeed file's deprecated offload switches and its whole batch (fuzzing, 2026-12-05).

``cpu_offload`` / ``cpu_offload_param`` are what DeepSpeed still reads as ``offload_optimizer`` / ``offload_param`` on
the CPU (deepspeedai/DeepSpeed@edaa722 runtime/zero/config.py l. 181-213); the import had taken them as no offload
(79.5 GB for 45.4). ``train_batch_size`` given as a number must be micro-batch x accumulation x GPUs, which the HF
Trainer checks (fill_match); the import reported it as "filled in by the trainer"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vramfit import estimate, from_config
from vramfit.errors import ScenarioError

AXOLOTL = ("base_model: meta-llama/Llama-3.1-8B\nsequence_len: 2048\nmicro_batch_size: 2\n"
           "gradient_accumulation_steps: 4\nbf16: true\ngradient_checkpointing: true\ndeepspeed: ds.json\n")


def _files(tmp_path: Path, ds: dict) -> Path:
    (tmp_path / "ds.json").write_text(json.dumps(ds))
    cfg = tmp_path / "run.yaml"
    cfg.write_text(AXOLOTL)
    return cfg


@pytest.mark.parametrize(("zero", "offload"), [
    ({"stage": 2, "cpu_offload": True}, "optimizer"),
    ({"stage": 3, "cpu_offload": True, "cpu_offload_param": True}, "optimizer+params"),
    ({"stage": 2, "cpu_offload": False}, "none"),
])
def test_deprecated_switches_are_the_sections_deepspeed_makes_of_them(tmp_path, zero, offload):
    imp = from_config(_files(tmp_path, {"zero_optimization": zero}))
    assert imp.scenario.offload.value == offload
    new = {"zero_optimization": {k: v for k, v in zero.items() if not k.startswith("cpu_offload")}}
    if zero.get("cpu_offload"):
        new["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
    if zero.get("cpu_offload_param"):
        new["zero_optimization"]["offload_param"] = {"device": "cpu"}
    assert from_config(_files(tmp_path, new)).scenario.offload == imp.scenario.offload
    # the scenario's own --deepspeed-config reads them alike
    sc = {"model": "meta-llama/Llama-3.1-8B", "method": "full", "num_gpus": 4, "deepspeed_config": {"zero_optimization": zero}}
    assert estimate(sc).scenario.offload.value == offload


def test_a_switch_beside_its_section_is_refused_as_deepspeed_refuses_it(tmp_path):
    with pytest.raises(ScenarioError, match=r"cpu_offload \(deprecated\) and offload_optimizer together"):
        from_config(_files(tmp_path, {"zero_optimization": {"stage": 2, "cpu_offload": True,
                                                             "offload_optimizer": {"device": "cpu"}}}))


def test_a_whole_batch_that_is_not_the_runs_is_said(tmp_path):
    imp = from_config(_files(tmp_path, {"zero_optimization": {"stage": 2}, "train_batch_size": 64}))
    on = {**imp.overrides, "num_gpus": 4}  # 2 x 4 x 4 = 32
    notes = [a for a in estimate(on).assumptions if "train_batch_size 64" in a]
    assert notes and notes[0].startswith("DeepSpeed config train_batch_size 64 is not this scenario's effective_batch (32)")
    assert not [a for a in estimate({**on, "num_gpus": 8}).assumptions if "train_batch_size" in a]  # 2 x 4 x 8 = 64


def test_hybrid_sharding_on_the_launchers_nodes(tmp_path):
    """Axolotl's ``fsdp: [hybrid_shard, auto_wrap]``: sharded within each node (shard_scope node), which on one node
    is every GPU, as FULL_SHARD; it had been refused as a multi-node layout (the node count is the launcher's)."""
    cfg = tmp_path / "hs.yaml"
    cfg.write_text("base_model: meta-llama/Llama-3.1-8B\nsequence_len: 2048\nmicro_batch_size: 1\n"
                   "fsdp: [hybrid_shard, auto_wrap]\n")
    over = from_config(cfg).overrides
    assert (over["parallelism"], over["shard_scope"]) == ("fsdp", "node")
    one, two = (estimate({**over, "num_gpus": 8, "num_nodes": n}) for n in (1, 2))
    full = estimate({**over, "num_gpus": 8, "shard_scope": "all"})
    assert one.peak.allocated_bytes == full.peak.allocated_bytes < two.peak.allocated_bytes


def test_pasted_configs_name_what_is_wrong():
    from vramfit.config_import import from_text

    with pytest.raises(ScenarioError, match="base_model must be one value .a model id or a path., got a mapping"):
        from_text("base_model: {a: 1}\n")
    with pytest.raises(ScenarioError, match="is not valid TOML"):  # was "must hold a mapping of config keys, got str"
        from_text("a = 1\nb = [", "torchtitan")


@pytest.mark.parametrize(("value", "on"), [(1, True), ("yes", True), ("Off", False), (0, False)])
def test_the_switches_read_as_deepspeeds_config_model_reads_a_bool(value, on):
    # pydantic v2 lax mode, which DeepSpeed's config model runs in: 0/1 and yes/no/on/off/true/false, any case
    sc = {"model": "meta-llama/Llama-3.1-8B", "method": "full", "num_gpus": 4,
          "deepspeed_config": {"zero_optimization": {"stage": 2, "cpu_offload": value}}}
    assert estimate(sc).scenario.offload.value == ("optimizer" if on else "none")
    with pytest.raises(ScenarioError, match="cpu_offload must be true or false, got 'maybe'"):
        estimate({**sc, "deepspeed_config": {"zero_optimization": {"stage": 2, "cpu_offload": "maybe"}}})


def test_a_plan_says_the_files_batch_values_hold_only_where_they_match(tmp_path):
    # review, 2026-12-05: plans at other micro-batches carried the file's numbers with no word that the Trainer refuses
    from vramfit.plan import plan

    ds = {"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
          "train_batch_size": 16}
    r = plan({"model": "meta-llama/Llama-3.1-8B", "method": "lora", "num_gpus": 2, "deepspeed_config": ds},
             effective_batch=16, gpu_ids=["h100-sxm"], with_changes=False)
    line = next(a for a in r.assumptions if a.startswith("Your DeepSpeed file gives"))
    assert "train_micro_batch_size_per_gpu 4, gradient_accumulation_steps 2, train_batch_size 16" in line
