"""`vramfit runs show` on any record `runs import` accepts: its text is never read as Rich markup, and fields an imported
record may hold in any JSON shape (details.load, remarks, assumptions, environment.packages) print as text. A bracketed
path in an error message, or a number where a list was written, ended the command in a traceback."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

pytest.importorskip("sqlalchemy")

from vramfit.cli.main import app  # noqa: E402

runner = CliRunner()


@pytest.mark.parametrize("change", [
    {"status": "error", "details": {"failed_at": "step1", "error": "RuntimeError: expected [/dev/nvidia0] to be open"}},
    {"details": {"load": 5}}, {"details": {"remarks": 5, "assumptions": "[/x]"}},
    {"environment": {"packages": ["torch", "[/bold]"], "gpu_name": "[/red] card", "memory_probe": "[/p]"}},
    {"tokens_per_s": None, "step_time_s": 1.5}, {"id": "[/run]abcdef0123"},
], ids=["bracketed-error", "load-number", "remarks-number", "packages-list", "no-rate", "bracketed-id"])
def test_runs_show_prints_any_imported_record(tmp_path, make_record, sqlite_url, change):
    rec = make_record().to_dict()
    for key, value in change.items():
        rec[key] = {**rec[key], **value} if isinstance(value, dict) and isinstance(rec.get(key), dict) else value
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    assert runner.invoke(app, ["runs", "import", str(path), "--db", sqlite_url]).exit_code == 0
    res = runner.invoke(app, ["runs", "show", rec["id"], "--db", sqlite_url], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    shown = " ".join(res.output.split())
    for text in ("[/dev/nvidia0]", "[/red] card", "[/run]abcdef0123", "[/x]"):
        if text in json.dumps(rec):
            assert text in shown


def test_an_embedded_record_without_its_id_or_a_bad_confidence_says_what_is_wanted(tmp_path, make_record, sqlite_url):
    from vramfit.measure.records import to_lines

    line = to_lines(make_record())[0]
    del line["vramfit_run"]["id"]
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps(line) + "\n")
    res = runner.invoke(app, ["runs", "import", str(path), "--db", sqlite_url])
    assert res.exit_code == 2 and "vramfit_run: missing field(s) id (a record needs id, created_at" in res.output
    assert "__init__" not in res.output
    rec = make_record().to_dict()
    rec["confidence"] = "super"
    path.write_text(json.dumps(rec) + "\n")
    res = runner.invoke(app, ["runs", "import", str(path), "--db", sqlite_url])
    assert res.exit_code == 2 and "confidence: unknown value 'super' (valid values: high, medium, low)" in res.output
