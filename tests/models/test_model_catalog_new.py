"""Issue 16's catalog additions: vision-language families and the small/current text models.

Every count is exact against transformers building the stored ``config`` on the meta device (the
method of tests/models/recount_params.py, run here so a wrong config or a transformers change fails),
and within the last digit of the checkpoint's published total (test_model_catalog.py checks that rounding
for every entry; the published figures are repeated here for the families the issue names).
"""

from __future__ import annotations

import pytest

from vramfit.models import load_catalog, resolve_model, search_models

BY_ID = {e["id"]: e for e in load_catalog()}

# id -> (exact count, transformers 5.24.0 on the meta device; the published rounded total)
ADDED = {
    "Qwen/Qwen2-VL-2B-Instruct": (2_208_985_600, "2.21B"),
    "Qwen/Qwen2-VL-7B-Instruct": (8_291_375_616, "8.29B"),
    "Qwen/Qwen2.5-VL-32B-Instruct": (33_452_718_336, "33.5B"),
    "Qwen/Qwen2.5-VL-72B-Instruct": (73_410_777_344, "73.4B"),
    "Qwen/Qwen3-235B-A22B": (235_093_634_560, "235B"),
    "Qwen/Qwen3-VL-2B-Instruct": (2_127_532_032, "2.13B"),
    "Qwen/Qwen3-VL-4B-Instruct": (4_437_815_808, "4.44B"),
    "Qwen/Qwen3-VL-8B-Instruct": (8_767_123_696, "8.77B"),
    "Qwen/Qwen3-VL-32B-Instruct": (33_357_390_064, "33.4B"),
    "Qwen/Qwen3-VL-30B-A3B-Instruct": (31_070_754_032, "31.1B"),
    "Qwen/Qwen3-VL-235B-A22B-Instruct": (235_670_022_896, "236B"),
    "llava-hf/llava-1.5-7b-hf": (7_063_427_072, "7.06B"),
    "llava-hf/llava-1.5-13b-hf": (13_351_494_656, "13.4B"),
    "llava-hf/llava-v1.6-mistral-7b-hf": (7_566_747_648, "7.57B"),
    "google/gemma-3-4b-it": (4_300_079_472, "4.3B"),
    "google/gemma-3-12b-it": (12_187_325_040, "12.2B"),
    "google/gemma-3-27b-it": (27_432_406_640, "27.4B"),
    "meta-llama/Llama-3.2-11B-Vision": (10_670_220_835, "10.7B"),
    "meta-llama/Llama-3.2-90B-Vision": (88_593_355_323, "88.6B"),
    "OpenGVLab/InternVL3-1B-hf": (938_193_024, "0.9B"),
    "OpenGVLab/InternVL3-2B-hf": (2_088_957_440, "2.09B"),
    "OpenGVLab/InternVL3-8B-hf": (7_944_373_760, "7.94B"),
    "OpenGVLab/InternVL3-14B-hf": (15_117_256_704, "15.1B"),
    "OpenGVLab/InternVL3-38B-hf": (38_388_164_992, "38.4B"),
    "OpenGVLab/InternVL3-78B-hf": (78_408_318_336, "78.4B"),
    "HuggingFaceTB/SmolVLM-Instruct": (2_246_272_880, "2.25B"),
    "HuggingFaceTB/SmolVLM-256M-Instruct": (256_484_928, "256M"),
    "HuggingFaceTB/SmolVLM2-2.2B-Instruct": (2_246_784_880, "2.25B"),
    "HuggingFaceTB/SmolVLM2-500M-Video-Instruct": (507_482_304, "508M"),
    "HuggingFaceM4/Idefics3-8B-Llama3": (8_462_086_384, "8.46B"),
    "microsoft/Phi-4-mini-instruct": (3_836_021_760, "3.84B"),
    "HuggingFaceTB/SmolLM2-135M": (134_515_008, "135M"),
    "HuggingFaceTB/SmolLM2-360M": (361_821_120, "362M"),
    "HuggingFaceTB/SmolLM2-1.7B": (1_711_376_384, "1.71B"),
    "HuggingFaceTB/SmolLM3-3B": (3_075_098_624, "3.08B"),
    "ibm-granite/granite-3.1-2b-instruct": (2_533_531_648, "2.53B"),
    "ibm-granite/granite-3.1-8b-instruct": (8_170_848_256, "8.17B"),
    "ibm-granite/granite-3.3-8b-instruct": (8_170_864_640, "8.17B"),
    "ibm-granite/granite-3.1-3b-a800m-instruct": (3_298_793_472, "3.3B"),
}
VISION = [m for m in ADDED if "vision_config" in BY_ID[m]["config"]]


