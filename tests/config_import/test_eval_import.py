"""eval_batch_size from each config format, with each framework's own defaults (sources in the readers)."""

import json
from pathlib import Path

import pytest

from vramfit import from_config
from vramfit.errors import ScenarioError

FIX = Path(__file__).parent / "fixtures"


def _json(tmp_path, name, **extra):
    p = tmp_path / name
    p.write_text(json.dumps({**json.loads((FIX / name).read_text()), **extra}))
    return from_config(p)


def _yaml(tmp_path, name, extra, drop=()):
    lines = [line for line in (FIX / name).read_text().splitlines() if not line.startswith(tuple(drop))]
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n" + extra)
    return from_config(p)


@pytest.mark.parametrize(("extra", "want"), [
    ({}, 0),  # eval_strategy "no" (transformers 5.24.0 default)
    ({"eval_strategy": "steps"}, 8),  # per_device_eval_batch_size 8 (transformers 5.24.0 default)
    ({"eval_strategy": "epoch", "per_device_eval_batch_size": 2}, 2),
    ({"evaluation_strategy": "steps", "per_device_eval_batch_size": 3}, 3),  # the name before transformers 4.46
    ({"eval_strategy": "no", "per_device_eval_batch_size": 2}, 0),
])
def test_trl_evaluates_when_eval_strategy_is_not_no(tmp_path, extra, want):
    imp = _json(tmp_path, "trl_full.json", **extra)
    assert imp.scenario.eval_batch_size == want
    assert imp.scenario.micro_batch_size == 8  # the train batch is its own key


def test_trl_says_the_eval_set_is_assumed(tmp_path):
    imp = _json(tmp_path, "trl_full.json", eval_strategy="steps")
    line = next(line for line in imp.lines() if "eval_strategy" in line)
    assert line == ("  read     eval_strategy: steps → eval_batch_size=8  [an eval set is assumed: the Trainer refuses "
                    "this strategy without one (transformers 5.24.0 src/transformers/trainer.py l. 682)]")


def test_trl_names_a_bad_strategy(tmp_path):
    with pytest.raises(ScenarioError, match="eval_strategy 'sometimes' is unknown"):
        _json(tmp_path, "trl_full.json", eval_strategy="sometimes")


@pytest.mark.parametrize(("extra", "want"), [
    ("val_size: 0.1\n", 0),  # a split set aside but never evaluated
    ("val_size: 0.1\neval_strategy: steps\neval_steps: 50\nper_device_eval_batch_size: 1\n", 1),
    ("eval_dataset: alpaca_en_demo\neval_strategy: epoch\n", 8),
    ("val_size: 0.1\ndo_eval: true\n", 8),  # trainer.evaluate() once after training
])
def test_llamafactory_needs_a_strategy_or_do_eval_and_a_set(tmp_path, extra, want):
    assert _yaml(tmp_path, "llamafactory_qlora.yaml", extra).scenario.eval_batch_size == want


def test_llamafactory_refuses_evaluation_without_a_set(tmp_path):
    with pytest.raises(ScenarioError, match="needs val_size > 0 or eval_dataset"):
        _yaml(tmp_path, "llamafactory_qlora.yaml", "eval_strategy: steps\n")


@pytest.mark.parametrize(("extra", "drop", "want"), [
    ("", (), 2),  # val_set_size 0.05, evals_per_epoch 4, num_epochs 1: eval_steps 0.25, at micro_batch_size 2
    ("eval_batch_size: 4\n", (), 4),
    ("eval_batch_size: 0\n", (), 8),  # not passed when 0 (builders/base.py l. 671): TrainingArguments' default 8
    ("", ("val_set_size",), 0),  # no eval set: eval_strategy "no"
    ("", ("evals_per_epoch",), 0),  # a set but no cadence: the Trainer's default "no"
    ("evals_per_epoch: 1\n", ("evals_per_epoch",), 0),  # 1 / (1 x 1) is not < 1: Axolotl skips evaluations
    ("eval_strategy: epoch\n", ("evals_per_epoch",), 2),
    ("test_datasets:\n  - path: held_out.jsonl\neval_steps: 20\n", ("val_set_size", "evals_per_epoch"), 2),
])
def test_axolotl_evaluates_with_a_set_and_a_cadence(tmp_path, extra, drop, want):
    assert _yaml(tmp_path, "axolotl_qlora.yml", extra, drop).scenario.eval_batch_size == want


@pytest.mark.parametrize(("extra", "want"), [
    ("", 0),
    ("run_val_every_n_steps: 100\n", 0),  # without dataset_val the recipe asserts: nothing to validate on
    ("run_val_every_n_steps: 100\ndataset_val:\n  _component_: torchtune.datasets.alpaca_dataset\n", 4),  # batch_size
    ("run_val_every_n_steps: 100\nbatch_size_val: 1\ndataset_val:\n  _component_: torchtune.datasets.alpaca_dataset\n", 1),
])
def test_torchtune_distributed_recipes_validate_at_batch_size_val(tmp_path, extra, want):
    assert _yaml(tmp_path, "torchtune_full_fsdp.yaml", extra).scenario.eval_batch_size == want


def test_litgpt_validates_at_its_micro_batch():
    for name, mb in (("litgpt_full.yaml", 4), ("litgpt_lora.yaml", 2), ("litgpt_qlora.yaml", 1)):
        sc = from_config(FIX / name).scenario
        assert (sc.micro_batch_size, sc.eval_batch_size) == (mb, mb), name


def test_litgpt_says_what_it_assumes_without_final_validation(tmp_path):
    p = tmp_path / "lora.yaml"
    p.write_text((FIX / "litgpt_lora.yaml").read_text().replace("  max_iters: 100", "  max_iters: 100\n  final_validation: false"))
    imp = from_config(p)
    e = next(e for e in imp.entries if e.key == "eval.final_validation")
    assert e.kind == "read" and e.note.startswith("assumed: training reaches eval.interval")
    assert imp.scenario.eval_batch_size == 2


@pytest.mark.parametrize(("name", "extra", "follows"), [
    ("litgpt_lora.yaml", "", True),  # validate() uses the train.micro_batch_size loader
    ("axolotl_qlora.yml", "", True),  # eval_batch_size unset: micro_batch_size
    ("axolotl_qlora.yml", "eval_batch_size: 2\n", False),
])
def test_a_micro_batch_flag_moves_the_eval_batch_where_the_file_ties_them(tmp_path, name, extra, follows):
    from vramfit.cli.from_config import overlay

    p = tmp_path / name
    p.write_text((FIX / name).read_text() + extra)
    data = overlay([p], None, {"micro_batch_size": 5})
    assert (data["micro_batch_size"], data["eval_batch_size"]) == (5, 5 if follows else 2)
    assert overlay([p], None, {"micro_batch_size": 5, "eval_batch_size": 3})["eval_batch_size"] == 3


def test_torchtune_writes_the_eval_batch_it_was_estimated_with(tmp_path):
    from vramfit.config_import.writeback import file_values

    p = tmp_path / "tt.yaml"
    p.write_text((FIX / "torchtune_full_fsdp.yaml").read_text()
                 + "run_val_every_n_steps: 100\ndataset_val:\n  _component_: torchtune.datasets.alpaca_dataset\n")
    imp = from_config(p)
    want = imp.scenario.replace(micro_batch_size=1).to_dict()
    assert file_values(imp, {"micro_batch_size": 1}, want) == ({"batch_size": 1, "batch_size_val": 4}, [])
