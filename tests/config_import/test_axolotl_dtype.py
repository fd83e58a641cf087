"""Axolotl's base and precision as axolotl-ai-cloud/axolotl@067b021 resolves them (config_import/axolotl_dtype.py):
adapter lora with load_in_4bit loads unquantized and is cast to fp32 (loaders/model.py l. 712, l. 1015-1023),
resolve_dtype's bf16 'auto' (utils/config/__init__.py l. 156-196), pydantic's lax booleans, torch_compile auto."""

from pathlib import Path

import pytest
import yaml

from vramfit import from_config
from vramfit.errors import ScenarioError

FIX = Path(__file__).parent / "fixtures"


def _write(tmp_path: Path, **keys) -> Path:
    data = yaml.safe_load((FIX / "axolotl_qlora.yml").read_text())
    for key, value in keys.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path = tmp_path / "axolotl.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def _notes(imp) -> dict:
    return {e.key: e.note for e in imp.entries}


def test_lora_with_load_in_4bit_is_an_fp32_lora_not_qlora(tmp_path):
    imp = from_config(_write(tmp_path, adapter="lora"))
    sc = imp.scenario
    assert (sc.method.value, sc.quantize.value, sc.precision.value) == ("lora", "none", "bf16-mixed")
    assert "quantizes only for adapter qlora" in _notes(imp)["load_in_4bit"]


@pytest.mark.parametrize(("keys", "precision"), [({"fp16": True, "bf16": None}, "fp16-mixed"),
                                                 ({"bf16": False}, "fp32")])
def test_lora_with_load_in_4bit_follows_the_trainers_autocast(tmp_path, keys, precision):
    sc = from_config(_write(tmp_path, adapter="lora", **keys)).scenario
    assert (sc.method.value, sc.precision.value) == ("lora", precision)


def test_lora_with_load_in_4bit_under_zero3_stays_16_bit(tmp_path):
    (tmp_path / "ds_z3.json").write_text('{"zero_optimization": {"stage": 3}}')
    imp = from_config(_write(tmp_path, adapter="lora", deepspeed="ds_z3.json"))
    assert (imp.scenario.method.value, imp.scenario.precision.value) == ("lora", "bf16-true")
    assert "in 16 bits" in _notes(imp)["load_in_4bit"]


def test_qlora_is_still_nf4(tmp_path):
    sc = from_config(_write(tmp_path)).scenario
    assert (sc.method.value, sc.quantize.value, sc.precision.value) == ("qlora", "nf4-dq", "bf16-true")


@pytest.mark.parametrize(("keys", "precision"), [
    ({"fp16": True, "bf16": None}, "fp16-true"),  # bf16 auto and fp16: bf16 off (l. 169-170)
    ({"fp16": True}, "fp16-true"),  # the fixture's bf16: auto, written out
    ({"bf16": "false"}, "fp32"), ({"bf16": "no"}, "fp32"), ({"bf16": "0"}, "fp32"),
    ({"bf16": "true", "fp16": "false"}, "bf16-true"),
    ({"bf16": False, "adapter": "lora", "load_in_4bit": None, "load_in_8bit": True}, "fp16-true"),  # int8: fp16
])
def test_precision_follows_resolve_dtype(tmp_path, keys, precision):
    assert from_config(_write(tmp_path, **keys)).scenario.precision.value == precision


def test_full_fine_tuning_in_fp16(tmp_path):
    path = _write(tmp_path, fp16=True, adapter=None, load_in_4bit=None)
    assert from_config(path).scenario.precision.value == "fp16-mixed"


@pytest.mark.parametrize(("value", "targets"), [("false", ["q_proj"]), ("no", ["q_proj"]), ("true", ["all-linear"])])
def test_lora_target_linear_string_is_a_boolean(tmp_path, value, targets):
    sc = from_config(_write(tmp_path, lora_target_linear=value, lora_target_modules=["q_proj"])).scenario
    assert list(sc.lora_targets) == targets


