"""Shared helpers for the export tests: plans that cover every sharding, files on disk, the engines' own loaders.

Each loader is the engine's code, not a YAML parser: accelerate's ``launch_command`` (with the process
spawning intercepted) and the plugin it would build from the launch environment, DeepSpeed's
``DeepSpeedConfig``, TRL's ``TrlParser`` with ``SFTConfig`` and ``ModelConfig``.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from unittest import mock

import pytest

from accelerate_cuda import pretend_cuda
from vramfit.plan import plan
from vramfit.plan.export import export_plan


def plan_rows() -> dict:
    """Plans of every shape the exports write (parallelism, offload, precision, method), by name."""
    # issue 22: ZeRO-3's gathers past the prefetch bucket are timed, so 8 x H100 run Qwen2.5-32B faster with DDP;
    # Qwen2.5-72B still needs ZeRO-3 there
    # (issue 13: the verdict counts the memory needed once the allocator releases its cached segments, so with the
    # standard loss Qwen2.5-7B at 32,768 tokens now fits with activation offload: the fused loss is asked for here)
    qwen7 = plan({"model": "Qwen/Qwen2.5-7B", "method": "lora", "seq_len": 32768, "loss": "fused"}, gpu_ids=["h100-sxm"],
                 effective_batch=16, dataset_tokens="100M").plans
    qwen72 = plan({"model": "Qwen/Qwen2.5-72B", "method": "lora", "seq_len": 8192},
                  gpu_ids=["h100-sxm"], effective_batch=16, dataset_tokens="100M").plans
    llama = plan({"model": "meta-llama/Llama-2-7b-hf", "method": "full", "precision": "bf16-mixed"},
                 gpu_ids=["a100-40gb-sxm"], effective_batch=16).plans
    qlora = plan({"model": "meta-llama/Llama-2-70b-hf", "method": "qlora", "gradient_checkpointing": "full"},
                 gpu_ids=["h100-sxm"], effective_batch=1).plans
    l40s = plan({"model": "meta-llama/Llama-2-7b-hf", "method": "lora"}, gpu_ids=["l40s"], effective_batch=64).plans
    # (issue 13: ZeRO-3 now keeps stage3_max_live_parameters gathered, so the planner no longer offers Mistral-7B
    # a ZeRO-3 + parameter-offload plan on the A10G; issue 22: the offloaded optimizer step and ZeRO-3's exposed
    # gathers are timed, so Llama-2-7B's fastest A10G plans are plain, and ZeRO-3's saved linear inputs keep it off the
    # no-checkpointing offload plan; Llama-2-13B still needs the offload)
    a10g = plan({"model": "meta-llama/Llama-2-13b-hf", "method": "lora"}, gpu_ids=["a10g"], effective_batch=32).plans
    small = plan({"model": "Qwen/Qwen2.5-0.5B", "method": "full", "precision": "bf16-mixed"},
                 gpu_ids=["rtx4090"], effective_batch=8).plans
    # (issue 22: PEFT's LoRA units under FSDP1's rate limiter make every FSDP gather wait, so 13B, which fits
    # each card whole, now plans DDP; 70B needs the sharding)
    fsdp = plan({"model": "meta-llama/Llama-2-70b-hf", "method": "lora", "parallelism": "fsdp"},
                gpu_ids=["a100-40gb-sxm"], effective_batch=16).plans
    rows = {
        "fsdp-lora-8gpu": next(p for p in fsdp if p.parallelism == "fsdp" and p.num_gpus == 8),
        "full-mixed-1gpu": next(p for p in small if p.num_gpus == 1),
        "ddp-lora-2gpu": next(p for p in l40s if p.num_gpus == 2),
        "zero3-offload-params": next(p for p in a10g if p.offload == "optimizer+params"),
        "zero3-lora-8gpu": next(p for p in qwen72 if p.num_gpus == 8),
        # the CPU step test runs this plan: not activation offload, whose TRL context needs a CUDA stream (trl 1.16
        # models/activation_offloading.py); Qwen2.5-32B at 8,192 tokens fits one H100 only with it since the
        # lowest-block backward is modelled; Qwen2.5-7B at 32,768 fits with full checkpointing and the fused loss
        "single-lora-fused": next(p for p in qwen7 if p.num_gpus == 1),
        "zero3-full-mixed": next(p for p in llama if p.parallelism == "zero3"),
        "zero2-8gpu": next(p for p in llama if p.parallelism == "zero2" and p.num_gpus == 8),
        "zero2-offload-1gpu": next(p for p in llama if p.offload != "none" and p.num_gpus == 1),
        "qlora-1gpu": qlora[0],
    }
    assert rows["single-lora-fused"].loss == "fused" and rows["single-lora-fused"].gradient_checkpointing == "full"
    assert rows["zero3-lora-8gpu"].parallelism == "zero3" and rows["zero3-lora-8gpu"].num_gpus == 8
    assert rows["zero2-offload-1gpu"].parallelism == "zero2" and rows["ddp-lora-2gpu"].parallelism == "ddp"
    assert rows["zero3-offload-params"].offload == "optimizer+params" and rows["fsdp-lora-8gpu"].parallelism == "fsdp"
    return rows


def write(plan_row, engine: str, folder: Path, epochs: float = 1.0):
    ex = export_plan(plan_row, engine, epochs=epochs)
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in ex.files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return ex


def accelerate_launch(folder: Path, extra: tuple[str, ...] = ()) -> tuple[str, dict[str, str]]:
    """Run ``accelerate launch --config_file accelerate.yaml train.py`` up to the process spawn.

    Returns which launcher accelerate chose and the environment it would give the training processes.
    """
    import accelerate.commands.launch as launch
    from accelerate.utils import launch as env_of

    chosen: dict = {}

    def grab(name):
        return lambda args: chosen.update(name=name, args=args)

    cwd = os.getcwd()
    os.chdir(folder)  # the DeepSpeed file is named relative to the launch folder
    try:
        with mock.patch.object(launch, "deepspeed_launcher", grab("deepspeed")), \
             mock.patch.object(launch, "multi_gpu_launcher", grab("multi_gpu")), \
             mock.patch.object(launch, "simple_launcher", grab("simple")):
            args = launch.launch_command_parser().parse_args(["--config_file", "accelerate.yaml", *extra, "train.py"])
            launch.launch_command(args)
        args = chosen["args"]
        if chosen["name"] == "deepspeed":
            env = env_of.prepare_deepspeed_cmd_env(args)[1]
        elif chosen["name"] == "multi_gpu":
            env = env_of.prepare_multi_gpu_env(args)
        else:
            env = env_of.prepare_simple_launcher_cmd_env(args)[1]
    finally:
        os.chdir(cwd)
    return chosen["name"], {k: v for k, v in env.items() if k.startswith(("ACCELERATE_", "FSDP_"))}


def load_script(folder: Path):
    """The exported train.py as a module (it must import and define its argument class)."""
    spec = importlib.util.spec_from_file_location(f"vramfit_export_{abs(hash(folder))}", folder / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def trl_args(folder: Path, *overrides: str):
    """TRL's parser on train_config.yaml, as train.py runs it; unknown keys are an error there."""
    from trl import ModelConfig, SFTConfig, TrlParser

    script = load_script(folder)
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        return TrlParser((script.DataArguments, SFTConfig, ModelConfig)).parse_args_and_config(
            ["--config", "train_config.yaml", "--dataset_path", "data.jsonl", *overrides])
    finally:
        os.chdir(cwd)


