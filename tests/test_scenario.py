import pytest

from vramfit.errors import ScenarioError
from vramfit.scenario import (
    Checkpointing,
    Method,
    Parallelism,
    Quantize,
    parse_scenario,
)

MODEL = "meta-llama/Llama-2-7b-hf"


def test_defaults_follow_the_schema():
    sc = parse_scenario({"model": MODEL})
    assert sc.method is Method.LORA
    assert sc.precision.value == "bf16-true"
    assert sc.quantize is Quantize.NONE
    assert sc.lora_rank == 16 and sc.lora_alpha == 32.0
    assert sc.lora_targets == ("all-linear",)
    assert sc.micro_batch_size == 1 and sc.seq_len == 2048 and sc.grad_accum == 1
    assert sc.gradient_checkpointing is Checkpointing.NONE
    assert sc.parallelism is Parallelism.NONE


def test_qlora_defaults_to_nf4_dq_and_multi_gpu_to_ddp():
    assert parse_scenario({"model": MODEL, "method": "qlora"}).quantize is Quantize.NF4_DQ
    assert parse_scenario({"model": MODEL, "num_gpus": 4}).parallelism is Parallelism.DDP


def test_dashed_keys_strings_and_round_trip():
    sc = parse_scenario({"model": MODEL, "micro-batch-size": "4", "seq-len": "4_096", "lora_targets": "q_proj, v_proj"})
    assert sc.micro_batch_size == 4 and sc.seq_len == 4096
    assert sc.lora_targets == ("q_proj", "v_proj")
    assert parse_scenario(sc.to_dict()) == sc


def test_replace_rederives_followers():
    sc = parse_scenario({"model": MODEL, "method": "qlora", "lora_rank": 8})
    lora = sc.replace(method="lora")
    assert lora.quantize is Quantize.NONE
    assert sc.replace(lora_rank=64).lora_alpha == 128.0


@pytest.mark.parametrize(
    ("data", "key", "valid"),
    [
        ({"model": MODEL, "method": "lorra"}, "method", "full, lora, qlora"),
        ({"model": MODEL, "precision": "bf16"}, "precision", "bf16-true"),
        ({"model": MODEL, "optimizer": "adam"}, "optimizer", "paged-adamw-8bit"),
        ({"model": MODEL, "attention": "flash2"}, "attention", "eager"),
        ({"model": MODEL, "seq_len": 0}, "seq_len", None),
        ({"model": MODEL, "seq_len": -5}, "seq_len", None),
        ({"model": MODEL, "micro_batch_size": 2.5}, "micro_batch_size", None),
        ({"model": MODEL, "micro_batch_size": True}, "micro_batch_size", None),
        ({"model": MODEL, "seq_len": 10**12}, "seq_len", None),
        ({"model": MODEL, "num_gpus": "many"}, "num_gpus", None),
        ({"model": MODEL, "lora_rank": 0}, "lora_rank", None),
        ({"model": MODEL, "bogus": 1}, "bogus", "micro_batch_size"),
        ({}, "model", None),
        ({"model": MODEL, "params": "7B"}, "model", None),
        ({"model": MODEL, "method": "qlora", "quantize": "none"}, "quantize", "nf4"),
        ({"model": MODEL, "method": "full", "quantize": "nf4"}, "quantize", None),
        ({"model": MODEL, "num_gpus": 2, "parallelism": "none"}, "parallelism", "zero3"),
        ({"model": MODEL, "offload": "optimizer"}, "offload", "zero3"),
        ({"model": MODEL, "num_gpus": 2, "parallelism": "zero2", "offload": "optimizer+params"}, "offload", "fsdp"),
        # an unknown gpu is refused where the card is used (tests/plan/test_verdict.py): validation reads no CSV
        ({"model": MODEL, "lora_targets": 5}, "lora_targets", None),
        ({"model": MODEL, "lora_dropout": 1.5}, "lora_dropout", None),
        ({"model": MODEL, "optimizer_in_backward": "maybe"}, "optimizer_in_backward", "true"),
        ({"model": MODEL, "framework": "keras"}, "framework", "torchtune"),
    ],
    ids=lambda v: str(v)[:40] if not isinstance(v, dict) else None,
)
def test_bad_values_name_the_key_and_the_valid_values(data, key, valid):
    with pytest.raises(ScenarioError) as exc:
        parse_scenario(data)
    assert exc.value.key == key
    assert str(exc.value).startswith(key)
    if valid:
        assert valid in str(exc.value)


