"""`vramfit simulate`: flags, --json, and the side-by-side rendering."""

from __future__ import annotations

import json

import pytest
from simconfigs import tiny
from typer.testing import CliRunner

from vramfit.cli.main import app


def _model(tmp_path) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(tiny("meta-llama/Llama-3.2-1B", layers=2)))
    return str(path)


def test_simulate_json(tmp_path):
    res = CliRunner().invoke(app, ["simulate", "--model", _model(tmp_path), "--method", "lora", "--seq-len", "64",
                                   "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["peak"]["allocated_bytes"] > 0
    assert data["simulation"]["layers_traced"] == [2]
    assert "estimate_peak" in data["simulation"]


def test_simulate_table_shows_estimate_alongside(tmp_path):
    res = CliRunner().invoke(app, ["simulate", "--model", _model(tmp_path), "--seq-len", "64"],
                             env={"COLUMNS": "150"})
    assert res.exit_code == 0, res.output
    assert "estimate − sim" in res.output and "Timeline" in res.output


def test_simulate_user_error_is_one_line(tmp_path):
    res = CliRunner().invoke(app, ["simulate", "--model", "Qwen/Qwen-7B"])
    assert res.exit_code == 2
    assert "estimator-only" in res.output


def test_simulate_refuses_a_training_stage_in_one_line():
    res = CliRunner().invoke(app, ["simulate", "--model", "meta-llama/Llama-3.2-1B", "--stage", "kto"])
    assert res.exit_code == 2
    assert res.output.strip().splitlines()[-1] == (
        "error: stage: the simulator runs TRL's DPO and GRPO loss steps; kto is estimator-only for now: use "
        "`vramfit estimate` (valid values: sft, dpo, grpo)")


def test_simulate_json_stays_one_document_when_a_library_prints(tmp_path):
    """`simulate --stage dpo --json`: TRL's DPO trainer imports DeepSpeed, whose logger wrote a line to stdout before the
    JSON (review of 2026-12-05); in a fresh process, as a user's pipe sees it, stdout is the JSON alone."""
    import subprocess
    import sys

    code = ("import sys; from vramfit.cli.main import app; sys.argv = ['vramfit', 'simulate', '--model', "
            f"{_model(tmp_path)!r}, '--method', 'lora', '--stage', 'dpo', '--seq-len', '64', '--json']; app()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                         env={**__import__("os").environ, "VRAMFIT_CONFIG_DIR": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads(out.stdout)
    assert data["peak"]["allocated_bytes"] > 0 and data["scenario"]["stage"] == "dpo"


@pytest.mark.parametrize("flag, key", [("--tensor-parallel", "tensor_parallel"), ("--pipeline-parallel", "pipeline_parallel"),
                                       ("--context-parallel", "context_parallel"), ("--expert-parallel", "expert_parallel")])
def test_simulate_refuses_model_parallel_layouts(flag, key):
    """They ran as plain FSDP2 over the ranks (the fake process group shards whole modules only), and the table set the
    estimate's figure for the real layout against it as an error of the estimate."""
    args = ["simulate", "--model", "meta-llama/Llama-3.2-1B", "--method", "full", "--framework", "torchtitan",
            "--num-gpus", "4", "--grad-accum", "2", flag, "2"]
    if key == "expert_parallel":
        args[2] = "Qwen/Qwen3-30B-A3B"
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2
    assert res.output.strip().splitlines()[-1] == (
        f"error: {key}: the simulator runs no {key.replace('_', ' ')}ism; it is estimator-only (valid values: 1)")


def test_simulate_refuses_a_stage_with_images_in_one_line():
    """It raised a RuntimeError traceback (the stage's mask positions are text rows only)."""
    res = CliRunner().invoke(app, ["simulate", "--model", "Qwen/Qwen2-VL-2B-Instruct", "--stage", "dpo", "--method",
                                   "lora", "--seq-len", "512", "--images-per-sample", "1"])
    assert res.exit_code == 2
    assert res.output.strip().splitlines()[-1] == (
        "error: images_per_sample: the simulator runs dpo on text only; with images it is estimator-only (valid values: 0)")