# --------------------------------------------------------------------------------------------- tests

PLANS = plan_rows()
STAGE = {"zero1": 1, "zero2": 2, "zero3": 3}


@pytest.mark.parametrize("name", sorted(PLANS))
@pytest.mark.parametrize("engine", ["accelerate", "fsdp", "trl"])
def test_accelerate_launch_accepts_the_export(name, engine, tmp_path, monkeypatch):
    """accelerate's own launch path, then the plugin it builds from that environment inside the trainer."""
    from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file
    from accelerate.utils import DeepSpeedPlugin, FullyShardedDataParallelPlugin

    p = PLANS[name]
    write(p, engine, tmp_path)
    cfg = load_config_from_file(str(tmp_path / "accelerate.yaml"))
    assert isinstance(cfg, ClusterConfig) and cfg.num_processes == p.num_gpus
    launcher, env = accelerate_launch(tmp_path)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.chdir(tmp_path)
    if engine != "fsdp" and p.parallelism in STAGE:
        assert launcher == "deepspeed" and env["ACCELERATE_DEEPSPEED_CONFIG_FILE"] == "ds_config.json"
        ds = DeepSpeedPlugin()  # raises if accelerate.yaml repeats a field the JSON owns (issue 11 item 1)
        assert ds.zero_stage == STAGE[p.parallelism]
        assert ds.hf_ds_config.config["train_micro_batch_size_per_gpu"] == p.micro_batch_size
        assert ds.hf_ds_config.config["bf16"] == {"enabled": True}
        assert ds.offload_optimizer_device == ("cpu" if p.offload != "none" else "none")
        assert ds.offload_param_device == ("cpu" if p.offload == "optimizer+params" else "none")
    elif engine == "fsdp" or p.parallelism.startswith("fsdp"):
        assert launcher == "multi_gpu" and env["ACCELERATE_USE_FSDP"] == "true"
        # sync_module_states asks for the current CUDA device; this machine has none
        with pretend_cuda():
            fsdp = FullyShardedDataParallelPlugin()
        want = "SHARD_GRAD_OP" if p.parallelism in ("zero1", "zero2", "fsdp-grad-op") else "FULL_SHARD"
        assert fsdp.fsdp_version == 1 and fsdp.sharding_strategy.name == want
        assert fsdp.activation_checkpointing == (p.gradient_checkpointing != "none")
        assert not (tmp_path / "ds_config.json").exists()
        assert fsdp.cpu_offload.offload_params == (p.offload != "none")
        assert fsdp.mixed_precision_policy is None and env["ACCELERATE_MIXED_PRECISION"] == "bf16"
    else:
        assert launcher == ("multi_gpu" if p.num_gpus > 1 else "simple")
        assert env["ACCELERATE_MIXED_PRECISION"] == "bf16" and cfg.distributed_type == ("MULTI_GPU" if p.num_gpus > 1 else "NO")


