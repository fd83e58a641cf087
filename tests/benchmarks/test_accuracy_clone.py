"""The accuracy benchmark runs from a fresh clone, with no ``../shared/`` beside it."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_accuracy_benchmark_runs_from_a_clean_clone(tmp_path):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout")
    clone = tmp_path / "clone"
    # the committed tree only: what a newcomer gets from `git clone`
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    assert not (clone.parent / "shared").exists()
    # the working tree's benchmark and data (so the test also covers uncommitted edits)
    for rel in ("benchmarks/accuracy.py", "benchmarks/data/measured/public.jsonl"):
        (clone / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, clone / rel)
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, "benchmarks/accuracy.py", "--json"], cwd=clone, env=env,
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    rows = [json.loads(x) for x in (ROOT / "benchmarks/data/measured/public.jsonl").read_text().splitlines() if x]
    assert len(rows) == 80
    summary = report["summary"]["ALL"]
    # the 56 rows with an exact sequence length, scored as the README's accuracy table says
    assert summary["n"] == sum(1 for r in rows if r["seq_exact"]) == 56
    assert summary["median_abs"] < 0.05
    assert summary["p90_abs"] < 0.15
