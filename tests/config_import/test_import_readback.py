"""What a config says, read as the framework reads it: FSDP's own activation checkpointing, quoted booleans, deep
nesting, a named dialect with no keys of its own, and torchtitan exports that carry the plan's sharding and model."""

import pytest
import tomllib

from vramfit import estimate, from_config
from vramfit.config_import import from_text
from vramfit.errors import ScenarioError
from vramfit.plan import plan
from vramfit.plan.export import export_plan
from vramfit.plan.export_titan import TOML_FILE

MODEL = "meta-llama/Llama-3.1-8B"


def test_a_trl_export_under_fsdp_reads_back_with_its_checkpointing(tmp_path):
    """The TRL export writes checkpointing as accelerate's fsdp_activation_checkpointing (the Trainer's off, as
    transformers requires): it read back as no checkpointing, 228.80 GiB for a 56.87 GiB plan (Llama-3.1-70B LoRA on
    4 x H100). Now the two files give the plan's bytes."""
    r = plan({"model": "meta-llama/Llama-3.1-70B", "method": "lora", "parallelism": "fsdp", "num_gpus": 4},
             effective_batch=8, gpu_ids="h100-sxm", with_changes=False, max_gpus=4)
    p = next(p for p in r.plans if p.gradient_checkpointing == "full" and p.scenario.get("parallelism") == "fsdp")
    out = export_plan(p, "trl")
    for name, text in out.files.items():
        (tmp_path / name).write_text(text)
    imp = from_config(tmp_path / "train_config.yaml", tmp_path / "accelerate.yaml")
    sc = imp.scenario
    assert (sc.gradient_checkpointing.value, sc.use_reentrant.value) == ("full", "no")
    assert estimate(sc.replace(gpu="h100-sxm")).peak.device_bytes == p.device_bytes


def test_fsdp_config_activation_checkpointing_in_the_training_config():
    imp = from_text("model_name_or_path: meta-llama/Llama-3.1-8B\nfsdp: full_shard auto_wrap\n"
                    "fsdp_config:\n  activation_checkpointing: true\ngradient_checkpointing: false\n", dialect="trl")
    assert (imp.overrides["gradient_checkpointing"], imp.overrides["use_reentrant"]) == ("full", "no")


ACCEL_FSDP_AC = ("distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n  fsdp_version: 1\n"
                 "  fsdp_sharding_strategy: FULL_SHARD\n  fsdp_activation_checkpointing: true\n")


@pytest.mark.parametrize("train, where", [
    ("", "gradient_checkpointing"),  # TRL's default is on
    ("gradient_checkpointing: true\n", "gradient_checkpointing"),
    ("activation_checkpointing: true\n", "activation_checkpointing"),
    ("activation_offloading: true\n", "gradient_checkpointing")])  # offloading leaves the Trainer's own on
def test_fsdp_and_trainer_checkpointing_both_on_is_refused_as_transformers_does(train, where):
    """transformers 5.24 trainer.py l. 879-884 raises when FSDP's activation checkpointing and the Trainer's are both
    on; TRL's gradient_checkpointing defaults to true, so the run needs it written false."""
    with pytest.raises(ScenarioError, match=rf"fsdp_config.activation_checkpointing turns on FSDP's .* while {where} \(the Trainer's"):
        from_text(f"model_name_or_path: {MODEL}\nfsdp: full_shard auto_wrap\n"
                  f"fsdp_config:\n  activation_checkpointing: true\n{train}", dialect="trl")


def test_an_axolotl_config_with_both_checkpointings_is_refused():
    text = f"base_model: {MODEL}\nfsdp_config:\n  activation_checkpointing: true\ngradient_checkpointing: true\n"
    with pytest.raises(ScenarioError, match="set gradient_checkpointing to false"):
        from_text(text, dialect="axolotl")
    imp = from_text(text.replace("gradient_checkpointing: true", "gradient_checkpointing: false"), dialect="axolotl")
    assert (imp.overrides["gradient_checkpointing"], imp.overrides["use_reentrant"]) == ("full", "no")


