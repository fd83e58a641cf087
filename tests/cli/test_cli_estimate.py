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


def test_gpus_says_when_the_bf16_column_holds_an_fp16_peak():
    """gpus.csv bf16_fp16_dense_tflops is the FP16 peak on cards without BF16 (supports_bf16 no: T4 65, V100 SXM2
    125): the "BF16 TFLOPS" column labels it FP16 there; BF16 cards keep their bare figure. The JSON keeps the key
    and carries supports_bf16 beside it."""
    r = runner.invoke(app, ["gpus"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    rows = {c[0]: c for c in ([x.strip() for x in line.split("│")[1:-1]] for line in r.output.splitlines()
                              if line.startswith("│"))}
    heading = next(line for line in r.output.splitlines() if "BF16 TFLOPS" in line)
    col = [x.strip() for x in heading.split("┃")[1:-1]].index("BF16 TFLOPS")
    assert rows["t4"][col] == "65.0 (FP16)" and rows["v100-sxm2-16gb"][col] == "125.0 (FP16)"
    assert rows["rtx4090"][col] == "165.2" and rows["h100-sxm"][col] == "989.0"
    d = {g["gpu_id"]: g for g in json.loads(run("gpus", "--json").output)}
    assert (d["t4"]["bf16_tflops"], d["t4"]["supports_bf16"]) == (65.0, False)
    assert (d["h100-sxm"]["bf16_tflops"], d["h100-sxm"]["supports_bf16"]) == (989.0, True)


def test_stage_bad_combination_is_one_line_exit_2():
    from typer.testing import CliRunner

    from vramfit.cli.main import app

    r = CliRunner().invoke(app, ["estimate", "--model", "meta-llama/Llama-3.2-1B", "--stage", "orpo", "--reference", "copy"])
    assert r.exit_code == 2
    assert r.output.strip().splitlines()[-1] == (
        "error: reference: stage orpo has no reference model (its loss is reference-free) (valid values: auto, none)")
