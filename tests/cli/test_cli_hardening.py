"""Issue 12, items 1-8: every class of bad CLI input is one line on stderr and exit code 2.

One test per class; each example is one the fuzzing pass found (a traceback, a hang or a blow-up
before the fix). ``tests/fuzz/test_fuzz_cli.py`` covers the same classes with generated input.
"""

from __future__ import annotations

import json
import time

import pytest
from typer.testing import CliRunner

from vramfit.cli.main import app

runner = CliRunner()
LLAMA = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 256,
         "intermediate_size": 128, "num_attention_heads": 4}


def run(*args: str):
    return runner.invoke(app, list(args))


def one_line_error(r, *words: str) -> str:
    """The result is exit code 2 with exactly one line on stderr, naming ``words``."""
    assert r.exit_code == 2, (r.exit_code, r.output, r.exception)
    assert "Traceback" not in r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def config_file(tmp_path, text: str, name: str = "config.json") -> str:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return str(p)


# ------------------------------------------------------------------------ 1. model strings
@pytest.mark.parametrize(("model", "words"), [
    ("~nosuchuser/x", ("model", "no such user")),
    ("a" * 300, ("model", "255", "MAX_NAME_CHARS")),
    ("org/" + "b" * 300, ("model", "MAX_NAME_CHARS")),
    ("/" + "c/" * 2100, ("model", "MAX_MODEL_CHARS")),
])
def test_model_strings(model, words):
    line = one_line_error(run("estimate", "--model", model), *words)
    assert len(line) < 400  # the value is cut, not repeated


def test_db_tilde_user_and_malformed_url():
    one_line_error(run("runs", "list", "--db", "~nosuchuser/x.sqlite"), "db", "no such user")
    one_line_error(run("runs", "list", "--db", "postgresql://[::1/x"), "db", "not a valid database URL")


