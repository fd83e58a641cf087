"""A DeepSpeed file given as the scenario's deepspeed_config with whole-number batch values that are not the scenario's:
the estimate names them (the HF Trainer refuses such a file, as the `--from` import does), instead of dropping them
silently (review of 2026-12-05: a 26 % lower figure with no word)."""

import pytest

from vramfit.errors import ScenarioError
from vramfit.estimate import estimate
from vramfit.scenario import parse_scenario
from vramfit.web.translate import untranslated

DS = {"zero_optimization": {"stage": 2}, "bf16": {"enabled": True}, "train_micro_batch_size_per_gpu": 2,
      "gradient_accumulation_steps": 4, "train_batch_size": 32}
RUN = {"model": "meta-llama/Llama-3.1-8B", "method": "full", "num_gpus": 4}


def _notes(**keys):
    r = estimate(parse_scenario({**RUN, "deepspeed_config": DS, **keys}))
    return [a for a in r.assumptions if "trainer_config_finalize" in a]


def test_values_that_are_not_the_scenarios_are_named():
    notes = _notes()
    # the whole batch too: micro-batch x accumulation x world size (fill_match("train_batch_size")), 1 x 1 x 4 here
    assert [n.split(" is not")[0] for n in notes] == ["DeepSpeed config train_micro_batch_size_per_gpu 2",
                                                      "DeepSpeed config gradient_accumulation_steps 4",
                                                      "DeepSpeed config train_batch_size 32"]
    assert "Give micro_batch_size 2" in notes[0] and untranslated(notes) == []
    assert "effective_batch (4)" in notes[2] and "micro_batch_size x grad_accum x data-parallel GPUs = 32" in notes[2]
    assert _notes(micro_batch_size=2, grad_accum=4) == []  # 2 x 4 x 4 = 32
    assert len(_notes(micro_batch_size=2)) == 2  # accumulation 1, and 2 x 1 x 4 = 8
    assert len(_notes(micro_batch_size=2, grad_accum=4, num_gpus=8)) == 1  # 64: the whole batch alone


def test_auto_and_a_zero_section_alone_say_nothing_and_a_bad_value_is_refused():
    auto = {**DS, "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
            "train_batch_size": "auto"}
    r = estimate(parse_scenario({**RUN, "deepspeed_config": auto}))
    assert not [a for a in r.assumptions if "trainer_config_finalize" in a]
    r = estimate(parse_scenario({**RUN, "deepspeed_config": {"stage": 2, "train_micro_batch_size_per_gpu": 7}}))
    assert not [a for a in r.assumptions if "trainer_config_finalize" in a]  # a section alone: not the file's key
    for bad in (0, -3, 10**23, 2.5, True, "x", float("nan")):
        with pytest.raises(ScenarioError, match="train_micro_batch_size_per_gpu must be a whole number from 1 to"):
            parse_scenario({**RUN, "deepspeed_config": {**DS, "train_micro_batch_size_per_gpu": bad}})
