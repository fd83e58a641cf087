"""The bundled catalog: every entry's exact parameter count, its published figure, its data."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from vramfit.models import load_catalog, resolve_model, search_models, spec_from_hf_config

ENTRIES = load_catalog()
BY_ID = {e["id"]: e for e in ENTRIES}
each_entry = pytest.mark.parametrize("entry", ENTRIES, ids=[e["id"] for e in ENTRIES])

REQUIRED = [
    "meta-llama/Llama-2-7b-hf", "meta-llama/Llama-2-13b-hf", "meta-llama/Llama-2-70b-hf",
    "codellama/CodeLlama-34b-hf", "meta-llama/Meta-Llama-3-8B", "meta-llama/Meta-Llama-3-70B",
    "meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-70B", "meta-llama/Llama-3.1-405B",
    "meta-llama/Llama-3.2-1B", "meta-llama/Llama-3.2-3B", "mistralai/Mistral-7B-v0.1",
    "mistral-community/Mistral-7B-v0.2", "mistralai/Mistral-7B-v0.3",
    "mistralai/Mixtral-8x7B-v0.1", "mistralai/Mixtral-8x22B-v0.1", "Qwen/Qwen-1_8B",
    "Qwen/Qwen-7B", "Qwen/Qwen-14B", "Qwen/Qwen-72B", "Qwen/Qwen2.5-0.5B", "Qwen/Qwen2.5-1.5B",
    "Qwen/Qwen2.5-3B", "Qwen/Qwen2.5-7B", "Qwen/Qwen2.5-14B", "Qwen/Qwen2.5-32B",
    "Qwen/Qwen2.5-72B", "Qwen/Qwen3-0.6B", "Qwen/Qwen3-1.7B", "Qwen/Qwen3-4B", "Qwen/Qwen3-8B",
    "Qwen/Qwen3-14B", "Qwen/Qwen3-32B", "Qwen/Qwen3-30B-A3B", "google/gemma-2b",
    "google/gemma-7b", "google/gemma-2-2b", "google/gemma-2-9b", "google/gemma-2-27b",
    "google/gemma-3-1b-pt", "google/gemma-3-4b-pt", "google/gemma-3-12b-pt",
    "google/gemma-3-27b-pt", "microsoft/phi-1_5", "microsoft/phi-2",
    "microsoft/Phi-3-mini-4k-instruct", "microsoft/Phi-3-medium-4k-instruct", "microsoft/phi-4",
    "tiiuae/falcon-7b", "tiiuae/falcon-40b", "stabilityai/stablelm-base-alpha-3b",
    "TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T", "01-ai/Yi-34B",
    "allenai/OLMo-2-1124-7B", "bigscience/bloomz-7b1",
]
# model names used by the measured-data file: each must resolve straight from the catalog
MEASURED = [
    "meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.2-3B-Instruct", "microsoft/phi-1_5",
    "stabilityai/stablelm-base-alpha-3b", "meta-llama/Llama-2-7b-hf", "meta-llama/Llama-2-13b-hf",
    "meta-llama/Llama-2-70b-hf", "bigscience/bloomz-7b1",
]


def rounded_value(text: str) -> tuple[Decimal, Decimal]:
    """``"6.74B"`` -> (6.74e9, 0.01e9): the figure and one unit of its last digit."""
    match = re.fullmatch(r"(\d+)(?:\.(\d+))?([MBT])", text)
    assert match, f"unparseable published figure {text!r}"
    scale = Decimal(10) ** {"M": 6, "B": 9, "T": 12}[match.group(3)]
    decimals = len(match.group(2) or "")
    return Decimal(text[:-1]) * scale, scale / (Decimal(10) ** decimals)


@each_entry
def test_spec_counts_exactly_the_published_params(entry):
    assert spec_from_hf_config(entry["config"]).num_params == entry["published_params"]


@each_entry
def test_published_rounded_figure_agrees(entry):
    value, unit = rounded_value(entry["published_params_rounded"])
    counted = entry["published_params"] + entry.get("published_params_rounded_offset", 0)
    # rounded or truncated to its last digit
    assert abs(counted - value) <= unit, (counted, entry["published_params_rounded"])
    assert entry["published_params_rounded_source"]


@each_entry
def test_entry_is_complete(entry):
    for key in ("id", "display_name", "family", "aliases", "source", "published_params",
                "published_params_source", "published_params_rounded", "config"):
        assert entry.get(key) not in (None, ""), key
    assert entry["source"].startswith("https://huggingface.co/")
    assert entry["source"].endswith("/config.json")
    assert isinstance(entry["published_params"], int)
    config = entry["config"]
    assert config["model_type"] and config["architectures"]
    for key in ("hidden_size", "num_attention_heads", "vocab_size"):
        # multimodal configs (Llama 4) keep the language model's shape in text_config; Gemma 3's lists only
        # what differs from Gemma3TextConfig's defaults (the reader's _GEMMA3_TEXT_DEFAULTS)
        assert (key in config or key in config.get("text_config", {})
                or config["model_type"] in ("bloom", "gemma3")), key


def test_required_entries_present():
    missing = [m for m in REQUIRED if m not in BY_ID]
    assert not missing


def test_ids_and_aliases_are_unique():
    seen: dict[str, str] = {}
    for entry in ENTRIES:
        for name in (entry["id"], *entry["aliases"]):
            assert name.lower() not in seen, (name, seen.get(name.lower()), entry["id"])
            seen[name.lower()] = entry["id"]


@pytest.mark.parametrize("name", MEASURED)
def test_measured_data_models_resolve_from_catalog(name):
    resolved = resolve_model(name)
    assert resolved.origin == "catalog"
    assert resolved.spec.num_params == BY_ID[resolved.id]["published_params"]


@pytest.mark.parametrize(
    ("model_id", "active", "rounded"),
    [
        ("mistralai/Mixtral-8x7B-v0.1", 12_879_925_248, "12.9B"),
        ("mistralai/Mixtral-8x22B-v0.1", 39_152_031_744, "39B"),
        ("Qwen/Qwen3-30B-A3B", 3_353_032_704, "3.3B"),
    ],
)
def test_moe_active_params(model_id, active, rounded):
    spec = spec_from_hf_config(BY_ID[model_id]["config"])
    assert spec.active_params_per_token == active
    value, unit = rounded_value(rounded)
    assert abs(active - value) <= unit
    assert BY_ID[model_id]["published_active_params_rounded"] == rounded


def test_search_models():
    assert {e["id"] for e in search_models("qwen3")} >= {"Qwen/Qwen3-8B", "Qwen/Qwen3-30B-A3B"}
    assert [e["id"] for e in search_models("LLAMA-2-7B-CHAT")] == ["meta-llama/Llama-2-7b-hf"]
    assert {e["id"] for e in search_models("gemma-3")} == {
        "google/gemma-3-1b-pt", "google/gemma-3-4b-pt", "google/gemma-3-12b-pt",
        "google/gemma-3-27b-pt", "google/gemma-3-4b-it", "google/gemma-3-12b-it", "google/gemma-3-27b-it",
    }
    assert search_models("falcon") == [BY_ID["tiiuae/falcon-7b"], BY_ID["tiiuae/falcon-40b"]]
    assert search_models("no-such-model-anywhere") == []
    assert len(search_models("")) == len(ENTRIES)


def test_catalog_is_cached_and_complete():
    assert load_catalog() is ENTRIES
    assert len(ENTRIES) >= len(REQUIRED)


@pytest.mark.parametrize(
    ("model_id", "active_matmul", "rounded"),
    [
        # gpt-oss model card table 1 counts the unembedding but not the embedding lookup as active
        ("openai/gpt-oss-20b", 3_608_307_264, "3.6B"),
        ("openai/gpt-oss-120b", 5_132_849_472, "5.1B"),
        ("deepseek-ai/DeepSeek-V3", 36_625_603_584, "37B"),
        # Llama 4: the language model's per-token parameters (the vision tower runs on images only)
        ("meta-llama/Llama-4-Scout-17B-16E", 16_138_408_960, "17B"),
        ("meta-llama/Llama-4-Maverick-17B-128E", 16_150_205_440, "17B"),
    ],
)
def test_new_moe_active_params_without_embedding_lookup(model_id, active_matmul, rounded):
    spec = spec_from_hf_config(BY_ID[model_id]["config"])
    assert spec.active_params_per_token - spec.embedding_params - spec.vision_params == active_matmul
    value, unit = rounded_value(rounded)
    assert abs(active_matmul - value) <= unit
    assert BY_ID[model_id]["published_active_params_rounded"] == rounded


NEW_FAMILIES = [
    "mistralai/Mistral-Nemo-Base-2407", "mistralai/Mistral-Small-24B-Base-2501",
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",  # untied head: not Qwen2.5-1.5B's architecture
    "deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-R1", "openai/gpt-oss-20b", "openai/gpt-oss-120b",
    "Qwen/Qwen2.5-VL-3B-Instruct", "Qwen/Qwen2.5-VL-7B-Instruct",
    "meta-llama/Llama-4-Scout-17B-16E", "meta-llama/Llama-4-Maverick-17B-128E",
]


# distills whose architecture is exactly a base model's: aliases of that entry (same count)
DISTILL_ALIASES = {
    "deepseek-ai/DeepSeek-R1-Distill-Llama-8B": 8_030_261_248,
    "deepseek-ai/DeepSeek-R1-Distill-Llama-70B": 70_553_706_496,
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B": 7_615_616_512,
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B": 14_770_033_664,
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B": 32_763_876_352,
}


def test_new_family_entries_present():
    assert [m for m in NEW_FAMILIES if m not in BY_ID] == []


@pytest.mark.parametrize(("name", "count"), DISTILL_ALIASES.items())
def test_distills_resolve_to_their_base_architecture(name, count):
    # counts from transformers 5.24.0 on the meta device of the distill's own config.json
    resolved = resolve_model(name)
    assert resolved.origin == "catalog"
    assert resolved.spec.num_params == count


def test_vision_language_entries_count_the_vision_tower():
    # Qwen2.5-VL-7B: 8,292,166,656 in all (the model card's 8.29B); the language model alone is
    # Qwen2.5-7B's layout with 152064 vocab: the rest is the 32-block ViT and its patch merger
    spec = spec_from_hf_config(BY_ID["Qwen/Qwen2.5-VL-7B-Instruct"]["config"])
    assert spec.vision_params == 676_550_144
    assert spec.num_params - spec.vision_params == 7_615_616_512


@each_entry
def test_alias_context_names_its_own_aliases_with_a_source(entry):
    """An alias whose config.json states another context is one of the entry's aliases, with the source beside it."""
    contexts = entry.get("alias_context", {})
    assert set(contexts) <= set(entry["aliases"])
    assert not contexts or entry["alias_context_source"]
    assert all(isinstance(n, int) and n > 0 for n in contexts.values())


