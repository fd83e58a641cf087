"""Review fixes: `runs export` never replaces the database or a user's file, `runs list` never cuts a figure,
the calibration file is checked and written safely, and `calibrate` keeps what it was not asked to replace."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("sqlalchemy")

from vramfit.calibration import load  # noqa: E402
from vramfit.cli.main import app  # noqa: E402
from vramfit.errors import VramfitError  # noqa: E402
from vramfit.measure.store import RunStore  # noqa: E402

GiB = 2**30
runner = CliRunner()


def invoke(*args: str, columns: int = 200, env: dict | None = None):
    return runner.invoke(app, list(args), env={"COLUMNS": str(columns), **(env or {})})


def one_line_error(res, exit_code: int = 2) -> str:
    assert res.exit_code == exit_code, res.output
    assert "Traceback" not in res.output and res.exception is None or isinstance(res.exception, SystemExit)
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    return lines[0]


@pytest.fixture
def db_file(tmp_path, make_record) -> Path:
    path = tmp_path / "runs.sqlite"
    st = RunStore(str(path))
    for _ in range(3):
        st.add(make_record())
    st.close()
    return path


# ------------------------------------------------------------------------------------------- runs export
@pytest.mark.parametrize("how", ["same path", "symlink"])
def test_export_refuses_to_write_over_the_database(db_file, tmp_path, how):
    target = db_file
    if how == "symlink":
        target = tmp_path / "link.jsonl"
        target.symlink_to(db_file)
    before = db_file.read_bytes()
    line = one_line_error(invoke("runs", "export", str(target), "--db", str(db_file)))
    assert "path:" in line and "is the runs database itself" in line
    assert db_file.read_bytes() == before
    assert len(RunStore(str(db_file)).list()) == 3


def test_export_refuses_the_default_database(tmp_path, make_record, monkeypatch):
    monkeypatch.delenv("VRAMFIT_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    st = RunStore()
    st.add(make_record())
    st.close()
    default = tmp_path / "data" / "vramfit" / "runs.sqlite"
    before = default.read_bytes()
    line = one_line_error(invoke("runs", "export", str(default)))
    assert "is the runs database itself" in line
    assert default.read_bytes() == before


def test_export_never_writes_over_another_file(db_file, tmp_path):
    mine = tmp_path / "notes.jsonl"
    mine.write_text("my own notes\n")
    line = one_line_error(invoke("runs", "export", str(mine), "--db", str(db_file)))
    assert "already exists with other content" in line and "never writes over a file" in line
    assert mine.read_text() == "my own notes\n"

    out = tmp_path / "out.jsonl"
    own_tmp = tmp_path / "out.jsonl.tmp"  # the old code wrote its temp file here and renamed it away
    own_tmp.write_text("keep me\n")
    assert invoke("runs", "export", str(out), "--db", str(db_file)).exit_code == 0
    first = out.read_text()
    assert len(first.splitlines()) == 9  # 3 runs x allocated, reserved, device
    res = invoke("runs", "export", str(out), "--db", str(db_file))  # the same export again: no loss, allowed
    assert res.exit_code == 0, res.output
    assert out.read_text() == first and own_tmp.read_text() == "keep me\n"
    assert sorted(p.name for p in tmp_path.iterdir() if ".tmp" in p.name) == ["out.jsonl.tmp"]


# --------------------------------------------------------------------------------------------- runs list
def test_runs_list_never_cuts_a_figure(tmp_path, make_record):
    db = tmp_path / "runs.sqlite"
    st = RunStore(str(db))
    st.add(make_record(scenario={"model": "meta-llama/Llama-3.1-8B", "method": "qlora", "seq_len": 32768},
                       allocated_bytes=round(72.28 * GiB), reserved_bytes=73 * GiB, device_bytes=74 * GiB,
                       tokens_per_s=4388.0))
    st.close()
    res = invoke("runs", "list", "--db", str(db), columns=80)
    assert res.exit_code == 0, res.output
    assert all(len(line) <= 80 for line in res.output.splitlines())
    row = next(line for line in res.output.splitlines() if "run0001" in line)
    cells = [c.strip() for c in row.strip("│").split("│")]
    assert cells[0] == "run0001abcdef" and "32768" in cells and "72.28" in cells and "4,388" in cells
    said = " ".join(res.output.split())
    assert "left out at 80 columns: ckpt, est, device, resv (a wider terminal or --json shows them)" in said
    wide = invoke("runs", "list", "--db", str(db), columns=200).output
    assert "left out" not in wide and "74.00" in wide and "73.00" in wide


# --------------------------------------------------------------------------------------- calibration file
def _family(**over):
    return {"runs": 3, "cuda_context_bytes": 548405248, "allocator_fraction": 0.03, **over}


@pytest.mark.parametrize("key,value", [
    ("cuda_context_bytes", "1e400"), ("cuda_context_bytes", str(2**41)), ("cuda_context_bytes", '"548405248"'),
    ("cuda_context_bytes", "5.5e8"), ("runs", "1.7"), ("runs", '"3"'), ("runs", "true"),
    ("allocator_fraction", '"0.1"'), ("gpus", '"h100"'),
])
def test_bad_calibration_values_are_one_line_errors(tmp_path, key, value):
    good = json.dumps(_family(gpus=["h100-sxm"], speed_factor=1.1, speed_runs=2))
    fam = good.replace(f'"{key}": ', f'"{key}": {value}, "_": ', 1)  # the bad value, the good one under "_"
    path = tmp_path / "c.json"
    path.write_text('{"version": 1, "families": {"h100": ' + fam + '}}')
    assert f"\"{key}\": {value}," in fam
    with pytest.raises(VramfitError, match=f"calibration file {path}: family 'h100'.*{key}"):
        load(path)
    for cmd in (["estimate", "--params", "1e9"], ["fit", "--params", "1e9", "--gpu", "h100-sxm"]):
        line = one_line_error(invoke(*cmd, env={"VRAMFIT_CALIBRATION": str(path)}))
        assert str(path) in line and key in line


def test_good_calibration_values_still_load(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"version": 1, "families": {"h100": _family(runs=7, gpus=["h100-sxm"])}}))
    fc = load(path).families["h100"]
    assert (fc.runs, fc.cuda_context_bytes, fc.allocator_fraction, fc.gpus) == (7, 548405248, 0.03, ("h100-sxm",))


# ------------------------------------------------------------------------------------------------ calibrate
@pytest.mark.parametrize("where", ["a folder", "empty", "inside a file"])
def test_calibrate_to_an_unusable_path_is_one_line(db_file, tmp_path, monkeypatch, where):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plain.txt").write_text("x")
    path = {"a folder": str(tmp_path), "empty": "", "inside a file": str(tmp_path / "plain.txt" / "c.json")}[where]
    line = one_line_error(invoke("calibrate", "--db", str(db_file), "--calibration", path))
    assert line.startswith("error: calibration: ")
    assert line.endswith("plain.txt' is a file, not a folder" if where == "inside a file"
                         else "is a directory; give a file name")
    assert (tmp_path / "plain.txt").read_text() == "x"


def test_calibrate_writes_atomically(db_file, tmp_path, monkeypatch):
    path = tmp_path / "cal.json"
    assert invoke("calibrate", "--db", str(db_file), "--calibration", str(path)).exit_code == 0
    before = path.read_text()

    def refuse(src, dst):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", refuse)
    line = one_line_error(invoke("calibrate", "--db", str(db_file), "--calibration", str(path)))
    assert line == f"error: calibration: cannot write '{path}': Permission denied"
    assert path.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cal.json", "runs.sqlite"]  # no temp file left


def test_calibrate_never_writes_over_a_file_that_is_not_a_calibration(db_file, tmp_path):
    mine = tmp_path / "notes.json"
    mine.write_text('{"mine": true}')
    line = one_line_error(invoke("calibrate", "--db", str(db_file), "--calibration", str(mine)))
    assert "is not a calibration file vramfit can read" in line and "never writes over it" in line
    assert mine.read_text() == '{"mine": true}'


def test_calibrate_with_calibration_off_writes_nothing(db_file, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = invoke("calibrate", "--db", str(db_file), env={"VRAMFIT_CALIBRATION": "off"})
    assert res.exit_code == 0, res.output
    assert not (tmp_path / "off").exists()
    assert "VRAMFIT_CALIBRATION=off: no calibration file written (--calibration PATH writes one)" in res.output
    data = json.loads(invoke("calibrate", "--db", str(db_file), "--json", env={"VRAMFIT_CALIBRATION": "off"}).output)
    assert data["calibration_file"] is None and not (tmp_path / "off").exists()
    res = invoke("calibrate", "--db", str(db_file), "--calibration", "mine.json", env={"VRAMFIT_CALIBRATION": "off"})
    assert res.exit_code == 0 and load(tmp_path / "mine.json").families["h100"].runs == 3


def test_calibrate_with_model_keeps_the_other_families(tmp_path, make_record):
    db = tmp_path / "runs.sqlite"
    st = RunStore(str(db))
    for _ in range(2):
        st.add(make_record())  # Llama-3.2-1B on h100
    st.add(make_record(scenario={"model": "Qwen/Qwen2.5-7B", "method": "lora", "seq_len": 512},
                       device_bytes=11 * GiB + 900 * 2**20))
    st.close()
    path = tmp_path / "cal.json"
    old = {"h100": _family(runs=14, gpus=["h100-sxm"]), "h200": _family(runs=3, cuda_context_bytes=700 * 2**20)}
    path.write_text(json.dumps({"version": 1, "families": old}))
    res = invoke("calibrate", "--db", str(db), "--model", "Qwen", "--calibration", str(path))
    assert res.exit_code == 0, res.output
    fams = load(path).families
    assert fams["h100"].runs == 1 and fams["h100"].cuda_context_bytes == 900 * 2**20
    assert (fams["h200"].runs, fams["h200"].cuda_context_bytes) == (3, 700 * 2**20)
    said = " ".join(res.output.split())
    assert f"calibration for h100 (1 run) written to {path}" in said
    assert "--model: only the families of the matching runs were replaced; kept as they were: h200 (3 runs)" in said
    res = invoke("calibrate", "--db", str(db), "--calibration", str(path))  # unfiltered: the file is the runs' own
    assert res.exit_code == 0 and sorted(load(path).families) == ["h100"] and load(path).families["h100"].runs == 3
