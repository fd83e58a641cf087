"""The data-parallel engines a framework runs (profile ``parallelisms``): torchtune's distributed recipes shard with
FSDP only, torchtitan adds DDP over replicas, neither runs DeepSpeed. Estimates refuse the rest, naming what runs; the
default for several GPUs is FSDP where there is no DDP; the planner offers only what runs."""

import pytest
from typer.testing import CliRunner

from vramfit.cli.main import app
from vramfit.errors import ScenarioError
from vramfit.plan import plan
from vramfit.scenario import parse_scenario

MODEL = "meta-llama/Llama-3.1-8B"


@pytest.mark.parametrize("framework, parallelism, valid", [
    ("torchtune", "zero3", "none, fsdp, fsdp-grad-op"), ("torchtune", "ddp", "none, fsdp, fsdp-grad-op"),
    ("torchtitan", "zero2", "none, ddp, fsdp, fsdp-grad-op")])
def test_an_engine_the_framework_does_not_run_is_refused(framework, parallelism, valid):
    with pytest.raises(ScenarioError, match=f"{framework} does not run {parallelism}") as e:
        parse_scenario({"model": MODEL, "method": "full", "framework": framework, "num_gpus": 8,
                        "parallelism": parallelism})
    assert e.value.key == "parallelism" and ", ".join(e.value.valid) == valid
    out = CliRunner().invoke(app, ["estimate", "--model", MODEL, "--framework", framework, "--num-gpus", "8",
                                   "--parallelism", parallelism])
    assert out.exit_code == 2 and f"valid values: {valid}" in out.output


def test_several_gpus_default_to_what_the_framework_runs():
    many = {"model": MODEL, "method": "full", "num_gpus": 8}
    assert parse_scenario({**many, "framework": "torchtune"}).parallelism.value == "fsdp"
    # torchtitan's data_parallel_shard_degree defaults to -1: FSDP over the ranks left (profile default_parallelism)
    assert parse_scenario({**many, "framework": "torchtitan"}).parallelism.value == "fsdp"
    assert parse_scenario({**many, "framework": "hf"}).parallelism.value == "ddp"
    # sweeping the GPU count re-derives it the same way
    one = parse_scenario({"model": MODEL, "method": "full", "framework": "torchtune"})
    assert one.replace(num_gpus=4).parallelism.value == "fsdp"


def test_torchtune_plans_shard_with_fsdp_only():
    """Llama-3.1-8B full fine-tuning on RTX 4090s under torchtune: every multi-GPU plan was DeepSpeed ZeRO-3
    before (which torchtune has no code for); now FSDP, as its distributed recipes run."""
    r = plan({"model": MODEL, "method": "full", "framework": "torchtune"}, effective_batch=64, max_gpus=8,
             gpu_ids="rtx4090", with_changes=False)
    engines = {p.scenario.get("parallelism") for p in r.plans}
    assert engines and engines <= {"none", "fsdp", "fsdp-grad-op"}
    assert any(p.num_gpus > 1 for p in r.plans)
    hf = plan({"model": MODEL, "method": "full"}, effective_batch=64, max_gpus=8, gpu_ids="rtx4090",
              with_changes=False)
    assert {p.scenario.get("parallelism") for p in hf.plans} & {"zero2", "zero3"}  # the HF Trainer keeps DeepSpeed


def test_litgpt_plans_neither_zero_nor_offload():
    """litgpt's scripts shard with Fabric's FSDPStrategy(cpu_offload=False) on several devices (lit-gpt@8641822
    finetune/lora.py): Llama-3.1-8B LoRA at 2,048 tokens on RTX 4090s (effective batch 32) plans FSDP (it was ZeRO-3, with offload on one
    and two GPUs), no change to fit offers offload, and a scenario that offloads is refused (profile runs_offload)."""
    from vramfit.plan.changes import _candidates

    base = {"model": MODEL, "method": "lora", "framework": "litgpt"}
    r = plan(base, effective_batch=32, max_gpus=8, gpu_ids="rtx4090", with_changes=False)
    assert r.plans and {(p.scenario.get("parallelism"), p.offload) for p in r.plans} <= {("none", "none"),
                                                                                        ("fsdp", "none")}
    assert not [c for c in _candidates(parse_scenario(base)) if "offload" in c.changes]
    with pytest.raises(ScenarioError, match="litgpt does not run zero3"):
        parse_scenario({**base, "num_gpus": 2, "parallelism": "zero3"})
    with pytest.raises(ScenarioError, match="offload: litgpt does not offload model state"):
        parse_scenario({**base, "num_gpus": 2, "parallelism": "fsdp", "offload": "optimizer+params"})
    # litgpt calls no fused loss (profile runs_fused_loss): at effective batch 64 on 8 cards a micro-batch of 8 holds
    # its fp32 logits, and accumulating holds every block's unsharded gradient (FSDP no_sync), so no plan; the reason
    # names only what litgpt runs
    r = plan(base, effective_batch=64, max_gpus=8, gpu_ids="rtx4090", with_changes=False)
    assert not r.plans and r.excluded[0].reason.startswith(
        "does not fit 8 x rtx4090 even with FSDP and checkpointing (at micro-batch 1)")
    assert not [c for c in _candidates(parse_scenario(base)) if c.changes.get("loss") == "fused"]
    # torchtune and HF keep their offload changes, each under an engine they run
    tt = _candidates(parse_scenario({"model": MODEL, "method": "full", "framework": "torchtune"}))
    assert [c.changes["parallelism"] for c in tt if "offload" in c.changes] == ["fsdp"]  # FSDP offloads params too


