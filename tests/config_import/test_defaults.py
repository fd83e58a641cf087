"""The defaults the HF-family readers fill in are the installed libraries' own, at the cited versions."""

import dataclasses
import importlib.metadata as md
from pathlib import Path

import pytest

from vramfit import from_config

FIX = Path(__file__).parent / "fixtures"


def _version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


@pytest.mark.slow  # imports trl (and torch)
@pytest.mark.skipif(_version("trl") != "1.16.0" or _version("transformers") != "5.24.0",
                    reason="defaults are cited for trl 1.16.0 / transformers 5.24.0")
def test_trl_defaults_match_the_installed_sftconfig_and_modelconfig():
    from trl import ModelConfig, SFTConfig

    sft = {f.name: f.default for f in dataclasses.fields(SFTConfig)}
    mc = {f.name: f.default for f in dataclasses.fields(ModelConfig)}
    d = {e.key: e.value for e in from_config(FIX / "trl_full.json").entries if e.kind == "default"}
    for key in ("per_device_train_batch_size", "gradient_accumulation_steps", "optim", "gradient_checkpointing",
                "max_length", "use_liger_kernel", "activation_offloading"):
        assert d[key] == sft[key], key
    assert d["dtype"] == mc["dtype"] and d["use_peft"] == mc["use_peft"]
    peft = {e.key: e.value for e in from_config(FIX / "trl_sft_qlora.yaml").entries if e.kind == "default"}
    assert peft["lora_dropout"] == mc["lora_dropout"]


@pytest.mark.slow  # imports peft (and torch)
@pytest.mark.skipif(_version("peft") != "0.21.2", reason="defaults are cited for peft 0.21.2")
def test_peft_default_targets_match_the_installed_peft():
    """trl.PEFT_DEFAULT_TARGETS is PEFT's mapping for every model type of the catalog (types PEFT lists none for are
    left out, and the import refuses them as PEFT does)."""
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as targets

    from vramfit.config_import.trl import PEFT_DEFAULT_TARGETS
    from vramfit.models import load_catalog

    types = {e["config"].get("model_type") for e in load_catalog() if e.get("config")}
    assert {t: list(PEFT_DEFAULT_TARGETS[t]) for t in PEFT_DEFAULT_TARGETS} == {
        t: list(targets[t]) for t in types if targets.get(t)}


def test_unknown_torchtune_builder_needs_model(tmp_path):
    from typer.testing import CliRunner

    from vramfit.cli.main import app
    from vramfit.errors import ScenarioError

    cfg = tmp_path / "tt.yaml"
    text = (FIX / "torchtune_full_fsdp.yaml").read_text().replace("llama3_2.llama3_2_3b", "llama4.llama4_scout_17b_16e")
    cfg.write_text(text)
    with pytest.raises(ScenarioError, match="model: is required"):
        from_config(cfg).scenario  # noqa: B018
    r = CliRunner().invoke(app, ["estimate", "--from", str(cfg), "--model", "meta-llama/Llama-3.2-3B", "--json"])
    assert r.exit_code == 0, r.output
    assert "builder llama4_scout_17b_16e: no Hugging Face id in vramfit's table; pass --model" in r.stderr


def test_preference_stage_and_accelerate_single_process(tmp_path):
    cfg = tmp_path / "dpo.yaml"
    cfg.write_text((FIX / "llamafactory_qlora.yaml").read_text().replace("stage: sft", "stage: dpo"))
    imp = from_config(cfg)
    assert imp.scenario.stage.value == "dpo" and "stage" not in {e.key for e in imp.not_modelled()}
    acc = tmp_path / "acc.yaml"
    acc.write_text("compute_environment: LOCAL_MACHINE\ndistributed_type: 'NO'\nnum_processes: 8\nmixed_precision: bf16\n")
    sc = from_config(FIX / "trl_full.json", acc).scenario
    assert (sc.num_gpus, sc.parallelism.value) == (1, "none")


def test_companion_that_contradicts_the_config_is_an_error(tmp_path):
    from vramfit.errors import ScenarioError

    peft = tmp_path / "adapter_config.json"
    peft.write_text('{"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": ["q_proj"]}')
    with pytest.raises(ScenarioError, match="sets lora_rank=8 but trl_sft_qlora.yaml sets lora_rank=32"):
        from_config(FIX / "trl_sft_qlora.yaml", peft)
