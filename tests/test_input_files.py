"""A key given twice in a scenario (YAML or JSON file, a --batch line, an HTTP body: tests/web/test_hardening.py) is refused in one line: the
parsers would keep the last one silently (vramfit.safe_input.unique_pairs, load_yaml_text)."""

import json

import pytest
from typer.testing import CliRunner

from vramfit.cli.main import app
from vramfit.errors import ScenarioError
from vramfit.scenario import load_scenario_file

runner = CliRunner()


@pytest.mark.parametrize(("name", "text", "where"), [
    ("s.yaml", "model: meta-llama/Llama-2-7b-hf\nmethod: lora\nmethod: qlora\n", " (line 3)"),
    ("s.json", '{"model": "meta-llama/Llama-2-7b-hf", "method": "lora", "method": "qlora"}', ""),
    ("n.yaml", "model: meta-llama/Llama-2-7b-hf\ndeepspeed_config:\n  zero_optimization: {stage: 2, stage: 3}\n",
     " (line 3)")])
def test_scenario_files(tmp_path, name, text, where):
    path = tmp_path / name
    path.write_text(text)
    key = "'stage'" if name.startswith("n") else "'method'"
    with pytest.raises(ScenarioError) as ei:
        load_scenario_file(path)
    assert f"gives the key {key} twice{where}" in str(ei.value)
    r = runner.invoke(app, ["estimate", "--scenario", str(path)])
    assert r.exit_code == 2 and f"gives the key {key} twice" in r.output and "Traceback" not in r.output


def test_batch_line(tmp_path):
    path = tmp_path / "b.jsonl"
    path.write_text('{"model": "meta-llama/Llama-2-7b-hf"}\n{"model": "a/b", "model": "meta-llama/Llama-2-7b-hf"}\n')
    r = runner.invoke(app, ["estimate", "--batch", str(path)])
    lines = [json.loads(x) for x in r.stdout.splitlines() if x.strip()]
    assert "peak" in lines[0] and "gives the key 'model' twice" in lines[1]["error"]


def test_the_same_key_in_two_mappings_is_fine(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text("model: meta-llama/Llama-2-7b-hf\nmethod: full\nparallelism: zero2\nnum_gpus: 2\n"
                    "deepspeed_config:\n  zero_optimization:\n    stage: 2\n    offload_optimizer: {device: none}\n"
                    "    offload_param: {device: none}\n")
    assert load_scenario_file(path).parallelism.value == "zero2"


def test_a_folder_is_not_reported_as_missing(tmp_path):
    """--from and --deepspeed-config given a folder say so (a missing path still reads 'file not found')."""
    r = runner.invoke(app, ["estimate", "--from", str(tmp_path)])
    assert r.exit_code == 2 and f"from: {tmp_path}: is a directory or a device, not a file" in r.output
    r = runner.invoke(app, ["estimate", "--model", "meta-llama/Llama-2-7b-hf", "--deepspeed-config", str(tmp_path)])
    assert r.exit_code == 2 and f"deepspeed_config: {tmp_path} is a directory or a device, not a file" in r.output
    r = runner.invoke(app, ["estimate", "--from", str(tmp_path / "none.yaml")])
    assert r.exit_code == 2 and "file not found" in r.output


@pytest.mark.parametrize("text", ["[" * 500 + "]" * 500, "- " * 5000 + "x\n",
                                  "".join(" " * i + f"k{i}:\n" for i in range(400)) + " " * 400 + "v: 1\n"])
def test_a_deeply_nested_config_is_one_line_not_a_traceback(tmp_path, text):
    """--from and the web's pasted config: flow, block-sequence and block-mapping nesting deeper than a config has
    is refused from the YAML events, before PyYAML's recursive composer runs (it raised RecursionError)."""
    from fastapi.testclient import TestClient

    from vramfit.web import create_app

    path = tmp_path / "deep.yaml"
    path.write_text(text)
    r = CliRunner().invoke(app, ["estimate", "--from", str(path)])
    assert r.exit_code == 2 and "is nested too deeply (more than 12 levels" in r.output
    web = TestClient(create_app(), base_url="http://localhost").post("/api/import", json={"text": text})
    assert web.status_code == 422 and "nested too deeply" in web.json()["error"]
