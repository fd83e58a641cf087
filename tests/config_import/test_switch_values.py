"""Switches written as strings, and gradient_checkpointing_kwargs written as a JSON string, read the way each
framework's own parser reads them (config_import/hf_common.py ``boolean``, ``use_reentrant``): accelerate's
``str_to_bool``, transformers' ``string_to_bool`` behind TRL's TrlParser, pydantic's lax bool behind Axolotl's config
model; LLaMA-Factory and torchtune take the YAML value as is, so a string there is refused. Anything else is one line."""

from pathlib import Path

import pytest
import yaml

from vramfit import from_config
from vramfit.errors import ScenarioError

FIX = Path(__file__).parent / "fixtures"


def _write(tmp_path: Path, fixture: str, **keys) -> Path:
    data = yaml.safe_load((FIX / fixture).read_text())
    for key, value in keys.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path = tmp_path / fixture
    path.write_text(yaml.safe_dump(data))
    return path


def _error(path: Path, *more: Path) -> str:
    with pytest.raises(ScenarioError) as ei:
        from_config(path, *more)
    msg = str(ei.value)
    assert "\n" not in msg
    return msg


@pytest.mark.parametrize(("value", "method", "quantize"), [
    ("false", "lora", "none"), ("False", "lora", "none"), ("no", "lora", "none"), ("0", "lora", "none"),
    ("true", "qlora", "nf4-dq"), ("Y", "qlora", "nf4-dq"), (1, "qlora", "nf4-dq")])
def test_trl_string_switches_follow_string_to_bool(tmp_path, value, method, quantize):
    sc = from_config(_write(tmp_path, "trl_sft_qlora.yaml", load_in_4bit=value)).scenario
    assert (sc.method.value, sc.quantize.value) == (method, quantize)


def test_trl_use_peft_false_string_is_full_fine_tuning(tmp_path):
    path = _write(tmp_path, "trl_sft_qlora.yaml", use_peft="false", load_in_4bit=False)
    assert from_config(path).scenario.method.value == "full"


def test_trl_refuses_what_string_to_bool_refuses(tmp_path):
    # "on" is accelerate's and pydantic's, not transformers' string_to_bool
    msg = _error(_write(tmp_path, "trl_sft_qlora.yaml", load_in_4bit="on"))
    assert "load_in_4bit: 'on' is not a boolean (valid values: true, false; or f, false, n, no, t, true, y, yes, 0, 1)" in msg


@pytest.mark.parametrize(("value", "method"), [("false", "lora"), ("off", "lora"), ("on", "qlora"), ("yes", "qlora")])
def test_axolotl_switches_follow_pydantic(tmp_path, value, method):
    # adapter lora quantizes with load_in_8bit (loaders/model.py l. 740); load_in_4bit needs adapter qlora
    path = _write(tmp_path, "axolotl_qlora.yml", adapter="lora", load_in_4bit=None, load_in_8bit=value)
    assert from_config(path).scenario.method.value == method


def test_axolotl_refuses_a_word_pydantic_refuses(tmp_path):
    msg = _error(_write(tmp_path, "axolotl_qlora.yml", load_in_4bit="maybe"))
    assert "load_in_4bit: 'maybe' is not a boolean (valid values: true, false; or f, false, n, no, off, on, t, true" in msg


@pytest.mark.parametrize(("value", "offload"), [
    ("false", "none"), ("False", "none"), ("no", "none"), ("0", "none"), ("true", "optimizer+params"),
    ("on", "optimizer+params")])
def test_accelerate_offload_params_follows_str_to_bool(tmp_path, accelerate_config, value, offload):
    path = _write(tmp_path, "trl_lora_fsdp.yaml")
    sc = from_config(path, accelerate_config(fsdp_offload_params=value)).scenario
    assert (sc.parallelism.value, sc.offload.value) == ("fsdp", offload)


def test_accelerate_refuses_what_str_to_bool_refuses(tmp_path, accelerate_config):
    msg = _error(_write(tmp_path, "trl_lora_fsdp.yaml"), accelerate_config(fsdp_offload_params="sometimes"))
    assert "fsdp_offload_params: 'sometimes' is not a boolean" in msg and "off, on" in msg