@pytest.mark.parametrize("model_id", ADDED)
def test_added_entry_counts_and_published_figure(model_id):
    entry = BY_ID[model_id]
    count, rounded = ADDED[model_id]
    assert entry["published_params"] == count
    assert entry["published_params_rounded"] == rounded
    assert entry["source"] == f"https://huggingface.co/{model_id}/blob/main/config.json"


@pytest.mark.parametrize("model_id", ADDED)
def test_added_entry_counts_exactly_on_the_meta_device(model_id):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from recount_params import count_transformers  # tests/models/, beside this file

    assert count_transformers(BY_ID[model_id]["config"]) == ADDED[model_id][0]


@pytest.mark.parametrize("model_id", ADDED)
def test_added_entry_estimates_offline(model_id, monkeypatch):
    from vramfit import estimate

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = estimate(model=model_id, method="lora")
    assert result.model.id == model_id
    resolved = resolve_model(model_id)
    assert resolved.origin == "catalog"
    assert resolved.spec.num_params == ADDED[model_id][0]
    # LoRA on bf16 weights: the base weights alone are 2 bytes a parameter, and the peak holds them
    assert result.peak.device_bytes > 2 * ADDED[model_id][0]


@pytest.mark.parametrize("model_id", VISION)
def test_vision_entries_count_their_vision_tower(model_id):
    spec = resolve_model(model_id).spec
    assert 0 < spec.vision_params < spec.num_params


def test_vision_tower_figures():
    # the Qwen2-VL ViT is Qwen2.5-VL's predecessor (LayerNorm, fc1/fc2 of 5120): 675,759,104 with its merger,
    # the language model the rest (Qwen2-7B's layout); Gemma 3's SigLIP tower is the one of
    # test_model_new_families.py's 4B figure, its projector sized by each text width
    qwen = resolve_model("Qwen/Qwen2-VL-7B-Instruct").spec
    assert qwen.vision_params == 675_759_104
    assert qwen.num_params - qwen.vision_params == 7_615_616_512
    gemma = {m: resolve_model(f"google/gemma-3-{m}-it").spec.vision_params for m in ("4b", "12b", "27b")}
    assert gemma == {"4b": 419_816_304, "12b": 421_290_864, "27b": 423_060_336}


def test_gemma3_instruct_ids_are_the_whole_multimodal_checkpoint():
    # the -it ids were aliases of the text-only -pt entries; they are now the multimodal checkpoints
    assert resolve_model("unsloth/gemma-3-4b-it").id == "google/gemma-3-4b-it"
    text_only = resolve_model("google/gemma-3-4b-pt").spec
    assert resolve_model("google/gemma-3-4b-it").spec.num_params - text_only.num_params == 419_816_304


def test_qwen3_235b_active_parameters():
    # Qwen3 model card: 235B total, 22B activated (8 of 128 experts a token, 94 layers)
    spec = resolve_model("Qwen/Qwen3-235B-A22B").spec
    assert spec.active_params_per_token == 22_190_763_520
    assert BY_ID["Qwen/Qwen3-235B-A22B"]["published_active_params_rounded"] == "22B"


def test_granite_moe_active_parameters():
    # "3b-a800m": 8 of 40 experts a token, about 800M active without the embedding lookup
    spec = resolve_model("ibm-granite/granite-3.1-3b-a800m-instruct").spec
    assert (spec.num_experts, spec.num_experts_per_tok) == (40, 8)
    assert spec.active_params_per_token - spec.embedding_params == 807_372_288


def test_moe_vision_language_entries_have_experts():
    for model_id in ("Qwen/Qwen3-VL-30B-A3B-Instruct", "Qwen/Qwen3-VL-235B-A22B-Instruct"):
        spec = resolve_model(model_id).spec
        assert spec.num_experts == 128


def test_search_finds_the_new_families():
    assert {e["id"] for e in search_models("qwen2-vl")} == {"Qwen/Qwen2-VL-2B-Instruct", "Qwen/Qwen2-VL-7B-Instruct"}
    assert len(search_models("internvl3")) == 6  # 1B, 2B, 8B, 14B, 38B, 78B
    assert {e["id"] for e in search_models("smollm2")} == {
        "HuggingFaceTB/SmolLM2-135M", "HuggingFaceTB/SmolLM2-360M", "HuggingFaceTB/SmolLM2-1.7B"}


STORED = [e["id"] for e in load_catalog() if "spec" in e]


