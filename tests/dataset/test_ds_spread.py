"""The reserved figure's spread from a dataset's real lengths (vramfit.dataset.spread): which batching policies get one,
its exact bytes (vramfit.estimate.varlen.shuffled_stranded over the padded rows), the card's bound, the API and CLI."""

import importlib
import json

import pytest
from dsutil import words, write_jsonl
from typer.testing import CliRunner

from vramfit import estimate
from vramfit.cli.main import app
from vramfit.dataset import Packing, Padding, Policy, analyze_dataset, reserved_spread, with_reserved_spread
from vramfit.estimate import resolve_spec

spread = importlib.import_module("vramfit.dataset.spread")
varlen = importlib.import_module("vramfit.estimate.varlen")

M = {"model": "meta-llama/Llama-2-7b-hf", "method": "qlora"}
LENGTHS = [30] * 90 + [300] * 9 + [3000]  # tokens per sample with the test tokenizer (BOS + words + EOS)


@pytest.fixture
def known(tmp_path):
    return write_jsonl(tmp_path / "known.jsonl", [{"text": words(n - 2)} for n in LENGTHS])


def _report(path, tok, **policy):
    return analyze_dataset(path, tokenizer=tok, policy=Policy(**policy))


def test_row_lengths_are_the_padded_rows_in_file_order(known, tok_dir):
    r = _report(known, tok_dir, micro_batch_size=4, max_length=1024)
    assert r.row_lengths == tuple([30] * 90 + [300] * 9 + [1024])  # truncated at max_length
    assert "row_lengths" not in r.to_dict() and r.to_dict()["train_tokens"] == 6424  # one number per sample: not in JSON
    mult = _report(known, tok_dir, max_length=1024, pad_to_multiple_of=256)
    assert sorted(set(mult.row_lengths)) == [256, 512, 1024]  # each rounded as the collator pads its batch's longest


@pytest.mark.parametrize("policy", [
    dict(max_length=1024, packing=Packing.BFD),  # packed rows: every step the same length
    dict(max_length=1024, padding=Padding.MAX_LENGTH),  # padded to the limit: fixed length
    dict(max_length=1024, group_by_length=True),  # the longest sample in the first batch: no later record
    dict(padding_free=True),  # one concatenated row per micro-batch: not modelled
])
def test_policies_without_a_spread(known, tok_dir, policy):
    r = _report(known, tok_dir, micro_batch_size=4, **policy)
    assert spread.spread_lengths(r) is None
    est = estimate(M, micro_batch_size=4, seq_len=r.peak_seq_len)
    assert with_reserved_spread(est, r) is est and "reserved_spread" not in est.to_dict()


def test_equal_lengths_give_no_spread(tmp_path, tok_dir):
    same = write_jsonl(tmp_path / "same.jsonl", [{"text": words(98)}] * 20)
    assert spread.spread_lengths(_report(same, tok_dir, max_length=1024)) is None


def test_the_spread_is_the_shuffled_replay_of_the_rows(known, tok_dir):
    r = _report(known, tok_dir, micro_batch_size=4, max_length=1024)
    est = estimate(M, micro_batch_size=4, seq_len=r.peak_seq_len)
    s = reserved_spread(est, r)
    replay = varlen.shuffled_stranded(resolve_spec(est.scenario)[1], est.scenario, list(r.row_lengths), runs=50)
    assert (s["p10_bytes"], s["median_bytes"], s["p90_bytes"]) == replay == (465_567_744, 520_093_696, 520_093_696)
    assert s == {"fixed_reserved_bytes": est.peak.reserved_bytes, "p10_bytes": 465_567_744, "median_bytes": 520_093_696,
                 "p90_bytes": 520_093_696, "orders": 50, "samples": 100, "capped_by_gpu": None}
    with_it = with_reserved_spread(est, r)
    assert with_it.to_dict()["reserved_spread"] == s and with_it.peak == est.peak  # the fixed-length figure stays
    line = spread.spread_line(s)
    # 39.47 GiB before the fp32 adapters' cached autocast copies were counted (estimate/forward_extras.py)
    assert line.startswith("reserved 39.54 GiB at fixed length; with this dataset's lengths in random order, "
                           "+0.43…+0.48 GiB (median +0.48; 10th–90th percentile of 50 epoch orders) on a card with room")


