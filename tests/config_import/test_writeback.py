"""Import -> change -> write back -> import gives the changed scenario; every other line byte-identical."""

import shutil
from pathlib import Path

import pytest

from vramfit import from_config
from vramfit.config_import.writeback import file_values, write_back
from vramfit.errors import ScenarioError
from vramfit.estimate import estimate

FIX = Path(__file__).parent / "fixtures"


def _roundtrip(tmp_path, name, changes, companions=()):
    for c in ("ds_z2.json", "ds_z3_offload.json"):
        shutil.copy(FIX / c, tmp_path / c)
    src = tmp_path / name
    shutil.copy(FIX / name, src)
    imp = from_config(src, *companions)
    want = imp.scenario.replace(**changes).to_dict()
    dest = tmp_path / ("new" + src.suffix)
    diff, left = write_back(imp, changes, want, dest)
    assert src.read_text() == (FIX / name).read_text()  # the source is never touched
    again = from_config(dest, *companions).scenario.to_dict()
    old, new = src.read_text().splitlines(), dest.read_text().splitlines()
    return want, again, old, new, diff, left


def _changed_lines(old, new):
    assert len(old) == len(new)
    return [(a, b) for a, b in zip(old, new, strict=True) if a != b]


def test_axolotl_roundtrip_keeps_every_other_byte(tmp_path):
    changes = {"micro_batch_size": 1, "grad_accum": 8, "gradient_checkpointing": "offload", "optimizer": "paged-adamw-8bit"}
    want, again, old, new, diff, left = _roundtrip(tmp_path, "axolotl_qlora.yml", changes)
    assert again == want and left == [] and want["eval_batch_size"] == 2
    # eval_batch_size defaulted to the old micro batch (2); it would follow the new one, so it is written out
    assert new[-1] == "eval_batch_size: 2"
    assert _changed_lines(old, new[:-1]) == [
        ("micro_batch_size: 2", "micro_batch_size: 1"),
        ("gradient_accumulation_steps: 4", "gradient_accumulation_steps: 8"),
        ("optimizer: paged_adamw_32bit", "optimizer: paged_adamw_8bit"),
        ("gradient_checkpointing: true", "gradient_checkpointing: offload"),
    ]
    assert "\n-micro_batch_size: 2\n" in diff and "\n+micro_batch_size: 1\n" in diff


def test_torchtune_nested_keys_and_capitalised_booleans(tmp_path):
    changes = {"seq_len": 2048, "gradient_checkpointing": "none", "lora_rank": 16}
    want, again, old, new, _, _ = _roundtrip(tmp_path, "torchtune_qlora.yaml", changes)
    assert again == {**want, "lora_alpha": 16.0}  # the file's own lora_alpha stays (only changed keys are written)
    assert _changed_lines(old, new) == [("  lora_rank: 8", "  lora_rank: 16"), ("  max_seq_len: 4096", "  max_seq_len: 2048"),
                                        ("enable_activation_checkpointing: True", "enable_activation_checkpointing: False")]


def test_litgpt_grad_accum_is_written_as_global_batch(tmp_path):
    want, again, old, new, _, left = _roundtrip(tmp_path, "litgpt_lora.yaml", {"micro_batch_size": 1, "grad_accum": 2})
    # litgpt validates at train.micro_batch_size: the file cannot keep the estimated eval batch of 2
    assert again == {**want, "eval_batch_size": 1}
    assert left == ["eval_batch_size=2 (the file evaluates at its micro batch)"]
    assert _changed_lines(old, new) == [("  global_batch_size: 16", "  global_batch_size: 4"),
                                        ("  micro_batch_size: 2", "  micro_batch_size: 1")]


def test_litgpt_gpu_count_is_written_as_devices(tmp_path):
    """A plan for 4 GPUs left devices: 2 in the file ('not in the file: num_gpus=4'); read back as written it was a
    2-GPU run at twice the accumulation (24.62 against 10.58 GiB). devices is written; the FSDP sharding and
    checkpointing it implies are not reported as left."""
    changes = {"num_gpus": 4, "parallelism": "fsdp", "gradient_checkpointing": "full", "micro_batch_size": 4,
               "grad_accum": 1}
    want, again, old, new, _, left = _roundtrip(tmp_path, "litgpt_lora.yaml", changes)
    assert (again["num_gpus"], again["grad_accum"], again["micro_batch_size"]) == (4, 1, 4)
    assert not [x for x in left if x.startswith(("num_gpus", "parallelism", "gradient_checkpointing"))]
    assert ("devices: 2", "devices: 4") in _changed_lines(old, new)


def test_missing_key_is_added_and_comment_kept(tmp_path):
    want, again, old, new, _, _ = _roundtrip(tmp_path, "llamafactory_qlora.yaml", {"seq_len": 1024, "loss": "fused"})
    assert again == want
    assert new[: len(old)] == old and new[len(old):] == ["cutoff_len: 1024", "enable_liger_kernel: true"]