def test_entries_without_a_torch_free_reader_store_their_spec():
    from vramfit.models.hf_config import SUPPORTED_MODEL_TYPES

    assert len(STORED) == 26
    assert all(BY_ID[m]["config"]["model_type"] not in SUPPORTED_MODEL_TYPES for m in STORED)
    assert not [e["id"] for e in load_catalog() if "spec" not in e
                and e["config"]["model_type"] not in SUPPORTED_MODEL_TYPES]


@pytest.mark.parametrize("model_id", STORED)
def test_stored_spec_is_the_live_reading(model_id):
    # a reader that changes (from_modules.py, hf_vlm.py) makes this fail: recount_params.py --write refreshes it
    pytest.importorskip("transformers")
    from vramfit.models import spec_from_hf_config
    from vramfit.models.spec_data import spec_from_data, spec_to_data

    live = spec_from_hf_config(BY_ID[model_id]["config"])
    assert spec_to_data(live) == BY_ID[model_id]["spec"]
    stored = spec_from_data(BY_ID[model_id]["spec"])
    assert stored == live and stored.vision == live.vision and stored.extra == live.extra


@pytest.fixture
def without_torch(monkeypatch):
    from vramfit.models import catalog

    for name in ("torch", "transformers"):
        monkeypatch.setitem(__import__("sys").modules, name, None)
    catalog.catalog_spec.cache_clear()
    yield
    catalog.catalog_spec.cache_clear()


@pytest.mark.parametrize("model_id", ["Qwen/Qwen2-VL-7B-Instruct", "meta-llama/Llama-3.2-11B-Vision",
                                      "HuggingFaceTB/SmolLM3-3B", "ibm-granite/granite-3.1-8b-instruct"])
def test_catalog_entries_estimate_without_torch(model_id, without_torch):
    from vramfit import estimate
    from vramfit.errors import ModelError
    from vramfit.models import spec_from_hf_config

    with pytest.raises(ModelError, match="sim"):  # the reader itself needs transformers ...
        spec_from_hf_config(BY_ID[model_id]["config"])
    assert resolve_model(model_id).spec.num_params == ADDED[model_id][0]  # ... the catalog does not
    assert estimate(model=model_id, method="qlora").model.num_params == ADDED[model_id][0]


def test_large_vision_entries_share_their_smaller_siblings_towers():
    """InternVL3-38B and -78B carry the same InternViT-6B (45 layers of 3200, 5,536,496,000 parameters before the
    projector's LayerNorm and linears), their projectors sized by the text width; Llama 3.2 90B Vision carries
    11B's tower (863,567,379), its projector Linear(7680, 8192) instead of Linear(7680, 4096)."""
    def tower(model_id: str) -> int:
        spec = resolve_model(model_id).spec
        return spec.vision_params - sum(x.params for x in spec.vision.projector)

    assert tower("OpenGVLab/InternVL3-38B-hf") == tower("OpenGVLab/InternVL3-78B-hf") == 5_536_496_000 + 2 * 12_800
    assert tower("meta-llama/Llama-3.2-90B-Vision") == tower("meta-llama/Llama-3.2-11B-Vision") == 863_567_379
    big = resolve_model("meta-llama/Llama-3.2-90B-Vision").spec
    assert sum(x.params for x in big.vision.projector) == 7680 * 8192 + 8192
    assert big.vision.cross_attention_layers == 20


def test_models_command_lists_every_entry_without_torch(without_torch):
    # `vramfit models` read the shape columns with the live reader, which needs transformers: on the base install
    # every listing that held a vision or Granite entry failed ("unsupported model_type 'mllama'")
    from typer.testing import CliRunner

    from vramfit.cli.main import app

    r = CliRunner().invoke(app, ["models"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert f"{len(load_catalog())} catalog models" in r.output
    row = next(line for line in r.output.splitlines() if "Llama-3.2-11B-Vision " in line)
    spec = resolve_model("meta-llama/Llama-3.2-11B-Vision").spec
    assert f"{spec.hidden_size}" in row and f"{spec.vocab_size:,}" in row


def test_catalog_lookups_never_import_torch():
    # the stored reading is used even where torch is installed: one answer everywhere, and no torch import
    # (seconds, and bitsandbytes' import-time warnings on stderr) for `vramfit models` or a catalog estimate
    import subprocess
    import sys

    code = ("import sys; from typer.testing import CliRunner; from vramfit.cli.main import app; "
            "r = CliRunner().invoke(app, ['models', 'vision']); assert r.exit_code == 0, r.output; "
            "from vramfit import estimate; estimate(model='Qwen/Qwen3-VL-8B-Instruct', method='lora'); "
            "print(sorted(m for m in ('torch', 'transformers', 'bitsandbytes') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
