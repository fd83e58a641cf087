"""A wrong-typed or out-of-range value in a config file is one line naming the key and its valid values (CLI exit 2,
HTTP 422), never a traceback: a 0 divisor, a word where a number goes, a list where a name goes (an unhashable table
lookup), a number where a list of module names goes."""

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vramfit.cli.main import app
from vramfit.config_import import from_config, from_text
from vramfit.errors import ScenarioError

FIX = Path(__file__).parent / "fixtures"
DIALECTS = {"litgpt": "litgpt", "axolotl": "axolotl", "llamafactory": "llamafactory", "trl": "trl",
            "torchtune": "torchtune"}


def edited(fixture: str, old: str | None, new: str) -> str:
    """The fixture's text with the one line ``old`` replaced by ``new`` (``old`` None: ``new`` appended)."""
    text = (FIX / fixture).read_text()
    if old is None:
        return text + new + "\n"
    assert text.count(old) == 1, f"{old!r} is not one line of {fixture}"
    return text.replace(old, new)


# (fixture, line in it, the line written instead (None: appended), key named in the refusal)
PASTED = [
    ("litgpt_lora.yaml", "  micro_batch_size: 2", "  micro_batch_size: 0", "train.micro_batch_size"),
    ("litgpt_lora.yaml", "devices: 2", "devices: 0", "devices"),
    ("litgpt_lora.yaml", "  micro_batch_size: 2", "  micro_batch_size: two", "train.micro_batch_size"),
    ("litgpt_lora.yaml", "precision: bf16-true", "precision: [bf16-true]", "precision"),
    ("litgpt_lora.yaml", "  global_batch_size: 16", "  global_batch_size: many", "train.global_batch_size"),
    ("litgpt_lora.yaml", None, "num_nodes: two", "num_nodes"),
    ("litgpt_qlora.yaml", "quantize: bnb.nf4-dq", "quantize: [bnb.nf4-dq]", "quantize"),
    ("axolotl_qlora.yml", "num_epochs: 1", "num_epochs: 0", "num_epochs"),
    ("axolotl_qlora.yml", "evals_per_epoch: 4", "evals_per_epoch: four", "evals_per_epoch"),
    ("axolotl_qlora.yml", None, "plugins: -1", "plugins"),
    ("axolotl_qlora.yml", None, "attn_implementation: [sdpa]", "attn_implementation"),
    ("axolotl_qlora.yml", "gradient_accumulation_steps: 4", "batch_size: sixteen", "batch_size"),
    ("llamafactory_qlora.yaml", "lora_target: all", "lora_target: 5", "lora_target"),
    ("llamafactory_qlora.yaml", "stage: sft", "stage: [sft]", "stage"),
    ("llamafactory_qlora.yaml", None, "flash_attn: [x]", "flash_attn"),
    ("llamafactory_qlora.yaml", None, "quantization_type: 0", "quantization_type"),
    ("trl_lora_fsdp.yaml", "attn_implementation: flash_attention_2", "attn_implementation: [sdpa]",
     "attn_implementation"),
    ("trl_lora_fsdp.yaml", "lora_target_modules: [q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]",
     "lora_target_modules: 7", "lora_target_modules"),
    ("torchtune_full_fsdp.yaml", "  _component_: torch.optim.AdamW", "  _component_: [torch.optim.AdamW]",
     "optimizer._component_"),
    ("torchtune_full_fsdp.yaml", "  _component_: torchtune.modules.loss.CEWithChunkedOutputLoss",
     "  _component_: [torchtune.modules.loss.CEWithChunkedOutputLoss]", "loss._component_"),
    ("torchtune_qlora.yaml", "  lora_attn_modules: ['q_proj', 'v_proj', 'output_proj']", "  lora_attn_modules: 3",
     "model.lora_attn_modules"),
]


@pytest.mark.parametrize("fixture, old, new, key", PASTED, ids=[f"{c[0]}:{c[2].strip()}" for c in PASTED])
def test_a_wrong_value_is_one_line_naming_the_key_and_its_valid_values(fixture, old, new, key):
    dialect = DIALECTS[fixture.split("_")[0]]
    with pytest.raises(ScenarioError, match=rf"{re.escape(key)}: .*\(valid values: ") as exc:
        from_text(edited(fixture, old, new), dialect=dialect)
    assert "\n" not in str(exc.value)


# (companion fixture, line in it, the line written instead, key named in the refusal)
COMPANIONS = [
    ("accelerate_fsdp.yaml", "num_machines: 1", "num_machines: abc", "num_machines"),
    ("accelerate_fsdp.yaml", "num_processes: 4", "num_processes: [4]", "num_processes"),
    ("accelerate_fsdp.yaml", "distributed_type: FSDP",
     "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: two", "deepspeed_config.zero_stage"),
    ("adapter_config.json", '"target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]', '"target_modules": -1',
     "target_modules"),
]


