"""A TRL file of a preference or RL stage (what ``plan --export trl`` writes: ``stage`` and the stage's config class
fields) reads back to the plan: it was taken for a LLaMA-Factory file (``stage`` is one of its keys) and refused."""

import pytest

from vramfit import estimate, from_config
from vramfit.config_import import from_text
from vramfit.errors import ScenarioError
from vramfit.plan import plan
from vramfit.plan.export import export_plan

MODEL = "meta-llama/Llama-3.1-8B"


@pytest.mark.parametrize("stage, keys", [("dpo", {}), ("dpo", {"reference": "precomputed"}), ("kto", {}),
                                         ("orpo", {}), ("simpo", {}), ("simpo", {"cpo_alpha": 0.0}), ("grpo", {}),
                                         ("grpo", {"reference": "adapters-off", "generation": "vllm-colocate"})])
def test_a_stage_export_reads_back_to_the_plan(tmp_path, stage, keys):
    r = plan({"model": MODEL, "method": "lora", "stage": stage, **keys}, effective_batch=16, gpu_ids="h100-sxm",
             max_gpus=1, with_changes=False)
    p = r.plans[0]
    for name, text in export_plan(p, "trl").files.items():
        (tmp_path / name).write_text(text)
    imp = from_config(tmp_path / "train_config.yaml")
    assert imp.dialect == "trl"
    sc = imp.scenario
    assert sc.stage.value == stage and sc.reference.value == p.scenario.get("reference", "auto")
    assert estimate(sc.replace(gpu="h100-sxm")).peak.device_bytes == p.device_bytes


def test_stage_keys_of_a_hand_written_trl_file():
    head = f"model_name_or_path: {MODEL}\nuse_peft: true\nper_device_train_batch_size: 8\n"
    grpo = from_text(head + "stage: grpo\nmax_prompt_length: 512\nmax_completion_length: 256\nbeta: 0.04\n")
    assert (grpo.overrides["seq_len"], grpo.overrides["completion_len"], grpo.overrides["reference"]) == \
        (768, 256, "adapters-off")
    ipo = from_text(head + "stage: dpo\nloss_type: [ipo]\n")
    assert any(e.key == "loss_type" and e.kind == "not modelled yet" for e in ipo.entries)
    old_dpo = from_text(head + "stage: dpo\nmax_length: 1024\nmax_prompt_length: 512\n")  # TRL < 0.26's split
    assert old_dpo.overrides["seq_len"] == 1024
    with pytest.raises(ScenarioError, match="max_length: GRPOConfig has none"):
        from_text(head + "stage: grpo\nmax_length: 1024\n")
    with pytest.raises(ScenarioError, match=r"stage: 'ppo' is not a stage of TRL's trainers \(valid values: sft, dpo"):
        from_text(head + "stage: ppo\n", dialect="trl")
    with pytest.raises(ScenarioError, match=r"loss_type: 'sigmoid' with stage simpo \(valid values: simpo\)"):
        from_text(head + "stage: simpo\nloss_type: sigmoid\n")


def test_a_llamafactory_file_with_a_stage_is_still_llamafactorys():
    imp = from_text(f"model_name_or_path: {MODEL}\nstage: dpo\nfinetuning_type: lora\nper_device_train_batch_size: 2\n"
                    "output_dir: out\n")
    assert imp.dialect == "llamafactory" and imp.overrides["stage"] == "dpo"


@pytest.mark.parametrize("stage", ["dpo", "rm", "sft"])
def test_a_llamafactory_file_on_its_defaults_is_not_taken_for_trl(stage):
    """stage beside TrainingArguments keys only (LLaMA-Factory's finetuning_type, cutoff_len, template left to their
    defaults) is LLaMA-Factory's: TRL's reading needs one of its own configs' keys (use_peft, lora_r, max_length, ...)."""
    imp = from_text(f"model_name_or_path: {MODEL}\nstage: {stage}\ndo_train: true\ndataset: demo\noutput_dir: out\n"
                    "per_device_train_batch_size: 2\ngradient_accumulation_steps: 8\nbf16: true\n")
    assert imp.dialect == "llamafactory"


@pytest.mark.parametrize("stage", ["sft", "dpo", "orpo"])
def test_a_qlora_export_reads_back_with_what_trls_trainer_does(tmp_path, stage):
    # trl 1.16.0: SFT/DPO/KTO/GRPO never call prepare_model_for_kbit_training and cast the adapters to bf16
    # (framework_version trl-1.16); the ORPO and CPO trainers prepare the model, as the HF profile does
    prepared = stage == "orpo"
    version = None if prepared else "trl-1.16"
    r = plan({"model": MODEL, "method": "qlora", "stage": stage, "framework_version": version}, effective_batch=16,
             gpu_ids="h100-sxm", max_gpus=1, with_changes=False)
    out = export_plan(r.plans[0], "trl")
    for name, text in out.files.items():
        (tmp_path / name).write_text(text)
    sc = from_config(tmp_path / "train_config.yaml").scenario
    assert sc.framework_version == version
    assert estimate(sc.replace(gpu="h100-sxm")).peak.device_bytes == r.plans[0].device_bytes
    assert not any("prepare_model_for_kbit_training" in n for n in out.notes)
    # a plan sized for a prepared model says the TRL run needs less
    if not prepared:
        default = plan({"model": MODEL, "method": "qlora", "stage": stage}, effective_batch=16, gpu_ids="h100-sxm",
                       max_gpus=1, with_changes=False)
        assert any("neither call prepare_model_for_kbit_training" in n
                   for n in export_plan(default.plans[0], "trl").notes)
        unprepared = plan({"model": MODEL, "method": "qlora", "stage": stage, "kbit_prepare": "no"}, effective_batch=16,
                          gpu_ids="h100-sxm", max_gpus=1, with_changes=False)  # not sized for a prepared model: no note
        assert not any("prepare_model_for_kbit_training" in n for n in export_plan(unprepared.plans[0], "trl").notes)
