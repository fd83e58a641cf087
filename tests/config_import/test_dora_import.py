"""DoRA switched on in each framework's config imports as ``dora: true`` (estimate/dora.py), and the estimate then
counts it: LLaMA-Factory ``use_dora``, Axolotl ``peft_use_dora``, TRL ``use_dora``, ms-swift ``use_dora`` and PEFT's
own ``adapter_config.json``, torchtune's ``model.use_dora`` (its DoRALinear)."""

from pathlib import Path

import pytest
import yaml

from vramfit import from_config
from vramfit.estimate import estimate

FIX = Path(__file__).parent / "fixtures"


def _write(tmp_path: Path, fixture: str, **keys) -> Path:
    data = yaml.safe_load((FIX / fixture).read_text())
    data.update(keys)
    path = tmp_path / fixture
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(("fixture", "key"), [
    ("llamafactory_qlora.yaml", "use_dora"), ("axolotl_qlora.yml", "peft_use_dora"),
    ("trl_sft_qlora.yaml", "use_dora"), ("swift_sft.yaml", "use_dora")])
def test_dora_switch_imports(tmp_path, fixture, key):
    on = from_config(_write(tmp_path, fixture, **{key: True}))
    off = from_config(_write(tmp_path, fixture, **{key: False}))
    assert on.scenario.dora is True and off.scenario.dora is False
    assert any(e.key == key and "dora=True" in e.becomes for e in on.entries)
    # the magnitude vectors are trained: one value per output of each adapted linear
    assert estimate(on.scenario).model.num_trainable_params > estimate(off.scenario).model.num_trainable_params


def test_peft_adapter_config_companion(tmp_path):
    peft = tmp_path / "adapter_config.json"
    peft.write_text('{"peft_type": "LORA", "r": 32, "lora_alpha": 16, "target_modules": "all-linear", '
                    '"use_dora": true}')
    imported = from_config(FIX / "trl_sft_qlora.yaml", peft)
    assert imported.scenario.dora is True


def test_torchtune_dora(tmp_path):
    data = yaml.safe_load((FIX / "torchtune_qlora.yaml").read_text())
    data["model"]["use_dora"] = True
    path = tmp_path / "tt.yaml"
    path.write_text(yaml.safe_dump(data))
    imported = from_config(path)
    assert imported.scenario.dora is True and imported.scenario.framework.value == "torchtune"
    assert any(e.key == "model.use_dora" and "dora=True" in e.becomes for e in imported.entries)


def test_a_null_use_dora_is_read_as_off(tmp_path):
    # TRL's ModelConfig field left null: read (not an unknown key), DoRA off
    assert from_config(_write(tmp_path, "trl_sft_qlora.yaml", use_dora=None)).scenario.dora is False
