"""ms-swift's use_logits_to_keep (None: on for text models, v4.5.2 swift/trainers/mixin.py l. 210-222) becomes
logits_to_keep labels where a forward holds one row: prepare_logits_to_keep (l. 1199-1220) keeps the label positions
of a batch of one row (packing/padding_free make one row of any batch); a batch of several unpacked rows keeps every
position from the first label on, which vramfit counts as every position (reported as not modelled yet)."""

from __future__ import annotations

import pytest

from vramfit.config_import import from_text

CMD = "swift sft --model Qwen/Qwen2.5-7B --tuner_type full --max_length 4096 --dataset x "


def _imp(extra: str):
    return from_text(CMD + extra + "\n")


@pytest.mark.parametrize("extra", ["", "--per_device_train_batch_size 4 --packing true",
                                   "--per_device_train_batch_size 2 --per_device_eval_batch_size 2 --padding_free true"])
def test_one_row_per_forward_keeps_the_label_positions(extra):
    imp = _imp(extra)
    assert imp.scenario.logits_to_keep.value == "labels"
    assert imp.scenario.label_share == 1.0  # the data set's share is not in the arguments: every token, a bound
    assert "use_logits_to_keep" not in {e.key for e in imp.not_modelled()}


@pytest.mark.parametrize("extra", ["--per_device_train_batch_size 2", "--per_device_eval_batch_size 4"])
def test_several_rows_count_every_position(extra):
    imp = _imp(extra)
    assert imp.scenario.logits_to_keep.value == "all"
    assert "use_logits_to_keep" in {e.key for e in imp.not_modelled()}


@pytest.mark.parametrize("extra", ["--use_logits_to_keep false", "--sequence_parallel_size 2"])
def test_off_keeps_every_position(extra):
    imp = _imp(extra)
    assert imp.scenario.logits_to_keep.value == "all"
