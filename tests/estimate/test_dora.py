"""PEFT's DoRA (scenario key ``dora``, estimate/dora.py): its parameters, the tensors each adapted linear keeps, its
forward working set, the releases and dropouts that change them, and the refusals."""

from __future__ import annotations

import pytest

from vramfit.errors import ScenarioError
from vramfit.estimate import estimate
from vramfit.estimate.step import compute
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario

# huggingface/peft@51c2ff666 method_comparison/MetaMathQA: Llama-3.2-3B in bf16, batch 4 x 768, r32 on q/v, dropout 0
MMQA = {"model": "meta-llama/Llama-3.2-3B", "precision": "bf16-true", "micro_batch_size": 4, "seq_len": 768,
        "lora_rank": 32, "lora_alpha": 64, "lora_dropout": 0.0, "lora_targets": ["q_proj", "v_proj"],
        "framework_version": "peft-method-comparison", "keeps_outputs": True}
T, Q_OUT, V_OUT, H = 4 * 768, 3072, 1024, 3072


def _step(**keys):
    sc = parse_scenario(keys)
    return compute(resolve_model(sc.model).spec, sc)


def _dora_items(step) -> dict[str, int]:
    return {k: v for k, v in step.saved.items.items() if ".dora_" in k}


def test_trainable_count_is_peft_printed():
    # the run's num_trainable_params: 9,289,728 = LoRA's 9,175,040 + 28 layers x (3,072 + 1,024) magnitudes
    assert estimate({**MMQA, "dora": False}).model.num_trainable_params == 9_175_040
    assert estimate({**MMQA, "dora": True}).model.num_trainable_params == 9_289_728


def test_dropout_zero_keeps_the_base_and_lora_outputs():
    items = _dora_items(_step(**MMQA, dora=True))
    # the base layer's bf16 output and the fp32 LoRA output (the input is cast to the fp32 adapters) per adapted linear
    assert items == {"q_proj.lora0.dora_lora_result": 4 * T * Q_OUT, "q_proj.lora0.dora_base_result": 2 * T * Q_OUT,
                     "v_proj.lora0.dora_lora_result": 4 * T * V_OUT, "v_proj.lora0.dora_base_result": 2 * T * V_OUT}
    plain = _step(**MMQA).saved.items
    assert {k: v for k, v in _step(**MMQA, dora=True).saved.items.items() if ".dora_" not in k} == plain


def test_dropout_recomputes_the_base_output_and_keeps_the_cast_weight():
    items = _dora_items(_step(**{**MMQA, "lora_dropout": 0.05}, dora=True))
    # F.linear(x, weight.to(fp32)): its fp32 output, and the fp32 copy of the weight kept for the input's gradient
    assert items["q_proj.lora0.dora_base_result"] == 4 * T * Q_OUT
    assert items["q_proj.lora0.dora_weight"] == 4 * H * Q_OUT
    assert items["v_proj.lora0.dora_weight"] == 4 * H * V_OUT
    # peft before 0.14 recomputes it whatever the dropout
    old = _dora_items(_step(**{**MMQA, "framework_version": "peft-method-comparison+peft-0.13"}, dora=True))
    assert old == items


def test_bf16_parameters_under_autocast_are_not_copied():
    # HF bf16-mixed keeps fp32 weights: weight.to(fp32) is the parameter, autocast casts it to a new 16-bit tensor
    items = _dora_items(_step(**{**MMQA, "precision": "bf16-mixed", "lora_dropout": 0.05}, dora=True))
    assert items["q_proj.lora0.dora_weight"] == 2 * H * Q_OUT  # autocast's 16-bit cast of the fp32 weight
    assert items["q_proj.lora0.dora_base_result"] == 2 * T * Q_OUT


def test_forward_transient_of_the_widest_linear():
    step = _step(model="meta-llama/Llama-3.1-8B", precision="bf16-true", dora=True, lora_targets=["all-linear"])
    # down_proj (14,336 -> 4,096): fp32 x_eye 14,336^2, then lora_weight, the fp32 weight copy, the product and the sum
    assert step.dora_forward == 4 * 14336 ** 2 + 4 * 4 * 14336 * 4096
    assert _step(model="meta-llama/Llama-3.1-8B", precision="bf16-true").dora_forward == 0


def test_transient_is_a_forward_temporary_and_a_recompute_one():
    keys = {"model": "meta-llama/Llama-3.1-8B", "precision": "bf16-true", "dora": True, "micro_batch_size": 1,
            "seq_len": 512}
    no_ck = {p.phase: dict(p.breakdown) for p in estimate({**keys, "gradient_checkpointing": "none"}).phases}
    ck = {p.phase: dict(p.breakdown) for p in estimate({**keys, "gradient_checkpointing": "full"}).phases}
    transient = _step(**keys).dora_forward
    assert no_ck["forward-attention"]["temporaries"] == transient and "temporaries" not in no_ck["forward"]
    assert ck["backward-block"]["temporaries"] >= transient > no_ck["backward-block"]["temporaries"]


