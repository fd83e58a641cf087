"""DeepSpeed files as users have them, found wrong by a user-driven review (2026-12-07): DeepSpeedZeroConfig's own
field names (Axolotl's zero3*.json write "max_live_parameters": 0), misspelt ZeRO keys DeepSpeed refuses, comments and
the engine's compile section in upstream files, ZeRO stage 0 in 16-bit, hpZ with the nodes on the command line,
accelerate's parameter offload below stage 3, flags over the file's stage, and ZeRO-1/2's flatten on a small card.
Each assertion fails on the code before the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vramfit import estimate, from_config
from vramfit.cli.main import app
from vramfit.errors import ScenarioError
from vramfit.web.translate import untranslated

runner = CliRunner()
AXOLOTL = ("base_model: meta-llama/Meta-Llama-3-8B\nsequence_len: 2048\nmicro_batch_size: 1\n"
           "gradient_accumulation_steps: 4\nbf16: true\ngradient_checkpointing: true\nflash_attention: true\n"
           "deepspeed: ds.json\n")
Z3 = {"stage": 3, "overlap_comm": True, "contiguous_gradients": True, "sub_group_size": 0, "reduce_bucket_size": "auto",
      "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto"}
BF16 = {"bf16": {"enabled": "auto"}, "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto"}


def _files(tmp_path: Path, ds: dict) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "ds.json").write_text(json.dumps(ds))
    cfg = tmp_path / "run.yaml"
    cfg.write_text(AXOLOTL)
    return cfg


def _est(tmp_path: Path, zero: dict, **flags):
    imp = from_config(_files(tmp_path, {**BF16, "zero_optimization": zero}))
    return estimate({**imp.scenario.to_dict(), "num_gpus": 8, **flags})


def test_deepspeeds_field_names_are_its_stage3_aliases(tmp_path):
    """Axolotl deepspeed_configs/zero3_bf16.json: "max_live_parameters": 0, "max_reuse_distance": 0 (the field names
    of DeepSpeedZeroConfig, populate_by_name): prefetching off, as under the stage3_ names (was the 1e9 default)."""
    field = _est(tmp_path / "a", {**Z3, "max_live_parameters": 0, "max_reuse_distance": 0})
    alias = _est(tmp_path / "b", {**Z3, "stage3_max_live_parameters": 0, "stage3_max_reuse_distance": 0})
    default = _est(tmp_path / "c", Z3)
    assert field.peak.allocated_bytes == alias.peak.allocated_bytes < default.peak.allocated_bytes
    assert default.peak.allocated_bytes - field.peak.allocated_bytes > 1.5 * 2**30  # Llama-3-8B: 1.9 GiB gathered


@pytest.mark.parametrize(("zero", "words"), [
    ({**Z3, "max_live_parameters": 0, "stage3_max_live_parameters": 0}, "name one DeepSpeed setting: give one"),
    ({**Z3, "reduce_bucket_size": "AUTO"}, "must be a whole number"),  # HF's is_auto is an exact comparison
    ({**Z3, "offload_optimiser": {"device": "cpu"}}, "zero_optimization.offload_optimiser is not a DeepSpeed ZeRO key"),
    ({**Z3, "offload_optimizer": {"devce": "cpu"}}, "zero_optimization.offload_optimizer.devce is not a DeepSpeed "
                                                     "offload key (valid keys: buffer_count, cpuadam_cores_perc"),
    ({"stage": 0}, "ZeRO stage 0 with bf16.enabled 'auto' is DeepSpeed's own 16-bit optimizer wrapper"),
])
def test_refused_as_deepspeed_or_the_hf_trainer_would(tmp_path, zero, words):
    with pytest.raises(ScenarioError, match=None) as e:
        from_config(_files(tmp_path, {**BF16, "zero_optimization": zero}))
    assert words in str(e.value)


def test_stage_0_in_fp32_is_plain_data_parallelism(tmp_path):
    imp = from_config(_files(tmp_path, {"bf16": {"enabled": False}, "zero_optimization": {"stage": 0}}))
    assert imp.scenario.parallelism.value in ("ddp", "none")


def test_upstream_comment_and_compile_keys_are_reported_not_refused(tmp_path):
    """LLaMA-Factory's ds_z2_autotp_config.json has a "_comment"; Axolotl's zero1_torch_compile.json a "compile"
    section, which DeepSpeed's engine reads (runtime/compiler.py): both files were refused as unknown keys."""
    imp = from_config(_files(tmp_path, {**BF16, "_comment": "tp", "compile": {"disable": False, "backend": "inductor"},
                                        "zero_optimization": {"stage": 1}}))
    kinds = {e.key.rsplit(" → ", 1)[-1]: e.kind for e in imp.entries}
    assert kinds["_comment"] == "ignored"  # DeepSpeed 0.18's CompileConfig has neither field: not said to compile
    assert kinds["compile.backend"] == kinds["compile.disable"] == "not modelled yet"


