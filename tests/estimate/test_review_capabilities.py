"""What a framework's recipes can be told to run (review findings F3, F9, F10d): torchtitan's default data-parallel
layout is FSDP and it runs no DDP beside tensor/pipeline/context parallelism; bitsandbytes optimizers, the fused loss,
litgpt's offload and stages without a trainer are refused naming the key and the values accepted; the torchtitan
importer reports the parallel degrees as the scenario keys they set."""

import dataclasses

import pytest
from typer.testing import CliRunner

from vramfit import estimate
from vramfit.cli.main import app
from vramfit.config_import import from_text
from vramfit.errors import ScenarioError
from vramfit.estimate.framework import PROFILES, profile_for
from vramfit.models import resolve_model
from vramfit.plan.search import configs_for
from vramfit.scenario import Framework, Method, Parallelism, Stage, parse_scenario
from vramfit.web.translate import to_pt, untranslated

MODEL = "meta-llama/Llama-3.1-8B"
TITAN_TP2 = {"model": MODEL, "method": "full", "framework": "torchtitan", "num_gpus": 8, "tensor_parallel": 2,
             "gpu": "h100-sxm", "gradient_checkpointing": "full", "framework_version": "torchtitan-0.2.2"}
GIB = 2**30


def _layout_note(r) -> str:
    return next(a for a in r.assumptions if a.startswith("Model parallel as torchtitan"))


def test_torchtitan_shards_the_ranks_tensor_parallel_leaves_by_default():
    """torchtitan's data_parallel_shard_degree defaults to -1: the 4 ranks TP 2 leaves of 8 run FSDP (20.29 GiB per
    GPU, as --parallelism fsdp; 20.88 GiB under torchtitan-2024's foreach AdamW step), not DDP (91.24 GiB, the state
    whole on each of them)."""
    default, fsdp = estimate(TITAN_TP2), estimate({**TITAN_TP2, "parallelism": "fsdp"})
    assert default.scenario.parallelism is Parallelism.FSDP
    assert default.peak.required_bytes == fsdp.peak.required_bytes == 21_781_057_536
    assert round(default.peak.required_bytes / GIB, 2) == 20.29
    assert estimate({**TITAN_TP2, "framework_version": "torchtitan-2024"}).peak.required_bytes == 22_423_023_616
    assert "; FSDP over the remaining 4 ranks (dp_shard × cp). " in _layout_note(default)
    # the other frameworks keep theirs: DDP for transformers, FSDP where the recipes run no DDP
    many = {"model": MODEL, "method": "full", "num_gpus": 8}
    assert [parse_scenario({**many, "framework": f}).parallelism.value for f in ("hf", "torchtune", "litgpt")] == \
        ["ddp", "fsdp", "fsdp"]
    assert profile_for(Framework.TORCHTITAN).default_parallelism is Parallelism.FSDP


@pytest.mark.parametrize("keys", [{"tensor_parallel": 2}, {"pipeline_parallel": 2, "grad_accum": 2},
                                  {"context_parallel": 2, "seq_len": 4096},
                                  {"tensor_parallel": 8, "context_parallel": 1, "num_gpus": 16}])
def test_torchtitan_refuses_ddp_replicas_beside_model_parallelism(keys):
    """9dec370 parallelize_llama.py l. 106-108: DDP over replicas beside another mesh dimension raises; under context
    parallel torchtitan applies FSDP instead."""
    with pytest.raises(ScenarioError) as err:
        parse_scenario({**TITAN_TP2, "tensor_parallel": 1, **keys, "parallelism": "ddp"})
    assert err.value.key == "parallelism" and err.value.valid == ["fsdp"]
    assert "torchtitan runs no DDP beside tensor, pipeline or context parallelism" in str(err.value)


def test_ddp_with_tensor_parallel_over_every_gpu_says_ddp():
    """Tensor parallel 8 over 8 GPUs leaves no data-parallel rank (what the 70B TOML imports as ddp): accepted, and the
    layout line names DDP, not FSDP."""
    r = estimate({**TITAN_TP2, "tensor_parallel": 8, "parallelism": "ddp"})
    note = _layout_note(r)
    assert "; DDP over the remaining 1 ranks (dp_replicate). " in note and "FSDP over" not in note
    assert untranslated([note]) == []


