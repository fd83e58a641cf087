"""The ``trl`` export of a preference or RL plan: the stage's own TRL config class parses train_config.yaml,
and the exported train.py runs the stage's trainer (one real DPO step on a tiny random model, on the CPU)."""

from __future__ import annotations

import ast
import dataclasses
import json
import math
import os

import pytest
from test_export_engines import load_script, write
from test_export_run import build_tiny, cpu_overrides, run_script

from vramfit.plan import plan
from vramfit.plan.export import export_plan

pytest.importorskip("trl")
BASE = {"model": "Qwen/Qwen2.5-0.5B", "method": "lora", "seq_len": 1024}


def _plan(**keys):
    return plan({**BASE, **keys}, gpu_ids=["h100-sxm"], effective_batch=16).plans[0]


def stage_args(folder, stage: str):
    """TRL's parser with the stage's config class, as train.py builds it (its own STAGES table)."""
    from trl import ModelConfig, TrlParser

    script = load_script(folder)
    config_class, _ = script.trainer_classes(stage)
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        return TrlParser((script.DataArguments, config_class, ModelConfig)).parse_args_and_config(
            ["--config", "train_config.yaml", "--dataset_path", "data.jsonl", "--use_cpu", "true"])
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("stage,reference,config", [
    ("dpo", "auto", "DPOConfig"), ("dpo", "precomputed", "DPOConfig"), ("kto", "auto", "KTOConfig"),
    ("orpo", "auto", "ORPOConfig"), ("simpo", "auto", "CPOConfig"),
])
def test_preference_stage_config_is_parsed_by_its_trl_class(stage, reference, config, tmp_path):
    p = _plan(stage=stage, reference=reference)
    write(p, "trl", tmp_path)
    data, args, model = stage_args(tmp_path, stage)
    assert type(args).__name__ == config and data.stage == stage
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (p.micro_batch_size, p.grad_accum)
    assert args.max_length == 1024 and model.use_peft
    if stage in ("dpo", "kto"):
        assert args.precompute_ref_log_probs == (reference == "precomputed")
    if stage == "dpo":
        assert args.loss_type == ["sigmoid"]
    if stage == "simpo":
        # the plan's NLL weight (CPOConfig's default 1.0 here): 0.0 was written whatever the plan counted
        assert (args.loss_type, args.cpo_alpha) == ("simpo", p.scenario["cpo_alpha"]) == ("simpo", 1.0)
    assert f"trl.{config} fields" in (tmp_path / "train_config.yaml").read_text()


@pytest.mark.parametrize("generation,reference", [("hf", "auto"), ("vllm-server", "adapters-off"),
                                                  ("vllm-colocate", "auto")])
def test_grpo_config_carries_the_rollout_keys(generation, reference, tmp_path):
    p = _plan(stage="grpo", num_generations=4, completion_len=256, grad_accum=16,
              generation="vllm-server" if generation == "vllm-colocate" else generation, reference=reference)
    if generation == "vllm-colocate":  # the planner sizes colocated vLLM per card; the export reads the keys
        p = dataclasses.replace(p, scenario={**p.scenario, "generation": generation,
                                             "vllm_gpu_memory_utilization": 0.25, "vllm_sleep": True})
    ex = write(p, "trl", tmp_path)
    _, args, _ = stage_args(tmp_path, "grpo")
    assert type(args).__name__ == "GRPOConfig"
    assert (args.num_generations, args.max_completion_length) == (4, 256)
    assert args.beta == (0.04 if reference == "adapters-off" else 0.0)
    assert args.use_vllm == (generation != "hf")
    if generation != "hf":
        assert args.vllm_mode == generation.removeprefix("vllm-")
    if generation == "vllm-colocate":
        assert (args.vllm_gpu_memory_utilization, args.vllm_enable_sleep_mode) == (0.25, True)
    assert any("--reward_model" in n for n in ex.notes)


def test_ppo_keeps_the_supervised_files_with_a_note():
    p = _plan(stage="dpo")
    p = dataclasses.replace(p, scenario={**p.scenario, "stage": "ppo"})
    ex = export_plan(p, "trl")
    assert "stage" not in ex.files["train_config.yaml"] and any("stage ppo" in n for n in ex.notes)


def test_exported_train_py_runs_one_dpo_step(tmp_path):
    """The DPO plan's files run DPOTrainer for one step on a tiny random Llama (nothing downloaded)."""
    tiny = build_tiny(tmp_path / "tiny")
    rows = [{"prompt": "the cat", "chosen": " sat on the mat", "rejected": " ran in the park"},
            {"prompt": "a dog", "chosen": " ran in the park", "rejected": " is warm today"}] * 2
    (tiny / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    folder = tmp_path / "export"
    write(_plan(stage="dpo"), "trl", folder)
    r = run_script(folder, [*cpu_overrides(tiny, tmp_path / "out"), "--per_device_train_batch_size", "2",
                            "--gradient_accumulation_steps", "1", "--max_length", "32"])
    assert r.returncode == 0, r.stderr[-3000:]
    assert "trainer: DPOTrainer" in r.stdout
    log = next(ast.literal_eval(line) for line in r.stdout.splitlines() if line.startswith("{'loss'"))
    # one step of the sigmoid loss from equal policy and reference: -log(sigmoid(0)) = log 2
    assert math.isclose(float(log["loss"]), math.log(2), rel_tol=1e-3)
    assert (tmp_path / "out" / "adapter_model.safetensors").exists()
