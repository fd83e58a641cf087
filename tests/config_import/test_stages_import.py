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
             "  vllm_gpu_memory_utilization: 0.4\n  vllm_enable_sleep_mode: true\n  beta: 0.04\n")
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
    text += "trl:\n  use_vllm: true\n  max_completion_length: 128\n"
    cfg = tmp_path / "grpo.yml"
    cfg.write_text(text)
    (tmp_path / "ds_z2.json").write_text((FIX / "ds_z2.json").read_text())
    sc = from_config(cfg).scenario
    assert (sc.stage.value, sc.generation.value, sc.vllm_gpu_memory_utilization, sc.num_generations) == (
        "grpo", "vllm-colocate", 0.3, 8)  # TRL's defaults (vllm_mode None in Axolotl -> colocate)
    r = estimate(sc, gpu="h100")
    assert dict(next(p for p in r.phases if p.phase == "generate").breakdown)["vllm"] == int(0.3 * get_gpu("h100").usable_bytes)
