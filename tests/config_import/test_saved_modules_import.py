"""PEFT modules_to_save in each framework's config imports as ``modules_to_save`` (estimate/saved_modules.py): Axolotl
``lora_modules_to_save``, TRL ``lora_modules_to_save``, ms-swift ``modules_to_save``, LLaMA-Factory
``additional_target`` (a comma-separated string) and PEFT's own ``adapter_config.json``; other families' names for the
embedding and head map to the scenario's two, anything else is reported as not counted."""

from pathlib import Path

import pytest
import yaml

from vramfit import from_config
from vramfit.estimate import estimate
from vramfit.models import resolve_model

FIX = Path(__file__).parent / "fixtures"


def _write(tmp_path: Path, fixture: str, **keys) -> Path:
    data = yaml.safe_load((FIX / fixture).read_text())
    data.update(keys)
    data.pop("deepspeed", None)  # ZeRO places the copies' gradients and states where it is not modelled: refused
    path = tmp_path / fixture
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(("fixture", "key", "value"), [
    ("axolotl_qlora.yml", "lora_modules_to_save", ["embed_tokens", "lm_head"]),
    ("trl_sft_qlora.yaml", "lora_modules_to_save", ["embed_tokens", "lm_head"]),
    ("swift_sft.yaml", "modules_to_save", ["model.embed_tokens", "lm_head"]),
    ("llamafactory_qlora.yaml", "additional_target", "embed_tokens,lm_head")])
def test_modules_to_save_imports(tmp_path, fixture, key, value):
    on = from_config(_write(tmp_path, fixture, **{key: value}))
    off = from_config(_write(tmp_path, fixture))
    assert on.scenario.modules_to_save == ("embed_tokens", "lm_head") and off.scenario.modules_to_save == ()
    assert any(e.key == key and e.kind == "read" and any(b.startswith("modules_to_save=") for b in e.becomes)
               for e in on.entries)
    # two whole trained copies: the trainable count grows by the embedding and the head
    grown = estimate(on.scenario).model.num_trainable_params - estimate(off.scenario).model.num_trainable_params
    spec = resolve_model(off.scenario.model).spec
    assert grown == spec.embedding_params + (spec.lm_head_params or spec.embedding_params)


def test_other_modules_are_reported_not_counted(tmp_path):
    from vramfit.web.translate import to_pt, untranslated

    imported = from_config(_write(tmp_path, "axolotl_qlora.yml", lora_modules_to_save=["lm_head", "score"]))
    assert imported.scenario.modules_to_save == ("lm_head",)
    entry = next(e for e in imported.entries if e.key == "lora_modules_to_save")
    assert entry.kind == "not modelled yet" and entry.note == "trained copies of score: not counted (embed_tokens and " \
        "lm_head are)"
    assert untranslated([entry.note]) == [] and to_pt(entry.note).startswith("cópias treinadas de score: não contadas")
    # empty names of a comma-separated string are dropped, not reported
    blank = from_config(_write(tmp_path, "trl_sft_qlora.yaml", lora_modules_to_save=" , lm_head, "))
    assert blank.scenario.modules_to_save == ("lm_head",)
    assert all(e.kind != "not modelled yet" for e in blank.entries if e.key == "lora_modules_to_save")


def test_swift_all_embedding_is_the_token_embedding(tmp_path):
    """ms-swift's get_modules_to_save replaces 'all-embedding' by the model's nn.Embedding modules; 'all-norm' (the
    norms) is a copy vramfit does not count."""
    imported = from_config(_write(tmp_path, "swift_sft.yaml", modules_to_save=["all-embedding", "all-norm"]))
    assert imported.scenario.modules_to_save == ("embed_tokens",)
    entry = next(e for e in imported.entries if e.key == "modules_to_save")
    assert "all-norm: not counted" in entry.note


def test_family_names_map_to_the_embedding_and_head(tmp_path):
    imported = from_config(_write(tmp_path, "trl_sft_qlora.yaml", lora_modules_to_save=["wte", "embed_out"]))
    assert imported.scenario.modules_to_save == ("embed_tokens", "lm_head")


def test_peft_adapter_config_companion(tmp_path):
    peft = tmp_path / "adapter_config.json"
    peft.write_text('{"peft_type": "LORA", "r": 32, "lora_alpha": 16, "target_modules": "all-linear", '
                    '"modules_to_save": ["lm_head"]}')
    assert from_config(FIX / "trl_sft_qlora.yaml", peft).scenario.modules_to_save == ("lm_head",)


def test_llamafactory_resize_vocab_trains_the_embedding_and_head(tmp_path):
    """LLaMA-Factory's _setup_lora_tuning makes the embeddings' modules the additional_target when resize_vocab is on
    and none is given; a given additional_target wins."""
    resized = from_config(_write(tmp_path, "llamafactory_qlora.yaml", resize_vocab=True))
    assert resized.scenario.modules_to_save == ("embed_tokens", "lm_head")
    assert any(e.key == "resize_vocab" and "modules_to_save=" in " ".join(e.becomes) for e in resized.entries)
    given = from_config(_write(tmp_path, "llamafactory_qlora.yaml", resize_vocab=True, additional_target="lm_head"))
    assert given.scenario.modules_to_save == ("lm_head",)
    assert from_config(_write(tmp_path, "llamafactory_qlora.yaml", resize_vocab=False)).scenario.modules_to_save == ()


def test_llamafactory_resize_vocab_under_full_fine_tuning_is_read_as_ignored(tmp_path):
    data = yaml.safe_load((FIX / "llamafactory_full_ds2.yaml").read_text())
    data["resize_vocab"] = True
    data.pop("deepspeed", None)
    path = tmp_path / "full.yaml"
    path.write_text(yaml.safe_dump(data))
    entry = next(e for e in from_config(path).entries if e.key == "resize_vocab")
    assert entry.kind == "ignored" and "added rows are not counted" in entry.note
