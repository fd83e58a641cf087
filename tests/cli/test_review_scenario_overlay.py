"""`--scenario FILE` plus flags: flags override the file's own keys; defaults follow from the combination."""

import json

import pytest
from typer.testing import CliRunner

from vramfit.cli.main import app
from vramfit.cli.options import build_scenario
from vramfit.errors import ScenarioError

runner = CliRunner()
MODEL = "meta-llama/Llama-3.1-8B"


def _file(tmp_path, text):
    f = tmp_path / "sc.yaml"
    f.write_text(text)
    return f


def _json(*args):
    r = runner.invoke(app, list(args))
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_num_gpus_flag_over_a_file_gets_the_multi_gpu_default(tmp_path):
    f = _file(tmp_path, f"model: {MODEL}\n")
    got = build_scenario({"num_gpus": "4"}, f)
    flags = build_scenario({"model": MODEL, "num_gpus": "4"}, None)
    assert got.num_gpus == 4 and got.parallelism == flags.parallelism
    assert got.parallelism.value != "none"


def test_stage_and_method_flags_over_a_file(tmp_path):
    grpo = build_scenario({"stage": "grpo"}, _file(tmp_path, f"model: {MODEL}\n"))
    assert grpo.stage.value == "grpo" and grpo.num_generations == build_scenario(
        {"model": MODEL, "stage": "grpo"}, None).num_generations
    lora = build_scenario({"method": "lora"}, _file(tmp_path, f"model: {MODEL}\nmethod: qlora\n"))
    assert lora.method.value == "lora" and lora.quantize.value == "none"


def test_the_files_explicit_values_stay_and_model_flag_replaces_params(tmp_path):
    f = _file(tmp_path, f"model: {MODEL}\nseq_len: 1536\nparallelism: zero3\nnum_gpus: 2\n")
    sc = build_scenario({"num_gpus": "4"}, f)
    assert (sc.seq_len, sc.parallelism.value, sc.num_gpus) == (1536, "zero3", 4)
    sc = build_scenario({"model": "meta-llama/Llama-2-7b-hf"}, _file(tmp_path, "params: 3B\nseq-len: 1024\n"))
    assert sc.model == "meta-llama/Llama-2-7b-hf" and sc.params is None and sc.seq_len == 1024


def test_the_files_own_errors_stay_clear(tmp_path):
    with pytest.raises(ScenarioError) as e:
        build_scenario({"num_gpus": "2"}, _file(tmp_path, f"model: {MODEL}\nmethod: foo\n"))
    assert e.value.key == "method" and "full" in str(e.value)
    with pytest.raises(ScenarioError) as e:
        build_scenario({"num_gpus": "2"}, _file(tmp_path, "- 1\n"))
    assert "mapping" in str(e.value)


@pytest.mark.parametrize("cmd", ["estimate", "fit"])
def test_estimate_and_fit_take_the_flags_over_a_file(tmp_path, cmd):
    f = _file(tmp_path, f"model: {MODEL}\nmethod: qlora\n")
    extra = ["--gpu", "h100-sxm"] if cmd == "fit" else []
    d = _json(cmd, "--scenario", str(f), "--method", "lora", "--num-gpus", "4", *extra, "--json")
    plain = _json(cmd, "--model", MODEL, "--method", "lora", "--num-gpus", "4", *extra, "--json")
    assert d == plain
    assert d["scenario"]["quantize"] == "none" and d["scenario"]["num_gpus"] == 4


def test_plan_and_sweep_take_the_flags_over_a_file(tmp_path):
    f = _file(tmp_path, f"model: {MODEL}\n")
    d = _json("sweep", "--scenario", str(f), "--stage", "grpo", "--vary", "seq_len=512,1024", "--json")
    plain = _json("sweep", "--model", MODEL, "--stage", "grpo", "--vary", "seq_len=512,1024", "--json")
    assert d == plain and d["values"] == [512, 1024] and d["scenario"]["stage"] == "grpo"
    r = runner.invoke(app, ["plan", "--scenario", str(f), "--num-gpus", "2", "--gpu", "h100-sxm", "--json"])
    assert r.exit_code == 0, r.output
