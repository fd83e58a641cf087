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
    sets = [f"benchmarks/data/measured/{n}" for n in ("public.jsonl", "found.jsonl", "stages.jsonl", "vramfit_h200.jsonl",
                                                       "vramfit_h100.jsonl", "vlm.jsonl")]
    for rel in ("benchmarks/accuracy.py", *sets):
        (clone / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, clone / rel)
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [sys.executable, "benchmarks/accuracy.py", "--json"], cwd=clone, env=env,
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    rows = [json.loads(x) for rel in sets for x in (ROOT / rel).read_text().splitlines() if x]
    assert len(rows) == 361
    summary = report["summary"]
    # the 233 rows with an exact sequence length (43 of public.jsonl, 120 of found.jsonl, the 27 H200 and 42 H100 runs'
    # counters, ms-swift's packed Qwen2.5-VL run of vlm.jsonl), as the README's table says
    assert summary["ALL"]["n"] == sum(1 for r in rows if r["seq_exact"]) == 233
    assert summary["vramfit-measure"]["n"] == 69 and summary["vramfit-measure"]["median_abs"] < 0.02
    assert summary["LIT_RES"]["median_abs"] < 0.05 and summary["ALL"]["median_abs"] < 0.06
    # the clone reproduces the figures of the working tree exactly (the README and docs tables are generated
    # from them and checked by tests/test_docs_examples.py)
    here = subprocess.run([sys.executable, str(ROOT / "benchmarks/accuracy.py"), "--json"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=True)
    assert report == json.loads(here.stdout)
