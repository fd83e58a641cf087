import json

import pytest
import tomllib
import yaml

from vramfit.errors import ScenarioError
from vramfit.plan import guide_table, plan
from vramfit.plan.export import ENGINES, export_plan


@pytest.fixture(scope="module")
def table():
    return guide_table()


def row(table, size, method):
    return next(r for r in table.rows if r.size == size and r.method == method)


def test_guide_table_covers_sizes_and_methods(table):
    assert {(r.size, r.method) for r in table.rows} == {(s, m) for s in ("7B", "13B", "34B", "70B") for m in ("full", "lora", "qlora")}
    json.dumps(table.to_dict())


def test_7b_full_disagreement_explains_the_accounting(table):
    r = row(table, "7B", "full")
    assert not r.agrees
    verdicts = {(c["class_gb"], c["count"]): c["verdict"] for c in r.claims}
    assert verdicts[(80, 1)] == "does not fit" and verdicts[(80, 2)] == "agrees" and verdicts[(48, 1)] == "does not fit"
    why = " ".join(r.why)
    assert "2 + 8 + 2 = 12 bytes per parameter" in why and "master copy" in why and "84 GB" in why
    assert "already exceeds 48 GB" in why


def test_70b_qlora_on_one_80gb_card_agrees(table):
    r = row(table, "70B", "qlora")
    assert r.agrees and r.fewest[80] == 1 and r.why == ()


def test_13b_lora_does_not_fit_24gb(table):
    r = row(table, "13B", "lora")
    c24 = next(c for c in r.claims if c["class_gb"] == 24)
    assert c24["verdict"] == "does not fit" and r.fewest[24] == 2 and r.fewest[48] == 1
    assert any("frozen base alone" in w for w in r.why)


def test_full_fine_tuning_rows_need_more_cards_than_the_guide(table):
    for size in ("13B", "34B", "70B"):
        r = row(table, size, "full")
        assert not r.agrees and all(c["verdict"] == "does not fit" for c in r.claims)


@pytest.fixture(scope="module")
def plans():
    return {
        "zero3": plan({"model": "meta-llama/Llama-2-7b-hf", "method": "full", "precision": "bf16-mixed"},
                      gpu_ids=["a100-40gb-sxm"], effective_batch=16).plans[0],
        "qlora1": plan({"model": "meta-llama/Llama-2-70b-hf", "method": "qlora", "gradient_checkpointing": "full"},
                       gpu_ids=["h100-sxm"], effective_batch=1).plans[0],
        "llama3": plan({"model": "meta-llama/Llama-3.1-8B", "method": "full", "framework": "torchtitan"},
                       gpu_ids=["h100-sxm"], effective_batch=8).plans[0],
    }


def test_deepspeed_export_matches_the_plan(plans):
    p = plans["zero3"]
    assert p.num_gpus > 1 and p.parallelism.startswith("zero")
    ex = export_plan(p, "deepspeed")
    cfg = json.loads(ex.files["ds_config.json"])
    assert cfg["train_micro_batch_size_per_gpu"] == p.micro_batch_size
    assert cfg["gradient_accumulation_steps"] == p.grad_accum
    assert cfg["train_batch_size"] == p.micro_batch_size * p.grad_accum * p.num_gpus
    assert cfg["zero_optimization"]["stage"] == int(p.parallelism[-1]) and cfg["bf16"] == {"enabled": True}
    assert f"--num_gpus {p.num_gpus}" in ex.command


@pytest.mark.parametrize("engine", ENGINES)
def test_every_engine_writes_parseable_files(plans, engine):
    from vramfit.plan.export_titan import refusals

    written = 0
    for p in plans.values():
        if engine == "torchtitan" and refusals(p.scenario):  # Llama 2 has no torchtitan flavor; QLoRA no 4-bit path
            with pytest.raises(ScenarioError, match="^export: "):
                export_plan(p, engine, epochs=2)
            continue
        written += 1
        ex = export_plan(p, engine, epochs=2)
        assert ex.files
        for name, text in ex.files.items():
            if name == "train_config.yaml":
                assert yaml.safe_load(text)["per_device_train_batch_size"] == p.micro_batch_size
            elif name == "accelerate.yaml":
                cfg = yaml.safe_load(text)
                assert cfg["num_processes"] == p.num_gpus
                if cfg["distributed_type"] == "DEEPSPEED":  # precision is the JSON's: accelerate refuses both
                    assert "mixed_precision" not in cfg and json.loads(ex.files["ds_config.json"])["bf16"]["enabled"]
                else:
                    assert cfg["mixed_precision"] == "bf16"
            elif name.endswith(".json"):
                json.loads(text)
            elif name.endswith(".py"):
                compile(text, name, "exec")
            elif name.endswith(".toml"):
                assert tomllib.loads(text)["training"]["local_batch_size"] == p.micro_batch_size
        json.dumps(ex.to_dict())
    assert written >= 1


def test_fsdp_and_trl_exports(plans):
    fs = yaml.safe_load(export_plan(plans["zero3"], "fsdp").files["accelerate.yaml"])
    assert fs["distributed_type"] == "FSDP"
    assert fs["fsdp_config"]["fsdp_sharding_strategy"] in ("FULL_SHARD", "SHARD_GRAD_OP")
    trl = yaml.safe_load(export_plan(plans["qlora1"], "trl").files["train_config.yaml"])
    assert trl["load_in_4bit"] and trl["use_peft"] and trl["activation_checkpointing"]
    assert trl["per_device_train_batch_size"] == plans["qlora1"].micro_batch_size


def test_unknown_engine():
    with pytest.raises(ScenarioError) as e:
        export_plan(None, "megatron")
    assert e.value.key == "export" and "deepspeed" in e.value.valid