def test_the_planner_never_pairs_ddp_with_a_model_parallel_layout():
    base = parse_scenario({k: v for k, v in TITAN_TP2.items() if k != "tensor_parallel"})
    configs = configs_for(8, base, resolve_model(MODEL).spec)
    layouts = [c.parallelism for c in configs if "+" in c.parallelism]
    assert layouts and all(p.split("+")[0] in ("fsdp", "hsdp") for p in layouts)
    assert not {c.optimizer for c in configs} - {"adamw"} and not {c.loss for c in configs} - {"standard"}


@pytest.mark.parametrize("keys,key,words,valid", [
    ({"framework": "torchtitan", "optimizer": "adamw-8bit"}, "optimizer",
     "torchtitan runs no bitsandbytes optimizer (adamw-8bit is one)", None),
    ({"framework": "torchtitan", "optimizer": "paged-adamw"}, "optimizer",
     "torchtitan runs no bitsandbytes optimizer (paged-adamw is one)", None),
    ({"framework": "torchtitan", "loss": "fused"}, "loss", "torchtitan does not call a fused linear + cross-entropy "
     "loss", ["standard"]),  # nor a chunked one (profile runs_chunked_loss)
    ({"framework": "torchtitan", "loss": "chunked"}, "loss", "torchtitan has no chunked-loss switch", ["standard"]),
    ({"framework": "unsloth", "method": "lora", "compile": True}, "compile",
     "unsloth's training code has no torch.compile switch", ["false"]),
    ({"framework": "litgpt", "method": "lora", "compile": True}, "compile",
     "litgpt's training code has no torch.compile switch", ["false"]),
    ({"framework": "litgpt", "num_gpus": 2, "parallelism": "fsdp", "offload": "optimizer+params"}, "offload",
     "litgpt does not offload model state to the host", ["none"]),
    ({"framework": "litgpt", "offload": "optimizer", "parallelism": "fsdp"}, "offload",
     "litgpt does not offload model state to the host", ["none"]),
    ({"framework": "torchtitan", "stage": "dpo"}, "stage", "torchtitan has no trainer for dpo", ["sft"]),
    ({"framework": "litgpt", "stage": "orpo"}, "stage", "litgpt has no trainer for orpo", ["sft"]),
    ({"framework": "torchtune", "method": "lora", "stage": "kto"}, "stage", "torchtune has no trainer for kto",
     ["sft", "dpo", "simpo", "ppo"]),
    ({"framework": "torchtune", "framework_version": "torchtune-0.1", "method": "lora", "stage": "simpo"}, "stage",
     "torchtune has no trainer for simpo", ["sft", "dpo"]),
    # torchtune v0.4.0 _recipe_registry.py: lora_dpo_* train adapters only, ppo_full_finetune_single_device the whole
    # policy on one GPU; full_dpo_distributed arrived in v0.6.0
    ({"framework": "torchtune", "stage": "dpo"}, "method", "torchtune has no dpo recipe that trains full (its dpo "
     "recipes: lora_dpo_single_device, lora_dpo_distributed)", ["lora", "qlora"]),
    ({"framework": "torchtune", "stage": "simpo"}, "method", "torchtune has no simpo recipe that trains full",
     ["lora", "qlora"]),
    ({"framework": "torchtune", "method": "qlora", "stage": "ppo"}, "method", "torchtune has no ppo recipe that trains "
     "qlora (its ppo recipes: ppo_full_finetune_single_device)", ["full"]),
    ({"framework": "torchtune", "stage": "ppo", "num_gpus": 2}, "num_gpus",
     "torchtune's ppo recipes run on one GPU only (ppo_full_finetune_single_device)", ["1"]),
    ({"framework": "torchtune", "framework_version": "torchtune-0.1", "method": "lora", "stage": "dpo", "num_gpus": 2},
     "num_gpus", "torchtune's dpo recipes run on one GPU only (lora_dpo_single_device)", ["1"]),
])
def test_what_the_framework_cannot_run_is_refused(keys, key, words, valid):
    with pytest.raises(ScenarioError) as err:
        parse_scenario({"model": MODEL, "method": "full", **keys})
    assert err.value.key == key and words in str(err.value)
    if valid is not None:
        assert err.value.valid == valid
    else:  # every optimizer but bitsandbytes' five
        assert "adamw" in err.value.valid and "adamw-8bit-torchao" in err.value.valid
        assert not {"adamw-8bit", "paged-adamw", "paged-adamw-8bit", "lion", "lion-8bit"} & set(err.value.valid)
    assert untranslated([str(err.value)]) == []


