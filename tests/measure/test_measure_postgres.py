"""The shared-database path on a real PostgreSQL server: a throwaway cluster started in a temp dir.

Needs the server binaries (``initdb``, ``pg_ctl``; ``scripts/system-deps.sh`` installs them in CI) and
psycopg; skips with the reason otherwise. As root the server runs as the ``postgres`` user (PostgreSQL
refuses to run as root) through ``runuser``.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("sqlalchemy")

from vramfit.measure.records import RecordError, dumps_lines, parse_lines  # noqa: E402
from vramfit.measure.store import RunStore  # noqa: E402

pytestmark = pytest.mark.postgres


def _bindir() -> Path | None:
    found = shutil.which("initdb")
    candidates = ([found] if found else []) + sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    for c in candidates:
        d = Path(os.path.realpath(c)).parent
        if (d / "pg_ctl").is_file():
            return d
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def pg_url():
    bindir = _bindir()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) not found: install postgresql "
                    "(scripts/system-deps.sh) to run the shared-database test")
    pytest.importorskip("psycopg", reason="psycopg (PostgreSQL driver) is not installed")
    prefix: list[str] = []
    owner = None
    if os.geteuid() == 0:
        import pwd

        try:
            owner = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and there is no 'postgres' user to run the server as")
        if shutil.which("runuser") is None:
            pytest.skip("running as root and runuser is missing")
        prefix = ["runuser", "-u", "postgres", "--"]
    root = Path(tempfile.mkdtemp(prefix="vramfit-pg-"))
    if owner is not None:
        os.chown(root, owner.pw_uid, owner.pw_gid)
    data, port = root / "data", _free_port()
    env = {**os.environ, "LC_ALL": "C"}

    def run(*cmd: str) -> subprocess.CompletedProcess:
        return subprocess.run([*prefix, *cmd], capture_output=True, text=True, env=env, timeout=120)

    init = run(str(bindir / "initdb"), "-D", str(data), "-U", "vramfit", "--auth=trust", "-E", "UTF8", "--no-sync")
    if init.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"initdb failed: {init.stderr or init.stdout}")
    start = run(str(bindir / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"), "-w", "-t", "60",
                "-o", f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off", "start")
    if start.returncode != 0:
        log = (root / "server.log").read_text() if (root / "server.log").exists() else ""
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail(f"pg_ctl start failed: {start.stderr or start.stdout}\n{log}")
    try:
        yield f"postgresql://vramfit@127.0.0.1:{port}/postgres"
    finally:
        run(str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg(pg_url):
    st = RunStore(pg_url)
    st.prepare()
    with st._engine.begin() as conn:
        conn.execute(st._runs.delete())
    yield st
    st.close()


def test_schema_and_round_trip_on_postgres(pg, make_record):
    assert pg.url.startswith("postgresql+psycopg://")
    big = make_record(device_bytes=150 * 10**9, scenario={"model": "meta-llama/Llama-3.1-8B", "method": "qlora"})
    rec = pg.add(big)
    assert pg.get(rec.id[:6]).to_dict() == rec.to_dict()  # BigInteger and JSON come back exactly
    assert pg.list(model="3.1_8B") == []  # LIKE wildcards are escaped
    assert [r.id for r in pg.list(method="qlora", gpu="h100")] == [rec.id]


def test_team_moves_runs_between_sqlite_and_postgres(pg, tmp_path, make_record):
    local = RunStore(str(tmp_path / "mine.sqlite"))
    for _ in range(3):
        local.add(make_record())
    text, _, _ = dumps_lines(local.list())
    assert pg.add_many(parse_lines(text)) == (3, 0)
    assert pg.add_many(parse_lines(text)) == (0, 3)
    back, _, _ = dumps_lines(pg.list())
    assert sorted(back.splitlines()) == sorted(text.splitlines())


def test_conflicting_import_writes_nothing(pg, make_record):
    first = pg.add(make_record())
    with pytest.raises(RecordError):
        pg.add_many([make_record(), make_record(id=first.id, notes="changed")])
    assert pg.count() == 1


def test_concurrent_writers(pg, pg_url, make_record):
    recs = [make_record() for _ in range(40)]
    errors: list[BaseException] = []

    def writer(chunk):
        st = RunStore(pg_url)
        try:
            for r in chunk:
                st.add(r)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            st.close()

    threads = [threading.Thread(target=writer, args=(recs[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and pg.count() == 40


def test_killed_writer_leaves_no_partial_run(pg, pg_url, make_record):
    pg.add(make_record(id="before0000000000"))
    url = pg.url
    script = textwrap.dedent(f"""
        import os, signal
        from sqlalchemy import create_engine, text
        conn = create_engine({url!r}).connect()
        conn.begin()
        conn.execute(text("INSERT INTO runs (id, created_at, source_id, source, scenario, environment, status, "
                          "seq_exact, confidence, notes, details) VALUES ('half', '', 's', '', '{{}}', '{{}}', "
                          "'ok', true, 'high', '', '{{}}')"))
        conn.execute(text("UPDATE runs SET notes = 'overwritten'"))
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    runs = pg.list()
    assert [r.id for r in runs] == ["before0000000000"] and runs[0].notes == ""


