"""The stage example of docs/stages.md ("Preference and RL stages", moved from the README) is this command's real output."""

import re
from pathlib import Path

from typer.testing import CliRunner

from vramfit.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
COMMAND = ("vramfit sweep --model meta-llama/Llama-3.1-8B --method full --micro-batch-size 8 --seq-len 1024 "
           "--gradient-checkpointing full --vary stage=* --cards h100,h200")


def test_readme_stage_example_is_generated():
    readme = (ROOT / "docs" / "stages.md").read_text(encoding="utf-8")
    m = re.search(r"\$ " + re.escape(COMMAND) + r"\n(.*?)\n```", readme, re.S)  # scripts/gen_examples.py writes it
    assert m, "the docs example is missing"
    r = CliRunner().invoke(app, COMMAND.split()[1:], env={"COLUMNS": "100"})
    assert r.exit_code == 0, r.output
    assert [x.rstrip() for x in r.stdout.strip("\n").splitlines()] == m.group(1).strip("\n").splitlines()
