"""A DeepSpeed config read beside a training config (config_import/ds_read.py): a value the HF Trainer fills in
and refuses when it differs (transformers 5.24.0 integrations/deepspeed.py ``fill_match`` / ``trainer_config_finalize``)
is refused here too; an offload section must be a mapping; a partial optimizer offload (``ratio`` < 1) is counted as
none, an upper bound."""

from __future__ import annotations

import json

import pytest
import yaml

from vramfit import estimate, from_config
from vramfit.errors import ScenarioError

TRL = {"model_name_or_path": "meta-llama/Llama-3.1-8B", "per_device_train_batch_size": 1,
       "gradient_accumulation_steps": 8, "bf16": True, "deepspeed": "ds.json"}


def _import(tmp_path, ds: dict, **trl):
    (tmp_path / "ds.json").write_text(json.dumps(ds))
    (tmp_path / "trl.yaml").write_text(yaml.safe_dump({**TRL, **trl}))
    return from_config(tmp_path / "trl.yaml")


@pytest.mark.parametrize(("ds", "message"), [
    ({"train_micro_batch_size_per_gpu": 8}, "train_micro_batch_size_per_gpu: 8 contradicts the training config's "
                                            "micro_batch_size (1)"),
    ({"gradient_accumulation_steps": 1}, "gradient_accumulation_steps: 1 contradicts the training config's grad_accum (8)"),
])
def test_a_value_the_trainer_refuses_is_refused(tmp_path, ds, message):
    with pytest.raises(ScenarioError) as err:
        _import(tmp_path, {"zero_optimization": {"stage": 2}, **ds})
    assert message in err.value.message and "set it to \"auto\"" in err.value.message


def test_auto_and_equal_values_pass(tmp_path):
    ds = {"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": "auto",
          "bf16": {"enabled": True}, "fp16": {"enabled": "auto"}}
    sc = _import(tmp_path, ds).scenario
    assert (sc.micro_batch_size, sc.grad_accum, sc.parallelism.value) == (1, 8, "zero2")


def test_an_offload_word_is_refused(tmp_path):
    with pytest.raises(ScenarioError) as err:
        _import(tmp_path, {"zero_optimization": {"stage": 3, "offload_param": "cpu"}})
    assert "zero_optimization.offload_param must be a mapping such as {\"device\": \"cpu\"}, got 'cpu'" in err.value.message
    with pytest.raises(ScenarioError) as err:
        estimate({"model": "meta-llama/Llama-3.1-8B", "method": "full", "num_gpus": 4,
                  "deepspeed_config": {"zero_optimization": {"stage": 3, "offload_optimizer": "cpu"}}})
    assert err.value.key == "deepspeed_config"


def test_a_partial_optimizer_offload_counts_as_none(tmp_path):
    """ratio 0.3: DeepSpeed updates 30 % of the optimizer states on the CPU and keeps the rest on the GPU; counting the
    whole state offloaded was 26 GiB under the no-offload figure on 4 GPUs, below the truth."""
    off = {"device": "cpu"}
    full = _import(tmp_path, {"zero_optimization": {"stage": 3, "offload_optimizer": off}}).scenario
    part = _import(tmp_path, {"zero_optimization": {"stage": 3, "offload_optimizer": {**off, "ratio": 0.3}}})
    none = _import(tmp_path, {"zero_optimization": {"stage": 3}}).scenario
    assert (full.offload.value, part.scenario.offload.value) == ("optimizer", "none")
    note = next(e for e in part.entries if e.key.endswith("offload_optimizer.ratio"))
    assert note.kind == "not modelled yet" and "counted as no optimizer offload (an upper bound)" in note.note
    figures = [estimate(s.replace(num_gpus=4)).peak.required_bytes for s in (full, part.scenario, none)]
    assert figures[0] < figures[1] == figures[2]
    with pytest.raises(ScenarioError, match="ratio must be a number from 0 to 1"):
        _import(tmp_path, {"zero_optimization": {"stage": 3, "offload_optimizer": {**off, "ratio": "half"}}})


def test_real_keys_are_reported_not_refused(tmp_path):
    """LLaMA-Factory's ModelArguments upcast_layernorm / upcast_lmhead_output and DeepSpeed's data_types.grad_accum_dtype
    exist (their effect not modelled yet); they used to be refused as misspellings."""
    lf = tmp_path / "lf.yaml"
    lf.write_text(yaml.safe_dump({"model_name_or_path": "meta-llama/Llama-3.1-8B", "stage": "sft", "finetuning_type": "lora",
                                  "bf16": True, "upcast_layernorm": True, "upcast_lmhead_output": True}))
    kinds = {e.key: (e.kind, e.note) for e in from_config(lf).entries}
    assert kinds["upcast_layernorm"] == ("not modelled yet", "layer norms upcast to fp32")
    assert kinds["upcast_lmhead_output"] == ("not modelled yet", "lm_head output upcast to fp32")
    imp = _import(tmp_path, {"zero_optimization": {"stage": 2}, "data_types": {"grad_accum_dtype": "fp32"}})
    note = next(e for e in imp.entries if e.key.endswith("data_types.grad_accum_dtype"))
    assert note.kind == "not modelled yet" and "grad_accum_dtype" in note.note


def test_precision_is_not_matched_against_the_scenario(tmp_path):
    """The Trainer matches bf16.enabled against its own bf16 argument; LLaMA-Factory's pure bf16 leaves that off while it
    loads 16-bit weights (bf16-true here), so a DeepSpeed bf16.enabled false is what that run has: not refused."""
    (tmp_path / "ds.json").write_text(json.dumps({"bf16": {"enabled": False}, "zero_optimization": {"stage": 2}}))
    lf = tmp_path / "lf.yaml"
    lf.write_text(yaml.safe_dump({"model_name_or_path": "meta-llama/Llama-3.1-8B", "stage": "sft", "finetuning_type": "lora",
                                  "cutoff_len": 512, "bf16": False, "deepspeed": "ds.json"}))
    sc = from_config(lf).scenario
    assert sc.parallelism.value == "zero2"


def test_the_ratio_is_read_at_stage_3_only(tmp_path):
    """DeepSpeed's offload_optimizer.ratio is 'only valid with ZeRO Stage 3': at stage 2 the whole state is offloaded."""
    imp = _import(tmp_path, {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.3}}})
    assert imp.scenario.offload.value == "optimizer"
    e = next(e for e in imp.entries if e.key.endswith("offload_optimizer.ratio"))
    assert (e.kind, e.note) == ("ignored", "DeepSpeed reads the ratio at ZeRO stage 3 only; at stage 2 the whole "
                                           "optimizer state is offloaded")