def test_instruct_alias_keeps_its_own_context():
    """Qwen2.5-7B-Instruct ships max_position_embeddings 32,768 (its model card) beside the base model's 131,072."""
    from vramfit.estimate import estimate

    base, instruct = resolve_model("Qwen/Qwen2.5-7B"), resolve_model("qwen/qwen2.5-7b-instruct")
    assert (base.spec.max_position_embeddings, instruct.spec.max_position_embeddings) == (131072, 32768)
    assert instruct.config["max_position_embeddings"] == 32768 and base.config["max_position_embeddings"] == 131072
    assert instruct.spec.num_params == base.spec.num_params
    # a distill with the base model's config keeps 131,072
    assert resolve_model("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B").spec.max_position_embeddings == 131072
    sc = {"method": "lora", "seq_len": 65536, "micro_batch_size": 1, "gradient_checkpointing": "full"}
    past = [a for a in estimate({**sc, "model": "Qwen/Qwen2.5-7B-Instruct"}).assumptions if "past the model's context" in a]
    assert len(past) == 1 and "32,768" in past[0]
    assert not [a for a in estimate({**sc, "model": "Qwen/Qwen2.5-7B"}).assumptions if "past the model's context" in a]


@pytest.mark.parametrize(("name", "context"), [
    ("Qwen2.5-7B-Instruct", 32768), ("unsloth/Qwen2.5-7B-Instruct-bnb-4bit", 32768),
    ("Qwen/Qwen2.5-Coder-7B-Instruct-AWQ", 32768), ("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", 262144),
    ("Phi-3-medium-128k-instruct", 131072), ("unsloth/Qwen2.5-7B-bnb-4bit", 131072), ("Phi-3-medium-4k-instruct", 4096)])
def test_a_name_matched_without_release_suffixes_keeps_its_alias_context(name, context):
    """The name fallback (release suffixes dropped) stands for the closest catalog name, whose context applies: it was
    the base model's for every one of these but the last two."""
    assert resolve_model(name).spec.max_position_embeddings == context