def test_json_file_is_rewritten_in_place(tmp_path):
    src = tmp_path / "t.json"
    src.write_text('{\n  "model_name_or_path": "Qwen/Qwen2.5-0.5B",\n  "per_device_train_batch_size": 8,\n  "bf16": true\n}\n')
    imp = from_config(src)
    write_back(imp, {"micro_batch_size": 2}, imp.scenario.replace(micro_batch_size=2).to_dict(), src)
    assert src.read_text().splitlines()[2] == '  "per_device_train_batch_size": 2,'
    assert from_config(src).scenario.micro_batch_size == 2


def test_keys_a_file_cannot_hold_are_listed_not_written():
    imp = from_config(FIX / "axolotl_qlora.yml")
    values, left = file_values(imp, {"num_gpus": 2, "parallelism": "zero3", "seq_len": 2048}, {})
    assert values == {"sequence_len": 2048} and left == ["num_gpus=2", "parallelism=zero3"]


def test_json_without_the_key_is_an_error(tmp_path):
    src = tmp_path / "t.json"
    src.write_text('{"model_name_or_path": "Qwen/Qwen2.5-0.5B"}\n')
    imp = from_config(src)
    with pytest.raises(ScenarioError, match="has no max_length"):
        write_back(imp, {"seq_len": 512}, {}, tmp_path / "o.json")


GC_FLIP = {"axolotl_qlora.yml": "none", "axolotl_full_fsdp.yml": "offload", "axolotl_lora_zero2.yml": "full",
           "llamafactory_lora_ds3.yaml": "none", "llamafactory_qlora.yaml": "none", "trl_sft_qlora.yaml": "offload",
           "torchtune_qlora.yaml": "offload", "torchtune_full_fsdp.yaml": "full", "llamafactory_full_ds2.yaml": "none",
           "trl_lora_fsdp.yaml": "none"}


@pytest.mark.parametrize("name", sorted(GC_FLIP) + ["litgpt_lora.yaml", "litgpt_qlora.yaml", "litgpt_full.yaml"])
def test_every_yaml_fixture_round_trips(tmp_path, name):
    changes = {"micro_batch_size": 3, "seq_len": 768}
    if name in GC_FLIP:
        changes["gradient_checkpointing"] = GC_FLIP[name]
    want, again, old, new, diff, left = _roundtrip(tmp_path, name, changes)
    if name.startswith("litgpt"):  # its eval batch is its micro batch (config_import/litgpt.py)
        assert left == [f"eval_batch_size={want['eval_batch_size']} (the file evaluates at its micro batch)"]
        want, left = {**want, "eval_batch_size": 3}, []
    assert again == want and left == []
    kept = [line for line in old if line in new]
    assert len(kept) >= len(old) - 4  # at most the batch, length and checkpointing lines (litgpt: global batch) change


def test_torchtune_loss_and_optimizer_are_written_as_components(tmp_path):
    """The optimizer's component changes and torch.optim's own ``fused: True`` goes with it: bitsandbytes' AdamW8bit
    takes no ``fused`` argument (torchtune's instantiate would raise TypeError). Re-read, the file's AdamW
    implementation is left to the framework (optimizer_impl auto), which does not act on an 8-bit optimizer anyway."""
    want, again, old, new, _, _ = _roundtrip(tmp_path, "torchtune_full_fsdp.yaml", {"loss": "standard", "optimizer": "adamw-8bit"})
    assert again == {**want, "optimizer_impl": "auto"} and want["optimizer_impl"] == "fused"
    assert [line for line in old if line not in new] == ["  _component_: torch.optim.AdamW", "  fused: True",
                                                         "  _component_: torchtune.modules.loss.CEWithChunkedOutputLoss"]
    assert [line for line in new if line not in old] == ["  _component_: bitsandbytes.optim.AdamW8bit",
                                                         "  _component_: torch.nn.CrossEntropyLoss"]
    assert len(new) == len(old) - 1


def test_trl_offload_adds_only_the_offload_switch(tmp_path):
    want, again, old, new, _, _ = _roundtrip(tmp_path, "trl_sft_qlora.yaml", {"gradient_checkpointing": "offload"})
    assert again == want
    assert new[: len(old)] == old and new[len(old):] == ["activation_offloading: true"]


def test_llamafactory_checkpoint_offload_is_written_as_use_unsloth_gc(tmp_path):
    """offload <-> use_unsloth_gc (LLaMA-Factory's UnslothGradientCheckpointing, config_import/llamafactory.py)."""
    want, again, old, new, _, left = _roundtrip(tmp_path, "llamafactory_qlora.yaml", {"gradient_checkpointing": "offload"})
    assert again == want and left == [] and again["gradient_checkpointing"] == "offload"
    assert new[: len(old)] == old and new[len(old):] == ["use_unsloth_gc: true"]
    # and back: a file that says true is edited to false, nothing else
    src = tmp_path / "offload.yaml"
    src.write_text("\n".join(new) + "\n")
    imp = from_config(src)
    want = imp.scenario.replace(gradient_checkpointing="full").to_dict()
    dest = tmp_path / "full.yaml"
    write_back(imp, {"gradient_checkpointing": "full"}, want, dest)
    assert from_config(dest).scenario.to_dict() == want
    assert _changed_lines(new, dest.read_text().splitlines()) == [("use_unsloth_gc: true", "use_unsloth_gc: false")]


