"""The AdamW implementation a config asks for (scenario key ``optimizer_impl``, vramfit/choices.py AdamwImpl):
transformers 5.24.0 trainer_optimizer.py passes ``fused=True`` only for ``optim: adamw_torch_fused``; for ``adamw_torch``
(and torchtune's ``torch.optim.AdamW`` without ``fused: True``) torch v2.13.0 torch/optim/adamw.py picks foreach on
CUDA, whose step copies the second moment (estimate/core.py). Both used to import as the profile's fused AdamW."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from vramfit import estimate, from_config
from vramfit.cli.main import app
from vramfit.errors import ScenarioError
from vramfit.plan import plan
from vramfit.plan.export import export_plan
from vramfit.scenario import parse_scenario
from vramfit.web.translate import untranslated

FIX = Path(__file__).parent / "fixtures"
FULL_8B = {"model": "meta-llama/Llama-3.1-8B", "method": "full", "gradient_checkpointing": "full"}


def _trl(tmp_path, **keys):
    path = tmp_path / "trl.yaml"
    path.write_text(yaml.safe_dump({"model_name_or_path": "meta-llama/Llama-3.1-8B", "bf16": True,
                                    "gradient_checkpointing": True, "max_length": 2048, **keys}))
    return from_config(path).scenario


def _torchtune(tmp_path, optimizer: dict):
    data = yaml.safe_load((FIX / "torchtune_full_fsdp.yaml").read_text())
    data["optimizer"] = {"_component_": "torch.optim.AdamW", "lr": 2e-5, **optimizer}
    path = tmp_path / "tt.yaml"
    path.write_text(yaml.safe_dump(data))
    return from_config(path).scenario


@pytest.mark.parametrize(("optim", "impl"), [("adamw_torch", "foreach"), ("adamw_torch_fused", "fused"),
                                             (None, "auto"), ("adamw_bnb_8bit", "auto")])
def test_hf_optim_names_the_implementation(tmp_path, optim, impl):
    sc = _trl(tmp_path, **({"optim": optim} if optim else {}))
    assert sc.optimizer_impl.value == impl  # a default (no optim) leaves it to the framework release


@pytest.mark.parametrize(("optimizer", "impl"), [({"fused": True}, "fused"), ({"fused": False}, "foreach"), ({}, "foreach"),
                                              ({"foreach": False}, "fused")])  # the for-loop step: no model-sized copy
def test_torchtune_adamw_is_foreach_unless_fused(tmp_path, optimizer, impl):
    assert _torchtune(tmp_path, optimizer).optimizer_impl.value == impl


def test_foreach_adds_the_second_moment_copy():
    """8B full fine-tuning, bf16 states: the foreach step's sqrt copy of exp_avg_sq is 2 B x 8,030,261,248 parameters,
    14.96 GiB, at the optimizer step; auto under transformers 5 is fused."""
    fused, foreach, auto = (estimate(parse_scenario({**FULL_8B, "optimizer_impl": i})) for i in ("fused", "foreach", "auto"))
    assert auto.peak.required_bytes == fused.peak.required_bytes
    assert foreach.peak.required_bytes - fused.peak.required_bytes == 2 * 8_030_261_248 == foreach.component("temporaries")
    assert f"{foreach.component('temporaries') / 2**30:.2f} GiB" == "14.96 GiB"  # README.md, `optimizer_impl`
    old = estimate(parse_scenario({**FULL_8B, "framework_version": "transformers-4.53", "optimizer_impl": "fused"}))
    assert old.component("temporaries") < foreach.component("temporaries")  # overrides the release's foreach default
    paged = estimate(parse_scenario({**FULL_8B, "optimizer": "adamw-8bit", "optimizer_impl": "foreach"}))
    said = [a for a in paged.assumptions if a.startswith("optimizer_impl=foreach is ignored")]
    assert len(said) == 1 and untranslated(said) == []  # the page shows it in Portuguese too


def test_cli_key_and_bad_value():
    run = ["estimate", "--model", "meta-llama/Llama-3.1-8B", "--method", "full"]
    ok = CliRunner().invoke(app, [*run, "--optimizer-impl", "foreach", "--json"])
    assert ok.exit_code == 0 and json.loads(ok.stdout)["scenario"]["optimizer_impl"] == "foreach"
    bad = CliRunner().invoke(app, [*run, "--optimizer-impl", "loop"])
    assert bad.exit_code == 2 and "optimizer_impl" in bad.output and "auto, fused, foreach" in bad.output


def test_trl_export_writes_the_foreach_optim():
    rep = plan({**FULL_8B, "optimizer_impl": "foreach", "seq_len": 1024}, effective_batch=8, gpu_ids="h200-sxm",
               with_changes=False)
    chosen = next(p for p in rep.plans if p.optimizer == "adamw")
    cfg = yaml.safe_load(export_plan(chosen, "trl").files["train_config.yaml"])
    assert cfg["optim"] == "adamw_torch"


@pytest.mark.parametrize(("line", "impl"), [("", "auto"), ('implementation = "fused"', "fused"),
                                            ('implementation = "foreach"', "foreach"), ("fused = false", "foreach"),
                                            ('implementation = "for-loop"', "fused")])
def test_torchtitan_optimizer_implementation(tmp_path, line, impl):
    """torchtitan's optimizer.implementation (v0.3.0: for-loop, foreach, fused, fused_opt_states_bf16; default fused)
    and the older fused switch become optimizer_impl; neither given: the profile's release (9dec370, foreach)."""
    text = (FIX / "torchtitan_llama3_8b.toml").read_text().replace('name = "AdamW"\n', f'name = "AdamW"\n{line}\n')
    path = tmp_path / "titan.toml"
    path.write_text(text)
    assert from_config(path).scenario.optimizer_impl.value == impl


def test_fused_and_foreach_together_are_refused(tmp_path):
    with pytest.raises(ScenarioError, match="optimizer.fused and optimizer.foreach are both True"):
        _torchtune(tmp_path, {"fused": True, "foreach": True})


def test_torch_only_arguments_under_another_optimizer_are_refused(tmp_path):
    """torchtune instantiates the component with every key under optimizer: bitsandbytes' AdamW8bit has no fused."""
    with pytest.raises(ScenarioError, match="bitsandbytes.optim.AdamW8bit takes no fused argument"):
        _torchtune(tmp_path, {"_component_": "bitsandbytes.optim.AdamW8bit", "fused": True})
