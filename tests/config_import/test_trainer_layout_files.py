"""What each framework really does with keys a review found misread: an fsdp_config naming a JSON file, a DeepSpeed
config written inline, offload_param below ZeRO-3, LLaMA-Factory/torchtune switches written as strings, litgpt's floor
division of the global batch, PEFT's per-architecture default LoRA targets in TRL, and ms-swift's
gradient_checkpointing_kwargs."""

import json
from pathlib import Path

import pytest
import yaml

from vramfit import estimate, from_config
from vramfit.errors import ScenarioError
from vramfit.scenario import parse_scenario

FIX = Path(__file__).parent / "fixtures"

TRL_FULL = {"model_name_or_path": "meta-llama/Llama-3.1-8B", "per_device_train_batch_size": 1,
            "gradient_accumulation_steps": 16, "max_length": 4096, "torch_dtype": "bfloat16", "output_dir": "out"}
FSDP_OPTIONS = {"fsdp_transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"], "fsdp_offload_params": True,
                "activation_checkpointing": False}
ZERO3_OFFLOAD = {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}, "bf16": {"enabled": "auto"}}


def _yaml(tmp_path: Path, name: str, data: dict) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def _error(path: Path) -> str:
    with pytest.raises(ScenarioError) as ei:
        from_config(path)
    return str(ei.value)


def test_trl_fsdp_config_file_reads_as_the_inline_mapping(tmp_path):
    """TrainingArguments.fsdp_config: a JSON file's location or the loaded dict; the file was ignored (offload lost)."""
    (tmp_path / "fsdp.json").write_text(json.dumps(FSDP_OPTIONS))
    by_file = from_config(_yaml(tmp_path, "file.yaml", {**TRL_FULL, "fsdp": "full_shard auto_wrap",
                                                         "fsdp_config": "fsdp.json"}))
    inline = from_config(_yaml(tmp_path, "inline.yaml", {**TRL_FULL, "fsdp": "full_shard auto_wrap",
                                                          "fsdp_config": FSDP_OPTIONS}))
    assert by_file.overrides == inline.overrides
    assert (by_file.scenario.parallelism.value, by_file.scenario.offload.value) == ("fsdp", "optimizer+params")
    assert by_file.companions == (tmp_path / "fsdp.json",)
    sc = by_file.scenario.replace(num_gpus=4)
    assert estimate(sc).peak.device_bytes == estimate(inline.scenario.replace(num_gpus=4)).peak.device_bytes


def test_fsdp_config_file_missing_is_one_line(tmp_path):
    msg = _error(_yaml(tmp_path, "c.yaml", {**TRL_FULL, "fsdp": "full_shard", "fsdp_config": "nope.json"}))
    assert "fsdp_config: file 'nope.json' not found" in msg and "\n" not in msg


@pytest.mark.parametrize("fixture", ["axolotl_qlora.yml", "trl_sft_qlora.yaml"])
def test_inline_deepspeed_mapping_reads_as_its_file(tmp_path, fixture):
    """Axolotl's ``deepspeed: str | dict`` and TrainingArguments' "already loaded json file as a dict"."""
    data = yaml.safe_load((FIX / fixture).read_text())
    (tmp_path / "ds.json").write_text(json.dumps(ZERO3_OFFLOAD))
    by_file = from_config(_yaml(tmp_path, "file.yaml", {**data, "deepspeed": "ds.json"}))
    inline = from_config(_yaml(tmp_path, "inline.yaml", {**data, "deepspeed": ZERO3_OFFLOAD}))
    assert by_file.overrides == inline.overrides
    assert (inline.scenario.parallelism.value, inline.scenario.offload.value) == ("zero3", "optimizer")
    assert inline.companions == ()
    assert any(e.key == "deepspeed → zero_optimization.stage" and e.kind == "read" for e in inline.entries)