@pytest.mark.parametrize("name", sorted(PLANS))
def test_deepspeed_parses_its_file_for_the_plans_world_size(name, tmp_path, monkeypatch):
    """DeepSpeed's own parser, as rank 0 of num_gpus ranks: the batch arithmetic must hold for that world."""
    import deepspeed.comm
    from deepspeed.runtime.config import DeepSpeedConfig

    p = PLANS[name]
    ex = write(p, "deepspeed", tmp_path)
    assert ex.command == f"deepspeed --num_gpus {p.num_gpus} train.py --deepspeed ds_config.json"
    monkeypatch.setattr(deepspeed.comm, "get_rank", lambda *a, **k: 0)
    world = mock.Mock(get_data_parallel_world_size=lambda: p.num_gpus)
    cfg = DeepSpeedConfig(str(tmp_path / "ds_config.json"), mpu=world)
    assert cfg.world_size == p.num_gpus
    assert cfg.train_batch_size == p.micro_batch_size * p.grad_accum * p.num_gpus == p.effective_batch
    # unsharded bf16 plans: stage 1, as stage 0 in 16-bit is DeepSpeed's fp16/bf16 optimizer wrapper with an
    # unsharded fp32 master copy (deepspeed 0.18.7 engine.py _do_optimizer_sanity_check), and the note says so
    stage = {**STAGE, "fsdp": 3, "fsdp-grad-op": 2}.get(p.parallelism, 1)
    assert (p.parallelism in ("none", "ddp")) == any("written as ZeRO stage 1" in n for n in ex.notes)
    assert cfg.zero_optimization_stage == stage and cfg.bfloat16_config.enabled
    assert (cfg.zero_config.offload_optimizer is not None) == (p.offload != "none")
    assert (cfg.zero_config.offload_param is not None) == (p.offload == "optimizer+params")
    with pytest.raises(AssertionError, match="train_batch_size"):  # the parser checks what we claim it checks
        DeepSpeedConfig(str(tmp_path / "ds_config.json"), mpu=mock.Mock(get_data_parallel_world_size=lambda: p.num_gpus + 1))