@pytest.mark.parametrize("fixture, old, new, key", COMPANIONS, ids=[f"{c[0]}:{c[3]}" for c in COMPANIONS])
def test_a_wrong_value_in_a_companion_file_is_one_line(tmp_path, fixture, old, new, key):
    companion = tmp_path / fixture
    companion.write_text(edited(fixture, old, new))
    with pytest.raises(ScenarioError, match=rf"{re.escape(key)}: .*\(valid values: ") as exc:
        from_config(FIX / "trl_full.json", companion)
    assert str(companion) in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("stage", ["[1]", "true", "5", '"2"'])
def test_a_wrong_zero_stage_in_the_deepspeed_json_a_config_names_is_one_line(tmp_path, stage):
    (tmp_path / "ds.json").write_text(edited("ds_z2.json", '"stage": 2', f'"stage": {stage}'))
    (tmp_path / "train.yaml").write_text(edited("llamafactory_full_ds2.yaml", "deepspeed: ds_z2.json", "deepspeed: ds.json"))
    with pytest.raises(ScenarioError, match=r"ds\.json: zero_optimization\.stage: .* \(valid values: 0, 1, 2, 3\)"):
        from_config(tmp_path / "train.yaml")


def test_a_path_the_file_system_refuses_and_a_world_past_floats_are_one_line(tmp_path):
    """A named DeepSpeed file under an unknown user's home or with a name too long for the file system, and an
    ms-swift world size past 1.8e308 under the default gradient accumulation (16 / batch / world): one line each."""
    for name, said in (("~nosuchuser-vramfit/ds.json", "cannot expand"), ("a" * 300 + ".json", "longer than 255")):
        cfg = tmp_path / "train.yaml"
        cfg.write_text(edited("llamafactory_full_ds2.yaml", "deepspeed: ds_z2.json", f"deepspeed: {name}"))
        with pytest.raises(ScenarioError, match=f"deepspeed: .*{said}"):
            from_config(cfg)
    args = json.loads((FIX / "swift_args.json").read_text())
    args.pop("gradient_accumulation_steps")
    with pytest.raises(ScenarioError, match="num_gpus: must be from 1"):
        from_text(json.dumps({**args, "global_world_size": 10**400}), dialect="swift")


def test_the_values_the_frameworks_take_still_read():
    """The checks refuse only what the framework would: a numeric string for litgpt's devices (int | str), one module
    name as a string, a float num_epochs under evals_per_epoch."""
    imp = from_text(edited("litgpt_lora.yaml", "devices: 2", "devices: '2'"), dialect="litgpt")
    assert imp.overrides["num_gpus"] == 2
    imp = from_text(edited("trl_lora_fsdp.yaml", "lora_target_modules: [q_proj, k_proj, v_proj, o_proj, gate_proj, "
                           "up_proj, down_proj]", "lora_target_modules: q_proj"), dialect="trl")
    assert imp.overrides["lora_targets"] == ["q_proj"]
    imp = from_text(edited("axolotl_qlora.yml", "num_epochs: 1", "num_epochs: 0.5"), dialect="axolotl")
    assert imp.overrides["eval_batch_size"] == 2  # 1 / (4 x 0.5) < 1: the cadence stays


def test_the_cli_exits_2_with_one_line_not_a_traceback(tmp_path):
    cfg = tmp_path / "x.yaml"
    cfg.write_text(edited("litgpt_lora.yaml", "  micro_batch_size: 2", "  micro_batch_size: 0"))
    r = CliRunner().invoke(app, ["estimate", "--from", str(cfg)])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and (r.exception is None or isinstance(r.exception, SystemExit))
    assert "train.micro_batch_size: 0 is not a positive integer (valid values: 1 or more)" in r.output


def test_numbers_the_frameworks_parsers_take_still_read(tmp_path):
    """accelerate int()s zero_stage from its environment variable, and Axolotl's pydantic takes 2.0 for an int:
    both read as their numbers (the audit of the stricter counts found them refused)."""
    from vramfit import from_config

    acc = tmp_path / "acc.yaml"
    acc.write_text('distributed_type: DEEPSPEED\nnum_processes: 2\ndeepspeed_config:\n  zero_stage: "3"\n')
    train = tmp_path / "t.yaml"
    train.write_text("model_name_or_path: meta-llama/Llama-3.1-8B\n")
    assert from_config(train, acc).scenario.parallelism.value == "zero3"
    ax = from_text("base_model: meta-llama/Llama-3.1-8B\nmicro_batch_size: 2.0\nbatch_size: 16\n", dialect="axolotl")
    assert (ax.overrides["grad_accum"], ax.scenario.micro_batch_size) == (8, 2)
