"""The TrainingArguments keys the HF-Trainer readers (TRL, LLaMA-Factory) ignore: one shared list."""

from __future__ import annotations

import dataclasses
import fnmatch
from pathlib import Path

from vramfit import from_config
from vramfit.config_import.hf_common import TRAINING_ARGS_IGNORED

FIX = Path(__file__).parent / "fixtures"

#: TrainingArguments keys both readers take without reading them, and why (what the report says).
EXTRA_KEYS = {
    "logging_first_step": ("true", "logging"), "log_level": ("warning", "logging"),
    "adam_epsilon": ("1.0e-8", "optimizer hyperparameter"), "do_eval": ("false", "evaluation"),
    "lr_scheduler_kwargs": ("{min_lr: 1.0e-6}", "schedule"), "do_predict": ("false", "inference"),
    "gradient_checkpointing_kwargs": ("{preserve_rng_state: false}", "checkpoint function options"),
    "remove_unused_columns": ("false", "data"), "data_seed": ("7", "randomness"),
}


def test_every_shared_pattern_names_a_training_arguments_field():
    from transformers import TrainingArguments

    fields = {f.name for f in dataclasses.fields(TrainingArguments)}
    legacy = {"overwrite_output_dir", "group_by_length"}  # transformers 4.x fields, still in configs
    unmatched = [p for p, _ in TRAINING_ARGS_IGNORED
                 if p not in legacy and not fnmatch.filter(fields, p.removesuffix(".*"))]
    assert unmatched == []


def test_trl_and_llamafactory_ignore_the_same_training_arguments(tmp_path):
    extra = "".join(f"{k}: {v}\n" for k, (v, _) in EXTRA_KEYS.items())
    trl = tmp_path / "trl.yaml"
    trl.write_text("model_name_or_path: Qwen/Qwen2.5-0.5B\nmax_length: 512\n" + extra)
    lf = tmp_path / "lf.yaml"
    lf.write_text((FIX / "llamafactory_qlora.yaml").read_text() + extra)
    for path, dialect in ((trl, "trl"), (lf, "llamafactory")):
        imp = from_config(path, dialect=dialect)
        got = {e.key.split(".")[0]: e.note for e in imp.entries if e.key.split(".")[0] in EXTRA_KEYS}
        assert got == {k: why for k, (_, why) in EXTRA_KEYS.items()}, dialect
        assert {e.kind for e in imp.entries if e.key.split(".")[0] in EXTRA_KEYS} == {"ignored"}


def test_a_readers_own_reason_wins_over_the_shared_one(tmp_path):
    lf = tmp_path / "lf.yaml"
    lf.write_text((FIX / "llamafactory_qlora.yaml").read_text() + "eval_dataset: alpaca_en_demo\neval_steps: 50\n")
    imp = from_config(lf)
    notes, kinds = {e.key: e.note for e in imp.entries}, {e.key: e.kind for e in imp.entries}
    # eval_dataset is read (it is LLaMA-Factory's eval set), not the shared eval_*; without eval_strategy no pass runs
    assert kinds["eval_dataset"] == "read" and imp.scenario.eval_batch_size == 0
    assert notes["eval_steps"] == "evaluation" and notes["output_dir"] == "path"


def test_use_reentrant_is_read_where_the_trainer_passes_it(tmp_path):
    """gradient_checkpointing_kwargs.use_reentrant sets the scenario's use_reentrant (estimate/reentrant_fsdp1.py); the
    other checkpoint options stay ignored, and a non-boolean names the key and its values."""
    trl = tmp_path / "trl.yaml"
    trl.write_text("model_name_or_path: Qwen/Qwen2.5-0.5B\nmax_length: 512\n"
                   "gradient_checkpointing_kwargs: {use_reentrant: true, preserve_rng_state: false}\n")
    imp = from_config(trl, dialect="trl")
    assert imp.scenario.use_reentrant.value == "yes"
    kinds = {e.key: e.kind for e in imp.entries}
    assert kinds["gradient_checkpointing_kwargs.use_reentrant"] == "read"
    assert kinds["gradient_checkpointing_kwargs.preserve_rng_state"] == "ignored"
    trl.write_text("model_name_or_path: Qwen/Qwen2.5-0.5B\ngradient_checkpointing_kwargs: {use_reentrant: maybe}\n")
    try:
        from_config(trl, dialect="trl")
    except Exception as e:  # the reader's error: the key and the valid values
        assert "gradient_checkpointing_kwargs.use_reentrant: 'maybe' is not a boolean (valid values: true, false)" in str(e)
    else:
        raise AssertionError("accepted")