# ------------------------------------------------------------------- 2. config.json fields
@pytest.mark.parametrize(("changes", "words"), [
    ({"model_type": "mistral", "sliding_window": "abc"}, ("'sliding_window' must be an integer", "'abc'")),
    ({"model_type": "mistral", "sliding_window": [1]}, ("'sliding_window' must be an integer",)),
    ({"model_type": "mistral", "sliding_window": -4}, ("'sliding_window' must be an integer >= 1",)),
    ({"max_position_embeddings": "abc"}, ("'max_position_embeddings' must be an integer",)),
    ({"model_type": "phi", "partial_rotary_factor": "x"}, ("'partial_rotary_factor' must be a number",)),
    ({"model_type": ["llama"]}, ("'model_type' must be a name",)),
    ({"vocab_size": 10**4000 // 10**3700}, ("'vocab_size'", "MAX_CONFIG_SIZE", "about 301 digits")),
    ({"num_hidden_layers": 10**9}, ("'num_hidden_layers'", "MAX_CONFIG_LAYERS")),
    ({"hidden_size": 2**26, "intermediate_size": 2**26, "vocab_size": 2**26, "num_hidden_layers": 1024},
     ("MAX_PARAMS",)),
])
def test_config_fields_are_type_and_range_checked(tmp_path, changes, words):
    path = config_file(tmp_path, json.dumps({**LLAMA, **changes}))
    one_line_error(run("estimate", "--model", path), "model", *words)


@pytest.mark.parametrize(("text", "words"), [
    ('{"model_type": "llama", "x": ' + "[" * 100_000 + "]" * 100_000 + "}", ("nested", "MAX_CONFIG_DEPTH")),
    ('{"model_type": "llama", "vocab_size": ' + "9" * 5000 + "}", ("4,300 digits",)),
    ('{"model_type": "llama", "max_position_embeddings": NaN}', ("NaN",)),
    ('{"model_type": "llama", "max_position_embeddings": Infinity}', ("Infinity",)),
])
def test_config_text_that_json_cannot_hold(tmp_path, text, words):
    one_line_error(run("estimate", "--model", config_file(tmp_path, text)), "model", *words)


def test_web_and_cli_share_one_config_validation():
    """The pasted-config path of the web API reaches the same checks (spec_from_hf_config)."""
    from vramfit.errors import ModelError
    from vramfit.models import spec_from_hf_config

    for bad in ({**LLAMA, "sliding_window": "abc", "model_type": "mistral"}, {**LLAMA, "num_hidden_layers": 10**9}):
        with pytest.raises(ModelError):
            spec_from_hf_config(bad)


# ------------------------------------------------------------------- 3. files and numbers
@pytest.mark.parametrize("option", ["--scenario", "--batch", "--gpus"])
def test_non_utf8_files(tmp_path, option):
    p = tmp_path / "bad.yaml"
    p.write_bytes(b"model: \xff\xfe\n")
    cmd = ["plan", "--params", "7B"] if option == "--gpus" else ["estimate"]
    r = run(*cmd, option, str(p))
    if option == "--batch":  # a batch reports the line and goes on
        assert r.exit_code == 0 and json.loads(r.stdout)["error"].startswith("batch: line 1 is not UTF-8")
    else:
        one_line_error(r, "not UTF-8", "byte 7 is 0xff")


def test_runs_import_non_utf8(tmp_path):
    p = tmp_path / "runs.jsonl"
    p.write_bytes(b"\xff\n")
    one_line_error(run("runs", "import", str(p), "--db", str(tmp_path / "x.sqlite")), "not UTF-8")


@pytest.mark.parametrize(("args", "words"), [
    (("estimate", "--params", "7B", "--lora-alpha", str(10**400)), ("lora_alpha", "MAX_NUMBER_CHARS")),
    (("estimate", "--params", "7B", "--lora-alpha", "1e400"), ("lora_alpha", "finite")),
    (("estimate", "--params", "7B", "--lora-dropout", "nan"), ("lora_dropout",)),
    (("plan", "--params", "7B", "--max-gpus", str(10**400)), ("max_gpus", "100,000", "digits")),
])
def test_huge_numbers(args, words):
    one_line_error(run(*args), *words)


def test_scenario_numbers_from_python_never_overflow():
    from vramfit.errors import ScenarioError
    from vramfit.scenario import parse_scenario

    for key in ("lora_alpha", "lora_dropout", "seq_len"):
        with pytest.raises(ScenarioError, match=key) as err:
            parse_scenario({"params": "7B", key: 10**400})
        assert len(str(err.value)) < 200


# --------------------------------------------------------------- 4. sweep, paths, runs, plan
@pytest.mark.parametrize("vary", ["seq_len=nan", "seq_len=inf..inf", "seq_len=1e400", "seq_len=1,2,nan"])
def test_sweep_vary_numbers(vary):
    one_line_error(run("sweep", "--params", "7B", "--vary", vary), "vary", "not a number")


def test_sweep_counts_values_before_building_them():
    t = time.perf_counter()
    one_line_error(run("sweep", "--params", "7B", "--vary", "seq_len=1..100000000000:1"),
                   "100,000,000,000 values", "MAX_SWEEP_VALUES")
    one_line_error(run("sweep", "--params", "7B", "--vary", "seq_len=" + ",".join(["1"] * 100_000)), "MAX_SWEEP_VALUES")
    assert time.perf_counter() - t < 5


@pytest.mark.parametrize(("option", "target", "words"), [
    ("--csv", "/nonexistent_dir_h3/x.csv", ("csv", "does not exist")),
    ("--csv", "DIR", ("csv", "is a directory")),
    ("--chart", "/nonexistent_dir_h3/x.png", ("chart", "does not exist")),
    ("--chart", "DIR", ("chart", "is a directory")),
])
def test_sweep_output_paths(tmp_path, option, target, words):
    target = str(tmp_path) if target == "DIR" else target
    one_line_error(run("sweep", "--params", "7B", "--vary", "seq_len=512,1024", option, target), *words)


def test_export_dir_that_is_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    one_line_error(run("plan", "--params", "1B", "--export", "trl", "--export-dir", str(f)), "export_dir", "not a folder")


@pytest.mark.parametrize("target", ["/nonexistent_dir_h3/out.jsonl", "DIR"])
def test_runs_export_paths(tmp_path, target):
    target = str(tmp_path) if target == "DIR" else target
    one_line_error(run("runs", "export", target, "--db", str(tmp_path / "x.sqlite")), "path")


@pytest.mark.parametrize("args", [
    ("runs", "show", "x" * 100_000), ("calibrate", "--model", "x" * 100_000),
    ("runs", "list", "--model", "x" * 100_000),
])
def test_runs_ids_and_filters_are_bounded(tmp_path, args):
    line = one_line_error(run(*args, "--db", str(tmp_path / "x.sqlite")), "MAX_ID_CHARS")
    assert len(line) < 300


@pytest.mark.parametrize("limit", ["1e20", str(10**20), "0"])
def test_runs_list_limit(tmp_path, limit):
    one_line_error(run("runs", "list", "--limit", limit, "--db", str(tmp_path / "x.sqlite")), "--limit")


def test_plan_mfu_floor_and_json_without_infinity():
    one_line_error(run("plan", "--params", "7B", "--mfu", "5e-324"), "mfu", "MIN_MFU")
    one_line_error(run("plan", "--params", "7B", "--mfu", "1e-300", "--dataset-tokens", "1e15", "--epochs", "1000",
                       "--json"), "mfu", "MIN_MFU")
    r = run("plan", "--params", "1B", "--mfu", "0.001", "--dataset-tokens", "1e15", "--epochs", "1000", "--json")
    assert r.exit_code == 0, r.output
    json.loads(r.stdout, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))


# ----------------------------------------------------------------- 5. one line, no contents
def test_yaml_syntax_error_is_one_line_with_position(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("model: [llama\n  x: :\n")
    one_line_error(run("estimate", "--scenario", str(p)), "scenario", "not valid YAML", "line 2")


def test_typer_usage_errors_are_one_line():
    one_line_error(run("estimate", "--params", "7B", "--no-such-option"), "No such option")
    one_line_error(run("runs", "list", "--limit", "abc"), "--limit")


def test_long_values_are_cut():
    line = one_line_error(run("estimate", "--params", "7B", "--method", "x" * 100_000), "method", "…")
    assert len(line) < 400


def test_scenario_file_contents_are_never_printed(tmp_path):
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$secretsalt$hashhashhash:20228:0:99999:7:::\ndaemon:*:20228:0:99999:7:::\n")
    r = run("estimate", "--scenario", str(secret))
    one_line_error(r, "scenario")
    assert "secretsalt" not in r.output and "daemon" not in r.output


def test_rich_markup_in_values_is_printed_as_text():
    line = one_line_error(run("estimate", "--params", "7B", "--method", "[/bold]"), "method")
    assert "[/bold]" in line


# ----------------------------------------------------------------- 6. resource blow-ups
def test_billion_laughs_yaml_is_refused_at_once(tmp_path):
    rows = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        rows.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    p = tmp_path / "laughs.yaml"
    p.write_text("\n".join(rows + ["model: *i"]) + "\n")
    t = time.perf_counter()
    one_line_error(run("estimate", "--scenario", str(p)), "scenario", "alias")
    assert time.perf_counter() - t < 2


def test_simulator_bounds_before_work(tmp_path):
    pytest.importorskip("torch")
    from vramfit.errors import ScenarioError
    from vramfit.sim import simulate

    t = time.perf_counter()
    with pytest.raises(ScenarioError, match="SIM_MAX_GPUS"):
        simulate({"params": "125M", "num_gpus": 100_000, "parallelism": "fsdp"})
    with pytest.raises(ScenarioError, match="SIM_MAX_LORA_RANK"):
        simulate({"params": "125M", "lora_rank": 65_536})
    deep = config_file(tmp_path, json.dumps({**LLAMA, "num_hidden_layers": 1000}))
    with pytest.raises(ScenarioError, match="SIM_MAX_FULL_DEPTH_LAYERS"):
        simulate({"model": deep}, layers=1000)
    assert time.perf_counter() - t < 10


# ------------------------------------------------------------------------ 8. --batch
def test_batch_one_output_line_per_input_line(tmp_path):
    lines = [
        b'{"params": "1B"}',
        b"",
        b'{"params": "1B", "lora_alpha": ' + b"1" * 5000 + b"}",
        b'{"params": "1B", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"params": "1B", "model_x": "\xff"}',
        b'{"params": "1B", "lora_alpha": ' + str(10**400).encode() + b"}",
        b'{"model": "~x/y"}',
        b'{"model": "' + b"m" * 300 + b'"}',
        b"   ",
        b"[1, 2",
        b'{"params": "1B", "method": "[/red]"}',
    ]
    p = tmp_path / "batch.jsonl"
    p.write_bytes(b"\n".join(lines) + b"\n")
    r = run("estimate", "--batch", str(p))
    assert r.exit_code == 0, r.output
    out = [json.loads(x) for x in r.stdout.splitlines()]
    assert len(out) == len(lines)
    assert "peak" in out[0]
    for i, item in enumerate(out[1:], 2):
        assert set(item) == {"error"}, (i, item)
        assert "internal error" not in item["error"], (i, item)
        assert len(item["error"]) < 1100
    assert "line 2 is blank" in out[1]["error"] and "4,300 digits" in out[2]["error"]
    assert "nested too deeply" in out[3]["error"] and "not UTF-8" in out[4]["error"]
    assert "no such user" in out[6]["error"] and "MAX_NAME_CHARS" in out[7]["error"]


def test_batch_with_bad_config_paths(tmp_path):
    bad = config_file(tmp_path, json.dumps({**LLAMA, "model_type": "mistral", "sliding_window": "abc"}))
    p = tmp_path / "b.jsonl"
    p.write_text(json.dumps({"model": bad}) + "\n" + json.dumps({"params": "1B"}) + "\n")
    out = [json.loads(x) for x in run("estimate", "--batch", str(p)).stdout.splitlines()]
    assert "sliding_window" in out[0]["error"] and "peak" in out[1]


@pytest.mark.parametrize(("args", "words"), [
    (("--steps", "100000000"), ("--steps", "10000")),
    (("--timeout", "nan"), ("timeout", "finite")),
    (("--db", "~nosuchuser/x.sqlite"), ("db", "no such user")),
])
def test_measure_options_bounded_before_work(args, words):
    one_line_error(run("measure", "--params", "125M", "--device", "cpu", *args), *words)


@pytest.mark.parametrize(("text", "words"), [
    ('{"text": ' + "9" * 5000 + "}", ("dataset", "not JSON", "4,300 digits")),
    ('{"text": ' + "[" * 100_000 + "]" * 100_000 + "}", ("dataset", "nested too deeply")),
])
def test_dataset_files_with_huge_numbers_or_deep_nesting(tmp_path, text, words):
    """The --dataset reader (merged from another branch) has the same classes as config files."""
    p = tmp_path / "ds.jsonl"
    p.write_text(text + "\n")
    one_line_error(run("plan", "--params", "1B", "--dataset", str(p)), *words)


@pytest.mark.parametrize(("option", "target", "words"), [
    ("--dataset-json", "DIR", ("dataset_json", "is a directory")),
    ("--length-chart", "/nonexistent_dir_h3/x.png", ("length_chart", "does not exist")),
])
def test_dataset_output_paths_checked_before_work(tmp_path, option, target, words):
    ds = tmp_path / "ds.jsonl"
    ds.write_text('{"text": "hello world"}\n')
    target = str(tmp_path) if target == "DIR" else target
    one_line_error(run("plan", "--params", "1B", "--dataset", str(ds), option, target), *words)


def test_sizes_of_any_architecture_are_bounded_by_name(tmp_path):
    """model_types read from transformers' own modules (any decoder) have size fields vramfit does
    not list: they are bounded by name before transformers builds anything."""
    gpt2 = {"model_type": "gpt2", "n_layer": 10**9, "n_embd": 768, "n_head": 12, "vocab_size": 50257}
    one_line_error(run("estimate", "--model", config_file(tmp_path, json.dumps(gpt2))), "'n_layer'", "MAX_CONFIG_LAYERS")
    gpt2.update(n_layer=2, n_embd=10**12)
    one_line_error(run("estimate", "--model", config_file(tmp_path, json.dumps(gpt2))), "'n_embd'", "MAX_CONFIG_SIZE")


def test_plan_export_torchtitan_of_a_qlora_plan_is_a_one_line_error(tmp_path):
    r = run("plan", "--model", "meta-llama/Llama-3.1-8B", "--method", "qlora", "--gpu", "rtx4090", "--export", "torchtitan",
            "--export-dir", str(tmp_path / "out"))
    one_line_error(r, "export", "the plan is qlora")
    assert not (tmp_path / "out").exists()