def test_not_a_mapping():
    with pytest.raises(ScenarioError, match="mapping"):
        parse_scenario(["model", MODEL])


def test_replace_keeps_every_key_the_user_set():
    """sweep --vary re-derived a given quantize (method) and stage settings; it keeps them now, as estimate with the
    same flags does (the user's parallelism 'none' and the node layout still follow the GPU count)."""
    sc = parse_scenario({"model": "meta-llama/Llama-3.1-8B", "method": "qlora", "quantize": "int8"})
    assert sc.replace(method="qlora", lora_rank=8).quantize.value == "int8"
    dpo = parse_scenario({"model": "meta-llama/Llama-3.1-8B", "method": "lora", "stage": "dpo", "reference": "copy"})
    assert dpo.replace(stage="dpo").reference.value == "copy"
    assert parse_scenario({"model": "meta-llama/Llama-3.1-8B", "parallelism": "none"}).replace(
        num_gpus=4).parallelism.value == "ddp"


def test_replace_follows_as_estimate_derives():
    """sweep --vary gave other figures than estimate with the same flags: a node layout given dropped to one node at
    the user's own GPU count (24.67 against 28.31 GiB), the framework's parallelism stayed the old framework's, and
    GRPO's accumulation stayed at the old stage's or GPU count's."""
    from vramfit import estimate

    keys = {"model": "meta-llama/Llama-3.1-8B", "method": "full", "num_gpus": 16, "num_nodes": 2,
            "parallelism": "fsdp", "shard_scope": "node"}
    sc = parse_scenario(keys)
    assert estimate(sc.replace(num_gpus=16)).peak.device_bytes == estimate(keys).peak.device_bytes
    layouts = {n: (sc.replace(num_gpus=n).num_nodes, sc.replace(num_gpus=n).shard_scope.value) for n in (4, 8, 24, 32)}
    assert layouts == {4: (1, "all"), 8: (1, "all"), 24: (3, "node"), 32: (4, "node")}  # nodes of 8 keep their size
    tune = parse_scenario({"model": "meta-llama/Llama-3.1-8B", "method": "full", "framework": "torchtune", "num_gpus": 4})
    assert tune.replace(framework="hf").parallelism == parse_scenario(
        {"model": "meta-llama/Llama-3.1-8B", "method": "full", "num_gpus": 4}).parallelism
    hf = parse_scenario({"model": "meta-llama/Llama-3.1-8B", "method": "full", "num_gpus": 4})
    assert hf.replace(framework="torchtune").parallelism.value == "fsdp"  # torchtune runs no DDP
    chosen = parse_scenario({"model": "meta-llama/Llama-3.1-8B", "method": "full", "num_gpus": 4, "parallelism": "ddp"})
    with pytest.raises(ScenarioError, match="torchtune does not run ddp"):  # a parallelism given stays given
        chosen.replace(framework="torchtune")
    lora = parse_scenario({"model": "meta-llama/Llama-3.1-8B", "method": "lora"})
    grpo = lora.replace(stage="grpo")
    assert grpo.grad_accum == parse_scenario({"model": "meta-llama/Llama-3.1-8B", "method": "lora",
                                              "stage": "grpo"}).grad_accum == 8
    assert grpo.replace(num_gpus=8).grad_accum == 1 and grpo.replace(stage="sft").grad_accum == 1
    set_ga = parse_scenario({"model": "meta-llama/Llama-3.1-8B", "method": "lora", "stage": "grpo", "grad_accum": 16})
    assert set_ga.replace(num_gpus=2).grad_accum == 16


def test_an_empty_scenario_file_says_it_is_empty(tmp_path):
    from vramfit.scenario import load_scenario_file

    empty = tmp_path / "s.yaml"
    empty.write_text("")
    with pytest.raises(ScenarioError, match="scenario: is empty: give a mapping of scenario keys"):
        load_scenario_file(empty)
