"""The report on a dataset with a known length distribution: every figure worked out by hand."""

import pytest
from dsutil import words, write_jsonl

from vramfit.dataset import Packing, Padding, Policy, analyze_dataset
from vramfit.dataset.report import histogram, suggest_max_length

# 90 samples of 30 tokens, 9 of 300, 1 of 3000 (text of n words = n + 2 tokens: BOS, words, EOS)
LENGTHS = [30] * 90 + [300] * 9 + [3000]


@pytest.fixture
def known(tmp_path):
    return write_jsonl(tmp_path / "known.jsonl", [{"text": words(n - 2)} for n in LENGTHS])


def test_histogram_truncation_and_suggestion(known, tok_dir):
    r = analyze_dataset(known, tokenizer=tok_dir, policy=Policy(micro_batch_size=4, max_length=1024))
    assert r.exact_tokens and r.rows == 100 and r.sample_tokens == 8400
    assert r.histogram == [(0, 64, 90), (64, 128, 0), (128, 256, 0), (256, 512, 9), (512, 1024, 0),
                           (1024, 2048, 0), (2048, 4096, 1)]
    assert r.percentiles == {"p50": 30, "p90": 300, "p99": 3000, "max": 3000}
    assert (r.truncated_samples, r.dropped_tokens) == (1, 3000 - 1024)
    assert r.dropped_share == pytest.approx(1976 / 8400)
    assert r.train_tokens == 8400 - 1976
    # 1 % of 8400 = 84 tokens may be lost: 3000 - L <= 84 -> L >= 2916 -> the next multiple of 64 is 2944
    assert (r.suggested_max_length, r.suggested_loss_share) == (2944, pytest.approx(56 / 8400))
    # the peak: the longest (truncated) sample padded with 3 others to its length
    assert (r.peak_rows, r.peak_row_len, r.peak_tokens, r.peak_seq_len) == (4, 1024, 4096, 1024)
    assert r.tokenized_bytes == 5 * (8400 - 1976)


def test_padding_accounting(known, tok_dir):
    one = analyze_dataset(known, tokenizer=tok_dir, policy=Policy(micro_batch_size=1, max_length=1024))
    assert one.processed_tokens == one.train_tokens and one.padding_share == 0  # one sample per batch: no padding
    full = analyze_dataset(known, tokenizer=tok_dir,
                           policy=Policy(micro_batch_size=4, max_length=1024, padding=Padding.MAX_LENGTH))
    assert full.processed_tokens == 100 * 1024
    assert (full.typical_rows, full.typical_row_len) == (4, 1024)
    longest = analyze_dataset(known, tokenizer=tok_dir, policy=Policy(micro_batch_size=4, max_length=1024))
    assert one.processed_tokens < longest.processed_tokens < full.processed_tokens
    assert longest.typical_row_len in (30, 300, 1024)
    by = longest.processed_by_micro_batch
    assert list(by) == [1, 2, 4, 8, 16, 32, 64] and by[1] == one.processed_tokens and by[4] == longest.processed_tokens
    assert all(by[a] <= by[b] for a, b in zip(list(by), list(by)[1:], strict=False))  # more rows per batch, more padding
    assert by[2] <= longest.processed_at(3) < by[4]  # batched at 3 itself (it was priced at 4's padding)
    assert longest.processed_at(500) == 100 * 1024  # all 100 rows in one batch, padded to the longest


def test_bfd_packing_efficiency_by_hand(known, tok_dir):
    # BFD at 1024: [1024]; three rows of 300 x 3 (+ 4 x 30 each in the 124 left); 78 x 30 -> 34, 34, 10 per row
    p = Policy(micro_batch_size=2, max_length=1024, packing=Packing.BFD)
    r = analyze_dataset(known, tokenizer=tok_dir, policy=p)
    assert r.train_rows == 7 and r.train_tokens == 6424
    assert r.packing_efficiency == pytest.approx(6424 / (7 * 1024))
    assert (r.peak_rows, r.peak_row_len) == (1, 1024 + 1020)  # padding-free: the two fullest rows as one
    assert r.processed_tokens == 6424 and not r.cross_sample_attention
    w = analyze_dataset(known, tokenizer=tok_dir, policy=Policy(micro_batch_size=2, max_length=1024, packing=Packing.WRAPPED))
    assert w.dropped_tokens == 0 and w.train_tokens == 8400 and w.train_rows == 9  # 8 full rows + 208
    assert w.cross_sample_attention and (w.peak_rows, w.peak_row_len) == (2, 1024)


