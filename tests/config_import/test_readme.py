"""The docs' (docs/import-config.md, moved from the README) "Import your training config" example is this command's real output."""

import re
import shutil
from pathlib import Path

from typer.testing import CliRunner

from vramfit.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
COMMAND = "vramfit fit --from qlora.yaml --gpu rtx3060-12gb --write-to fits.yaml"


def test_readme_import_example_is_generated(tmp_path, monkeypatch):
    readme = (ROOT / "docs" / "import-config.md").read_text(encoding="utf-8")
    m = re.search(re.escape(COMMAND) + r"\n```\n```\n(.*?)\n```", readme, re.S)
    assert m, "the README example is missing"
    shutil.copy(ROOT / "tests/config_import/fixtures/litgpt_qlora.yaml", tmp_path / "qlora.yaml")
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, COMMAND.split()[1:])
    assert r.exit_code == 0, r.output
    assert r.stderr.rstrip("\n") == m.group(1)
    assert "max_seq_length: 832" in (tmp_path / "fits.yaml").read_text()
