"""Unsloth's modules_to_save (profile ``saved_copy_dtype``, ``saved_originals_to_disk_*``, ``embedding_target_is_copy``):
the copies keep the load's 16-bit dtype but an fp16 load trains them in fp32; under its offloaded checkpointing
FastLlamaModel.get_peft_model moves the originals to disk first, so only the copies are on the card. Figures are the
model's own shapes: Llama-3.1-8B has an untied 128,256 x 4,096 embedding and head; Llama-3.2-1B a tied 128,256 x 2,048
one."""

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
BASE = {"model": "meta-llama/Llama-3.1-8B", "framework": "unsloth", "method": "qlora", "lora_targets": ["all-linear"],
        "seq_len": 1024}
BOTH = ["embed_tokens", "lm_head"]


def _parts(**keys):
    sc = parse_scenario({**BASE, **keys})
    return compute(resolve_model(sc.model).spec, sc).parts


def test_offloaded_checkpointing_moves_the_originals_off_the_card():
    copy = round_allocation(V8 * H8 * 2)  # bf16 load: the copies stay bf16
    for ckpt, originals in (("offload", 0), ("full", 2 * copy)):
        plain, both = _parts(gradient_checkpointing=ckpt), _parts(gradient_checkpointing=ckpt, modules_to_save=BOTH)
        assert both.weights - plain.weights == originals - 2 * copy  # the originals leave only under "unsloth"
        assert both.adapters - plain.adapters == 2 * copy
        assert both.gradients - plain.gradients == 2 * copy
        assert both.copy_grads == (copy, copy)


def test_an_fp16_load_trains_fp32_copies():
    plain, both = _parts(precision="fp16-true"), _parts(precision="fp16-true", modules_to_save=BOTH)
    fp32, fp16 = round_allocation(V8 * H8 * 4), round_allocation(V8 * H8 * 2)
    assert both.adapters - plain.adapters == 2 * fp32
    assert both.weights - plain.weights == -2 * fp16  # the fp16 originals went to disk
    assert both.copy_grads == (fp32, fp32)
    # hf (PEFT) keeps the original's dtype: an fp16-true LoRA copy stays fp16
    hf = compute(resolve_model("meta-llama/Llama-3.1-8B").spec, parse_scenario(
        {**BASE, "framework": "hf", "method": "lora", "precision": "fp16-true", "modules_to_save": ["lm_head"]})).parts
    assert hf.copy_grads == (0, fp16)


def test_a_tied_original_leaves_only_when_both_users_are_copied():
    tied = round_allocation(V1 * H1 * 2)
    small = {"model": "meta-llama/Llama-3.2-1B"}
    plain = _parts(**small)
    assert _parts(**small, modules_to_save=BOTH).weights == plain.weights - tied
    assert _parts(**small, modules_to_save=["embed_tokens"]).weights == plain.weights  # the head still uses it
    # ensure_weight_tying is off by default (unsloth@015bdef models/llama.py get_peft_model): two copies
    assert _parts(**small, modules_to_save=BOTH).adapters - plain.adapters == 2 * tied


@pytest.mark.parametrize(("keys", "stays"), [
    ({"quantize": "int8"}, True),  # load_in_8bit goes to FastModel, which offloads nothing
    ({"model": "microsoft/Phi-3-mini-4k-instruct"}, True),  # phi3 is no FastLlamaModel type
    ({}, False),
])
def test_only_fast_llama_model_types_and_loads_offload(keys, stays):
    plain, both = _parts(**keys), _parts(**keys, modules_to_save=["lm_head"])
    assert (both.weights == plain.weights) is stays


def test_the_note_says_where_the_originals_are():
    notes = [a for a in estimate({**BASE, "modules_to_save": BOTH}).assumptions if a.startswith("modules_to_save")]
    assert notes == ["modules_to_save: whole trained copies of embed_tokens, lm_head in 16-bit (the load's dtype, fp32 "
                     "for an fp16 load), each with its gradient and optimizer state; the frozen originals moved to "
                     "disk before the copy, off the GPU: embed_tokens, lm_head."]


def test_refusals():
    with pytest.raises(ScenarioError) as err:
        estimate({**BASE, "lora_targets": ["all-linear", "embed_tokens"]})
    assert err.value.key == "lora_targets" and "move embed_tokens to modules_to_save" in str(err.value)
    with pytest.raises(ScenarioError) as err:  # 2024.8 cast every copy to fp32, and its head's logits with it
        estimate({**BASE, "framework_version": "unsloth-2024.8", "modules_to_save": ["lm_head"]})
    assert err.value.key == "modules_to_save" and "from its 2024.11 release" in str(err.value)
    assert estimate({**BASE, "lora_targets": ["all-linear", "lm_head"]}).peak.allocated_bytes > 0  # LoRA on the head


def test_fit_offers_lora_only_on_modules_unsloth_would_not_copy_again():
    from vramfit.plan.changes import changes_to_fit

    by = {c.name: c for c in changes_to_fit({**BASE, "modules_to_save": BOTH}, "rtx3060-12gb")}
    # the embedding's copy stays (Unsloth would copy an embed_tokens target again); the head gets LoRA instead
    assert by["adapt-saved-modules"].changes == {"modules_to_save": ["embed_tokens"],
                                                 "lora_targets": ["all-linear", "lm_head"]}
    assert by["adapt-saved-modules"].tradeoff.startswith("a rank-r update of lm_head:")
    assert by["no-saved-modules"].tradeoff == "embed_tokens, lm_head stay frozen: added tokens keep their initial vectors"
    embed = {c.name for c in changes_to_fit({**BASE, "modules_to_save": ["embed_tokens"], "seq_len": 16384},
                                              "rtx3060-12gb")}
    assert "no-saved-modules" in embed and "adapt-saved-modules" not in embed


def test_releases_before_march_2026_copy_an_lm_head_target_too():
    """unsloth@0e0d8fc (2024.12) get_peft_model: ``if module == "lm_head": ... modules_to_save.append("lm_head")``."""
    for release in ("unsloth-2024.12", "unsloth-2024.11"):
        with pytest.raises(ScenarioError) as err:
            estimate({**BASE, "framework_version": release, "lora_targets": ["all-linear", "lm_head"]})
        assert err.value.key == "lora_targets" and f"unsloth ({release}) trains lm_head" in str(err.value)
    assert estimate({**BASE, "lora_targets": ["all-linear", "lm_head"]}).model.num_trainable_params < 10**8


def test_a_tied_note_is_translated():
    from vramfit.web.translate import to_pt, untranslated

    notes = [a for a in estimate({**BASE, "model": "meta-llama/Llama-3.2-1B", "modules_to_save": BOTH}).assumptions
             if a.startswith("modules_to_save")]
    assert notes[0].endswith("off the GPU: embed_tokens=lm_head.")
    assert untranslated(notes) == [] and to_pt(notes[0]).endswith("fora da GPU: embed_tokens=lm_head.")


def test_readme_figures():
    """README, modules_to_save: Unsloth Llama-3.1-8B QLoRA r16 all-linear at 1 x 1,024, without and with both copies."""
    gib = [round(estimate({**BASE, "gradient_checkpointing": ckpt, "modules_to_save": saved}).peak.allocated_bytes
                 / 2**30, 1) for ckpt in ("offload", "full") for saved in ([], BOTH)]
    assert gib == [6.2, 11.8, 6.3, 13.8]
