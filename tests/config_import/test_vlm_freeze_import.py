"""A trainer's own tower-freezing switch, read (a drive of the product, 2026-12-07): LLaMA-Factory's
freeze_vision_tower and freeze_multi_modal_projector default to True (finetuning_args.py), and
find_all_linear_modules(model, freeze_vision_tower) keeps lora_target all off the tower; the import had trained it
(25.9 M adapters on Qwen2.5-VL-7B against 20.2 M on its language model). A text model the catalog knows gets no
freeze switch (the estimate would say it is ignored), from LLaMA-Factory or ms-swift."""

from __future__ import annotations

from vramfit import estimate, from_config

VL = """model_name_or_path: Qwen/Qwen2.5-VL-7B-Instruct
stage: sft
finetuning_type: {ft}
lora_target: all
cutoff_len: 2048
per_device_train_batch_size: 1
bf16: true
"""


def _imp(tmp_path, text: str, name: str = "lf.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return from_config(path)


def test_llamafactory_freezes_a_vision_models_tower_by_default(tmp_path):
    lora = _imp(tmp_path, VL.format(ft="lora"))
    assert lora.scenario.freeze_vision.value == "yes"
    r = estimate({**lora.scenario.to_dict(), "images_per_sample": 1})
    trained = estimate({**lora.scenario.to_dict(), "images_per_sample": 1, "freeze_vision": "no"})
    assert r.model.num_trainable_params == 20_185_088 < trained.model.num_trainable_params
    assert not any(n.startswith("freeze_vision") for n in r.assumptions)
    full = _imp(tmp_path, VL.format(ft="full").replace("lora_target: all\n", "") + "freeze_vision_tower: false\n")
    assert full.scenario.freeze_vision.value == "no"
    full_split = _imp(tmp_path, VL.format(ft="full").replace("lora_target: all\n", "")
                      + "freeze_multi_modal_projector: false\n")
    note = next(e.note for e in full_split.entries if e.key == "freeze_multi_modal_projector")
    assert note == "the projector frozen apart from the tower: counted with freeze_vision_tower"
    # under LoRA find_all_linear_modules leaves the projector out whatever the switch says (misc.py l. 37-38)
    lora_split = _imp(tmp_path, VL.format(ft="lora") + "freeze_multi_modal_projector: false\n")
    entry = next(e for e in lora_split.entries if e.key == "freeze_multi_modal_projector")
    assert (entry.kind, entry.note) == ("ignored", "unused with adapters: lora_target all leaves the projector out")


def test_llamafactorys_image_cap_is_said_with_the_size_to_give(tmp_path):
    imp = _imp(tmp_path, VL.format(ft="lora"))
    note = next(e.note for e in imp.entries if e.key == "image_max_pixels")
    assert note.startswith("each image is scaled to at most 589,824 pixels before the processor") and "768 x 768" in note
    own = _imp(tmp_path, VL.format(ft="lora") + "image_max_pixels: 262144\n")
    assert "at most 262,144 pixels" in next(e.note for e in own.entries if e.key == "image_max_pixels")


def test_a_catalog_text_model_gets_no_freeze_switch(tmp_path):
    text = _imp(tmp_path, VL.format(ft="lora").replace("Qwen/Qwen2.5-VL-7B-Instruct", "meta-llama/Llama-3.1-8B"))
    assert text.scenario.freeze_vision.value == "auto"
    assert not [e for e in text.entries if e.key == "image_max_pixels"]
    assert not any(n.startswith("freeze_vision") for n in estimate(text.scenario).assumptions)
    swift = _imp(tmp_path, "swift sft --model meta-llama/Llama-3.1-8B --train_type lora\n", "run.sh")
    assert swift.scenario.freeze_vision.value == "auto"