def test_an_accelerate_companion_turning_fsdp_checkpointing_on(tmp_path):
    """The companion's FSDP checkpointing with the TRL file's left on is refused, naming the file; with it off, FSDP's
    non-reentrant wrapper decides use_reentrant whatever the Trainer's kwargs say (they are unused then)."""
    (tmp_path / "accelerate.yaml").write_text(ACCEL_FSDP_AC)
    train = tmp_path / "train.yaml"
    train.write_text(f"model_name_or_path: {MODEL}\ngradient_checkpointing_kwargs: {{use_reentrant: true}}\n")
    with pytest.raises(ScenarioError, match="gradient_checkpointing in train.yaml .* is true"):
        from_config(train, tmp_path / "accelerate.yaml")
    train.write_text(train.read_text() + "gradient_checkpointing: false\n")
    sc = from_config(train, tmp_path / "accelerate.yaml").scenario
    assert (sc.gradient_checkpointing.value, sc.use_reentrant.value, sc.num_gpus) == ("full", "no", 2)


def test_llamafactory_checkpoints_the_model_itself_so_fsdp_checkpointing_is_one_switch(tmp_path):
    """LLaMA-Factory enables checkpointing on the model, not through TrainingArguments: no refusal there."""
    (tmp_path / "accelerate.yaml").write_text(ACCEL_FSDP_AC)
    train = tmp_path / "lf.yaml"
    train.write_text(f"model_name_or_path: {MODEL}\nstage: sft\nfinetuning_type: lora\ncutoff_len: 1024\n")
    sc = from_config(train, tmp_path / "accelerate.yaml").scenario
    assert (sc.gradient_checkpointing.value, sc.parallelism.value) == ("full", "fsdp")


@pytest.mark.parametrize("text, key, value", [
    ('gradient_checkpointing: "false"\n', "gradient_checkpointing", "none"),
    ('use_liger_kernel: "no"\n', "loss", "standard"), ('torch_compile: "false"\n', "compile", None)])
def test_quoted_booleans_read_as_transformers_parses_them(text, key, value):
    imp = from_text(f"model_name_or_path: {MODEL}\n{text}", dialect="trl")
    assert imp.overrides.get(key) == value


@pytest.mark.parametrize("text, message", [
    ("gradient_checkpointing: maybe\n", "'maybe' is not a boolean"),
    ("fsdp: 5\n", "fsdp must be FSDP words"), ("fsdp: true\n", "fsdp must be FSDP words")])
def test_bad_switches_are_one_line(text, message):
    with pytest.raises(ScenarioError, match=message):
        from_text(f"model_name_or_path: {MODEL}\n{text}", dialect="trl")


def test_deep_toml_and_json_are_one_line(tmp_path):
    toml = tmp_path / "deep.toml"
    toml.write_text("[" + ".".join(["a"] * 600) + "]\nx = 1\n")
    deep = tmp_path / "deep.json"
    deep.write_text('{"a":' * 900 + "1" + "}" * 900)
    for path in (toml, deep):
        with pytest.raises(ScenarioError, match="nested too deeply"):
            from_config(path)


def test_a_named_dialect_reads_a_file_with_none_of_its_keys():
    imp = from_text('[model]\nhf_assets_path = "meta-llama/Llama-3.1-8B"\n[training]\nseq_len = 2048\n',
                    dialect="torchtitan")
    assert (imp.dialect, imp.overrides["seq_len"]) == ("torchtitan", 2048)


def test_a_toml_switch_must_be_a_boolean():
    with pytest.raises(ScenarioError, match="enable_cpu_offload: 'false' is not a boolean"):
        from_text('[model]\nname = "llama3"\nflavor = "8B"\n[training]\nenable_cpu_offload = "false"\n'
                  '[parallelism]\ndata_parallel_shard_degree = 2\n', dialect="torchtitan")


