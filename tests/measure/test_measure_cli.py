"""``vramfit measure``, ``vramfit runs …`` and ``vramfit calibrate`` through the real CLI app."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("sqlalchemy")

from vramfit.cli.main import app  # noqa: E402
from vramfit.measure.records import dumps_lines  # noqa: E402
from vramfit.measure.store import RunStore  # noqa: E402

runner = CliRunner()


def invoke(*args: str, env: dict | None = None):
    return runner.invoke(app, list(args), env={"COLUMNS": "200", **(env or {})})


@pytest.fixture
def filled(sqlite_url, make_record):
    st = RunStore(sqlite_url)
    recs = [st.add(make_record()), st.add(make_record(scenario={"model": "meta-llama/Llama-3.1-8B", "method": "qlora"})),
            st.add(make_record(status="oom", allocated_bytes=None, reserved_bytes=None, device_bytes=None))]
    st.close()
    return recs


def test_commands_are_registered():
    out = invoke("--help").output
    for name in ("measure", "runs", "calibrate"):
        assert name in out
    runs = invoke("runs", "--help").output
    for name in ("list", "show", "export", "import"):
        assert name in runs
    measure = invoke("measure", "--help").output
    for opt in ("--steps", "--weights", "--db", "--device", "--seq-len", "--scenario"):
        assert opt in measure


@pytest.mark.slow
def test_measure_on_cpu_stores_the_run(tiny, sqlite_url):
    sc = tiny(method="lora")
    res = invoke("measure", "--model", sc["model"], "--seq-len", "32", "--steps", "2", "--device", "cpu",
                 "--no-simulate", "--db", sqlite_url, "--json")
    assert res.exit_code == 0, res.output
    rec = json.loads(res.output)
    assert rec["status"] == "ok" and rec["steps_done"] == 2 and rec["environment"]["device"] == "cpu"
    assert RunStore(sqlite_url).get(rec["id"]).scenario["seq_len"] == 32


@pytest.mark.parametrize("model,message", [
    ("gpt2", "model: unknown model 'gpt2'"),
    ("meta-llama/Llama-3.2-1B", "no CUDA GPU is visible to PyTorch here"),
], ids=["unknown-model", "no-gpu"])
def test_measure_errors_come_before_the_progress_line(sqlite_url, monkeypatch, model, message):
    """The progress line ('measuring … on 1 cuda device(s) …') was printed before these errors."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    res = invoke("measure", "--model", model, "--method", "lora", "--seq-len", "64", "--db", sqlite_url)
    assert res.exit_code == 2, res.output
    assert message in res.output and "measuring" not in res.output and len(res.output.strip().splitlines()) == 1


def test_measure_rejects_unmeasurable_scenarios_before_running(sqlite_url):
    res = invoke("measure", "--model", "meta-llama/Llama-3.2-1B", "--num-gpus", "2", "--parallelism", "zero3",
                 "--db", sqlite_url)
    assert res.exit_code == 2 and "DeepSpeed ZeRO" in res.output


def test_runs_list_and_show(filled, sqlite_url):
    res = invoke("runs", "list", "--db", sqlite_url)
    assert res.exit_code == 0 and "3 run(s)" in res.output and "oom" in res.output and "more match" not in res.output
    res = invoke("runs", "list", "--db", sqlite_url, "--limit", "2")  # the headline said '2 run(s)' of 3
    assert res.exit_code == 0 and "2 run(s)" in res.output and "(the newest 2; more match: raise --limit)" in \
        " ".join(res.output.split())
    res = invoke("runs", "list", "--db", sqlite_url, "--limit", "2", "--json")
    assert len(res.output.splitlines()) == 2
    res = invoke("runs", "list", "--db", sqlite_url, "--method", "qlora", "--json")
    lines = [json.loads(x) for x in res.output.splitlines()]
    assert [x["id"] for x in lines] == [filled[1].id]
    res = invoke("runs", "show", filled[0].id[:8], "--db", sqlite_url)
    assert res.exit_code == 0 and filled[0].id in res.output and "est. − meas." in res.output
    res = invoke("runs", "show", filled[0].id, "--db", sqlite_url, "--json")
    assert json.loads(res.output) == filled[0].to_dict()


