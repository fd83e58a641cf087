"""Axolotl ``rl`` and LLaMA-Factory ``stage`` + ``pref_loss`` become the scenario's ``stage`` (issue 15)."""

from pathlib import Path

import pytest

from vramfit import from_config

FIX = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize(("pref_loss", "stage"), [("sigmoid", "dpo"), ("ipo", "dpo"), ("orpo", "orpo"),
                                                   ("simpo", "simpo")])
def test_llamafactory_dpo_stage_with_its_preference_loss(tmp_path, pref_loss, stage):
    cfg = tmp_path / "dpo.yaml"
    text = (FIX / "llamafactory_qlora.yaml").read_text().replace("stage: sft", f"stage: dpo\npref_loss: {pref_loss}")
    cfg.write_text(text)
    sc = from_config(cfg).scenario
    assert sc.stage.value == stage and sc.method.value == "qlora"


def test_llamafactory_reward_model_stage_is_reported_not_modelled(tmp_path):
    cfg = tmp_path / "rm.yaml"
    cfg.write_text((FIX / "llamafactory_qlora.yaml").read_text().replace("stage: sft", "stage: rm"))
    imp = from_config(cfg)
    nm = {e.key: e.note for e in imp.not_modelled()}
    assert imp.scenario.stage.value == "sft" and "reward-model training" in nm["stage"]


def test_axolotl_grpo_reads_the_rollout_sizes(tmp_path):
    text = (FIX / "axolotl_lora_zero2.yml").read_text().replace("rl: dpo", "rl: grpo").replace(
        "micro_batch_size: 4", "micro_batch_size: 8")
    text += ("trl:\n  num_generations: 4\n  max_completion_length: 256\n  use_vllm: true\n  vllm_mode: colocate\n"
             "  vllm_enable_sleep_mode: true\n  beta: 0.04\nvllm:\n  gpu_memory_utilization: 0.4\n")
    cfg = tmp_path / "grpo.yml"
    cfg.write_text(text)
    (tmp_path / "ds_z2.json").write_text((FIX / "ds_z2.json").read_text())
    imp = from_config(cfg)
    out = imp.overrides  # colocated vLLM needs the card too (the CLI's --gpu): the mapping alone here
    assert {k: out[k] for k in ("stage", "num_generations", "completion_len", "generation",
                                "vllm_gpu_memory_utilization", "vllm_sleep", "reference")} == {
        "stage": "grpo", "num_generations": 4, "completion_len": 256, "generation": "vllm-colocate",
        "vllm_gpu_memory_utilization": 0.4, "vllm_sleep": True, "reference": "adapters-off"}


def test_axolotl_grpo_with_a_card_estimates(tmp_path):
    from vramfit import estimate
    from vramfit.gpus import get_gpu

    text = (FIX / "axolotl_lora_zero2.yml").read_text().replace("rl: dpo", "rl: grpo").replace(
        "micro_batch_size: 4", "micro_batch_size: 8").replace("deepspeed: ds_z2.json\n", "")
    text += "trl:\n  use_vllm: true\n  vllm_mode: colocate\n  max_completion_length: 128\n"
    cfg = tmp_path / "grpo.yml"
    cfg.write_text(text)
    (tmp_path / "ds_z2.json").write_text((FIX / "ds_z2.json").read_text())
    sc = from_config(cfg).scenario
    assert (sc.stage.value, sc.generation.value, sc.vllm_gpu_memory_utilization, sc.num_generations) == (
        "grpo", "vllm-colocate", 0.9, 8)  # Axolotl's vllm.gpu_memory_utilization default; TRL's generations
    r = estimate(sc, gpu="h100")
    assert dict(next(p for p in r.phases if p.phase == "generate").breakdown)["vllm"] == int(0.9 * get_gpu("h100").usable_bytes)


def _grpo(tmp_path, extra: str, rl: str = "grpo"):
    text = (FIX / "axolotl_lora_zero2.yml").read_text().replace("rl: dpo", f"rl: {rl}").replace(
        "micro_batch_size: 4", "micro_batch_size: 8").replace("deepspeed: ds_z2.json\n", "")
    cfg = tmp_path / "grpo.yml"
    cfg.write_text(text + "sequence_len: 2048\n" + extra)  # holds TRL's 512-token completion
    return from_config(cfg)


def test_axolotl_use_vllm_without_a_mode_is_the_server(tmp_path):
    """validation.py l. 1906-1913 check_vllm_mode_set: vllm_mode unset -> server (vLLM on other GPUs)."""
    imp = _grpo(tmp_path, "trl:\n  use_vllm: 'true'\n")
    assert imp.overrides["generation"] == "vllm-server" and "vllm_gpu_memory_utilization" not in imp.overrides


def test_axolotl_trl_vllm_gpu_memory_utilization_is_dropped_as_axolotl_drops_it(tmp_path):
    imp = _grpo(tmp_path, "trl:\n  use_vllm: true\n  vllm_mode: colocate\n  vllm_gpu_memory_utilization: 0.4\n")
    assert imp.overrides["vllm_gpu_memory_utilization"] == 0.9
    entry = next(e for e in imp.entries if e.key == "trl.vllm_gpu_memory_utilization")
    assert entry.kind == "ignored" and "vllm.gpu_memory_utilization" in entry.note


@pytest.mark.parametrize(("extra", "reference"), [
    ("rl_beta: 0.04\n", "adapters-off"), ("rl_beta: 0\n", "none"), ("orpo_alpha: 0.1\n", "adapters-off"),
    ("rl_beta: 0.04\ntrl:\n  beta: 0.0\n", "none"),  # trl.beta wins (core/builders/rl.py l. 122-128)
    ("", "auto")])  # GRPOConfig's beta 0.0: the scenario's auto, no reference for grpo
def test_axolotl_grpo_beta_decides_the_reference(tmp_path, extra, reference):
    assert _grpo(tmp_path, extra).scenario.reference.value == reference


def test_axolotl_rl_beta_full_fine_tuning_keeps_a_copy(tmp_path):
    text = "rl_beta: 0.04\n"
    imp = _grpo(tmp_path, text)
    assert imp.scenario.reference.value == "adapters-off"
    cfg = tmp_path / "full.yml"
    cfg.write_text((tmp_path / "grpo.yml").read_text().replace("adapter: lora\n", "").replace("lora_r: 16\n", "")
                   .replace("unsloth_lora_mlp: true\n", ""))
    assert from_config(cfg).scenario.reference.value == "copy"


def test_axolotl_gdpo_runs_the_grpo_trainer(tmp_path):
    assert _grpo(tmp_path, "", rl="gdpo").scenario.stage.value == "grpo"


@pytest.mark.parametrize("rl", ["ppo", "DPO", "7"])
def test_axolotl_unknown_rl_is_refused_with_the_valid_values(tmp_path, rl):
    from vramfit.errors import ScenarioError

    with pytest.raises(ScenarioError) as ei:
        _grpo(tmp_path, "", rl=rl)
    assert "rl: " in str(ei.value) and "(valid values: dpo, gdpo, grpo, ipo, orpo, kto, simpo, ebft)" in str(ei.value)