def test_torchtitan_export_carries_grad_op_sharding_and_the_model():
    """A fsdp-grad-op plan wrote no fsdp_reshard_after_forward and read back as fsdp (143.25 against 133.19 GiB), and
    the TOML named no model.name / flavor (torchtitan would build its debugmodel): both are written now."""
    r = plan({"model": MODEL, "method": "full", "framework": "torchtitan"}, effective_batch=8, max_gpus=8,
             gpu_ids="h100-sxm", with_changes=False)
    p = next(p for p in r.plans if p.scenario.get("parallelism") == "fsdp-grad-op" and p.num_gpus > 1)
    text = export_plan(p, "torchtitan").files[TOML_FILE]
    assert 'fsdp_reshard_after_forward = "never"' in text and 'name = "llama3"' in text and 'flavor = "8B"' in text
    sc = from_text(text).scenario
    assert (sc.parallelism.value, sc.num_gpus) == ("fsdp-grad-op", p.num_gpus)
    qwen = plan({"model": "Qwen/Qwen3-8B", "method": "full", "framework": "torchtitan"}, effective_batch=8,
                max_gpus=8, gpu_ids="h100-sxm", with_changes=False)
    notes = export_plan(qwen.plans[0], "torchtitan").notes
    assert any("--module qwen3 " in n for n in notes)


@pytest.mark.parametrize("tp, pp, shard", [(4, 1, 1), (1, 4, 1), (2, 2, 1), (2, 1, 2), (1, 1, 4)])
def test_a_one_shard_tensor_or_pipeline_layout_export_says_what_older_torchtitan_runs(tp, pp, shard):
    """Four GPUs all in tensor or pipeline stages leave one data-parallel shard: torchtitan before 0.3 applies no FSDP
    there (no bf16 parameter cast; v0.2.2 maybe_enable_amp: none under TP/PP), so the export says the plan holds under
    0.3; with two or four FSDP shards there is nothing to say."""
    import dataclasses

    r = plan({"model": MODEL, "method": "full", "framework": "torchtitan"}, effective_batch=8, max_gpus=8,
             gpu_ids="h100-sxm", with_changes=False)
    p = next(p for p in r.plans if p.num_gpus == 4 and p.offload == "none")
    p = dataclasses.replace(p, scenario={**p.scenario, "tensor_parallel": tp, "pipeline_parallel": pp})
    out = export_plan(p, "torchtitan")
    par = tomllib.loads(out.files[TOML_FILE])["parallelism"]
    assert par["data_parallel_shard_degree"] == shard
    line = [n for n in out.notes if "no bf16 parameter cast: autocast, or fp32 under tensor or pipeline" in n]
    assert len(line) == int(shard == 1)


def test_torchtitan_is_planned_without_activation_offload_and_hf_fsdp_without_optimizer_only_offload():
    """torchtitan has no activation offload (v0.3.0 activation_checkpoint.py: selective, full, memory-budget, none),
    and FSDP's CPU offload moves the parameters too: neither is tried; ZeRO keeps its optimizer-only offload."""
    from vramfit.plan.search import configs_for
    from vramfit.scenario import parse_scenario

    titan = configs_for(8, parse_scenario({"model": MODEL, "method": "full", "framework": "torchtitan"}))
    assert titan and not [c for c in titan if c.gradient_checkpointing == "offload"]
    fsdp = configs_for(4, parse_scenario({"model": MODEL, "method": "full", "parallelism": "fsdp", "num_gpus": 4}))
    assert {c.offload for c in fsdp} == {"none", "optimizer+params"}
    zero = configs_for(4, parse_scenario({"model": MODEL, "method": "full"}))
    assert ("zero3", "optimizer") in {(c.parallelism, c.offload) for c in zero}
    assert "offload" in {c.gradient_checkpointing for c in zero}


