"""Review fixes: a file the user names that cannot be read (no permission, an I/O error) is one line naming the
option, exit 2, never a traceback. The tests run as root, so chmod 000 reads anyway: opening and reading are
made to fail instead."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vramfit.cli.main import app

runner = CliRunner()
MODEL = ["--model", "Qwen/Qwen2.5-7B", "--method", "lora"]


def one_line_error(res) -> str:
    assert res.exit_code == 2, res.output
    assert not isinstance(res.exception, OSError) and "Traceback" not in res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    return lines[0]


@pytest.fixture
def unreadable(monkeypatch):
    """Opening a file named ``locked.*`` for reading through pathlib raises PermissionError, as for a file without
    read rights (writing it, as the tests do first, works)."""
    real_open = Path.open

    def refuse(self, *args, **kwargs):
        if self.name.startswith("locked.") and "r" in (args[0] if args else kwargs.get("mode", "r")):
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", refuse)


def test_from_file_without_read_permission(tmp_path, unreadable):
    f = tmp_path / "locked.yaml"
    f.write_text("model_name_or_path: Qwen/Qwen2.5-7B\n")
    line = one_line_error(runner.invoke(app, ["estimate", "--from", str(f)]))
    assert line == f"error: from: {f}: cannot read it: Permission denied"


def test_deepspeed_config_without_read_permission(tmp_path, unreadable):
    f = tmp_path / "locked.json"
    f.write_text(json.dumps({"zero_optimization": {"stage": 2}}))
    line = one_line_error(runner.invoke(app, ["estimate", *MODEL, "--num-gpus", "2", "--deepspeed-config", str(f)]))
    assert line == f"error: deepspeed_config: {f}: cannot read it: Permission denied"


@pytest.mark.parametrize("suffix", ["jsonl", "json", "csv"])
def test_dataset_without_read_permission(tmp_path, unreadable, suffix):
    f = tmp_path / f"locked.{suffix}"
    f.write_text('{"text": "hello"}\n' if suffix != "csv" else "text\nhello\n")
    line = one_line_error(runner.invoke(app, ["estimate", *MODEL, "--dataset", str(f)]))
    assert line == f"error: dataset: cannot read {f}: Permission denied"


def test_batch_read_error_mid_file(tmp_path, monkeypatch):
    f = tmp_path / "b.jsonl"
    f.write_text(json.dumps({"params": 1e9}) + "\n" + json.dumps({"params": 2e9}) + "\n")

    class FailingFile:  # the first line reads, the second is an I/O error (a failing disk, a network share)
        def __init__(self):
            self.lines = iter([f.read_bytes().splitlines(keepends=True)[0]])

        def readline(self, size=-1):
            try:
                return next(self.lines)
            except StopIteration:
                raise OSError(5, "Input/output error") from None

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr("vramfit.cli.options.open", lambda *a, **k: FailingFile(), raising=False)
    res = runner.invoke(app, ["estimate", "--batch", str(f)])
    assert res.exit_code == 2 and not isinstance(res.exception, OSError), res.output
    out = res.stdout.strip().splitlines()
    assert len(out) == 1 and json.loads(out[0])["scenario"]["params"] == 1_000_000_000  # the line read before
    assert res.stderr.strip() == f"error: batch: cannot read '{f}' at line 2: Input/output error"