def test_what_the_frameworks_run_is_kept():
    """TRL-based transformers and Unsloth run every stage; torchtune 0.4 its DPO/SimPO/PPO recipes; litgpt and
    torchtune keep the bitsandbytes optimizers (their configs name any optimizer class)."""
    for stage in Stage:
        assert parse_scenario({"model": MODEL, "stage": stage.value}).stage is stage
    assert parse_scenario({"model": MODEL, "framework": "unsloth", "method": "qlora", "stage": "dpo"}).stage is Stage.DPO
    assert parse_scenario({"model": MODEL, "framework": "torchtune", "stage": "dpo"}).stage is Stage.DPO
    # each torchtune stage recipe's own methods and GPU counts run
    for keys in ({"method": "qlora", "stage": "dpo", "num_gpus": 2}, {"method": "lora", "stage": "simpo"},
                 {"method": "full", "stage": "ppo"}, {"method": "full", "stage": "sft", "num_gpus": 2}):
        sc = parse_scenario({"model": MODEL, "framework": "torchtune", **keys})
        assert (sc.method.value, sc.stage.value, sc.num_gpus) == (keys["method"], keys["stage"], keys.get("num_gpus", 1))
    assert parse_scenario({"model": MODEL, "method": "full", "stage": "dpo", "num_gpus": 2}).stage is Stage.DPO  # TRL
    assert parse_scenario({"model": MODEL, "framework": "litgpt", "optimizer": "paged-adamw"}).optimizer.value == \
        "paged-adamw"
    assert parse_scenario({"model": MODEL, "framework": "torchtitan", "method": "full"}).optimizer.value == "adamw"
    assert PROFILES[Framework.HF].stages == () and PROFILES[Framework.UNSLOTH].stages == ()


def _stage_line(r) -> str:
    return next(a for a in r.assumptions if a.startswith("Stage "))


def test_a_torchtune_stage_names_its_recipe_and_the_stage_profile_counted():
    """torchtune runs DPO/PPO with its own recipes; the estimate counts them with TRL's stage profile (the only one
    modelled) and says both, instead of claiming TRL runs the stage."""
    tune = estimate({"model": MODEL, "framework": "torchtune", "method": "lora", "stage": "dpo"})
    assert _stage_line(tune) == (
        "Stage dpo in torchtune's lora_dpo_single_device / lora_dpo_distributed recipe, its memory estimated as "
        "torchtune-0.4 runs the stage (torchtune's own log-prob code, not TRL's); micro_batch_size counts pairs: chosen and rejected run "
        "as one concatenated forward of 2 × micro_batch_size sequences.")
    ppo = estimate({"model": MODEL, "framework": "torchtune", "method": "full", "stage": "ppo"})
    assert _stage_line(ppo).startswith("Stage ppo in torchtune's ppo_full_finetune_single_device recipe, its memory "
                                       "estimated as TRL v1.9.0 runs the stage")
    old = estimate({"model": MODEL, "framework": "torchtune", "framework_version": "torchtune-0.1", "method": "lora",
                    "stage": "dpo"})
    assert _stage_line(old).startswith("Stage dpo in torchtune's lora_dpo_single_device recipe,")
    hf = estimate({"model": MODEL, "method": "lora", "stage": "dpo"})
    assert _stage_line(hf).startswith("Stage dpo as TRL 1.16.0 runs it; ")
    assert _stage_line(estimate({"model": MODEL, "method": "lora", "stage": "ppo"})).startswith(
        "Stage ppo as TRL v1.9.0 runs it; ")
    assert untranslated([_stage_line(r) for r in (tune, ppo, old, hf)]) == []
    assert to_pt(_stage_line(ppo)) == ("Etapa ppo na receita ppo_full_finetune_single_device do torchtune, com a memória "
                                       "estimada como o TRL v1.9.0 corre a etapa (sem perfil de etapa do torchtune); "
                                       "micro_batch_size conta completações.")