def test_the_card_bounds_the_growth(known, tok_dir):
    r = _report(known, tok_dir, micro_batch_size=4, max_length=3000)
    free = reserved_spread(estimate(M, micro_batch_size=4, gradient_checkpointing="full", seq_len=3000), r)
    assert (free["p10_bytes"], free["p90_bytes"], free["capped_by_gpu"]) == (864_026_624, 887_095_296, None)
    # (805,306,368 and 864,026,624 before 2026-12-06: the adapters' cached autocast copies at the end of forward,
    # estimate/forward_extras.py autocast_adapter_copies, change which cached segments the longer batches strand)
    # (p90 868,220,928 before 2026-12-02: the loss's working set now comes before its saved log-softmax output, the
    # order of DeepSpeed's engine trace, estimate/transients.py _loss_from_figures; 4 MiB less stranded)
    t4 = reserved_spread(estimate(M, micro_batch_size=4, gradient_checkpointing="full", seq_len=3000, gpu="t4"), r)
    assert (t4["p10_bytes"], t4["median_bytes"], t4["p90_bytes"], t4["capped_by_gpu"]) == (0, 0, 0, "t4")  # over it already
    roomy = reserved_spread(estimate(M, micro_batch_size=4, gradient_checkpointing="full", seq_len=3000, gpu="rtx4090"), r)
    assert roomy["p90_bytes"] == 887_095_296 and roomy["capped_by_gpu"] is None  # 4.6 GiB of headroom holds it


def test_a_large_set_is_sampled(monkeypatch, known, tok_dir):
    monkeypatch.setattr(spread, "SPREAD_MAX_SAMPLES", 40)
    rows = spread.spread_lengths(_report(known, tok_dir, max_length=1024))
    assert len(rows) == 40 and set(rows) <= {30, 300, 1024}


def test_estimate_cli_states_the_spread(known, tok_dir):
    run = CliRunner().invoke
    args = ["estimate", "--model", M["model"], "--method", "qlora", "--micro-batch-size", "4", "--seq-len", "1024",
            "--dataset", str(known), "--tokenizer", str(tok_dir)]
    j = run(app, [*args, "--json"])
    assert j.exit_code == 0, j.output
    d = json.loads(j.stdout)
    assert d["scenario"]["seq_len"] == 1024
    assert d["reserved_spread"] == {"fixed_reserved_bytes": d["peak"]["reserved_bytes"], "p10_bytes": 465_567_744,
                                    "median_bytes": 520_093_696, "p90_bytes": 520_093_696, "orders": 50,
                                    "samples": 100, "capped_by_gpu": None}
    text = run(app, args)
    assert text.exit_code == 0 and "with this dataset's lengths in random order, +0.43…+0.48 GiB (median +0.48" in text.stdout
    assert "random order" not in text.stderr  # stated once, in the result
    packed = run(app, [*args, "--packing", "bfd", "--json"])
    assert packed.exit_code == 0 and "reserved_spread" not in json.loads(packed.stdout)
    plain = run(app, args[:7] + ["--json"])  # no dataset: no field (the result object unchanged)
    assert plain.exit_code == 0 and "reserved_spread" not in json.loads(plain.stdout)


@pytest.mark.parametrize("command", ["fit", "plan"])
def test_fit_and_plan_state_it_on_stderr(known, tok_dir, command):
    args = [command, "--model", M["model"], "--method", "qlora", "--micro-batch-size", "4", "--seq-len", "1024",
            "--gpu", "rtx4090", "--gradient-checkpointing", "full", "--dataset", str(known), "--tokenizer", str(tok_dir)]
    r = CliRunner().invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    line = r.stderr.splitlines()[-1]
    rep = _report(known, tok_dir, micro_batch_size=4, max_length=1024)
    est = estimate(M, micro_batch_size=4, seq_len=1024, gpu="rtx4090", gradient_checkpointing="full")
    assert line == spread.spread_line(reserved_spread(est, rep))
    assert "+0.55…+0.57 GiB (median +0.55;" in line  # 5.6 GiB of headroom on the card: not capped
    grouped = CliRunner().invoke(app, [*args, "--group-by-length", "--json"])
    assert grouped.exit_code == 0 and "random order" not in grouped.stderr
