"""`estimate --batch` with datasets: a line that names one gets exactly `estimate --dataset --json`'s result."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vramfit.cli.main import app

runner = CliRunner()
FIX = Path(__file__).resolve().parents[1] / "dataset" / "fixtures"
DATA, TOK = str(FIX / "chat.jsonl"), str(FIX / "tok")
SC = {"model": "Qwen/Qwen2.5-7B", "method": "qlora", "gradient_checkpointing": "full", "gpu": "a100-80gb-sxm",
      "micro_batch_size": 4, "seq_len": 2048}


def _batch(tmp_path, lines, *args):
    f = tmp_path / "b.jsonl"
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    r = runner.invoke(app, ["estimate", "--batch", str(f), *args])
    assert r.exit_code == 0, r.output
    return [json.loads(x) for x in r.stdout.splitlines()]


def _single(*args):
    flags = [a for k, v in SC.items() for a in ("--" + k.replace("_", "-"), str(v))]
    r = runner.invoke(app, ["estimate", *flags, "--dataset", DATA, "--tokenizer", TOK, *args, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def single():
    return _single()


def test_a_line_naming_a_dataset_gets_estimate_dataset_s_result(tmp_path, single):
    out = _batch(tmp_path, [{**SC, "dataset": {"path": DATA, "tokenizer": TOK}}, SC, {**SC, "dataset": None}])
    assert out[2] == out[1]  # "dataset": null names none
    assert out[0] == single  # the whole result: peak at the peak micro-batch's length, fits, reserved_spread
    spread = out[0]["reserved_spread"]
    assert spread["samples"] > 1 and 0 < spread["p10_bytes"] <= spread["median_bytes"] <= spread["p90_bytes"]
    assert out[0]["scenario"]["seq_len"] < SC["seq_len"]  # the dataset's peak row, not the line's seq_len
    assert "reserved_spread" not in out[1] and out[1]["scenario"]["seq_len"] == SC["seq_len"]


def test_command_line_dataset_applies_to_lines_without_their_own(tmp_path, single):
    packed = _single("--packing", "bfd")
    out = _batch(tmp_path, [SC, {**SC, "dataset": {"path": DATA, "tokenizer": TOK, "packing": "bfd"}}],
                 "--dataset", DATA, "--tokenizer", TOK)
    assert out == [single, packed]
    assert "reserved_spread" not in packed  # packed rows replay the same sizes every step: no spread


def test_bad_dataset_values_are_one_error_line_each(tmp_path):
    out = _batch(tmp_path, [{**SC, "dataset": {"path": DATA, "bogus": 1}}, {**SC, "dataset": {"path": DATA, "sample": "x"}},
                            {**SC, "dataset": 3}, {**SC, "dataset": str(FIX / "missing.jsonl")}, SC])
    assert out[0]["error"].startswith("dataset.'bogus': unknown dataset option (valid values: path, tokenizer,")
    assert out[1] == {"error": "dataset.sample: must be an integer, got str"}
    assert out[2]["error"].startswith("dataset: must be a file path or an object of dataset options")
    assert out[3]["error"].startswith("dataset: file not found")
    assert out[4]["peak"]["device_bytes"] > 0


def test_the_length_pass_runs_once_per_dataset_and_policy(tmp_path, monkeypatch):
    import vramfit.cli.dataset_opts as opts

    calls = []
    real = opts.run_dataset
    monkeypatch.setattr(opts, "run_dataset", lambda o, sc: calls.append(sc.micro_batch_size) or real(o, sc))
    line = {**SC, "dataset": {"path": DATA, "tokenizer": TOK}}
    out = _batch(tmp_path, [line, line, {**line, "micro_batch_size": 2}, line])
    assert calls == [4, 2] and out[0] == out[1] == out[3] and out[2] != out[0]


def test_report_files_belong_to_one_scenario(tmp_path):
    f = tmp_path / "b.jsonl"
    f.write_text(json.dumps(SC) + "\n")
    r = runner.invoke(app, ["estimate", "--batch", str(f), "--dataset", DATA, "--dataset-json", str(tmp_path / "r.json")])
    assert r.exit_code == 2 and "dataset_json: writes one scenario's report: not with --batch" in r.output
