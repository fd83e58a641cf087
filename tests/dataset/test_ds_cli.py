"""`--dataset` on estimate, fit and plan as a user runs them; bad input is one line and exit 2."""

import json

import pytest
from dsutil import words, write_jsonl
from typer.testing import CliRunner

from vramfit.cli.main import app

runner = CliRunner()
M = ["--model", "meta-llama/Llama-2-7b-hf", "--method", "qlora"]
LENGTHS = [30] * 90 + [300] * 9 + [3000]


def run(*args):
    return runner.invoke(app, list(args))


@pytest.fixture
def known(tmp_path):
    return write_jsonl(tmp_path / "known.jsonl", [{"text": words(n - 2)} for n in LENGTHS])


def test_estimate_uses_the_peak_micro_batch(known, tok_dir, tmp_path):
    out = tmp_path / "report.json"
    r = run("estimate", *M, "--micro-batch-size", "4", "--seq-len", "1024", "--dataset", str(known),
            "--tokenizer", str(tok_dir), "--dataset-json", str(out), "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["scenario"]["seq_len"] == 1024 and d["scenario"]["micro_batch_size"] == 4
    assert "peak micro-batch 4 × 1,024 = 4,096 tokens" in r.stderr
    assert "1 samples truncated, 1,976 tokens dropped (23.5%); suggested max_length 2,944 loses 0.7%" in r.stderr
    assert json.loads(out.read_text())["train_tokens"] == 6424
    # packing: padding-free rows, the peak is the two fullest BFD rows as one
    p = run("estimate", *M, "--micro-batch-size", "2", "--seq-len", "1024", "--dataset", str(known),
            "--tokenizer", str(tok_dir), "--packing", "bfd", "--json")
    assert p.exit_code == 0, p.output
    assert json.loads(p.stdout)["scenario"]["seq_len"] == (1024 + 1020) // 2
    assert "packing efficiency 89.6%" in p.stderr
    # padding-free without packing: no truncation (TRL refuses max_length there); the peak is the 4 longest together
    f = run("estimate", *M, "--micro-batch-size", "4", "--dataset", str(known), "--tokenizer", str(tok_dir),
            "--padding-free", "--json")
    assert f.exit_code == 0, f.output
    assert "peak micro-batch 1 × 3,900 = 3,900 tokens" in f.stderr and "no truncation" in f.stderr
    assert json.loads(f.stdout)["scenario"]["seq_len"] == 3900 // 4


def test_plan_times_the_processed_tokens(known, tok_dir):
    report = tok_dir.parent / "r.json"
    r = run("plan", *M, "--seq-len", "4096", "--micro-batch-size", "4", "--dataset", str(known), "--tokenizer",
            str(tok_dir), "--cards", "h100-sxm", "--max-gpus", "1", "--epochs", "2", "--dataset-json", str(report), "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    rep = json.loads(report.read_text())
    processed = rep["processed_tokens"]
    assert processed > 8400  # padding to the longest of 4 random samples
    assert rep["processed_by_micro_batch"]["1"] == 8400 and rep["processed_by_micro_batch"]["4"] == processed
    assert d["inputs"]["dataset_tokens"] == 8400  # real tokens: disk
    assert d["inputs"]["total_tokens"] == 2 * processed  # time and cost: what the GPUs process
    for p in d["plans"]:  # each plan's own micro-batch sets its padding
        at = rep["processed_by_micro_batch"][str(p["micro_batch_size"])]
        assert p["hours"] == pytest.approx(2 * at / p["speed"]["tokens_per_s"] / 3600)
    assert d["scenario"]["seq_len"] == 3000  # the longest row: the peak at any micro-batch
    assert any(a.startswith("Time from the ") and "padding included" in a for a in d["assumptions"])
    assert not any(a.startswith("The dataset is packed") for a in d["assumptions"])
    both = run("plan", *M, "--dataset", str(known), "--dataset-tokens", "5M", "--cards", "h100-sxm")
    assert both.exit_code == 2 and "dataset_tokens: give the dataset or its token count, not both" in both.output


def test_fit_with_a_chart(known, tmp_path):
    pytest.importorskip("matplotlib")
    chart = tmp_path / "lengths.png"
    r = run("fit", *M, "--gpu", "rtx4090", "--dataset", str(known), "--length-chart", str(chart))
    assert r.exit_code == 0, r.output
    assert chart.stat().st_size > 5000 and "approximate" in r.stderr


@pytest.mark.parametrize("args, message", [
    (["--dataset", "missing.jsonl"], "error: dataset: file not found: missing.jsonl"),
    (["--dataset", "{known}", "--tokenizer", "no/such/tok"], "error: tokenizer: not found: no/such/tok"),
    (["--dataset", "{known}", "--field", "body"], "error: field: no column 'body' in the dataset"),
    (["--dataset", "{known}", "--packing", "zip"], "error: packing: unknown value 'zip' (valid values: none, bfd, bfd_split, wrapped)"),
    (["--tokenizer", "x"], "error: dataset: --tokenizer needs --dataset FILE"),
    (["--dataset", "{known}", "--max-length", "ten"], "error: max_length: must be a number"),
    (["--dataset", "{known}", "--field", "text,text"], "error: field: names the column 'text' twice; give one column"),
])
def test_bad_input_is_one_line_and_exit_2(known, args, message):
    r = run("estimate", *M, *[a.format(known=known) for a in args])
    assert r.exit_code == 2, r.output
    assert r.output.startswith(message) and r.output.count("\n") == 1 and "Traceback" not in r.output


def test_large_files_report_progress(known, monkeypatch):
    from vramfit.cli import dataset_opts

    monkeypatch.setattr(dataset_opts, "PROGRESS_MIN_BYTES", 10)
    seen = []
    import vramfit.dataset as ds  # run_dataset imports analyze_dataset from here when called

    orig = ds.analyze_dataset

    def spy(*a, on_rows=None, **kw):
        seen.append(on_rows)
        return orig(*a, on_rows=lambda n: (seen.append(n), on_rows(n)), **kw)

    monkeypatch.setattr(ds, "analyze_dataset", spy)
    r = run("estimate", *M, "--dataset", str(known), "--json")
    assert r.exit_code == 0, r.output
    assert callable(seen[0]) and seen[-1] == 100  # the progress callback got the final row count


@pytest.mark.parametrize("rows, message", [
    ([{"text": "a b"}, {"body": "c"}], "error: dataset: row 2 of d.jsonl has no column 'text' (the dataset's text column"),
    ([{"prompt": "a", "completion": "b"}, {"prompt": "c"}], "error: dataset: row 2 of d.jsonl has no column 'completion'"),
    ([{"text": ""}, {"text": ""}], "error: dataset: d.jsonl has no tokens: the text in 'text' is empty in every row"),
])
def test_rows_without_the_column_or_without_tokens_are_one_line(tmp_path, rows, message):
    """A later row lacking the first row's column was a KeyError traceback; all-empty rows said "seq_len ... got 0"."""
    data = write_jsonl(tmp_path / "d.jsonl", rows)
    r = run("estimate", *M, "--dataset", str(data))
    assert r.exit_code == 2, r.output
    assert r.output.startswith(message) and r.output.count("\n") == 1 and "Traceback" not in r.output
    batch = tmp_path / "b.jsonl"
    batch.write_text(json.dumps({"model": "meta-llama/Llama-2-7b-hf", "dataset": str(data)}) + "\n")
    b = run("estimate", "--batch", str(batch))
    assert json.loads(b.stdout)["error"].startswith(message.removeprefix("error: "))  # was "internal error"


def test_max_length_with_k_is_a_sequence_length_as_seq_len_is(known, tok_dir):
    """`--seq-len 1k` is 1,024 tokens; `--max-length 1k` was 1,000 (read as a count): now both are 1,024."""
    k = run("estimate", *M, "--micro-batch-size", "4", "--seq-len", "1k", "--dataset", str(known),
            "--tokenizer", str(tok_dir), "--max-length", "1k", "--json")
    assert k.exit_code == 0, k.output
    assert json.loads(k.stdout)["scenario"]["seq_len"] == 1024
    assert "1 samples truncated, 1,976 tokens dropped (23.5%)" in k.stderr