def test_torchtune_linear_cross_entropy_reads_as_the_chunked_loss(tmp_path):
    """torchtune's LinearCrossEntropyLoss keeps each chunk's logits for backward (no fused kernel): it imports as the
    chunked loss, with the reason beside the key; torchtune 0.4, the profile's release, calls no fused loss, so a
    scenario asking for one under torchtune is refused naming the losses it runs, and a plan keeps the file's loss."""
    from vramfit.errors import ScenarioError
    from vramfit.scenario import parse_scenario

    src = tmp_path / "tt.yaml"
    src.write_text("model:\n  _component_: torchtune.models.llama3_1.llama3_1_8b\ntokenizer:\n  max_seq_len: 4096\n"
                   "batch_size: 2\ngradient_accumulation_steps: 1\nloss:\n  _component_: torchtune.modules.loss.LinearCrossEntropyLoss\n"
                   "dtype: bf16\n")
    imp = from_config(src)
    assert imp.scenario.loss.value == "chunked"
    line = next(e.line() for e in imp.entries if e.key == "loss._component_")
    assert "→ loss=chunked" in line and "keeps each token chunk's logits for backward" in line
    with pytest.raises(ScenarioError) as e:
        parse_scenario({"model": "meta-llama/Llama-3.1-8B", "framework": "torchtune", "loss": "fused"})
    assert e.value.key == "loss" and e.value.valid == ["standard", "chunked"]
    ce = tmp_path / "ce.yaml"
    ce.write_text(src.read_text().replace("LinearCrossEntropyLoss", "CEWithChunkedOutputLoss"))
    assert from_config(ce).scenario == imp.scenario
    chunked, standard = estimate(imp.scenario), estimate(imp.scenario.replace(loss="standard"))
    logits = dict(chunked.peak.breakdown)["logits_loss"]
    # every chunk's fp32 log_softmax output is kept (4 B x 8,192 tokens x 128,256): the fused kernel keeps none
    assert logits >= 4 * 2 * 4096 * 128256 and chunked.peak.required_bytes < standard.peak.required_bytes


@pytest.mark.parametrize(("start", "value"), [("false", "full"), ("true", "none")])
def test_trl_activation_checkpointing_is_written_under_the_name_the_file_uses(tmp_path, start, value):
    # transformers 5.24 reads activation_checkpointing over its deprecated alias: a gradient_checkpointing written
    # beside it changed nothing, so a planned change (on or off) did not reach the run
    src = tmp_path / "in.yaml"
    src.write_text((FIX / "trl_sft_qlora.yaml").read_text().replace("gradient_checkpointing:", "activation_checkpointing:")
                   .replace("activation_checkpointing: true", f"activation_checkpointing: {start}"))
    imp = from_config(src)
    want = imp.scenario.replace(gradient_checkpointing=value).to_dict()
    dest = tmp_path / "out.yaml"
    write_back(imp, {"gradient_checkpointing": value}, want, dest)
    assert f"activation_checkpointing: {'true' if value == 'full' else 'false'}" in dest.read_text()
    assert "\ngradient_checkpointing:" not in dest.read_text()
    assert from_config(dest).scenario.to_dict() == want


@pytest.mark.parametrize("form", ["string", "class_path"])
def test_litgpt_optimizer_is_written_as_a_class_path(tmp_path, form):
    """A plan that moves to 8-bit AdamW wrote nothing into a litgpt file ("not in the file"), so the file as written
    ran torch's AdamW: 4.6 GiB over the planned figure for gemma-2b full fine-tuning. litgpt imports a dotted name in
    either form (litgpt/utils.py ``instantiate_torch_optimizer``)."""
    text = (FIX / "litgpt_full.yaml").read_text()
    if form == "class_path":
        text = text.replace("optimizer: AdamW", "optimizer:\n  class_path: torch.optim.AdamW")
    want, again, old, new, _, left = _roundtrip_text(tmp_path, text, {"optimizer": "adamw-8bit"})
    assert again == want and again["optimizer"] == "adamw-8bit" and left == []
    line = "optimizer: bitsandbytes.optim.AdamW8bit" if form == "string" else "  class_path: bitsandbytes.optim.AdamW8bit"
    assert [b for a, b in _changed_lines(old, new)] == [line]
    assert estimate(from_config(tmp_path / "new.yaml").scenario).peak == estimate(want).peak


def _roundtrip_text(tmp_path, text, changes):
    src = tmp_path / "src.yaml"
    src.write_text(text)
    imp = from_config(src)
    want = imp.scenario.replace(**changes).to_dict()
    dest = tmp_path / "new.yaml"
    _, left = write_back(imp, changes, want, dest)
    return want, from_config(dest).scenario.to_dict(), text.splitlines(), dest.read_text().splitlines(), None, left