def test_more_memory_than_lora_and_says_why():
    lora, dora = estimate(MMQA), estimate({**MMQA, "dora": True})
    # 28 blocks x 3,072 tokens x (3,072 + 1,024) x (2 + 4) bytes, the magnitudes and their AdamW states beside them
    assert dora.peak.allocated_bytes - lora.peak.allocated_bytes == pytest.approx(28 * T * 4096 * 6, rel=0.02)
    line = next(a for a in dora.assumptions if a.startswith("DoRA"))
    assert "72.0 MiB per block" in line and "PEFT >= 0.14 at dropout 0" in line
    assert dora.accuracy["path"]["method"] == "lora+dora"


@pytest.mark.parametrize(("keys", "words"), [
    ({"method": "full"}, "full fine-tuning has no adapters"),
    ({"framework": "unsloth", "method": "lora"}, "unsloth runs no DoRA that is modelled"),
    ({"framework": "litgpt"}, "litgpt runs no DoRA that is modelled"),
    ({"framework": "torchtune", "framework_version": "torchtune-0.1"}, "torchtune (torchtune-0.1) runs no DoRA"),
    ({"lora_targets": ["q_proj", "lm_head"]}, "embedding or output layer (lm_head)"),
    ({"model": "Qwen/Qwen3-30B-A3B"}, "PEFT refuses DoRA on fused experts (gate_proj, which all-linear adapts)"),
    ({"model": "google/gemma-3-4b-it"}, "vision tower (q_proj) is not modelled: set freeze_vision yes"),
])
def test_refusals_name_the_key(keys, words):
    with pytest.raises(ScenarioError) as e:
        estimate({"model": "meta-llama/Llama-3.1-8B", "dora": True, **keys})
    assert e.value.key == "dora" and words in str(e.value)


def test_torchtune_keeps_its_base_output_whatever_the_dropout():
    # torchtune v0.4.0 DoRALinear: base_out of the undropped input, in the model's bf16 like its adapters
    keys = {"model": "meta-llama/Llama-3.2-3B", "framework": "torchtune", "precision": "bf16-true", "dora": True,
            "micro_batch_size": 4, "seq_len": 768, "lora_rank": 32, "lora_targets": ["q_proj", "v_proj"]}
    for dropout in (0.0, 0.05):
        items = _dora_items(_step(**keys, lora_dropout=dropout))
        assert items == {"q_proj.lora0.dora_lora_result": 2 * T * Q_OUT, "q_proj.lora0.dora_base_result": 2 * T * Q_OUT,
                         "v_proj.lora0.dora_lora_result": 2 * T * V_OUT, "v_proj.lora0.dora_base_result": 2 * T * V_OUT}
    # x_eye in bf16 kept by lora_A's matmul, lora_weight (the bf16 weight itself is not copied), and the output's three
    # bf16 T x out products: more than the norm's moment (lora_weight, the product and the sum), 3,072 tokens here
    step = _step(**keys)
    assert step.dora_forward == 2 * H * H + 2 * H * Q_OUT + 3 * 2 * T * Q_OUT
    assert step.dora_recompute == 2 * H * H + 3 * 2 * H * Q_OUT


def test_changes_to_fit_offer_dora_s_own_savings():
    from vramfit.plan.changes import changes_to_fit

    sc = {"model": "meta-llama/Llama-3.1-8B", "dora": True, "lora_dropout": 0.05, "gradient_checkpointing": "none"}
    by = {c.name: c for c in changes_to_fit(sc, "h100-sxm")}
    base = estimate({**sc, "gpu": "h100-sxm"}).peak.device_bytes
    # dropout 0: the fp32 copy of every adapted weight (6.98 B params) is no longer kept; plain LoRA also drops the
    # base and LoRA outputs; both are measured figures of the changed scenario
    assert by["dora-no-dropout"].changes == {"lora_dropout": 0.0} and by["plain-lora"].changes == {"dora": False}
    assert base - by["dora-no-dropout"].device_bytes > 30 * 2**30
    assert by["plain-lora"].device_bytes < by["dora-no-dropout"].device_bytes
    assert by["plain-lora"].device_bytes == estimate({**sc, "dora": False, "gpu": "h100-sxm"}).peak.device_bytes
    # the README's figures (GiB)
    gib = [round(b / 2**30, 1) for b in (base, by["dora-no-dropout"].device_bytes, by["plain-lora"].device_bytes)]
    assert gib == [88.8, 54.7, 41.1]
    # torchtune reuses the base output whatever the dropout: no dropout change offered
    tt = {c.name for c in changes_to_fit({**sc, "framework": "torchtune"}, "rtx4090")}
    assert "plain-lora" in tt and "dora-no-dropout" not in tt


