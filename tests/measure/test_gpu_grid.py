"""benchmarks/gpu_grid.py: the grid's coverage, and its CPU dry run (the GPU path minus the CUDA counters)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark_modules import load_benchmark
from vramfit import estimate
from vramfit.measure.records import parse_lines
from vramfit.models import resolve_model

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_grid.py"


def _grid_module():
    return load_benchmark("gpu_grid")


def test_grid_covers_what_the_issue_asks():
    grid = _grid_module().GRID
    assert len(grid) >= 10
    scs = list(grid.values())
    assert {s["method"] for s in scs} == {"full", "lora", "qlora"}
    assert len({s["seq_len"] for s in scs}) >= 2
    assert {s["gradient_checkpointing"] for s in scs} >= {"none", "full"}
    sizes = {resolve_model(s["model"]).spec.num_params for s in scs}
    assert min(sizes) >= 1e9 and max(sizes) <= 9e9 and len(sizes) >= 3


def test_family_grid_adds_other_architectures_and_long_context():
    mod = _grid_module()
    fam = mod.FAMILY_GRID
    assert not set(fam) & set(mod.GRID)
    types = {resolve_model(s["model"]).config["model_type"] for s in fam.values()}
    assert types >= {"qwen2", "gemma2", "qwen3", "qwen3_moe"}
    long_qlora = sorted(s["seq_len"] for s in fam.values() if s["method"] == "qlora" and not s.get("modules_to_save"))
    assert long_qlora == [8192, 32768]
    # PEFT's whole trained copies and DoRA, each beside its plain LoRA twin at the same length
    adapters = {n: (s["method"], s.get("dora", False), tuple(s.get("modules_to_save", ()))) for n, s in fam.items()
                if s["seq_len"] == 1024}
    assert sorted(adapters.values()) == [("lora", False, ()), ("lora", False, ("embed_tokens", "lm_head")),
                                         ("lora", True, ()), ("qlora", False, ("embed_tokens", "lm_head"))]


def test_only_runs_entries_in_the_order_given(tmp_path):
    chosen = _grid_module().scenarios(["gemma2-2b-lora-s2048", "l1b-full-s512"], False, tmp_path)
    assert [n for n, _ in chosen] == ["gemma2-2b-lora-s2048", "l1b-full-s512"]


def test_every_grid_entry_is_measurable_and_fits_a_141_gb_card():
    from vramfit.measure.build import check_measurable
    from vramfit.scenario import parse_scenario

    mod = _grid_module()
    for name, sc in {**mod.GRID, **mod.FAMILY_GRID}.items():
        scenario = parse_scenario(sc)
        check_measurable(scenario)
        assert estimate(scenario).peak.device_bytes < 120e9, name


def test_every_grid_entry_runs_through_the_harness_on_cpu(tmp_path):
    pytest.importorskip("torch")
    from vramfit.measure.probe import FakeProbe
    from vramfit.measure.runner import measure

    mod = _grid_module()
    for name, sc in mod.scenarios(None, True, tmp_path):
        sc["seq_len"] = 64  # every combination of method, precision, optimizer and checkpointing; short sequences
        rec = measure(sc, steps=1, device="cpu", in_process=True, probe=FakeProbe(), simulate=False)
        assert rec.status == "ok", (name, rec.details.get("error"))


@pytest.mark.slow
def test_dry_run_writes_importable_records(tmp_path):
    pytest.importorskip("torch")
    only = "l1b-full-mixed-s512,l8b-qlora-s512-ckpt"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--out", str(tmp_path), "--steps", "2",
                           "--only", only], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    measured = list(tmp_path.glob("gpu-grid-*-dry.measured.jsonl"))
    runs = list(tmp_path.glob("gpu-grid-*-dry.runs.jsonl"))
    assert len(measured) == 1 and len(runs) == 1
    lines = [json.loads(x) for x in measured[0].read_text().splitlines()]
    assert len(lines) == 2 * 3 and {x["measured"]["metric"] for x in lines} == {"allocated", "reserved", "device"}
    recs = parse_lines(measured[0].read_text())
    assert sorted(r.notes.split()[-1] for r in recs) == sorted(only.split(","))
    assert [r.id for r in parse_lines(runs[0].read_text())] == [r.id for r in recs]
    assert "done in" in proc.stdout


def test_list_and_unknown_entries(tmp_path):
    out = subprocess.run([sys.executable, str(SCRIPT), "--list"], capture_output=True, text=True, check=True)
    mod = _grid_module()
    assert len(out.stdout.splitlines()) == len(mod.GRID) + len(mod.FAMILY_GRID)
    bad = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--out", str(tmp_path), "--only", "nope"],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "unknown grid entries: nope" in bad.stderr


@pytest.mark.slow
def test_budget_stops_before_a_run_that_could_overrun(tmp_path):
    pytest.importorskip("torch")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--out", str(tmp_path), "--steps", "1",
                           "--budget-s", "1", "--only", "l1b-lora-s2048,l3b-lora-s512"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "l3b-lora-s512 and later entries not run" in proc.stdout
    (runs,) = tmp_path.glob("gpu-grid-*.runs.jsonl")
    assert len(runs.read_text().splitlines()) == 1
