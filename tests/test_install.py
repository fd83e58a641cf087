"""Installation that behaves: the bare install's message, the extras, the system packages script."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
#: Runs the console script with typer and rich unimportable, as after a bare `pip install vramfit`.
BARE = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('typer', 'rich'):
            raise ModuleNotFoundError(name)
        return None
sys.meta_path.insert(0, Block())
import importlib.util
_find = importlib.util.find_spec
importlib.util.find_spec = lambda n, *a: None if n in ('typer', 'rich') else _find(n, *a)
sys.argv = ['vramfit', 'estimate', '--params', '7e9']
from vramfit.cli.entry import run
run()
"""


def _run(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=ENV, timeout=120)


def test_bare_install_names_the_extra_to_install():
    res = _run(BARE)
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert "vramfit: the command line needs the 'cli' extra (typer, rich not installed):" in res.stderr
    assert "pip install 'vramfit[cli]'" in res.stderr
    for extra in ("cli", "web", "sim", "measure", "all"):
        assert f"vramfit[{extra}]:" in res.stderr
    assert f"$ vramfit\n{res.stderr}```" in (ROOT / "docs" / "install.md").read_text(encoding="utf-8")  # the docs show it


def test_entry_point_runs_the_cli_when_installed():
    res = _run("import sys; sys.argv=['vramfit','--help']; from vramfit.cli.entry import run; run()")
    assert res.returncode == 0, res.stderr
    assert "estimate" in res.stdout and "calibrate" in res.stdout


def test_pyproject_extras_and_license():
    tomllib = pytest.importorskip("tomllib")
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["license"] == "Apache-2.0"  # the SPDX string form (PEP 639), not the deprecated table
    assert meta["scripts"]["vramfit"] == "vramfit.cli.entry:run"
    extras = meta["optional-dependencies"]
    assert any(d.startswith("psycopg") for d in extras["postgres"])  # the PostgreSQL test runs where the server exists
    assert "postgres" in extras["all"][0]
    assert any(d.startswith("typer") for d in extras["cli"]) and "vramfit[cli]" in extras["web"]


def test_system_deps_says_what_and_why(tmp_path):
    """Without root, a missing Chromium is named with the tests that need it, and nothing is installed."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "id").write_text("#!/bin/sh\necho 1000\n")
    (bin_ / "id").chmod(0o755)
    for tool in ("ls", "mktemp", "tail", "rm"):
        (bin_ / tool).symlink_to(f"/bin/{tool}")
    res = subprocess.run(["/bin/bash", str(ROOT / "scripts/system-deps.sh")], capture_output=True, text=True,
                         env={"PATH": str(bin_)}, timeout=60)
    assert res.returncode == 0
    assert "chromium, chromium-driver: the browser tests (tests/web, marker 'browser')" in res.stdout
    assert "not installing (needs root and apt-get)" in res.stdout


def _pins() -> dict[str, str]:
    import re

    lines = (ROOT / "requirements" / "tested.txt").read_text().splitlines()
    pins = dict(line.split("==", 1) for line in lines if line and not line.startswith("#"))
    return {re.sub(r"[-_.]+", "-", k).lower(): v for k, v in pins.items()}


def test_make_test_installs_the_versions_the_suite_passed_with():
    """requirements/tested.txt pins every library the extras name (a release made after the last green run cannot
    turn a clean clone's CI red: accelerate 1.16 moved the call its FSDP plugin makes to find CUDA), and the
    Makefile's setup installs under it; inside that setup every pinned library is at its pinned version."""
    import re
    from importlib import metadata

    tomllib = pytest.importorskip("tomllib")
    pins = _pins()
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    named = {re.sub(r"[-_.]+", "-", re.split(r"[\[<>=!~ ]", req, maxsplit=1)[0]).lower()
             for reqs in extras.values() for req in reqs}
    named -= {"vramfit"}
    assert named <= set(pins), sorted(named - set(pins))
    assert pins["torch"] == "2.13.0" and pins["torchtitan"] == "0.3.0"
    make = (ROOT / "Makefile").read_text()
    assert "cp requirements/tested.txt $(VENV)/constraints.txt" in make
    assert "-c $(VENV)/constraints.txt -e '.[all,test]'" in make
    made = Path(sys.prefix) / "constraints.txt"  # written by the Makefile's setup: this is its .venv
    if made.exists() and made.read_text() == (ROOT / "requirements" / "tested.txt").read_text():
        for name in ("transformers", "peft", "accelerate", "trl", "deepspeed", "bitsandbytes", "fastapi", "typer"):
            assert metadata.version(name) == pins[name], name


#: The console script with torch and the libraries of the sim/measure extras unimportable, as after
#: `pip install 'vramfit[cli]'`: every command but simulate and measure must work, and those two name the extra.
NO_TORCH = """
import importlib.abc, importlib.util, sys
EXTRAS = ('torch', 'transformers', 'peft', 'bitsandbytes', 'accelerate', 'deepspeed', 'trl')
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in EXTRAS:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Block())
_find = importlib.util.find_spec
importlib.util.find_spec = lambda n, *a: None if n.split('.')[0] in EXTRAS else _find(n, *a)
from typer.testing import CliRunner
from vramfit.cli.main import app
for line in sys.argv[1:]:
    r = CliRunner().invoke(app, line.split())
    print(r.exit_code, line, '|', (r.stderr or '').strip().splitlines()[-1:] if r.exit_code else '', sep=' ')
"""


def test_every_command_runs_on_the_cli_install_without_torch():
    pytest.importorskip("typer")
    commands = ["models", "models vision", "gpus", "guide-table",
                "estimate --model meta-llama/Llama-3.2-11B-Vision --method qlora",
                "estimate --model ibm-granite/granite-3.1-3b-a800m-instruct --method full --json",
                "plan --model OpenGVLab/InternVL3-8B-hf --method lora",
                "fit --model HuggingFaceTB/SmolVLM2-2.2B-Instruct --method full --gpu a100-80gb",
                "sweep --model HuggingFaceTB/SmolLM3-3B --method lora --vary seq_len=512..2048"]
    res = _run(NO_TORCH, *commands, "simulate --model meta-llama/Llama-3.1-8B --method qlora",
               "measure --model meta-llama/Llama-3.1-8B --method qlora")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    assert lines[:len(commands)] == [f"0 {c} | " for c in commands]
    assert lines[-2] == ("2 simulate --model meta-llama/Llama-3.1-8B --method qlora | "
                         "[\"error: torch is not installed: install the sim extra (pip install 'vramfit[sim]')\"]")
    assert lines[-1].startswith("2 measure ") and "torch is not installed: install the measure extra" in lines[-1]