def test_cast_parameters_are_not_copied_again():
    # FSDP's mixed precision (and the DeepSpeed engine) computes on 16-bit parameters: under autocast with dropout the
    # recomputed base output's F.linear keeps that parameter, no new copy (the simulator: +372 MiB for DoRA, as at
    # dropout 0; counting a copy had made it +2,226 MiB)
    keys = {"model": "meta-llama/Llama-3.2-1B", "precision": "bf16-mixed", "num_gpus": 2, "lora_dropout": 0.1,
            "micro_batch_size": 1, "seq_len": 256}
    for par in ("fsdp", "zero2"):
        items = _dora_items(_step(**keys, parallelism=par, dora=True))
        assert not any(k.endswith(".dora_weight") for k in items)
    items = _dora_items(_step(**{**keys, "num_gpus": 1}, dora=True))  # one GPU: the fp32 weight, autocast's copy
    assert items["q_proj.lora0.dora_weight"] == 2 * 2048 * 2048


def test_autocast_keeps_only_the_16_bit_identity_and_old_peft_makes_none():
    keys = {"model": "meta-llama/Llama-3.2-1B", "micro_batch_size": 1, "seq_len": 256, "dora": True}
    # down_proj (8,192 -> 2,048) at get_weight_norm's add: autocast's bf16 x_eye, then four fp32 in x out tensors
    # (lora_weight, the fp32 weight copy, the product and the sum); at lora_A both identities (fp32 + bf16)
    step = _step(**keys, precision="bf16-mixed")
    assert step.dora_recompute == max(8192 ** 2 * 6, 8192 ** 2 * 2 + 4 * 4 * 8192 * 2048)
    # peft before 0.12 multiplies lora_B.weight @ lora_A.weight: no identity; its adapters and input are bf16
    old = _step(**keys, precision="bf16-true", framework_version="peft-0.11")
    assert old.dora_recompute == 3 * 2 * 8192 * 2048


def test_selective_checkpointing_recomputes_no_dora_layer():
    keys = {"model": "meta-llama/Llama-3.1-8B", "dora": True, "micro_batch_size": 1, "seq_len": 1024}
    phases = {p.phase: dict(p.breakdown) for p in estimate({**keys, "gradient_checkpointing": "selective"}).phases}
    assert phases["backward-block"].get("temporaries", 0) < _step(**keys).dora_recompute


def test_readme_checkpointed_increment():
    # README: Llama-3.2-1B checkpointed at 8 x 2,048 tokens, DoRA adds 2,724 MiB (the simulator 2,725:
    # tests/sim/test_sim_dora.py); the block's backward holds result_dora's fp32 T x 8,192 gradient (512 MiB)
    keys = {"model": "meta-llama/Llama-3.2-1B", "lora_targets": ["all-linear"], "lora_rank": 16,
            "precision": "bf16-true", "gradient_checkpointing": "full", "loss": "fused", "seq_len": 2048,
            "micro_batch_size": 8}
    added = estimate({**keys, "dora": True}).peak.allocated_bytes - estimate(keys).peak.allocated_bytes
    assert round(added / 2**20) == 2724
    assert _step(**keys, dora=True).block_transient - _step(**keys).block_transient == 4 * 8 * 2048 * 8192


def test_grpo_generation_forms_the_weight_norm_on_every_forward():
    """The generating policy runs its DoRA layers, which form B·A and the weight norm on each forward, a decoding
    step's too: the largest one (down_proj, as in training's forward) is added to the generation's transient."""
    keys = {"model": "meta-llama/Llama-3.1-8B", "precision": "bf16-true", "stage": "grpo", "seq_len": 2048,
            "completion_len": 1920, "micro_batch_size": 8, "gradient_checkpointing": "full"}
    gen = [dict(next(p for p in estimate({**keys, "dora": d}).phases if p.phase == "generate").breakdown)
           for d in (False, True)]
    assert gen[1]["generation_transient"] - gen[0]["generation_transient"] == 4 * 14336 ** 2 + 4 * 4 * 14336 * 4096


def test_rl_residents_are_in_the_forward_high_point_too():
    """A colocated vLLM's share (GRPO) and PPO's value model, its activations and the reward model stay on the card at
    the policy's top-block high point (``forward-attention``, where DoRA's weight norm runs), as in every other phase."""
    keys = {"model": "meta-llama/Llama-3.1-8B", "precision": "bf16-true", "seq_len": 1024, "completion_len": 512,
            "gradient_checkpointing": "full", "dora": True}
    grpo = {p.phase: dict(p.breakdown) for p in estimate({**keys, "stage": "grpo", "micro_batch_size": 8,
                                                          "generation": "vllm-colocate", "gpu": "h100-sxm"}).phases}
    assert grpo["forward-attention"]["vllm"] == grpo["forward"]["vllm"] > 20 * 2**30
    ppo = {p.phase: dict(p.breakdown) for p in estimate({**keys, "stage": "ppo", "micro_batch_size": 2}).phases}
    for part in ("value_model", "reward_model", "value_activations"):
        assert ppo["forward-attention"][part] == ppo["forward"][part] > 0