@pytest.mark.parametrize(("fixture", "key"), [("llamafactory_qlora.yaml", "bf16"),
                                              ("torchtune_qlora.yaml", "compile"),
                                              ("torchtune_qlora.yaml", "enable_activation_checkpointing")])
def test_frameworks_that_keep_the_string_refuse_it(tmp_path, fixture, key):
    """LLaMA-Factory (HfArgumentParser.parse_dict) and torchtune (OmegaConf) keep "false" as a string, which their
    code then reads as true: refused rather than guessed."""
    msg = _error(_write(tmp_path, fixture, **{key: "false"}))
    assert f"{key}: 'false' is not a boolean (valid values: true, false)" in msg


@pytest.mark.parametrize(("kwargs", "want"), [
    ('{"use_reentrant": false}', "no"), ('{"use_reentrant": "False"}', "no"), ('{"use_reentrant": true}', "yes"),
    ({"use_reentrant": False}, "no"), ('{"preserve_rng_state": true}', "auto")])
def test_trl_checkpointing_kwargs_as_json_string(tmp_path, kwargs, want):
    """TrainingArguments.__post_init__ parses a string starting with '{' (transformers v4.40.0 training_args.py
    _VALID_DICT_FIELDS, _convert_str_dict)."""
    imp = from_config(_write(tmp_path, "trl_lora_fsdp.yaml", gradient_checkpointing_kwargs=kwargs))
    assert imp.scenario.use_reentrant.value == want
    assert not any(line.startswith("ignored gradient_checkpointing_kwargs") for line in imp.lines())


def test_json_string_changes_the_estimate_as_the_mapping_does(tmp_path):
    from vramfit import estimate

    text = _write(tmp_path, "trl_lora_fsdp.yaml", gradient_checkpointing_kwargs='{"use_reentrant": false}')
    as_text = estimate(from_config(text).scenario.replace(framework_version="transformers-4.44"))
    mapping = _write(tmp_path, "trl_lora_fsdp.yaml", gradient_checkpointing_kwargs={"use_reentrant": False})
    as_mapping = estimate(from_config(mapping).scenario.replace(framework_version="transformers-4.44"))
    assert as_text.peak.device_bytes == as_mapping.peak.device_bytes


@pytest.mark.parametrize(("kwargs", "shown"), [("[1, 2]", "'[1, 2]'"), ("{use_reentrant: no", "'{use_reentrant: no'")])
def test_trl_checkpointing_kwargs_not_a_mapping(tmp_path, kwargs, shown):
    msg = _error(_write(tmp_path, "trl_lora_fsdp.yaml", gradient_checkpointing_kwargs=kwargs))
    assert msg.count("gradient_checkpointing_kwargs:") == 1 and shown in msg and "valid values: a mapping" in msg


def test_trl_checkpointing_kwargs_list_is_refused(tmp_path):
    msg = _error(_write(tmp_path, "trl_lora_fsdp.yaml", gradient_checkpointing_kwargs=[1, 2]))
    assert "gradient_checkpointing_kwargs: [1, 2] is not a mapping" in msg


def test_axolotl_checkpointing_kwargs_string_is_refused(tmp_path):
    """Axolotl's config model types the key as a mapping, which pydantic does not parse from a string."""
    path = _write(tmp_path, "axolotl_qlora.yml", gradient_checkpointing_kwargs='{"use_reentrant": false}')
    msg = _error(path)
    assert "is not a mapping (valid values: a mapping such as {use_reentrant: false})" in msg


@pytest.mark.parametrize("value", [float("nan"), -1, "five"])
def test_axolotl_val_set_size_must_be_a_size(tmp_path, value):
    msg = _error(_write(tmp_path, "axolotl_qlora.yml", val_set_size=value))
    assert "val_set_size:" in msg and "is not a number of at least 0" in msg


def test_accelerate_unquoted_no_is_the_single_process_layout(tmp_path):
    """YAML reads `distributed_type: NO` unquoted as false; it is the NO the user wrote, not an unknown layout."""
    acc = tmp_path / "accelerate.yaml"
    acc.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: NO\nmixed_precision: bf16\nnum_processes: 1\n")
    sc = from_config(FIX / "trl_sft_qlora.yaml", acc).scenario
    assert (sc.num_gpus, sc.parallelism.value) == (1, "none")


