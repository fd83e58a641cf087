"""Truncation, packing, padding and sampler order give exactly what the trainers build."""

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vramfit.dataset import DatasetError, Packing, Padding, Policy
from vramfit.dataset.policy import batch_shape, micro_batches, peak_batch, sample_order, training_rows


def test_truncation_keeps_the_start_and_counts_the_drop():
    rows, dropped = training_rows([10, 500, 100, 1000], Policy(max_length=256))
    assert rows == [10, 256, 100, 256]
    assert dropped == (500 - 256) + (1000 - 256)


def test_bfd_packs_best_fit_decreasing_like_trl_docs():
    # trl/data_utils.py pack_dataset docstring: lengths 5, 2, 3, 1 at seq_length 4 -> rows [4], [3, 1], [2]
    rows, dropped = training_rows([5, 2, 3, 1], Policy(max_length=4, packing=Packing.BFD))
    assert sorted(rows) == [2, 4, 4] and dropped == 1
    rows, dropped = training_rows([5, 2, 3, 1], Policy(max_length=4, packing=Packing.BFD_SPLIT))
    assert sorted(rows) == [3, 4, 4] and dropped == 0  # docstring: [4], [3, 1], [2, 1]


def _trl_rows(lengths, cap, strategy):
    datasets = pytest.importorskip("datasets")
    data_utils = pytest.importorskip("trl.data_utils")
    ds = datasets.Dataset.from_dict({"input_ids": [[1] * n for n in lengths]})
    packed = data_utils.pack_dataset(ds, cap, strategy=strategy)
    return sorted(len(x) for x in packed["input_ids"])


@pytest.mark.slow  # importing trl takes seconds
@pytest.mark.parametrize("strategy", ["bfd", "bfd_split", "wrapped"])
def test_packing_matches_trl_pack_dataset_row_for_row(strategy):
    rng = random.Random(7)
    lengths = [rng.choice([3, 40, 90, 200, 511, 700]) for _ in range(2300)]  # three map batches of 1000
    ours, _ = training_rows(lengths, Policy(max_length=512, packing=Packing(strategy)))
    assert sorted(ours) == _trl_rows(lengths, 512, strategy)


def test_padding_shapes():
    p = Policy(micro_batch_size=3, max_length=512)
    assert batch_shape([10, 300, 20], p) == (3, 300)
    assert batch_shape([10, 300, 20], Policy(micro_batch_size=3, pad_to_multiple_of=64)) == (3, 320)
    assert batch_shape([10, 300, 20], Policy(micro_batch_size=3, max_length=512, padding=Padding.MAX_LENGTH)) == (3, 512)
    assert batch_shape([10, 300, 20], Policy(micro_batch_size=3, padding_free=True, pad_to_multiple_of=8)) == (1, 336)
    # bfd packing turns padding-free on (sft_trainer.py: padding_free = ... or packing with bfd)
    assert Policy(max_length=8, packing=Packing.BFD).flattened and not Policy(max_length=8, packing=Packing.WRAPPED).flattened


def test_peak_is_the_longest_rows_together():
    rows = [5] * 100 + [900, 700, 50]
    assert peak_batch(rows, Policy(micro_batch_size=4)) == (4, 900)
    assert peak_batch(rows, Policy(micro_batch_size=4, padding_free=True)) == (1, 900 + 700 + 50 + 5)
    assert peak_batch([7, 9], Policy(micro_batch_size=4)) == (2, 9)


def test_every_epoch_batch_is_within_the_peak_and_covers_each_row_once():
    rng = random.Random(1)
    rows = [rng.randint(1, 2000) for _ in range(999)]
    for p in (Policy(micro_batch_size=4), Policy(micro_batch_size=4, group_by_length=True, grad_accum=2),
              Policy(micro_batch_size=4, padding_free=True)):
        order = sample_order(rows, p)
        assert sorted(order) == list(range(len(rows)))
        batches = micro_batches(rows, p)
        assert len(batches) == 250  # 999 / 4, the last one short (drop_last False)
        r, n = peak_batch(rows, p)
        assert max(a * b for a, b in batches) <= r * n


def test_group_by_length_puts_the_longest_first_and_pads_less():
    rng = random.Random(3)
    rows = [rng.choice([20, 30, 1500]) for _ in range(4000)]
    grouped = Policy(micro_batch_size=8, group_by_length=True)
    first = micro_batches(rows, grouped)[0]
    assert first[1] == 1500  # get_length_grouped_indices: the longest element in the first batch
    waste_random = sum(a * b for a, b in micro_batches(rows, Policy(micro_batch_size=8)))
    waste_grouped = sum(a * b for a, b in micro_batches(rows, grouped))
    assert waste_grouped < 0.5 * waste_random


def test_policy_errors():
    with pytest.raises(DatasetError, match="packing: packing needs a max_length"):
        Policy(packing=Packing.BFD)
    with pytest.raises(DatasetError, match="padding"):
        Policy(padding=Padding.MAX_LENGTH)
    with pytest.raises(DatasetError, match="max_length: padding-free without packing does not truncate"):
        Policy(max_length=512, padding_free=True)
    with pytest.raises(DatasetError, match="no non-empty rows"):
        peak_batch([], Policy())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 3000), min_size=1, max_size=300), st.sampled_from(list(Packing)),
       st.integers(1, 8), st.integers(0, 5), st.booleans())
def test_properties_of_any_dataset(lengths, packing, mb, seed, grouped):
    p = Policy(micro_batch_size=mb, max_length=1024, packing=packing, group_by_length=grouped, seed=seed)
    rows, dropped = training_rows(lengths, p)
    assert all(0 < r <= 1024 for r in rows) or packing is Packing.NONE
    assert sum(rows) + dropped == sum(lengths)  # every token trained or counted as dropped
    if packing is Packing.BFD_SPLIT or packing is Packing.WRAPPED:
        assert dropped == 0
    if not any(rows):
        return
    peak_r, peak_l = peak_batch(rows, p)
    batches = micro_batches(rows, p)
    # each row in exactly one micro-batch (padding-free: one concatenated row per micro-batch)
    assert sum(r for r, _ in batches) == (len(batches) if p.flattened else len(rows))
    assert max(r * n for r, n in batches) <= peak_r * peak_l