@pytest.mark.parametrize("name", sorted(PLANS))
def test_trl_parses_train_config_and_transformers_agrees_with_the_deepspeed_file(name, tmp_path):
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    p = PLANS[name]
    ex = write(p, "trl", tmp_path, epochs=2)
    assert ex.command == ("accelerate launch --config_file accelerate.yaml train.py --config train_config.yaml"
                          " --dataset_path data.jsonl")
    # use_cpu only because this machine has no bf16 GPU; every other value is the file's
    data, args, model = trl_args(tmp_path, "--use_cpu", "true")
    sc = p.scenario
    assert data.dataset_path == "data.jsonl" and model.model_name_or_path == sc["model"]
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (p.micro_batch_size, p.grad_accum)
    assert args.num_train_epochs == 2 and args.max_length == sc["seq_len"] and args.bf16
    # TRL's default is on; under FSDP accelerate.yaml's fsdp_activation_checkpointing does it instead
    assert args.activation_checkpointing == (p.gradient_checkpointing != "none" and not p.parallelism.startswith("fsdp"))
    assert args.use_liger_kernel == (p.loss == "fused")
    assert model.use_peft == (sc["method"] != "full") and model.load_in_4bit == (sc["method"] == "qlora")
    if model.use_peft:
        assert (model.lora_r, model.lora_alpha, model.lora_target_modules) == (sc["lora_rank"], sc["lora_alpha"], "all-linear")
    if p.parallelism in STAGE:
        assert args.deepspeed == "ds_config.json"
        # transformers' Trainer-side check that the JSON and the arguments agree, at the plan's world size
        world = type("WorldArgs", (type(args),), {"world_size": property(lambda self: p.num_gpus)})
        hf = HfTrainerDeepSpeedConfig(str(tmp_path / "ds_config.json"))
        hf.trainer_config_process(world(**{f: getattr(args, f) for f in ("output_dir", "per_device_train_batch_size",
                                    "gradient_accumulation_steps", "bf16", "optim", "use_cpu", "activation_checkpointing")}))
        assert hf.mismatches == []
    else:
        assert args.deepspeed is None


def test_fsdp_and_trl_launch_one_script_name():
    p = PLANS["zero3-full-mixed"]
    commands = {e: export_plan(p, e).command for e in ("accelerate", "fsdp", "trl", "deepspeed")}
    assert all(" train.py" in c for c in commands.values())
    assert "train.py" in export_plan(p, "trl").files and "train.py" not in export_plan(p, "fsdp").files