def test_what_deepspeed_takes_as_auto_or_by_its_older_names(tmp_path):
    """DeepSpeedConfigModel drops "auto" values before validation (config_utils.py): an unknown ZeRO key or a field
    name valued "auto" is DeepSpeed's default, not an error; "bfloat16" is the older name of the bf16 section."""
    same = _est(tmp_path / "a", {**Z3, "prefetch_bucket_size": "auto", "no_such_key": "auto"}).peak.allocated_bytes
    assert same == _est(tmp_path / "b", {**Z3}).peak.allocated_bytes
    with pytest.raises(ScenarioError, match="ZeRO stage 0 with bfloat16.enabled true"):
        from_config(_files(tmp_path / "c", {"bfloat16": {"enabled": True}, "zero_optimization": {"stage": 0}}))


def test_hpz_with_the_nodes_on_the_command_line(tmp_path):
    """--from with --num-gpus 16 --num-nodes 2 reads the file's zero_hpz_partition_size 8 as shard_scope node, as
    --deepspeed-config does (it was left not modelled: 13.87 against 15.61 GiB)."""
    ds = tmp_path / "ds.json"
    _files(tmp_path, {**BF16, "zero_optimization": {**Z3, "zero_hpz_partition_size": 8}})
    via_from = runner.invoke(app, ["estimate", "--from", str(tmp_path / "run.yaml"), "--num-gpus", "16", "--num-nodes",
                                   "2", "--json"])
    via_flags = runner.invoke(app, ["estimate", "--model", "meta-llama/Meta-Llama-3-8B", "--method", "full",
                                    "--precision", "bf16-mixed", "--seq-len", "2048", "--grad-accum", "4",
                                    "--gradient-checkpointing", "full", "--attention", "flash", "--num-gpus", "16",
                                    "--num-nodes", "2", "--parallelism", "zero3", "--deepspeed-config", str(ds), "--json"])
    assert via_from.exit_code == via_flags.exit_code == 0, (via_from.output, via_flags.output)
    a, b = json.loads(via_from.stdout), json.loads(via_flags.stdout)
    assert a["scenario"]["shard_scope"] == b["scenario"]["shard_scope"] == "node"
    assert a["peak"]["allocated_bytes"] == b["peak"]["allocated_bytes"]
    assert "zero_hpz_partition_size" not in " ".join(b["assumptions"])  # modelled, not listed as unread


def test_accelerate_parameter_offload_follows_deepspeeds_stage_rule(tmp_path):
    trl = tmp_path / "trl.yaml"
    trl.write_text("model_name_or_path: meta-llama/Llama-3.2-1B\nuse_peft: true\nbf16: true\nmax_length: 1024\n")
    for stage, opt, want in ((2, "none", "none"), (2, "cpu", "optimizer"), (3, "none", "none"),
                             (3, "cpu", "optimizer+params")):
        acc = tmp_path / f"acc{stage}{opt}.yaml"
        acc.write_text(f"distributed_type: DEEPSPEED\nnum_processes: 8\ndeepspeed_config:\n  zero_stage: {stage}\n"
                       f"  offload_optimizer_device: {opt}\n  offload_param_device: cpu\n")
        imp = from_config(trl, acc)  # was "gives an invalid scenario" for parameter offload below stage 3 or alone
        assert imp.scenario.offload.value == want and imp.scenario.parallelism.value == f"zero{stage}"


