"""The docs' (docs/dataset.md, moved from the README) dataset example is this command's real output, on the committed fixtures."""

import re
from pathlib import Path

from dsutil import make_readme_fixtures
from typer.testing import CliRunner

from vramfit.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
COMMAND = ("vramfit fit --model Qwen/Qwen2.5-7B --method qlora --gradient-checkpointing full --gpu rtx4090 "
           "--micro-batch-size 4 --dataset tests/dataset/fixtures/chat.jsonl --tokenizer tests/dataset/fixtures/tok "
           "--group-by-length")


def test_readme_dataset_example_is_generated(monkeypatch):
    readme = (ROOT / "docs" / "dataset.md").read_text(encoding="utf-8")
    m = re.search(re.escape(COMMAND) + r"\n```\n```\n(.*?)\n```", readme, re.S)
    assert m, "the README example is missing"
    monkeypatch.chdir(ROOT)
    r = CliRunner().invoke(app, COMMAND.split()[1:])
    assert r.exit_code == 0, r.output
    assert r.stderr.rstrip("\n") == m.group(1)


def test_fixtures_are_what_the_generator_writes(tmp_path):
    make_readme_fixtures(tmp_path)
    for name in ("chat.jsonl", "tok/tokenizer_config.json"):
        assert (tmp_path / name).read_bytes() == (ROOT / "tests/dataset/fixtures" / name).read_bytes(), name
