"""`runs import` of a file that fails validation creates no runs database (it is checked whole first)."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("sqlalchemy")

from vramfit.cli.main import app  # noqa: E402

runner = CliRunner()
PUBLIC = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "measured" / "public.jsonl"


def invoke(*args):
    return runner.invoke(app, list(args), env={"COLUMNS": "200"})


def _good_lines(n: int) -> list[str]:
    with open(PUBLIC, encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(n)]


@pytest.mark.parametrize("where", ["first", "last"])
def test_a_bad_file_creates_no_database(tmp_path, where):
    db = tmp_path / "sub" / "runs.sqlite"
    good = _good_lines(2)
    lines = ['{"id": "x"}', *good] if where == "first" else [*good, '{"id": "x"}']
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    r = invoke("runs", "import", str(bad), "--db", str(db))
    assert r.exit_code == 2 and f"line {1 if where == 'first' else 3}: missing field(s)" in r.output
    assert not db.exists() and not db.parent.exists()
    r = invoke("runs", "list", "--db", str(db))
    assert r.exit_code == 2 and "no runs database" in r.output and "vramfit runs import FILE" in r.output


def test_a_good_file_still_imports(tmp_path):
    db = tmp_path / "runs.sqlite"
    f = tmp_path / "good.jsonl"
    f.write_text("\n".join(_good_lines(1)) + "\n")
    r = invoke("runs", "import", str(f), "--db", str(db))
    assert r.exit_code == 0 and "imported 1 run(s)" in r.output and db.is_file()


def test_a_directory_is_named_as_one(tmp_path):
    db = tmp_path / "runs.sqlite"
    r = invoke("runs", "import", str(tmp_path), "--db", str(db))
    assert r.exit_code == 2 and "is a directory; give one JSON Lines file" in r.output
    assert not db.exists()


def test_list_refuses_an_unknown_method(tmp_path):
    db = tmp_path / "runs.sqlite"
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(_good_lines(3)) + "\n")
    assert invoke("runs", "import", str(good), "--db", str(db)).exit_code == 0
    r = invoke("runs", "list", "--method", "foo", "--db", str(db))
    assert r.exit_code == 2 and "method: unknown value 'foo' (valid values: full, lora, qlora)" in r.output
    r = invoke("runs", "list", "--method", "lora", "--db", str(db), "--json")
    assert r.exit_code == 0 and [json.loads(x)["scenario"]["method"] for x in r.output.splitlines()] == ["lora"]