@pytest.mark.parametrize("engine", ["accelerate", "trl"])
def test_issue_11_command_writes_a_config_accelerate_launches(engine, tmp_path, monkeypatch):
    """The command of issue 11 item 1, through the CLI, then accelerate's launch path and DeepSpeedPlugin.

    Issue 22 times ZeRO-3's gathers past DeepSpeed's prefetch bucket: the fastest plan for Qwen2.5-32B on
    8 x H100 became DDP, so the ZeRO-3 launch path is exercised with Qwen2.5-72B, which still needs it."""
    from accelerate.utils import DeepSpeedPlugin
    from typer.testing import CliRunner

    from vramfit.cli.main import app

    r = CliRunner().invoke(app, ["plan", "--model", "Qwen/Qwen2.5-72B", "--method", "lora", "--seq-len", "8192",
                                 "--dataset-tokens", "100M", "--effective-batch", "16", "--cards", "h100-sxm",
                                 "--export", engine, "--pick", "fastest", "--export-dir", str(tmp_path)],
                            env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    launcher, env = accelerate_launch(tmp_path)
    assert launcher == "deepspeed" and "mixed_precision" not in env["ACCELERATE_CONFIG_DS_FIELDS"]
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.chdir(tmp_path)
    assert DeepSpeedPlugin().zero_stage == 3


def test_sgd_momentum_compile_and_framework_reach_the_trainer(tmp_path):
    """The optimizer the plan sized (SGD with a momentum buffer) is the one transformers builds from the file."""
    import torch
    from transformers import Trainer

    rows = plan({"model": "meta-llama/Llama-2-7b-hf", "method": "lora", "optimizer": "sgd-momentum", "compile": True,
                 "framework": "torchtune"}, gpu_ids=["h100-sxm"], effective_batch=8).plans
    p = next(r for r in rows if r.num_gpus == 1)
    assert p.optimizer == "sgd-momentum" and p.num_gpus == 1
    ex = write(p, "trl", tmp_path)
    _, args, _ = trl_args(tmp_path, "--use_cpu", "true")
    cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(args)
    assert cls is torch.optim.SGD and kwargs["momentum"] == 0.9 and args.torch_compile
    assert any("sized for torchtune" in n for n in ex.notes)


@pytest.mark.parametrize("engine", ["fsdp", "accelerate"])
def test_every_nested_accelerate_key_is_a_launch_option(engine):
    """accelerate copies fsdp_config / deepspeed_config keys onto launch arguments without checking them, so a
    misspelt key would be dropped silently: each must be one of `accelerate launch`'s own options."""
    import yaml
    from accelerate.commands.launch import launch_command_parser

    options = {s.lstrip("-") for a in launch_command_parser()._actions for s in a.option_strings}
    seen: set[str] = set()
    for p in PLANS.values():
        cfg = yaml.safe_load(export_plan(p, engine).files["accelerate.yaml"])
        seen |= {*cfg.get("fsdp_config", {}), *cfg.get("deepspeed_config", {})}
    assert len(seen) >= 2 and seen <= options, seen - options


def test_a_stage_plan_exports_its_own_trl_config():
    """Issue 15: a DPO plan's files run DPOTrainer (test_export_stages.py parses and runs them), not SFT."""
    rows = plan({"model": "Qwen/Qwen2.5-0.5B", "method": "lora", "stage": "dpo"}, gpu_ids=["l40s"]).plans
    ex = export_plan(rows[0], "trl")
    assert "trl.DPOConfig fields" in ex.files["train_config.yaml"] and "stage: dpo" in ex.files["train_config.yaml"]
    assert not any("supervised step" in n for n in ex.notes)


@pytest.mark.parametrize(("model", "parallelism"), [("meta-llama/Llama-3.1-8B", "zero2"), ("Qwen/Qwen2.5-32B", "zero3")])
def test_the_exported_deepspeed_config_means_the_plans_bytes(tmp_path, model, parallelism):
    """The exported ds_config.json writes the ZeRO buffer sizes the plan's estimate used (the HF template's "auto"
    filled from the hidden size): given back as the scenario's deepspeed_config, the estimate is the plan's, to the
    byte. Without them DeepSpeed's 5e8-element buckets applied and the run held about 2.5 % more."""
    import json

    from vramfit import estimate

    report = plan({"model": model, "method": "full", "parallelism": parallelism, "num_gpus": 8},
                  gpu_ids=["h100-sxm"], effective_batch=32)
    p = next(p for p in report.plans if p.parallelism == parallelism)
    files = export_plan(p, "deepspeed").files
    ds = json.loads(files["ds_config.json"])
    zero = ds["zero_optimization"]
    h = {"meta-llama/Llama-3.1-8B": 4096, "Qwen/Qwen2.5-32B": 5120}[model]
    assert zero["reduce_bucket_size"] == h * h and zero["stage"] == int(parallelism[-1])
    if parallelism == "zero3":
        assert zero["stage3_prefetch_bucket_size"] == int(0.9 * h * h) and zero["stage3_param_persistence_threshold"] == 10 * h
    path = tmp_path / "ds_config.json"
    path.write_text(files["ds_config.json"])
    again = estimate({**p.scenario, "deepspeed_config": str(path)})
    assert again.peak.device_bytes == p.device_bytes


@pytest.mark.parametrize(("scenario", "card"), [
    ({"model": "meta-llama/Llama-3.1-8B", "method": "full"}, "a100-80gb-sxm"),
    # a QLoRA plan sized for what TRL's trainers do (no kbit preparation, bf16 adapters: trl-1.16); one sized for a
    # prepared model reads back lower, and its export says so (tests/config_import/test_trl_stages.py)
    ({"model": "meta-llama/Llama-3.1-8B", "method": "qlora", "framework_version": "trl-1.16"}, "rtx4090"),
])
def test_a_trl_export_imports_back_to_the_plans_bytes(tmp_path, scenario, card):
    """plan --export trl, then estimate --from its files: transformers 5.24's activation_checkpointing and TRL's
    bnb_4bit_quant_storage are read (they were unknown keys), and the bytes are the plan's."""
    from vramfit import estimate
    from vramfit.config_import import from_config

    p = plan(scenario, gpu_ids=[card], effective_batch=32).plans[0]
    for name, text in export_plan(p, "trl").files.items():
        (tmp_path / name).write_text(text)
    assert "activation_checkpointing:" in (tmp_path / "train_config.yaml").read_text()
    extra = [tmp_path / "accelerate.yaml"] if (tmp_path / "accelerate.yaml").is_file() else []
    imp = from_config(tmp_path / "train_config.yaml", *extra)
    got = estimate(imp.scenario.replace(gpu=card))
    assert got.peak.device_bytes == p.device_bytes


def test_torchtitan_is_planned_only_with_what_it_runs_and_an_hf_plan_exported_to_it_says_what_changes():
    """torchtitan v0.3.0 builds Adam/AdamW/DistMuon and its own whole-logits cross-entropy (profile runs_bnb_optimizers,
    runs_fused_loss false): its plans and changes never offer 8-bit or paged AdamW or the fused loss; an hf plan that
    uses them, exported for torchtitan, says so instead of passing for the plan."""
    from vramfit.plan import changes_to_fit

    titan = plan({"model": "meta-llama/Llama-3.1-8B", "method": "full", "framework": "torchtitan"},
                 gpu_ids=["a100-80gb-sxm"], effective_batch=32)
    assert titan.plans and {(p.optimizer, p.loss) for p in titan.plans} == {("adamw", "standard")}
    offered = changes_to_fit({"model": "meta-llama/Llama-3.1-8B", "method": "full", "framework": "torchtitan",
                              "seq_len": 8192}, "rtx4090")
    assert offered and not [c for c in offered if c.changes.get("optimizer") or c.changes.get("loss") == "fused"]
    hf = plan({"model": "meta-llama/Llama-3.1-8B", "method": "full"}, gpu_ids=["a100-80gb-sxm"], effective_batch=32)
    p = hf.plans[0]
    assert (p.optimizer, p.loss) == ("adamw-8bit", "fused")
    notes = export_plan(p, "torchtitan").notes
    assert any("optimizer adamw-8bit, which torchtitan does not build" in n for n in notes)
    assert any("the fused loss" in n for n in notes) and any("sized for hf" in n for n in notes)


@pytest.mark.parametrize("keys, words", [
    ({"model": "meta-llama/Llama-3.1-8B", "method": "qlora"}, ("the plan is qlora", "no 4-bit path")),
    ({"model": "meta-llama/Llama-3.1-8B", "method": "lora"}, ("the plan is lora", "LoRAConverter")),
    ({"model": "mistralai/Mistral-7B-v0.1", "method": "full"}, ("none for mistralai/Mistral-7B-v0.1", "llama3 8B")),
    ({"params": "7B", "method": "full"}, ("none for params=7000000000",)),
])
def test_torchtitan_export_refuses_what_torchtitan_cannot_run(keys, words):
    """The torchtitan files ran the plan as full fine-tuning of llama3 (a LoRA/QLoRA plan lost its method; a Mistral
    plan got ``--module llama3`` and no flavor, i.e. torchtitan v0.2.2's ``debugmodel``): now refused, naming why
    and the engines that can run it."""
    from vramfit.errors import ScenarioError

    p = plan(keys, gpu_ids=["a100-80gb-sxm"]).plans[0]
    with pytest.raises(ScenarioError) as e:
        export_plan(p, "torchtitan")
    assert e.value.key == "export" and e.value.valid == ["accelerate", "deepspeed", "fsdp", "trl"]
    assert all(w in e.value.message for w in words), e.value.message


def test_torchtitan_export_names_the_flavor_of_a_model_with_a_flavors_shapes():
    """Llama-3.1-8B-Instruct has no entry of its own in torchtitan but is llama3 8B shape for shape."""
    import tomllib

    p = plan({"model": "meta-llama/Llama-3.1-8B-Instruct", "method": "full", "framework": "torchtitan"},
             gpu_ids=["a100-80gb-sxm"]).plans[0]
    ex = export_plan(p, "torchtitan")
    model = tomllib.loads(ex.files["torchtitan.toml"])["model"]
    assert model == {"name": "llama3", "flavor": "8B", "hf_assets_path": "meta-llama/Llama-3.1-8B-Instruct"}
    assert any("--module llama3 " in n for n in ex.notes)
    qwen = plan({"model": "Qwen/Qwen3-8B", "method": "full", "framework": "torchtitan"}, gpu_ids=["h100-sxm"]).plans[0]
    assert tomllib.loads(export_plan(qwen, "torchtitan").files["torchtitan.toml"])["model"]["flavor"] == "8B"


def test_trl_export_of_a_chunked_loss_plan_writes_the_fused_loss_and_the_tables_figure():
    """TRL has no chunked loss: the file ran the standard loss (whole fp32 logits) under a header giving the chunked
    plan's figure, and that figure was the device one where the plan's table shows the needed one."""
    import yaml

    from vramfit.estimate import estimate
    from vramfit.units import gib

    p = plan({"model": "meta-llama/Llama-3.1-8B", "method": "lora", "loss": "chunked", "seq_len": 8192},
             gpu_ids=["h100-sxm"]).plans[0]
    ex = export_plan(p, "trl")
    text = ex.files["train_config.yaml"]
    assert yaml.safe_load(text)["use_liger_kernel"] is True
    assert f"-> {gib(p.required_bytes, 1)} GiB needed of" in text.splitlines()[0]
    fused = estimate({**p.scenario, "loss": "fused"}).peak.required_bytes
    assert fused < p.required_bytes < estimate({**p.scenario, "loss": "standard"}).peak.required_bytes
    # the files run no evaluation (train.py passes no eval_dataset): a plan sized with one says so
    ev = plan({**p.scenario, "eval_batch_size": 4}, gpu_ids=["h100-sxm"]).plans[0]
    assert any("evaluation pass at micro-batch 4" in n for n in export_plan(ev, "trl").notes)


def test_torchtitan_trains_no_4bit_base_so_a_qlora_estimate_is_refused():
    """The estimate took framework torchtitan with method qlora (and counted it) while torchtitan v0.3.0 has no 4-bit
    path and its export refused the plan: one answer now, from the profile's ``methods``."""
    from vramfit.errors import ScenarioError
    from vramfit.estimate import estimate

    with pytest.raises(ScenarioError) as e:
        estimate({"model": "meta-llama/Llama-3.1-8B", "method": "qlora", "framework": "torchtitan"})
    assert e.value.key == "method" and e.value.valid == ["full", "lora"]
    assert estimate({"model": "meta-llama/Llama-3.1-8B", "method": "lora", "framework": "torchtitan"}).peak.device_bytes > 0


def test_trl_export_writes_dora_and_the_saved_modules(tmp_path):
    """A plan's dora and modules_to_save reach train.py's LoraConfig through TRL's ModelConfig (use_dora,
    lora_modules_to_save), so the exported run trains what the estimate counted."""
    from vramfit.plan import plan

    p = plan({"model": "meta-llama/Llama-3.1-8B", "method": "lora", "dora": True,
              "modules_to_save": ["embed_tokens", "lm_head"]}, gpu_ids=["h100-sxm"], effective_batch=8).plans[0]
    write(p, "trl", tmp_path)
    _, _, model_args = trl_args(tmp_path, "--use_cpu", "true")
    cfg = load_script(tmp_path).lora_config(model_args)
    assert cfg.use_dora is True and sorted(cfg.modules_to_save) == ["embed_tokens", "lm_head"]
    plain = plan({"model": "meta-llama/Llama-3.1-8B", "method": "lora"}, gpu_ids=["h100-sxm"], effective_batch=8)
    write(plain.plans[0], "trl", tmp_path / "plain")
    cfg = load_script(tmp_path / "plain").lora_config(trl_args(tmp_path / "plain", "--use_cpu", "true")[2])
    assert cfg.use_dora is False and cfg.modules_to_save is None


@pytest.mark.parametrize("policy, want", [
    ({"packing": "none", "max_length": 4096, "padding_free": False, "pad_to_multiple_of": 64, "group_by_length": True,
      "padding": "longest"},
     {"packing": False, "max_length": 4096, "padding_free": False, "pad_to_multiple_of": 64,
      "train_sampling_strategy": "group_by_length"}),
    ({"packing": "wrapped", "max_length": 2048, "padding_free": False, "padding": "longest"},
     {"packing": True, "packing_strategy": "wrapped", "max_length": 2048}),
    ({"packing": "none", "max_length": None, "padding_free": True, "padding": "longest"},
     {"packing": False, "padding_free": True, "max_length": None}),
])
def test_trl_export_writes_the_datasets_batching(tmp_path, policy, want):
    """The export always wrote packing: true, whatever batching the plan was sized and timed for with --dataset (a
    padding-free plan with no max_length ran 19k-token packed rows instead)."""
    p = next(r for r in plan({"model": "Qwen/Qwen2.5-0.5B", "method": "lora", "seq_len": 4096},
                             gpu_ids=["h100-sxm"], effective_batch=8).plans if r.num_gpus == 1)
    ex = export_plan(p, "trl", batching=policy)
    for name, text in ex.files.items():
        (tmp_path / name).write_text(text)
    _, args, _ = trl_args(tmp_path, "--use_cpu", "true")
    assert {k: getattr(args, k) for k in want} == want
