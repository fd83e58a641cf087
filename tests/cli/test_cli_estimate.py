"""`vramfit estimate / models / gpus` as a user runs them."""

import json

from typer.testing import CliRunner

from vramfit.cli.main import app

runner = CliRunner()
MODEL = "meta-llama/Llama-2-7b-hf"


def run(*args):
    return runner.invoke(app, list(args))


def test_estimate_table_shows_components_peaks_and_fits():
    r = run("estimate", "--model", MODEL, "--method", "qlora", "--seq-len", "4096", "--micro-batch-size", "2")
    assert r.exit_code == 0, r.output
    for word in ("quantized_base", "activations", "allocated", "reserved", "device", "GiB", "RTX 4090", "Assumptions"):
        assert word in r.output


def test_estimate_json_matches_the_api():
    from vramfit import estimate

    r = run("estimate", "--model", MODEL, "--method", "lora", "--lora-targets", "q_proj,v_proj", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    api = estimate(model=MODEL, method="lora", lora_targets=["q_proj", "v_proj"])
    assert d["peak"]["device_bytes"] == api.peak.device_bytes
    assert d["scenario"]["lora_targets"] == ["q_proj", "v_proj"]


def test_scenario_file_yaml_and_flag_override(tmp_path):
    f = tmp_path / "run.yaml"
    f.write_text(f"model: {MODEL}\nmethod: qlora\nseq_len: 1024\n")
    a = json.loads(run("estimate", "--scenario", str(f), "--json").output)
    b = json.loads(run("estimate", "--scenario", str(f), "--seq-len", "2048", "--json").output)
    assert a["scenario"]["seq_len"] == 1024 and b["scenario"]["seq_len"] == 2048
    assert b["peak"]["allocated_bytes"] > a["peak"]["allocated_bytes"]


def test_batch_keeps_order_and_reports_bad_lines(tmp_path):
    f = tmp_path / "many.jsonl"
    f.write_text(
        json.dumps({"model": MODEL, "seq_len": 512}) + "\n"
        + json.dumps({"model": MODEL, "method": "lorra"}) + "\n"
        + "{broken\n"
        + json.dumps({"model": MODEL, "seq_len": 1024}) + "\n"
    )
    r = run("estimate", "--batch", str(f))
    assert r.exit_code == 0, r.output
    lines = [json.loads(x) for x in r.output.strip().splitlines()]
    assert len(lines) == 4
    assert lines[0]["scenario"]["seq_len"] == 512 and lines[3]["scenario"]["seq_len"] == 1024
    assert "method" in lines[1]["error"] and "full, lora, qlora" in lines[1]["error"]
    assert "line 3" in lines[2]["error"]


def test_bad_input_exit_2_with_the_field_and_no_traceback():
    cases = [
        (["--model", MODEL, "--method", "lorra"], "method"),
        (["--model", MODEL, "--seq-len", "0"], "seq_len"),
        (["--model", MODEL, "--optimizer", "adam"], "optimizer"),
        (["--model", MODEL, "--gpu", "rtx9090"], "gpu"),
        (["--scenario", "/nonexistent/x.yaml"], "scenario"),
        ([], "model"),
    ]
    for args, field in cases:
        r = run("estimate", *args)
        assert r.exit_code == 2, (args, r.output)
        assert field in r.output
        assert "Traceback" not in r.output


def test_models_lists_and_searches():
    r = run("models", "qwen3")
    assert r.exit_code == 0
    assert "Qwen/Qwen3-8B" in r.output and "Llama" not in r.output
    d = json.loads(run("models", "--json").output)
    assert len(d) >= 50 and all("source" in e for e in d)


def test_gpus_lists_marketing_and_usable_memory():
    r = run("gpus")
    assert r.exit_code == 0 and "usable GiB" in r.output and "rtx4090" in r.output


def test_stage_bad_combination_is_one_line_exit_2():
    from typer.testing import CliRunner

    from vramfit.cli.main import app

    r = CliRunner().invoke(app, ["estimate", "--model", "meta-llama/Llama-3.2-1B", "--stage", "orpo", "--reference", "copy"])
    assert r.exit_code == 2
    assert r.output.strip().splitlines()[-1] == (
        "error: reference: stage orpo has no reference model (its loss is reference-free) (valid values: auto, none)")