def test_the_launchers_mixed_precision_stays_where_the_training_config_sets_none(tmp_path):
    """transformers' TrainingArguments keeps ACCELERATE_MIXED_PRECISION unless bf16 or fp16 is set: with both false
    over fp32 weights the run is bf16 autocast, not fp32 (it was read as fp32, the launcher's value called ignored)."""
    (tmp_path / "t.yaml").write_text(f"model_name_or_path: {MODEL}\nbf16: false\nfp16: false\n")
    (tmp_path / "a.yaml").write_text("distributed_type: MULTI_GPU\nnum_processes: 2\nmixed_precision: bf16\n")
    assert from_config(tmp_path / "t.yaml", tmp_path / "a.yaml").scenario.precision.value == "bf16-mixed"
    (tmp_path / "b.yaml").write_text(f"model_name_or_path: {MODEL}\nbf16: true\n")  # the config's own wins
    assert from_config(tmp_path / "b.yaml", tmp_path / "a.yaml").scenario.precision.value == "bf16-mixed"
    (tmp_path / "c.yaml").write_text(f"model_name_or_path: {MODEL}\nfp16: true\n")
    assert from_config(tmp_path / "c.yaml", tmp_path / "a.yaml").scenario.precision.value == "fp16-mixed"


def test_the_deepspeed_keys_line_is_portuguese_throughout():
    from vramfit.scenario import parse_scenario
    from vramfit.web.translate import to_pt

    sc = parse_scenario({"model": MODEL, "method": "full", "num_gpus": 8, "parallelism": "zero3",
                         "deepspeed_config": {"zero_optimization": {"stage": 3, "zero_quantized_weights": True,
                                                                    "made_up_key": 1}, "aio": {"block_size": 1}}})
    line = next(a for a in estimate(sc).assumptions if a.startswith("DeepSpeed config keys"))
    pt = to_pt(line)
    assert pt.startswith("Chaves da configuração DeepSpeed") and "not read by vramfit" not in pt
    assert "desconhecidas do vramfit" in pt or "não lidas pelo vramfit" in pt
    assert "NVMe offload I/O" not in pt and "E/S do descarregamento para NVMe" in pt


@pytest.mark.parametrize("fsdp_version", ["1", "2"])
def test_a_trl_export_of_an_offload_plan_under_fsdp_reads_back(tmp_path, fsdp_version):
    """The export writes TRL's activation_offloading with FSDP's activation checkpointing (the wrapper's block inputs
    go to the host): read as a clash ('sets gradient_checkpointing=full but ... offload'); now as offload, the plan's
    bytes."""
    import dataclasses

    r = plan({"model": "Qwen/Qwen2.5-7B", "method": "full", "parallelism": "fsdp", "fsdp_version": "2"},
             effective_batch=16, gpu_ids="rtx4080", max_gpus=2, with_changes=False)
    p = next(p for p in r.plans if p.gradient_checkpointing == "offload" and p.num_gpus == 2)
    p = dataclasses.replace(p, scenario={**p.scenario, "fsdp_version": fsdp_version})  # FSDP1: the same files' keys
    for name, text in export_plan(p, "trl").files.items():
        (tmp_path / name).write_text(text)
    sc = from_config(tmp_path / "train_config.yaml", tmp_path / "accelerate.yaml").scenario
    assert (sc.gradient_checkpointing.value, sc.fsdp_version.value) == ("offload", fsdp_version)
    assert estimate(sc.replace(gpu="rtx4080")).peak.device_bytes == estimate({**p.scenario, "gpu": "rtx4080"}
                                                                             ).peak.device_bytes


def test_a_trl_export_of_a_params_only_plan_reads_back_as_that_size(tmp_path):
    """A plan sized by parameter count writes ``model_name_or_path: <a N-parameter model>``; read back, that was a
    model id no estimate could resolve. Now it is the same params, and the same bytes."""
    p = plan({"params": "1B", "method": "full"}, gpu_ids="h100-sxm", with_changes=False).plans[0]
    for name, text in export_plan(p, "trl").files.items():
        (tmp_path / name).write_text(text)
    sc = from_config(tmp_path / "train_config.yaml", tmp_path / "accelerate.yaml").scenario
    assert sc.model is None and sc.params == 1_000_000_000
    assert estimate(sc.replace(gpu="h100-sxm")).peak.device_bytes == p.device_bytes
