"""Smaller input cases of the CLI audit: the --params echo is cut like every other, `models` with no match exits 1
with --json too, and sweeping params over a named model is refused instead of dropping the model."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from vramfit.cli.main import app
from vramfit.limits import MAX_SHOWN_CHARS

runner = CliRunner()


def test_a_long_params_value_is_cut_in_the_echo():
    r = runner.invoke(app, ["estimate", "--params", "x" * 200])
    assert r.exit_code == 2 and r.stdout == ""
    shown = "'" + "x" * (MAX_SHOWN_CHARS - 2) + "…"
    assert r.stderr == f"error: params: not a parameter count: {shown} (examples: 7B, 1.5b, 405M, 7e9, 7000000000)\n"
    big = runner.invoke(app, ["estimate", "--params", "9" * 200])
    assert big.exit_code == 2 and len(big.stderr) < 200 and "is absurd (more than 10 trillion)" in big.stderr


def test_models_with_no_match_exits_1_as_a_table_and_as_json():
    table = runner.invoke(app, ["models", "zzz-no-such-model"])
    assert table.exit_code == 1 and "0 catalog models matching 'zzz-no-such-model'" in table.stdout
    as_json = runner.invoke(app, ["models", "zzz-no-such-model", "--json"])
    assert as_json.exit_code == 1 and json.loads(as_json.stdout) == []
    found = runner.invoke(app, ["models", "llama-3.2-1b", "--json"])
    assert found.exit_code == 0 and json.loads(found.stdout)[0]["id"] == "meta-llama/Llama-3.2-1B"


def test_sweeping_params_over_a_named_model_is_refused():
    r = runner.invoke(app, ["sweep", "--model", "meta-llama/Llama-3.2-1B", "--vary", "params=1B,7B"])
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr == ("error: vary: params: each value is a generic Llama-style decoder of that size, not a size of "
                        "the scenario's model 'meta-llama/Llama-3.2-1B'; sweep sizes with params instead of model, or "
                        "vary model over ids\n")
    sizes = runner.invoke(app, ["sweep", "--params", "3B", "--vary", "params=1B,7B", "--json"])
    assert sizes.exit_code == 0 and [p["value"] for p in json.loads(sizes.stdout)["points"]] == ["1B", "7B"]


def test_a_scenario_flag_given_twice_is_refused_naming_both_values():
    """click keeps the last of a single-valued option: `--gpu h100-sxm --gpu rtx4090` estimated for the RTX 4090
    only, and `plan --gpu a --gpu b` planned one card where two were meant (--cards takes a list)."""
    for cmd in ("estimate", "plan", "fit"):
        r = CliRunner().invoke(app, [cmd, "--model", "meta-llama/Llama-3.1-8B", "--gpu", "h100-sxm", "--gpu", "rtx4090"])
        assert r.exit_code == 2 and "Traceback" not in r.output, (cmd, r.output)
        line = r.stderr.strip()
        assert line == "error: gpu: --gpu is given 2 times ('h100-sxm', 'rtx4090'); give it once", line
    ok = CliRunner().invoke(app, ["estimate", "--model", "meta-llama/Llama-3.1-8B", "--seq-len", "4k", "--json"])
    assert ok.exit_code == 0 and '"seq_len": 4096' in ok.stdout


def test_inline_deepspeed_json_is_bounded_as_every_json_input():
    deep = '{"a":' * 5000 + "1" + "}" * 5000
    for text, words in ((deep, "nested too deeply"), ('{"a": 1' + "0" * 5000 + "}", "over 4,300 digits"),
                        ('{"a": ', "is not valid JSON")):
        r = runner.invoke(app, ["estimate", "--model", "meta-llama/Llama-3.1-8B", "--deepspeed-config", text])
        assert r.exit_code == 2 and "Traceback" not in r.output, r.output
        assert r.stderr.startswith("error: deepspeed_config: the inline JSON") and words in r.stderr, r.stderr
        assert "set_int_max_str_digits" not in r.stderr


def test_batch_flags_override_every_line_as_docs_estimate_says(tmp_path):
    lines = tmp_path / "many.jsonl"
    lines.write_text('{"model": "meta-llama/Llama-3.1-8B", "seq_len": 1024}\n{"params": "1B", "gpu": "rtx4090"}\n')
    r = runner.invoke(app, ["estimate", "--batch", str(lines), "--gpu", "h100-sxm", "--seq-len", "2048"])
    assert r.exit_code == 0, r.output
    out = [json.loads(x) for x in r.stdout.splitlines()]
    assert [o["scenario"]["gpu"] for o in out] == ["h100-sxm", "h100-sxm"]
    assert [o["scenario"]["seq_len"] for o in out] == [2048, 2048]
