"""Output options are checked before any work or output: plan's --top/--export/--pick/--write-to, sweep's
--json with --csv -. Each case was accepted, or refused only after the plan was printed, before the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from vramfit.cli.main import app

runner = CliRunner()
PLAN = ["plan", "--model", "meta-llama/Llama-3.2-1B", "--cards", "h100-sxm"]
FIX = Path(__file__).resolve().parents[1] / "config_import" / "fixtures"


def refused(args: list[str], line: str) -> None:
    """Exit 2, nothing on stdout, and exactly ``line`` on stderr."""
    r = runner.invoke(app, args)
    assert r.exit_code == 2, (r.output, r.exception)
    assert r.stdout == "" and r.stderr == line + "\n"


@pytest.mark.parametrize("args, line", [
    (["--top", "-1"], "error: top: must be 1 or more (rows to show), got -1"),
    (["--top", "0"], "error: top: must be 1 or more (rows to show), got 0"),
    (["--export", "nope"], "error: export: unknown engine 'nope' (valid values: accelerate, deepspeed, fsdp, trl, torchtitan)"),
    (["--pick", "zz"], "error: pick: must be cheapest, fastest or a row number from 1, got 'zz'"),
    (["--pick", "99", "--json"], "error: pick: must be cheapest, fastest or a row number 1..1, got '99'"),
    (["--write-to", "x.yaml"], "error: write-to: needs --from FILE (the config to write the change into)"),
], ids=["top-negative", "top-zero", "engine", "pick-word", "pick-past-the-plans", "write-to-without-from"])
def test_plan_refuses_bad_output_options_before_printing(args, line):
    refused([*PLAN, *args], line)


def test_plan_write_to_a_missing_folder_is_refused_before_the_plan(tmp_path):
    r = runner.invoke(app, ["plan", "--from", str(FIX / "trl_full.json"), "--cards", "h100-sxm", "--write-to",
                            str(tmp_path / "no" / "x.json")])
    assert r.exit_code == 2 and r.stdout == "" and "Traceback" not in r.output  # the mapping read goes to stderr
    assert r.stderr.splitlines()[-1] == f"error: write-to: the folder '{tmp_path / 'no'}' does not exist"


def test_a_bad_pick_writes_no_export_files(tmp_path):
    out = tmp_path / "exp"
    refused([*PLAN, "--export", "trl", "--export-dir", str(out), "--pick", "7"],
            "error: pick: must be cheapest, fastest or a row number 1..1, got '7'")
    assert not out.exists()


def test_sweep_refuses_json_with_csv_on_stdout(tmp_path):
    sweep = ["sweep", "--model", "meta-llama/Llama-3.2-1B", "--vary", "seq_len=512..1024"]
    refused([*sweep, "--json", "--csv", "-"],
            "error: csv: --csv - and --json both write to stdout; give --csv a file name, or leave one out")
    r = runner.invoke(app, [*sweep, "--json", "--csv", str(tmp_path / "s.csv")])
    assert r.exit_code == 0 and r.stdout.startswith("{") and (tmp_path / "s.csv").read_text().startswith("seq_len,")


def test_fit_write_to_a_missing_folder_is_refused_before_the_grid(tmp_path):
    r = runner.invoke(app, ["fit", "--from", str(FIX / "trl_sft_qlora.yaml"), "--gpu", "rtx3060-12gb", "--write-to",
                            str(tmp_path / "no" / "x.yaml")])
    assert r.exit_code == 2 and r.stdout == "" and "Traceback" not in r.output  # was exit 0 with the grid printed
    assert r.stderr.splitlines()[-1] == f"error: write-to: the folder '{tmp_path / 'no'}' does not exist"


def test_fit_says_why_cells_are_blank_and_where_to_go_when_nothing_fits():
    """A GRPO grid's 512 column is blank (seq_len must hold the 512-token completion): the reason is printed; a run
    with no micro-batch that fits points at `plan`, which ranks the changes (drive 2026-12-07)."""
    grpo = CliRunner().invoke(app, ["fit", "--model", "meta-llama/Llama-3.2-3B", "--method", "lora", "--stage", "grpo",
                                    "--gpu", "a100-80gb-sxm", "--gradient-checkpointing", "full", "--seq-len", "1024"],
                              env={"COLUMNS": "160"})
    assert grpo.exit_code == 0
    assert "blank: completion_len: must be shorter than seq_len (512)" in " ".join(grpo.output.split())
    full = CliRunner().invoke(app, ["fit", "--model", "meta-llama/Llama-3.1-8B", "--method", "full", "--seq-len", "2048",
                                    "--gpu", "h100-sxm", "--num-gpus", "8"], env={"COLUMNS": "160"})
    assert full.exit_code == 0 and "none (micro-batch 1 does not fit)" in full.output
    assert "`vramfit plan` with the same options ranks the changes" in " ".join(full.output.split())

    refused = CliRunner().invoke(app, ["fit", "--model", "meta-llama/Llama-3.1-8B", "--stage", "grpo", "--generation",
                                       "vllm-colocate", "--vllm-gpu-memory-utilization", "0.05", "--gpu", "h100-sxm"],
                                 env={"COLUMNS": "200"})
    text = " ".join(refused.output.split())
    assert refused.exit_code == 0 and "→ cannot run: vLLM's 0.05 share" in text
    assert "No micro-batch or sequence runs on this card" in text and "`vramfit plan`" not in text