def test_runs_export_import_round_trip(filled, sqlite_url, tmp_path):
    out = tmp_path / "runs.jsonl"
    res = invoke("runs", "export", str(out), "--db", sqlite_url)
    assert res.exit_code == 0, res.output
    assert "6 line(s) from 2 run(s)" in res.output and "1 run(s) without figures" in res.output
    assert out.read_text() == dumps_lines(list(reversed(RunStore(sqlite_url).list())))[0]
    other = f"sqlite:///{tmp_path / 'other.sqlite'}"
    res = invoke("runs", "import", str(out), "--db", other)
    assert res.exit_code == 0 and "imported 2 run(s)" in res.output
    res = invoke("runs", "import", str(out), "--db", other)
    assert "imported 0 run(s)" in res.output and "2 already present" in res.output
    rec_file = tmp_path / "records.jsonl"
    invoke("runs", "export", str(rec_file), "--db", sqlite_url, "--format", "records")
    res = invoke("runs", "import", str(rec_file), "--db", other)
    assert "imported 1 run(s)" in res.output and "2 already present" in res.output  # the OOM run too
    device_only = invoke("runs", "export", "-", "--db", sqlite_url, "--metric", "device").output
    assert {json.loads(x)["measured"]["metric"] for x in device_only.splitlines() if x.startswith("{")} == {"device"}


def test_import_of_a_bad_file_names_the_line_and_imports_nothing(filled, sqlite_url, tmp_path):
    good = dumps_lines(filled[:1])[0].splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([good[0], '{"id": "x"}', good[1]]) + "\n")
    other = f"sqlite:///{tmp_path / 'other.sqlite'}"
    res = invoke("runs", "import", str(bad), "--db", other)
    assert res.exit_code == 2 and "line 2: missing field(s)" in res.output
    assert not Path(other.removeprefix("sqlite:///")).exists()  # checked whole before the database is made


@pytest.mark.parametrize("args,message", [
    (("runs", "list", "--status", "done"), "status: unknown value 'done'"),
    (("runs", "show", "nope"), "no run with id 'nope'"),
    (("runs", "export", "-", "--metric", "peak"), "metric: unknown value 'peak'"),
    (("runs", "export", "-", "--format", "csv"), "format: unknown value 'csv'"),
    (("runs", "import", "/no/such/file.jsonl"), "file not found"),
    (("calibrate", "--db", "nosuchdialect://x"), "invalid database URL"),
], ids=["status", "show", "metric", "format", "import-missing", "bad-url"])
def test_user_errors_are_one_line(filled, sqlite_url, args, message):
    extra = () if "--db" in args else ("--db", sqlite_url)
    res = invoke(*args, *extra)
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output


def test_calibrate(filled, sqlite_url):
    res = invoke("calibrate", "--db", sqlite_url)
    assert res.exit_code == 0, res.output
    assert "Estimator error on 2 run(s)" in res.output and "h100" in res.output
    data = json.loads(invoke("calibrate", "--db", sqlite_url, "--json").output)
    assert data["runs"] == 3 and data["scored"] == 2 and data["overheads"][0]["gpu_family"] == "h100"
    empty = sqlite_url.replace("runs.sqlite", "empty.sqlite")
    res = invoke("calibrate", "--db", empty)
    assert res.exit_code == 2 and "no runs database at" in res.output
    RunStore(empty).prepare()
    assert "no runs stored yet" in invoke("calibrate", "--db", empty).output


def test_db_from_environment_variable(filled, sqlite_url):
    res = invoke("runs", "list", env={"VRAMFIT_DB": sqlite_url})
    assert res.exit_code == 0 and "3 run(s)" in res.output