@pytest.mark.parametrize(("value", "parallelism"), [("FULL_SHARD", "fsdp"), (1, "fsdp"), ("shard_grad_op", "fsdp-grad-op"),
                                                    (2, "fsdp-grad-op"), (3, "fsdp-no-shard")])
def test_accelerate_sharding_strategy_by_name_or_number(tmp_path, accelerate_config, value, parallelism):
    path = _write(tmp_path, "trl_lora_fsdp.yaml", fsdp=None, fsdp_config=None)
    sc = from_config(path, accelerate_config(fsdp_sharding_strategy=value)).scenario
    assert sc.parallelism.value == parallelism


@pytest.mark.parametrize("value", ["BOGUS", 9])
def test_accelerate_unknown_sharding_strategy_is_refused(tmp_path, accelerate_config, value):
    path = _write(tmp_path, "trl_lora_fsdp.yaml", fsdp=None, fsdp_config=None)
    msg = _error(path, accelerate_config(fsdp_sharding_strategy=value))
    assert f"fsdp_sharding_strategy: {value!r} is not an FSDP sharding strategy (valid values: FULL_SHARD" in msg


@pytest.mark.parametrize(("text", "said"), [('{"a": ' + "[" * 100_000, "is nested too deeply"),
                                            ('{"use_reentrant": ' + "9" * 5_000 + "}", "a number too large")])
def test_hostile_json_string_kwargs_are_one_line(tmp_path, text, said):
    msg = _error(_write(tmp_path, "trl_lora_fsdp.yaml", gradient_checkpointing_kwargs=text))
    assert "gradient_checkpointing_kwargs:" in msg and said in msg and len(msg) < 400


@pytest.mark.parametrize("value", ["bogus", "bf32", 16])
def test_accelerate_mixed_precision_must_be_one_accelerate_knows(tmp_path, value):
    """mixed_precision is ignored (the training config sets the precision) but not silently when accelerate itself
    would refuse it (PrecisionType: no, fp8, fp16, bf16)."""
    acc = tmp_path / "accelerate.yaml"
    acc.write_text(f"distributed_type: MULTI_GPU\nmixed_precision: {value}\nnum_processes: 2\n")
    assert f"mixed_precision: {value!r} is not an accelerate precision (valid values: no, fp8, fp16, bf16)" in \
        _error(FIX / "trl_sft_qlora.yaml", acc)


@pytest.mark.parametrize("value", ["bf16", "BF16", "'no'", "no", "fp8"])
def test_accelerate_mixed_precision_values_accelerate_runs_are_read(tmp_path, value):
    acc = tmp_path / "accelerate.yaml"
    acc.write_text(f"distributed_type: MULTI_GPU\nmixed_precision: {value}\nnum_processes: 2\n")
    sc = from_config(FIX / "trl_sft_qlora.yaml", acc).scenario
    assert (sc.num_gpus, sc.parallelism.value) == (2, "ddp")


def test_trl_reads_transformers_5_activation_checkpointing_names(tmp_path):
    """transformers 5.24 renamed gradient_checkpointing(_kwargs) to activation_checkpointing(_kwargs) and reads the old
    names only when the new one is unset (TrainingArguments.__post_init__); every_n_layers is not modelled."""
    off = from_config(_write(tmp_path, "trl_sft_qlora.yaml", gradient_checkpointing=None, activation_checkpointing=False))
    assert off.scenario.gradient_checkpointing.value == "none"
    both = from_config(_write(tmp_path, "trl_sft_qlora.yaml", gradient_checkpointing=True, activation_checkpointing=False))
    assert both.scenario.gradient_checkpointing.value == "none"
    assert next(e for e in both.entries if e.key == "gradient_checkpointing").kind == "ignored"
    kw = from_config(_write(tmp_path, "trl_sft_qlora.yaml", activation_checkpointing=True,
                            activation_checkpointing_kwargs={"use_reentrant": True, "every_n_layers": 2}))
    assert (kw.scenario.gradient_checkpointing.value, kw.scenario.use_reentrant.value) == ("full", "yes")
    assert next(e for e in kw.entries if e.key.endswith("every_n_layers")).kind == "not modelled yet"
    storage = from_config(_write(tmp_path, "trl_sft_qlora.yaml", bnb_4bit_quant_storage="bfloat16"))
    assert next(e for e in storage.entries if e.key == "bnb_4bit_quant_storage").kind == "ignored"
