"""The runs database on SQLite: schema on first use, queries, transactional writes, interrupted writes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("sqlalchemy")

from vramfit.measure.records import RecordError, dumps_lines, parse_lines  # noqa: E402
from vramfit.measure.store import ENV_VAR, DatabaseError, RunStore, default_url, resolve_url  # noqa: E402


def test_schema_is_created_on_first_write(tmp_path):
    path = tmp_path / "deep" / "dir" / "runs.sqlite"
    st = RunStore(str(path))
    with pytest.raises(DatabaseError, match="no runs database at .*runs.sqlite: nothing is stored there"):
        st.count()  # reading creates nothing
    assert not (tmp_path / "deep").exists()
    st.prepare()
    assert st.count() == 0
    assert path.is_file()
    st.close()


def test_add_get_and_prefix(store, make_record):
    rec = store.add(make_record(id="abcdef0123456789"))
    assert store.get("abcdef0123456789").to_dict() == rec.to_dict()
    assert store.get("abcdef").id == rec.id
    store.add(make_record(id="abcxyz0000000000"))
    with pytest.raises(RecordError, match="2 runs start with 'abc'"):
        store.get("abc")
    with pytest.raises(RecordError, match="no run with id 'zzz'"):
        store.get("zzz")
    with pytest.raises(RecordError, match="no run"):
        store.get("abc%")  # LIKE wildcards are literal


def test_list_filters_and_orders_newest_first(store, make_record):
    store.add(make_record(created_at="2026-01-01T00:00:00Z"))
    store.add(make_record(created_at="2026-01-03T00:00:00Z", status="oom", allocated_bytes=None,
                          reserved_bytes=None, device_bytes=None))
    store.add(make_record(created_at="2026-01-02T00:00:00Z",
                          scenario={"model": "meta-llama/Llama-3.1-8B", "method": "qlora"},
                          environment={"gpu_name": "NVIDIA A100-SXM4-80GB"}))
    assert [r.created_at[:10] for r in store.list()] == ["2026-01-03", "2026-01-02", "2026-01-01"]
    assert len(store.list(status="oom")) == 1
    assert len(store.list(method="qlora")) == 1
    assert len(store.list(model="3.1-8B")) == 1
    assert len(store.list(gpu="A100 80GB")) == 1 and len(store.list(gpu="h100")) == 2
    assert len(store.list(limit=2)) == 2


def test_duplicate_id_writes_nothing(store, make_record):
    rec = store.add(make_record())
    with pytest.raises(DatabaseError, match="nothing was written"):
        store.add(make_record(id=rec.id, notes="other"))
    assert store.count() == 1 and store.get(rec.id).notes == ""


def test_import_is_one_transaction(store, make_record):
    first = store.add(make_record())
    batch = [make_record(), make_record(), make_record(id=first.id, notes="changed")]
    with pytest.raises(RecordError, match="already stored .* with different content"):
        store.add_many(batch)
    assert store.count() == 1
    added, skipped = store.add_many([first, *batch[:2]])
    assert (added, skipped) == (2, 1) and store.count() == 3
    assert store.add_many(batch[:2]) == (0, 2)  # importing twice adds nothing


def test_interrupted_import_rolls_back(store, make_record, monkeypatch):
    store.add(make_record())
    recs = [make_record() for _ in range(5)]
    real = store._row
    calls = {"n": 0}

    def row(rec):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # Ctrl-C while the rows are being written
        return real(rec)

    monkeypatch.setattr(store, "_row", row)
    with pytest.raises(KeyboardInterrupt):
        store.add_many(recs)
    monkeypatch.setattr(store, "_row", real)
    assert store.count() == 1


def test_killed_writer_leaves_earlier_runs_and_no_partial_run(tmp_path, make_record):
    url = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    st = RunStore(url)
    st.add(make_record(id="before0000000000"))
    st.close()
    script = textwrap.dedent(f"""
        import os, signal
        from sqlalchemy import create_engine, text
        eng = create_engine({url!r})
        conn = eng.connect()
        tx = conn.begin()
        conn.execute(text("INSERT INTO runs (id, created_at, source_id, source, scenario, environment, status, "
                          "seq_exact, confidence, notes, details) VALUES ('half', '', 's', '', '{{}}', '{{}}', "
                          "'ok', 1, 'high', '', '{{}}')"))
        conn.execute(text("UPDATE runs SET notes = 'overwritten'"))
        os.kill(os.getpid(), signal.SIGKILL)  # dies inside the transaction
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    st = RunStore(url)
    runs = st.list()
    assert [r.id for r in runs] == ["before0000000000"] and runs[0].notes == ""
    st.add(make_record(id="after00000000000"))  # the database is usable afterwards
    assert st.count() == 2


def test_export_import_between_databases(tmp_path, make_record):
    a = RunStore(str(tmp_path / "a.sqlite"))
    recs = [a.add(make_record()) for _ in range(3)]
    text, _, _ = dumps_lines(a.list())
    b = RunStore(str(tmp_path / "b.sqlite"))
    assert b.add_many(parse_lines(text)) == (3, 0)
    assert sorted((r.to_dict() for r in b.list()), key=lambda d: d["id"]) == sorted(
        (r.to_dict() for r in recs), key=lambda d: d["id"])


def test_url_resolution(tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert resolve_url() == default_url()
    assert default_url().startswith("sqlite:///") and default_url().endswith("vramfit/runs.sqlite")
    monkeypatch.setenv(ENV_VAR, "sqlite:///from-env.sqlite")
    assert resolve_url() == "sqlite:///from-env.sqlite"
    assert resolve_url("sqlite:///flag.sqlite") == "sqlite:///flag.sqlite"  # --db wins over the variable
    assert resolve_url(str(tmp_path / "x.sqlite")) == f"sqlite:///{tmp_path / 'x.sqlite'}"
    if not _has("psycopg2"):
        assert resolve_url("postgresql://u:p@host/db") == "postgresql+psycopg://u:p@host/db"
    assert RunStore("postgresql+psycopg://u:secret@host/db").redacted_url == "postgresql+psycopg://u:***@host/db"


def test_bad_url_is_a_user_error():
    with pytest.raises(DatabaseError, match="invalid database URL"):
        RunStore("nosuchdialect://x/y").count()


def test_unreachable_database_is_a_user_error(tmp_path):
    target = tmp_path / "not-a-dir"
    target.write_text("")
    with pytest.raises(DatabaseError, match="cannot open"):
        RunStore(f"sqlite:///{target}/runs.sqlite").prepare()


def _has(mod: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(mod) is not None


def test_default_database_lives_in_the_user_data_dir(tmp_path, monkeypatch, make_record):
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    st = RunStore()
    st.add(make_record())
    assert Path(st.url[len("sqlite:///"):]).is_file()
    assert os.fspath(tmp_path / "xdg") in st.url
