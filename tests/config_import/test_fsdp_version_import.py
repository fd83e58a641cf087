"""fsdp_version in an accelerate config, a Trainer's fsdp_config and an Axolotl config becomes the scenario's
fsdp_version (accelerate v1.15.0 FullyShardedDataParallelPlugin: 1 or 2), and a plan exports it back."""

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from vramfit import from_config
from vramfit.errors import ScenarioError
from vramfit.plan import plan
from vramfit.plan.export import export_plan

FIX = Path(__file__).parent / "fixtures"



@pytest.mark.parametrize(("version", "want"), [(2, "2"), ("1", "1"), (None, "auto")])
def test_accelerate_fsdp_version_becomes_the_key(version, want, accelerate_config):
    extra = {} if version is None else {"fsdp_version": version}
    imp = from_config(FIX / "trl_sft_qlora.yaml", accelerate_config(**extra))
    assert (imp.scenario.parallelism.value, imp.scenario.fsdp_version.value) == ("fsdp", want)
    if version is not None:
        assert any("fsdp_config.fsdp_version" in x and f"fsdp_version={want}" in x for x in imp.lines())


def test_a_bad_version_is_one_line(accelerate_config):
    with pytest.raises(ScenarioError) as ei:
        from_config(FIX / "trl_sft_qlora.yaml", accelerate_config(fsdp_version=3))
    assert "fsdp_version" in str(ei.value) and "valid values: 1, 2" in str(ei.value) and "\n" not in str(ei.value)


def test_axolotl_fsdp_version_2(tmp_path):
    p = tmp_path / "axolotl.yml"
    p.write_text((FIX / "axolotl_full_fsdp.yml").read_text() + "fsdp_version: 2\n")
    sc = from_config(p).scenario
    assert (sc.parallelism.value, sc.fsdp_version.value) == ("fsdp", "2")


def test_a_fsdp2_plan_exports_accelerates_fsdp2_keys(tmp_path, monkeypatch):
    """accelerate's own launch environment from the exported file, then the plugin the trainer builds from it."""
    import accelerate.commands.launch as launch
    from accelerate.utils import FullyShardedDataParallelPlugin
    from accelerate.utils import launch as env_of

    r = plan({"model": "Qwen/Qwen2.5-0.5B", "method": "full", "precision": "bf16-mixed", "parallelism": "fsdp",
              "num_gpus": 2, "fsdp_version": 2}, gpu_ids=["rtx4090"], effective_batch=8)
    p = next(p for p in r.plans if p.num_gpus == 2)  # the planner picks DDP for a model this small: shard it
    assert str(p.scenario["fsdp_version"]) == "2"
    p = replace(p, parallelism="fsdp", scenario={**p.scenario, "parallelism": "fsdp"})
    text = export_plan(p, "fsdp").files["accelerate.yaml"]
    fsdp = yaml.safe_load(text)["fsdp_config"]
    assert fsdp["fsdp_version"] == 2 and fsdp["fsdp_reshard_after_forward"] is True
    assert "fsdp_sharding_strategy" not in fsdp and "fsdp_sync_module_states" not in fsdp
    (tmp_path / "accelerate.yaml").write_text(text)
    monkeypatch.chdir(tmp_path)
    args = launch.launch_command_parser().parse_args(["--config_file", "accelerate.yaml", "train.py"])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(launch, "multi_gpu_launcher", lambda a: setattr(args, "resolved", a))
        launch.launch_command(args)
    for k, v in env_of.prepare_multi_gpu_env(args.resolved).items():
        if k.startswith(("ACCELERATE_", "FSDP_")):
            monkeypatch.setenv(k, v)
    plugin = FullyShardedDataParallelPlugin()
    assert plugin.fsdp_version == 2 and plugin.reshard_after_forward is True