def test_zero2_with_offload_param_is_zero2_with_optimizer_offload(tmp_path):
    """DeepSpeed builds its stage-1/2 optimizer with offload_optimizer_config only: offload_param is not read there."""
    ds = {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True},
                                "offload_param": {"device": "cpu", "pin_memory": True}}}
    (tmp_path / "ds.json").write_text(json.dumps(ds))
    imp = from_config(_yaml(tmp_path, "c.yaml", {**TRL_FULL, "deepspeed": "ds.json"}))
    assert (imp.scenario.parallelism.value, imp.scenario.offload.value) == ("zero2", "optimizer")
    entry = next(e for e in imp.entries if e.key == "deepspeed → zero_optimization.offload_param.device")
    assert entry.kind == "ignored" and "stage 3 only; at stage 2 the parameters stay on the GPU" in entry.note
    # the same config given to a scenario directly
    sc = parse_scenario({"model": "meta-llama/Llama-3.1-8B", "parallelism": "zero2", "num_gpus": 8,
                         "deepspeed_config": ds})
    assert sc.offload.value == "optimizer"
    zero3 = parse_scenario({"model": "meta-llama/Llama-3.1-8B", "parallelism": "zero3", "num_gpus": 8,
                            "deepspeed_config": {**ds, "zero_optimization": {**ds["zero_optimization"], "stage": 3}}})
    assert zero3.offload.value == "optimizer+params"


@pytest.mark.parametrize(("fixture", "key"), [
    ("llamafactory_qlora.yaml", "disable_gradient_checkpointing"), ("llamafactory_qlora.yaml", "enable_liger_kernel"),
    ("llamafactory_qlora.yaml", "packing"), ("llamafactory_qlora.yaml", "double_quantization"),
    ("llamafactory_qlora.yaml", "use_dora"), ("llamafactory_qlora.yaml", "use_galore"),
])
def test_llamafactory_string_switches_are_refused(tmp_path, fixture, key):
    """parse_dict keeps the YAML string "false", which LLaMA-Factory's code then reads as true: refused, as bf16 is."""
    data = yaml.safe_load((FIX / fixture).read_text())
    msg = _error(_yaml(tmp_path, fixture, {**data, key: "false"}))
    assert f"{key}: 'false' is not a boolean (valid values: true, false)" in msg


@pytest.mark.parametrize("key", ["apply_lora_to_mlp", "apply_lora_to_output", "use_dora"])
def test_torchtune_string_switches_are_refused(tmp_path, key):
    data = yaml.safe_load((FIX / "torchtune_qlora.yaml").read_text())
    data["model"][key] = "false"
    msg = _error(_yaml(tmp_path, "tt.yaml", data))
    assert f"model.{key}: 'false' is not a boolean" in msg


def test_llamafactory_false_switches_still_read(tmp_path):
    data = yaml.safe_load((FIX / "llamafactory_qlora.yaml").read_text())
    sc = from_config(_yaml(tmp_path, "lf.yaml", {**data, "disable_gradient_checkpointing": False,
                                                 "enable_liger_kernel": True, "use_dora": False})).scenario
    assert (sc.gradient_checkpointing.value, sc.loss.value) == ("full", "fused")


def test_litgpt_floors_the_global_batch(tmp_path):
    """litgpt/args.py: global_batch_size // devices // micro_batch_size, asserted > 0, no multiple required."""
    data = yaml.safe_load((FIX / "litgpt_full.yaml").read_text())
    data.update(devices=8, train={**data["train"], "global_batch_size": 20, "micro_batch_size": 2})
    imp = from_config(_yaml(tmp_path, "lit.yaml", data))
    assert imp.scenario.grad_accum == 1
    entry = next(e for e in imp.entries if e.key == "train.global_batch_size")
    assert entry.note == "litgpt floors it: 20 // 8 device(s) // 2 = 1 micro-batch(es) per step, 16 samples"
    data["train"]["global_batch_size"] = 12
    assert "leaves no micro-batch of 2 on each of 8 device(s)" in _error(_yaml(tmp_path, "lit2.yaml", data))
    data["train"]["global_batch_size"] = 64
    exact = from_config(_yaml(tmp_path, "lit3.yaml", data))
    assert exact.scenario.grad_accum == 4
    assert not next(e for e in exact.entries if e.key == "train.global_batch_size").note