def test_litgpt_trains_a_quantized_base_on_one_gpu_only():
    """lit-gpt@8641822 finetune/lora.py raises NotImplementedError for --quantize on several devices: refused, and a
    QLoRA plan for litgpt is one GPU (HF's FSDP QLoRA keeps its multi-GPU plans)."""
    q = {"model": MODEL, "method": "qlora", "framework": "litgpt"}
    with pytest.raises(ScenarioError, match="litgpt trains a quantized base on one GPU only") as e:
        parse_scenario({**q, "num_gpus": 2, "parallelism": "fsdp"})
    assert (e.value.key, e.value.valid) == ("num_gpus", ["1"])
    # one device runs no checkpointing (profile checkpointing_by_devices): 27.1 GiB at 2,048 tokens, so 512 here
    r = plan({**q, "seq_len": 512}, effective_batch=8, max_gpus=8, gpu_ids="rtx4090", with_changes=False)
    assert r.plans and all(p.num_gpus == 1 and p.scenario["gradient_checkpointing"] == "none" for p in r.plans)
    hf = plan({"model": "meta-llama/Llama-3.1-70B", "method": "qlora"}, effective_batch=8, max_gpus=8,
              gpu_ids="rtx4090", with_changes=False)
    assert any(p.num_gpus > 1 for p in hf.plans)


@pytest.mark.parametrize("engine, launcher", [("deepspeed", "DeepSpeed"), ("accelerate", "accelerate"),
                                              ("fsdp", "accelerate")])
def test_an_hf_engine_export_of_a_torchtitan_plan_says_whose_memory_it_was(engine, launcher):
    """The files launch the user's script under accelerate or DeepSpeed, not torchtitan: the note says so (the TRL and
    torchtitan exports had theirs; these had none)."""
    from vramfit.plan.export import export_plan

    p = plan({"model": MODEL, "method": "full", "framework": "torchtitan"}, gpu_ids=["h100-sxm"],
             with_changes=False).plans[0]
    notes = export_plan(p, engine).notes
    assert (f"the plan was sized for torchtitan; these files launch your script under {launcher}, whose memory "
            "differs (estimate again with framework hf)") in notes
    hf = plan({"model": MODEL, "method": "full"}, gpu_ids=["h100-sxm"], with_changes=False).plans[0]
    assert not any("sized for hf" in n for n in export_plan(hf, engine).notes)


def test_litgpt_shards_over_every_rank_so_no_hsdp():
    """litgpt's fine-tuning scripts run FULL_SHARD (Fabric's FSDPStrategy default) or ModelParallelStrategy over
    devices x num_nodes: shard_scope node is refused, and its multi-node plans shard over all ranks; torchtune (its
    recipes take data_parallel_replicate_dim) keeps HSDP."""
    from vramfit.plan.search import configs_for
    from vramfit.web.translate import to_pt

    many = {"model": MODEL, "method": "full", "num_gpus": 16, "num_nodes": 2, "parallelism": "fsdp",
            "shard_scope": "node"}
    with pytest.raises(ScenarioError, match="litgpt shards over every rank") as e:
        parse_scenario({**many, "framework": "litgpt"})
    assert (e.value.key, e.value.valid) == ("shard_scope", ["all"])
    assert "reparte por todas as GPUs" in to_pt(str(e.value))
    assert parse_scenario({**many, "framework": "torchtune"}).shard_scope.value == "node"
    lit = configs_for(16, parse_scenario({"model": MODEL, "method": "full", "framework": "litgpt"}))
    tune = configs_for(16, parse_scenario({"model": MODEL, "method": "full", "framework": "torchtune"}))
    assert "hsdp" not in {c.parallelism for c in lit} and "hsdp" in {c.parallelism for c in tune}


@pytest.mark.parametrize("value, words", [("-4", "must be from 1 to 1,000,000, got '-4'"),
                                          ("four", "must be a number like 50000000")])
def test_a_negative_count_is_judged_by_its_range(value, words):
    """'-4' was called a malformed number (the token-count hint) where '0' got the range."""
    from vramfit.plan.inputs import parse_count

    with pytest.raises(ScenarioError, match=words):
        parse_count("effective_batch", value, 1, 1_000_000)
