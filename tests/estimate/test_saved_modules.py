"""PEFT's modules_to_save (estimate/saved_modules.py): whole trained copies of embed_tokens / lm_head beside LoRA, their
gradients and optimizer states, when backward makes those gradients, and the refusals. Figures are the model's own
shapes: Llama-3.1-8B has an untied 128,256 x 4,096 embedding and head; Llama-3.2-1B a tied 128,256 x 2,048 one."""

from __future__ import annotations

import pytest

from vramfit.errors import ScenarioError
from vramfit.estimate import estimate
from vramfit.estimate.allocator import round_allocation
from vramfit.estimate.step import compute
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario

V8, H8 = 128_256, 4_096
V1, H1 = 128_256, 2_048
BASE8 = {"model": "meta-llama/Llama-3.1-8B", "lora_targets": ["q_proj", "v_proj"], "seq_len": 1024}


def _step(**keys):
    sc = parse_scenario(keys)
    return compute(resolve_model(sc.model).spec, sc)


def test_names_parse_from_a_list_or_a_string():
    assert parse_scenario({**BASE8, "modules_to_save": "embed_tokens, lm_head"}).modules_to_save == (
        "embed_tokens", "lm_head")
    assert parse_scenario({**BASE8, "modules_to_save": ["lm_head", "lm_head"]}).modules_to_save == ("lm_head",)
    assert parse_scenario({**BASE8, "modules_to_save": []}).modules_to_save == ()


@pytest.mark.parametrize(("keys", "says"), [
    ({"modules_to_save": ["score"]}, "'score' is not a module trained as a whole copy here (valid values: "
                                     "embed_tokens, lm_head)"),
    ({"modules_to_save": 3}, "must be a list of module names, got 3"),
    ({"modules_to_save": ["lm_head"], "method": "full"}, "full fine-tuning already trains every module"),
    ({"modules_to_save": ["lm_head"], "lora_targets": ["q_proj", "lm_head"]}, "lm_head is also in lora_targets"),
    ({"modules_to_save": ["lm_head"], "num_gpus": 2, "parallelism": "zero3"}, "modelled on one GPU and under DDP"),
    ({"modules_to_save": ["embed_tokens"], "framework": "torchtune"}, "torchtune trains no modelled copies"),
])
def test_refusals_name_the_key(keys, says):
    with pytest.raises(ScenarioError) as err:
        estimate({**BASE8, **keys})
    assert err.value.key == "modules_to_save" and says in str(err.value)


def test_each_copy_is_the_module_with_its_gradient_and_adamw_states_in_the_load_dtype():
    plain, both = (estimate({**BASE8, "modules_to_save": m}) for m in ([], ["embed_tokens", "lm_head"]))
    copy = round_allocation(V8 * H8 * 2)  # bf16-true load: the copy keeps bf16 (PEFT casts only LoRA layers to fp32)
    assert both.model.num_trainable_params - plain.model.num_trainable_params == 2 * V8 * H8
    s0, s1 = _step(**BASE8), _step(**BASE8, modules_to_save=["embed_tokens", "lm_head"])
    assert s1.parts.adapters - s0.parts.adapters == 2 * copy
    assert s1.parts.gradients - s0.parts.gradients == 2 * copy
    assert s1.parts.optimizer_state - s0.parts.optimizer_state == 4 * copy  # exp_avg, exp_avg_sq in bf16
    assert s1.parts.copy_grads == (copy, copy)


def test_qlora_copies_are_fp32_after_prepare_model_for_kbit_training():
    s = _step(**BASE8, method="qlora", modules_to_save=["lm_head"])
    assert s.parts.copy_grads == (0, round_allocation(V8 * H8 * 4))
    notes = " ".join(estimate({**BASE8, "method": "qlora", "modules_to_save": ["lm_head"]}).assumptions)
    assert "whole trained copies of lm_head in fp32" in notes


def test_gradients_arrive_outside_the_blocks():
    s0, s1 = _step(**BASE8), _step(**BASE8, modules_to_save=["embed_tokens", "lm_head"])
    copy = round_allocation(V8 * H8 * 2)
    assert s1.layer_grads == s0.layer_grads  # no block makes a copy's gradient
    assert s1.head_grad == copy and s0.head_grad == 0  # the head copy's, at the top of backward
    assert s1.lowest_grads - s0.lowest_grads == copy  # the head's by the lowest block; the embedding's comes after it