def test_the_stage_recipe_is_profile_data(monkeypatch):
    """The line and the refusal read the profile's stage_recipes, not the framework's name: a transformers profile
    given a recipe says it and refuses what the recipe cannot run."""
    from vramfit.estimate.profile_fields import StageRecipe

    recipe = StageRecipe(Stage.KTO, (Method.FULL,), False, ("my_kto",))
    monkeypatch.setitem(PROFILES, Framework.HF, dataclasses.replace(PROFILES[Framework.HF], stage_recipes=(recipe,)))
    r = estimate({"model": MODEL, "method": "full", "stage": "kto"})
    assert _stage_line(r).startswith("Stage kto in transformers + PEFT's my_kto recipe, its memory estimated as TRL "
                                     "1.16.0 runs the stage")
    for keys, key, valid in (({"method": "lora"}, "method", ["full"]), ({"method": "full", "num_gpus": 2}, "num_gpus",
                                                                         ["1"])):
        with pytest.raises(ScenarioError) as err:
            parse_scenario({"model": MODEL, "stage": "kto", **keys})
        assert err.value.key == key and err.value.valid == valid


def test_refusals_exit_2_naming_the_key():
    runner = CliRunner()
    r = runner.invoke(app, ["estimate", "--model", MODEL, "--framework", "torchtitan", "--method", "full",
                            "--optimizer", "adamw-8bit"])
    assert r.exit_code == 2 and "optimizer: torchtitan runs no bitsandbytes optimizer" in r.output
    r = runner.invoke(app, ["estimate", "--model", MODEL, "--framework", "torchtitan", "--method", "full",
                            "--num-gpus", "8", "--tensor-parallel", "2", "--parallelism", "ddp"])
    assert r.exit_code == 2 and "(valid values: fsdp)" in r.output


def test_a_profile_that_offloads_is_what_lets_an_offload_through(monkeypatch):
    """The refusal reads the profile (runs_offload), not the framework's name."""
    keys = {"model": MODEL, "method": "full", "framework": "litgpt", "num_gpus": 2, "parallelism": "fsdp",
            "offload": "optimizer+params"}
    monkeypatch.setitem(PROFILES, Framework.LITGPT, dataclasses.replace(PROFILES[Framework.LITGPT], runs_offload=True))
    assert parse_scenario(keys).offload.value == "optimizer+params"


def test_the_titan_import_reports_the_degrees_it_sets():
    imp = from_text("[training]\nbatch_size = 4\ndata_parallel_shard_degree = 4\ntensor_parallel_degree = 2\n"
                    "[model]\nname = 'llama3'\nflavor = '8B'\n", "torchtitan")
    line = next(x for x in imp.lines() if "training.tensor_parallel_degree" in x)
    assert "→ tensor_parallel=2" in line and "no effect on its own" not in line
    assert imp.scenario.tensor_parallel == 2 and imp.scenario.parallelism is Parallelism.FSDP
    new = from_text("[parallelism]\ndata_parallel_shard_degree = 1\ntensor_parallel_degree = 2\n"
                    "pipeline_parallel_degree = 1\n[training]\nlocal_batch_size = 1\n[model]\nflavor = '8B'\n", "torchtitan")
    lines = {k: next(x for x in new.lines() if k in x) for k in ("parallelism.tensor_parallel_degree",
                                                                "parallelism.pipeline_parallel_degree")}
    assert "→ tensor_parallel=2" in lines["parallelism.tensor_parallel_degree"]
    assert "→ pipeline_parallel=1" in lines["parallelism.pipeline_parallel_degree"]
    # TP 2 over the 2 GPUs it names: no data-parallel rank, imported as ddp (torchtitan applies neither FSDP nor DDP)
    assert (new.scenario.num_gpus, new.scenario.parallelism) == (2, Parallelism.DDP)
    assert to_pt("stage: torchtitan has no trainer for dpo (valid values: sft)") == \
        "stage: o torchtitan não tem treinador para dpo (valores válidos: sft)"