def test_sample_scales_totals_and_says_so(known, tok_dir):
    r = analyze_dataset(known, tokenizer=tok_dir, policy=Policy(max_length=4096), sample=50)
    assert (r.rows, r.sampled_rows) == (100, 50)
    assert any("uniform sample of 50 of 100 rows" in n for n in r.notes)
    whole = analyze_dataset(known, tokenizer=tok_dir, policy=Policy(max_length=4096), sample=500)
    assert whole.sampled_rows is None and whole.sample_tokens == 8400


def test_helpers_on_plain_lists():
    assert histogram([0, 63, 64, 65, 1000]) == [(0, 64, 2), (64, 128, 2), (128, 256, 0), (256, 512, 0), (512, 1024, 1)]
    # 1 % of 10,900 = 109 tokens: at 800 the long sample loses 200, at 900 it loses 100
    assert suggest_max_length([100] * 99 + [1000], step=100) == (900, pytest.approx(100 / 10900))
    assert suggest_max_length([10] * 1000 + [20], step=5) == (10, pytest.approx(10 / 10020))


def test_the_plans_disk_counts_the_dataset_file_as_it_is(known, tok_dir):
    """The raw dataset was 4 bytes per token left after truncation (here 6,424): the file on disk is what it is."""
    from vramfit.plan import plan

    r = analyze_dataset(known, tokenizer=tok_dir, policy=Policy(micro_batch_size=1, max_length=1024))
    rep = plan({"model": "Qwen/Qwen2.5-0.5B", "method": "lora", "seq_len": 1024}, gpu_ids=["h100-sxm"], dataset=r)
    disk = rep.plans[0].disk
    assert disk.dataset_raw_bytes == known.stat().st_size == r.file_bytes != 4 * r.train_tokens


def test_fit_on_a_padding_free_dataset_stops_at_its_rows(tmp_path, tok_dir):
    """15 short rows, padding-free: above 15 the peak row shrank to a few tokens and fit answered 31,026."""
    from vramfit.plan import fit

    path = write_jsonl(tmp_path / "fifteen.jsonl", [{"text": words(20 + 7 * i)} for i in range(15)])
    r = analyze_dataset(path, tokenizer=tok_dir, policy=Policy(micro_batch_size=2, padding_free=True))
    sc = {"model": "Qwen/Qwen2.5-0.5B", "method": "lora", "micro_batch_size": 2, "gradient_checkpointing": "full"}
    assert fit(sc, "h100-sxm", dataset=r).max_micro_batch == 15


def test_a_micro_batch_between_the_simulated_sizes_is_batched_itself(known, tok_dir):
    """A micro-batch of 3 was priced at 4's padding (the nearest size simulated at or above it)."""
    from vramfit.dataset.policy import micro_batches

    r = analyze_dataset(known, tokenizer=tok_dir, policy=Policy(micro_batch_size=4, max_length=1024))
    three = sum(rows * n for rows, n in micro_batches(r.row_lengths, r.policy_at(3)))
    assert r.processed_at(3) == three != r.processed_at(4)
    assert r.processed_at(4) == r.processed_by_micro_batch[4] and r.processed_at(3) == three  # memoised, same


def test_the_planner_takes_the_micro_batch_that_is_fastest_with_its_padding(tmp_path, tok_dir):
    """A setting's micro-batch was chosen by seconds per token at one length, where more rows per batch are never
    slower; with a dataset the time is the processed tokens (padding grows with the rows) times that. Short rows beside
    a few long ones: the chosen micro-batch is the least time of those that fit, the padding included."""
    from vramfit.plan import plan

    lengths = [20] * 60 + [2000] * 4
    path = write_jsonl(tmp_path / "mixed.jsonl", [{"text": words(n - 2)} for n in lengths])
    r = analyze_dataset(path, tokenizer=tok_dir, policy=Policy(micro_batch_size=1, max_length=2048))
    sc = {"model": "Qwen/Qwen2.5-0.5B", "method": "lora", "seq_len": 2048}
    with_data = plan(sc, gpu_ids=["h100-sxm"], effective_batch=16, dataset=r, max_gpus=1)
    fixed = plan(sc, gpu_ids=["h100-sxm"], effective_batch=16, dataset_tokens=r.train_tokens, max_gpus=1)
    mine, theirs = with_data.plans[0], fixed.plans[0]
    assert mine.micro_batch_size < theirs.micro_batch_size  # padding to 2,000 in most batches outweighs the speed
    assert r.processed_at(mine.micro_batch_size) < r.processed_at(theirs.micro_batch_size)