@pytest.mark.parametrize(("value", "packed"), [("false", []), ("true", ["seq_len=4096"])])
def test_sample_packing_string_is_a_boolean(tmp_path, value, packed):
    imp = from_config(_write(tmp_path, sample_packing=value, pad_to_sequence_len=None))
    assert next(e for e in imp.entries if e.key == "sample_packing").becomes == packed


@pytest.mark.parametrize(("value", "gc"), [("false", "none"), ("on", "full"), ("offload", "offload")])
def test_gradient_checkpointing_string_follows_pydantic(tmp_path, value, gc):
    assert from_config(_write(tmp_path, gradient_checkpointing=value)).overrides["gradient_checkpointing"] == gc


@pytest.mark.parametrize(("key", "value", "valid"), [
    ("bf16", "maybe", "valid values: true, false, auto; or f, false, n, no, off, on, t, true, y, yes, 0, 1"),
    ("lora_target_linear", "all", "valid values: true, false; or f, false, n, no, off, on, t, true, y, yes, 0, 1"),
    ("fp16", 2, "valid values: true, false"), ("torch_compile", "fast", "valid values: true, false, auto")])
def test_garbage_switches_are_refused_naming_the_key(tmp_path, key, value, valid):
    with pytest.raises(ScenarioError) as ei:
        from_config(_write(tmp_path, **{key: value}))
    assert f"{key}: " in str(ei.value) and valid in str(ei.value)


@pytest.mark.parametrize(("keys", "compiled"), [({"torch_compile": "auto"}, True), ({"torch_compile": "false"}, False),
                                                ({"torch_compile": "auto", "use_ray": True}, False)])
def test_torch_compile_auto_is_on(tmp_path, keys, compiled):
    assert from_config(_write(tmp_path, **keys)).overrides["compile"] is compiled


_FULL_FSDP = ("base_model: meta-llama/Llama-3.1-8B\nsequence_len: 2048\nmicro_batch_size: 1\n"
              "fsdp: [full_shard, auto_wrap]\nfsdp_config:\n  fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer\n")


@pytest.mark.parametrize("extra, precision", [("bf16: true\n", "bf16-mixed"), ("bfloat16: true\n", "bf16-mixed"),
                                              ("bf16: true\nfsdp_version: 1\n", "bf16-mixed"),
                                              ("bf16: true\nfsdp_version: 2\n", "bf16-true"),
                                              ("bf16: false\nfp16: false\n", "fp32")])
def test_fsdp1_full_fine_tuning_trains_fp32_weights(extra, precision):
    """Axolotl's FSDP1 is accelerate's prepare_model, which upcasts the trainable FlatParameters to fp32 once bf16
    turns mixed precision on (accelerate@16cb6eb accelerator.py l. 1991-2031); its FSDP2 patch does not."""
    from vramfit import estimate
    from vramfit.config_import import from_text

    imp = from_text(_FULL_FSDP + extra, dialect="axolotl")
    sc = imp.scenario.replace(num_gpus=4)
    assert sc.precision.value == precision and sc.method.value == "full"
    if precision == "bf16-mixed":
        assert "prepare_model" in _notes(imp)["bf16"]
        # the fp32 shard of Llama-3.1-8B's 8,030,261,248 weights over 4 GPUs, 4 bytes each (2 under bf16-true)
        true = estimate(sc.replace(precision="bf16-true"))
        assert estimate(sc).component("master_weights") == 4 * 8_030_261_248 // 4
        assert true.component("weights") == 2 * 8_030_261_248 // 4
        doc = " ".join((Path(__file__).parents[2] / "docs" / "import-config.md").read_text(encoding="utf-8").split())
        mixed_gib, true_gib = estimate(sc).component("master_weights") / 2**30, true.component("weights") / 2**30
        assert f"{mixed_gib:.1f} GiB of fp32 weight shards, not {true_gib:.1f} GiB of bf16 ones" in doc