def test_lora_on_lm_head_makes_no_weight_gradient():
    """LoRA on lm_head leaves the V x H weight frozen: only its adapters get gradients. Counting a whole head gradient
    read +23 % above the simulator on Llama-3.2-1B checkpointed at 1 x 256 (3.39 against 2.75 GiB)."""
    keys = {"model": "meta-llama/Llama-3.2-1B", "micro_batch_size": 1, "seq_len": 256,
            "gradient_checkpointing": "full"}
    s = _step(**keys, lora_targets=["q_proj", "v_proj", "lm_head"])
    assert s.head_grad == 0 and s.lm_head_trainable and not s.head_trains
    with_head = estimate({**keys, "lora_targets": ["q_proj", "v_proj", "lm_head"]}).peak.allocated_bytes
    without = estimate({**keys, "lora_targets": ["q_proj", "v_proj"]}).peak.allocated_bytes
    assert 0 < with_head - without < 100 * 2**20


def test_tied_model_gets_one_copy_per_name():
    s = _step(model="meta-llama/Llama-3.2-1B", modules_to_save=["embed_tokens", "lm_head"])
    assert s.parts.copy_grads == (round_allocation(V1 * H1 * 2),) * 2


def test_accuracy_path_names_the_copies():
    r = estimate({**BASE8, "modules_to_save": ["lm_head"]})
    assert r.accuracy["path"]["method"] == "lora+modules_to_save"


def test_readme_figures():
    """README: Llama-3.1-8B, r16 on all linears, 1 x 2,048, checkpointed: LoRA 18.9 -> 24.8 GiB, QLoRA 12.7 -> 24.5."""
    gib = [round(estimate({"model": "meta-llama/Llama-3.1-8B", "method": m, "lora_targets": ["all-linear"],
                           "seq_len": 2048, "gradient_checkpointing": "full", "modules_to_save": saved}
                          ).peak.allocated_bytes / 2**30, 1)
           for m in ("lora", "qlora") for saved in ([], ["embed_tokens", "lm_head"])]
    assert gib == [18.9, 24.8, 12.7, 24.5]


def test_changes_to_fit_offer_lora_on_the_modules_or_no_copies():
    from vramfit.plan.changes import changes_to_fit

    sc = {"model": "meta-llama/Llama-3.1-8B", "method": "qlora", "lora_targets": ["all-linear"], "seq_len": 2048,
          "gradient_checkpointing": "full", "modules_to_save": ["embed_tokens", "lm_head"]}
    by = {c.name: c for c in changes_to_fit(sc, "rtx4090")}
    base = estimate({**sc, "gpu": "rtx4090"}).peak.device_bytes
    adapt, none = by["adapt-saved-modules"], by["no-saved-modules"]
    assert adapt.changes == {"modules_to_save": [], "lora_targets": ["all-linear", "embed_tokens", "lm_head"]}
    assert none.changes == {"modules_to_save": []}
    # both are the changed scenario's own estimate: two fp32 copies with their gradients and states are ~11 GiB
    assert none.device_bytes == estimate({**sc, "modules_to_save": [], "gpu": "rtx4090"}).peak.device_bytes
    assert base - none.device_bytes > 10 * 2**30 and none.device_bytes < adapt.device_bytes < base
    assert "adapt-saved-modules" not in {c.name for c in changes_to_fit({**sc, "dora": True}, "rtx4090")}


def test_dpo_counts_the_fp32_head_copy_gradient_without_a_cast():
    """TRL's fused LM head (ChunkedLogProbFunction) returns ``grad_weight.to(weight.dtype)``: no cast for the fp32 copy
    QLoRA trains, so the loss phase grows by the fp32 weight gradient only, as for bf16-mixed's fp32 weights."""
    base = {**BASE8, "seq_len": 512, "stage": "dpo", "method": "qlora"}
    grown = [estimate({**base, **x, "modules_to_save": ["lm_head"]}).peak.allocated_bytes
             - estimate({**base, **x}).peak.allocated_bytes for x in ({}, {"precision": "bf16-mixed"})]
    assert grown[0] == grown[1]
    copy = round_allocation(V8 * H8 * 4)
    assert 4 * copy <= grown[0] < 4 * copy + 2**30 // 64  # copy, gradient, two AdamW states; no 16-bit cast


def test_the_component_table_names_the_copies():
    comps = {c["name"]: c for c in estimate({**BASE8, "modules_to_save": ["lm_head"]}).to_dict()["components"]}
    assert comps["adapters"]["detail"] == "LoRA A and B matrices and the whole trained copies of lm_head (modules_to_save)"
    plain = {c["name"]: c for c in estimate(BASE8).to_dict()["components"]}
    assert plain["adapters"]["detail"] == "LoRA A and B matrices"


def test_a_plan_with_copies_says_no_sharding_engine_was_tried():
    from vramfit.plan.search import tried_words

    assert tried_words(parse_scenario({**BASE8, "modules_to_save": ["lm_head"]})) == (
        "even with checkpointing (at micro-batch 1)")
    assert tried_words(parse_scenario(BASE8)) == "even with ZeRO-3, checkpointing and offload (at micro-batch 1)"
