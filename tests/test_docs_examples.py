"""Every example output in README.md and docs/ is what its command prints now (scripts/gen_examples.py),
and the documentation site builds offline with no warning (mkdocs build --strict)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _gen():
    spec = importlib.util.spec_from_file_location("gen_examples", ROOT / "scripts" / "gen_examples.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gen_examples"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_examples_match_their_commands():
    pytest.importorskip("uvicorn")  # the `vramfit serve` example
    gen = _gen()
    assert gen.examples(), "no generated example found"
    stale = gen.check()
    assert not stale, "examples out of date (run python scripts/gen_examples.py):\n" + "\n".join(stale)


def test_a_changed_example_is_caught(tmp_path):
    gen = _gen()
    page = tmp_path / "page.md"
    page.write_text("<!-- example: vramfit gpus --json; head=2 -->\n```console\n$ vramfit gpus --json\n[\n {\n…\n```\n")
    [ex] = gen.examples([page])
    assert ex.body == ex.fresh  # what the command prints
    page.write_text(page.read_text().replace(" {", " {\"edited\": 1,"))
    [ex] = gen.examples([page])
    assert ex.body != ex.fresh


def test_every_command_has_its_page():
    gen = _gen()
    pages = {p.stem for p in (ROOT / "docs" / "commands").glob("*.md")}
    assert pages == {n.replace(" ", "-") for n in gen.command_names()}
    assert "estimate" in pages and "runs-import" in pages


def test_site_builds_offline(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    pytest.importorskip("mkdocstrings")
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or "mkdocs"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT / "src")}
    res = subprocess.run([mkdocs, "build", "--strict", "-q", "-d", str(tmp_path / "site")], cwd=ROOT,
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    api = (tmp_path / "site" / "api.html").read_text(encoding="utf-8")
    assert 'id="vramfit.estimate.estimate"' in api and 'id="vramfit.calibration"' in api  # from the docstrings
    assert (tmp_path / "site" / "commands" / "plan.html").is_file()
    assert "fonts.googleapis.com" not in (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