@pytest.mark.parametrize(("model", "targets"), [
    ("tiiuae/falcon-7b", ["query_key_value"]), ("microsoft/phi-2", ["q_proj", "v_proj", "fc1", "fc2"]),
    ("Qwen/Qwen2.5-7B", ["q_proj", "v_proj"]),
])
def test_trl_default_lora_targets_follow_peft_by_model_type(tmp_path, model, targets):
    cfg = {"model_name_or_path": model, "use_peft": True, "per_device_train_batch_size": 1, "max_length": 1024}
    imp = from_config(_yaml(tmp_path, "t.yaml", cfg))
    assert list(imp.scenario.lora_targets) == targets
    entry = next(e for e in imp.entries if e.key == "lora_target_modules")
    assert entry.kind == "default" and "TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING" in entry.note


def test_trl_default_lora_targets_refused_where_peft_has_none(tmp_path):
    cfg = {"model_name_or_path": "Qwen/Qwen3-30B-A3B", "use_peft": True, "max_length": 1024}
    msg = _error(_yaml(tmp_path, "t.yaml", cfg))
    assert "PEFT has no default target modules for model type 'qwen3_moe'" in msg
    cfg["lora_target_modules"] = "all-linear"
    assert from_config(_yaml(tmp_path, "t2.yaml", cfg)).scenario.lora_targets == ("all-linear",)


def test_trl_default_lora_targets_for_a_model_outside_the_catalog_say_so(tmp_path):
    cfg = {"model_name_or_path": "someone/custom-7b", "use_peft": True, "max_length": 1024}
    entry = next(e for e in from_config(_yaml(tmp_path, "t.yaml", cfg)).entries if e.key == "lora_target_modules")
    assert entry.value == ["q_proj", "v_proj"] and "give lora_target_modules for another architecture" in entry.note


def test_swift_gradient_checkpointing_kwargs_sets_use_reentrant(tmp_path):
    script = (FIX / "swift_lora_sft.sh").read_text().replace(
        "--max_length 2048 \\", "--max_length 2048 \\\n    --gradient_checkpointing_kwargs '{\"use_reentrant\": false}' \\")
    path = tmp_path / "s.sh"
    path.write_text(script)
    imp = from_config(path)
    assert imp.scenario.use_reentrant.value == "no"
    assert not imp.not_modelled() or all(e.key != "gradient_checkpointing_kwargs" for e in imp.not_modelled())


def test_a_trl_command_line_names_what_to_give_instead(tmp_path):
    path = tmp_path / "run.sh"
    path.write_text("trl sft --model_name_or_path Qwen/Qwen2.5-0.5B --use_peft\n")
    msg = _error(path)
    assert "command lines are read for ms-swift only; for TRL, Axolotl, LLaMA-Factory or torchtune give the YAML" in msg


def test_zero_true_precision_says_deepspeed_keeps_fp32_masters():
    base = {"model": "meta-llama/Llama-3.1-8B", "method": "full", "precision": "bf16-true", "num_gpus": 8}
    line = "DeepSpeed ZeRO keeps an fp32 master copy and fp32 optimizer states in each rank's partition"
    zero3 = estimate(parse_scenario({**base, "parallelism": "zero3"}))
    assert any(a.startswith(line) for a in zero3.assumptions)
    assert "master_weights" in {c.name for c in zero3.components}
    fsdp = estimate(parse_scenario({**base, "parallelism": "fsdp"}))
    assert not any(a.startswith(line) for a in fsdp.assumptions)