def test_flags_replace_the_files_stage_and_offload(tmp_path):
    _files(tmp_path, {**BF16, "zero_optimization": {**Z3, "offload_optimizer": {"device": "cpu"},
                                                    "offload_param": {"device": "cpu"}}})
    base = ["estimate", "--from", str(tmp_path / "run.yaml"), "--num-gpus", "8", "--json"]
    for flags, (par, off) in ((["--parallelism", "zero2"], ("zero2", "optimizer")), (["--offload", "none"], ("zero3", "none")),
                              (["--parallelism", "fsdp"], ("fsdp", "none"))):
        r = runner.invoke(app, [*base, *flags])  # was "zero_optimization.stage 3 means parallelism zero3" (exit 2)
        assert r.exit_code == 0, r.output
        sc = json.loads(r.stdout)["scenario"]
        assert (sc["parallelism"], sc["offload"]) == (par, off)  # off DeepSpeed, the file's offload goes with it
    r = runner.invoke(app, [*base, "--parallelism", "zero2", "--offload", "optimizer+params"])
    assert r.exit_code == 2 and "offload: parameter offload needs fully sharded parameters" in r.output


def test_a_zero2_flatten_peak_states_the_small_card_figure():
    """DeepSpeed 0.18.7 flattens ZeRO-1/2's 16-bit groups on the GPU only where the free memory holds the copy: the
    estimate keeps the figure with the flatten and now says what a card without the room peaks at."""
    r = estimate({"model": "meta-llama/Llama-2-7b-hf", "method": "full", "precision": "bf16-mixed", "num_gpus": 8,
                  "parallelism": "zero2", "offload": "optimizer", "gradient_checkpointing": "full", "gpu": "rtx4090"})
    assert r.peak.phase == "load"
    note = next(a for a in r.assumptions if a.startswith("The peak is ZeRO's load"))
    other = max(p.allocated_bytes for p in r.phases if p.phase != "load")
    assert f"{other / 2**30:,.2f} GiB allocated" in note and other < r.peak.allocated_bytes - 10 * 2**30
    assert untranslated([note]) == []


def test_a_scenarios_deepspeed_config_names_a_misspelt_zero_key_as_such():
    """Where a DeepSpeed config only sizes buffers (--deepspeed-config, the web page's field) an unknown ZeRO key is
    reported, not refused: now as a spelling to check, not as a key "not read by vramfit"."""
    r = estimate({"model": "meta-llama/Llama-3.2-1B", "method": "full", "num_gpus": 8, "parallelism": "zero3",
                  "deepspeed_config": {"zero_optimization": {"stage": 3, "offload_optimiser": {"device": "cpu"}}}})
    said = [a for a in r.assumptions if a.startswith("DeepSpeed config keys not modelled")]
    assert said == ["DeepSpeed config keys not modelled, their effect (if any) not in this estimate: "
                    "zero_optimization.offload_optimiser.device: not a DeepSpeed ZeRO key (DeepSpeed would refuse it): "
                    "check the spelling."]
    assert untranslated(said) == []


def test_hpz_read_for_one_layout_is_undone_when_the_flags_change_it(tmp_path):
    """A launcher file's 2 nodes of 8 make hpZ 8 shard_scope node; --num-gpus 32 over it (2 nodes of 16) must not keep
    it: DeepSpeed's secondary group is still 8 GPUs, which the node scope does not model (a review)."""
    (tmp_path / "ds.json").write_text(json.dumps({**BF16, "zero_optimization": {"stage": 3, "zero_hpz_partition_size": 8}}))
    (tmp_path / "run.yaml").write_text(AXOLOTL)
    (tmp_path / "acc.yaml").write_text("distributed_type: DEEPSPEED\nnum_machines: 2\nnum_processes: 16\n"
                                       "deepspeed_config:\n  deepspeed_config_file: ds.json\n")
    base = ["estimate", "--from", str(tmp_path / "run.yaml"), "--from", str(tmp_path / "acc.yaml"), "--json"]
    for flags, want in (([], (16, 2, "node")), (["--num-gpus", "32"], (32, 2, "all")),
                        (["--num-gpus", "32", "--num-nodes", "4"], (32, 4, "node"))):
        r = runner.invoke(app, [*base, *flags])
        assert r.exit_code == 0, r.output
        sc = json.loads(r.stdout)["scenario"]
        assert (sc["num_gpus"], sc["num_nodes"], sc["shard_scope"]) == want