# ------------------------------------------------ issue 12: one schema, the same limits as SQLite
def test_records_at_the_limits_read_back_equal_on_both_databases(pg, tmp_path, make_record):
    from vramfit.measure import record_schema as S

    rec = make_record(id="i" * S.MAX_ID_CHARS, notes="é✓中" * (S.MAX_TEXT_CHARS // 3), device_bytes=2**63 - 1,
                      details={"deep": json.loads('{"a":' * 15 + "1" + "}" * 15), "n": -(2**63)})
    lite = RunStore(str(tmp_path / "limits.sqlite"))
    for st in (lite, pg):
        assert st.add_many([rec]) == (1, 0)
        assert st.get(rec.id).to_dict() == rec.to_dict()


@pytest.mark.parametrize("over,message", [
    ({"environment": {"gpu_family": ["h100"]}}, "environment.gpu_family must be a string, got list"),
    ({"notes": "a\x00b"}, "notes contains a NUL character"),
    ({"details": {"x": float("inf")}}, "details.x must be a finite number"),
    ({"allocated_bytes": 2**63}, "allocated_bytes must be a positive integer number of bytes below 2**63"),
], ids=["family-list", "nul", "infinity", "bytes-2-63"])
def test_poisonous_records_are_refused_before_postgres_sees_them(pg, make_record, over, message):
    rec = make_record().to_dict()
    rec.update(over)
    with pytest.raises(RecordError) as err:
        pg.add_many(parse_lines(json.dumps(rec) + "\n"))
    assert message in str(err.value)
    assert pg.count() == 0


def test_nan_timing_reimport_is_a_no_op_on_postgres(pg, make_record):
    rec = make_record().to_dict()
    rec["step_time_s"] = float("nan")
    text = json.dumps(rec) + "\n"
    assert pg.add_many(parse_lines(text)) == (1, 0)
    assert pg.add_many(parse_lines(text)) == (0, 1)
    assert pg.get(rec["id"]).step_time_s is None


def test_bad_rows_on_postgres_are_reported_not_raised(pg, make_record):
    from sqlalchemy import text

    good = pg.add(make_record())
    with pg._engine.begin() as conn:
        conn.execute(text("INSERT INTO runs (id, created_at, source_id, source, scenario, environment, status, "
                          "seq_exact, confidence, notes, details, estimate) VALUES ('bad', '', 's', '', "
                          "'{\"model\": \"meta-llama/Llama-3.2-1B\"}', '{\"gpu_family\": [\"h100\"]}', 'ok', "
                          "true, 'high', '', '{}', '\"12 GiB\"')"))
    assert [r.id for r in pg.list()] == [good.id]
    assert pg.bad_rows[0][0] == "bad" and "must be" in pg.bad_rows[0][1]
    with pytest.raises(RecordError, match="run 'bad' is stored but invalid"):
        pg.get("bad")


def test_six_simultaneous_first_uses_on_postgres(pg, pg_url):
    from sqlalchemy import text

    with pg._engine.begin() as conn:
        conn.execute(text("DROP TABLE runs"))
    pg.close()
    script = ("import sys, time\nfrom vramfit.measure.store import RunStore\n"
              "start = float(sys.argv[1])\nwhile time.time() < start: pass\n"
              "st = RunStore(sys.argv[2]); st.prepare(); print(st.count())\n")
    start = time.time() + 2.0
    procs = [subprocess.Popen([sys.executable, "-c", script, str(start), pg_url], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(6)]
    results = [(p.wait(timeout=60), p.stdout.read().strip(), p.stderr.read()[-300:]) for p in procs]
    assert [r[:2] for r in results] == [(0, "0")] * 6, results
