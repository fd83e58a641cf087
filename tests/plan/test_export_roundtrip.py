"""An exported plan, read back by the importer, is the plan: what a review of the round trip found different.

- A 16-bit full fine-tuning under FSDP was written with bf16 on and accelerate's mixed_precision bf16, under which
  accelerate keeps the trained weights in fp32 (80 GiB planned, 113 GiB run); it is written with mixed precision off.
- The same TRL settings with bf16 on, read back, are that fp32-weight run (config_import/trainer_layout.py).
- A use_reentrant the scenario sets was replaced by the export's own choice.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from vramfit import estimate, from_config
from vramfit.plan import plan
from vramfit.plan.export import export_plan

FULL_70B = {"model": "meta-llama/Llama-3.1-70B", "method": "full", "parallelism": "fsdp", "seq_len": 4096}


def _write(tmp_path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)


def test_a_16bit_fsdp_full_plan_is_written_with_mixed_precision_off_and_reads_back_the_same(tmp_path):
    report = plan(FULL_70B, gpu_ids=["h100-sxm"], effective_batch=64, with_changes=False)
    chosen = next(p for p in report.plans if p.parallelism == "fsdp" and p.scenario["precision"] == "bf16-true")
    exported = export_plan(chosen, "trl")
    _write(tmp_path, exported.files)
    accelerate = yaml.safe_load(exported.files["accelerate.yaml"])
    train = yaml.safe_load(exported.files["train_config.yaml"])
    assert accelerate["mixed_precision"] == "no" and (train["bf16"], train["fp16"]) == (False, False)
    assert train["dtype"] == "bfloat16"
    assert any(n.startswith("mixed_precision no: the plan trains bf16-true weights as loaded") for n in exported.notes)
    back = from_config(tmp_path / "train_config.yaml", tmp_path / "accelerate.yaml")
    sc = back.scenario.replace(gpu="h100-sxm")
    assert (sc.precision.value, sc.num_gpus) == ("bf16-true", chosen.num_gpus)
    assert estimate(sc).peak.required_bytes == chosen.required_bytes
    # the figures docs/planner.md quotes: the plan's need and the same run with bf16 on
    doc = (Path(__file__).resolve().parents[2] / "docs" / "planner.md").read_text(encoding="utf-8")
    quoted = re.search(r"on 8 × H100: ([\d.]+) GiB planned, ([\d.]+) GiB with bf16 on", doc)
    assert quoted and chosen.num_gpus == 8
    upcast = estimate(sc.replace(precision="bf16-mixed")).peak.required_bytes
    assert (round(chosen.required_bytes / 2**30, 1), round(upcast / 2**30)) == (float(quoted[1]), float(quoted[2]))


def test_trl_with_bf16_on_under_fsdp_reads_as_fp32_trained_weights(tmp_path):
    """accelerate upcasts what trains once mixed precision is on: 16 B per parameter, not 8."""
    train = {"model_name_or_path": "meta-llama/Llama-3.1-8B", "dtype": "bfloat16", "max_length": 2048,
             "per_device_train_batch_size": 1, "fsdp": "full_shard auto_wrap"}
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(train))
    imp = from_config(tmp_path / "t.yaml")
    assert imp.scenario.precision.value == "bf16-mixed"
    entry = next(e for e in imp.entries if e.key == "bf16")
    assert entry.becomes == ["precision=bf16-mixed"] and "keeps the trained weights in fp32" in entry.note
    (tmp_path / "off.yaml").write_text(yaml.safe_dump({**train, "bf16": False}))
    assert from_config(tmp_path / "off.yaml").scenario.precision.value == "bf16-true"
    (tmp_path / "lora.yaml").write_text(yaml.safe_dump({**train, "use_peft": True}))
    assert from_config(tmp_path / "lora.yaml").scenario.precision.value == "bf16-true"  # adapters are fp32 already
    mixed = estimate(imp.scenario.replace(num_gpus=8))
    true = estimate(imp.scenario.replace(num_gpus=8, precision="bf16-true"))
    assert mixed.peak.allocated_bytes > true.peak.allocated_bytes


def test_trl_through_an_accelerate_fsdp_config_reads_the_same(tmp_path):
    train = {"model_name_or_path": "meta-llama/Llama-3.1-8B", "dtype": "bfloat16", "max_length": 2048}
    acc = {"compute_environment": "LOCAL_MACHINE", "distributed_type": "FSDP", "mixed_precision": "bf16",
           "num_processes": 8, "fsdp_config": {"fsdp_version": 2}}
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(train))
    (tmp_path / "acc.yaml").write_text(yaml.safe_dump(acc))
    assert from_config(tmp_path / "t.yaml", tmp_path / "acc.yaml").scenario.precision.value == "bf16-mixed"
    (tmp_path / "t2.yaml").write_text(yaml.safe_dump({**train, "bf16": False}))
    (tmp_path / "acc2.yaml").write_text(yaml.safe_dump({**acc, "mixed_precision": "no"}))
    assert from_config(tmp_path / "t2.yaml", tmp_path / "acc2.yaml").scenario.precision.value == "bf16-true"


def test_the_scenarios_use_reentrant_is_written(tmp_path):
    report = plan({"model": "meta-llama/Llama-3.1-8B", "method": "qlora", "precision": "fp16-mixed",
                   "use_reentrant": "yes", "seq_len": 1024}, gpu_ids=["t4"], effective_batch=8, with_changes=False)
    chosen = next(p for p in report.plans if p.gradient_checkpointing != "none")
    train = yaml.safe_load(export_plan(chosen, "trl").files["train_config.yaml"])
    assert train["activation_checkpointing_kwargs"] == {"use_reentrant": True}
    _write(tmp_path, {"train_config.yaml": export_plan(chosen, "trl").files["train_config.yaml"]})
    assert from_config(tmp_path / "train_config.yaml").scenario.use_reentrant.value == "yes"


def test_the_trl_export_keeps_the_checkpoints_the_plans_disk_counts():
    """plan(checkpoints_kept=k) sizes the disk for k checkpoints (k + 1 while one is saved); the TRL file wrote
    save_total_limit 1 whatever k was. 0 is written as no saving: transformers rotates nothing at a limit <= 0."""
    sc = {"model": "Qwen/Qwen2.5-0.5B", "method": "lora", "seq_len": 1024}
    for kept, want in ((3, {"save_total_limit": 3}), (1, {"save_total_limit": 1}), (0, {"save_strategy": "no"})):
        chosen = plan(sc, gpu_ids=["l4"], effective_batch=8, dataset_tokens="10M", checkpoints_kept=kept,
                      with_changes=False).plans[0]
        assert chosen.disk.checkpoints_kept == kept
        train = yaml.safe_load(export_plan(chosen, "trl").files["train_config.yaml"])
        assert {k: train[k] for k in want} == want
        assert ("save_total_limit" in train) == bool(kept)
