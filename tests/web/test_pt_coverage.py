"""The Portuguese page is Portuguese throughout: the estimator's assumptions over a broad grid of scenarios, the
import and dataset errors and notes, the upload's own file name in its messages, and PT decimals in the GPU list."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from vramfit.errors import ScenarioError

L8 = "meta-llama/Llama-3.1-8B"
STATIC = Path(__file__).resolve().parents[2] / "src" / "vramfit" / "web" / "static"


def _stage_scenarios():
    for stage, method in itertools.product(("dpo", "kto", "orpo", "simpo", "grpo", "ppo"), ("lora", "full", "qlora")):
        yield {"model": L8, "method": method, "stage": stage}
        for ref in ("copy", "adapters-off", "precomputed", "none"):
            yield {"model": L8, "method": method, "stage": stage, "reference": ref}
    for gen in ("vllm-colocate", "vllm-server"):
        yield {"model": L8, "method": "lora", "stage": "grpo", "generation": gen, "gpu": "h100-sxm"}
    yield {"model": L8, "stage": "grpo", "generation": "vllm-colocate", "vllm_sleep": True, "gpu": "h100-sxm"}
    yield {"model": L8, "stage": "dpo", "rpo_alpha": 1.0}
    for version, stage in itertools.product(("trl-0.14", "trl-0.21", "llamafactory-0.9"), ("dpo", "orpo", "grpo")):
        yield {"model": L8, "stage": stage, "framework_version": version}


def _framework_scenarios():
    extras = ({}, {"loss": "fused"}, {"loss": "chunked"}, {"eval_batch_size": 4}, {"attention": "eager"},
              {"gradient_checkpointing": "offload"}, {"num_gpus": 2, "parallelism": "fsdp"},
              {"num_gpus": 2, "parallelism": "fsdp", "offload": "optimizer+params"},
              {"num_gpus": 2, "parallelism": "zero2", "offload": "optimizer"},
              {"num_gpus": 2, "parallelism": "zero3", "offload": "optimizer+params"}, {"keeps_outputs": True})
    for fw, method, extra in itertools.product(("hf", "torchtune", "torchtitan", "unsloth", "litgpt"),
                                               ("full", "lora", "qlora"), extras):
        yield {"model": L8, "framework": fw, "method": method, **extra}
    # Unsloth's xformers fallback on a card without FlashAttention-2 (its own assumption line)
    yield {"model": L8, "framework": "unsloth", "method": "qlora", "attention": "flash", "gpu": "t4",
           "precision": "fp16-true"}
    # grouped-query SDPA on such a card: PyTorch's math kernel
    yield {"model": L8, "framework": "hf", "method": "lora", "attention": "sdpa", "gpu": "t4", "precision": "fp16-mixed"}
    versions = {"hf": ("transformers-4.40", "transformers-4.47", "fsdp-qlora", "axolotl-0.12"),
                "torchtune": ("torchtune-0.1",), "litgpt": ("litgpt-2024",), "unsloth": ("unsloth-2024.11", "unsloth-2024.8", "unsloth-2024.5")}
    for fw, names in versions.items():
        for version, method in itertools.product(names, ("full", "lora", "qlora")):
            yield {"model": L8, "framework": fw, "framework_version": version, "method": method}
            yield {"model": L8, "framework": fw, "framework_version": version, "method": method,
                   "num_gpus": 2, "parallelism": "fsdp", "gradient_checkpointing": "full"}


def _layout_scenarios():
    full = {"model": L8, "method": "full"}
    yield {**full, "num_gpus": 16, "num_nodes": 2, "parallelism": "fsdp", "shard_scope": "node"}
    yield {**full, "num_gpus": 16, "num_nodes": 2, "parallelism": "zero3", "shard_scope": "node"}
    for par in ("zero2", "zero3", "ddp"):
        yield {**full, "num_gpus": 16, "num_nodes": 2, "parallelism": par}
    yield {**full, "num_gpus": 16, "parallelism": "fsdp"}
    titan = {**full, "framework": "torchtitan", "parallelism": "fsdp"}
    yield {**titan, "num_gpus": 4, "tensor_parallel": 2}
    yield {**titan, "num_gpus": 4, "context_parallel": 2}
    yield {**titan, "num_gpus": 4, "pipeline_parallel": 2, "grad_accum": 4}
    yield {**titan, "num_gpus": 4, "pipeline_parallel": 2, "grad_accum": 4, "pipeline_schedule": "interleaved-1f1b",
           "pipeline_virtual_stages": 2}
    yield {**titan, "num_gpus": 16, "num_nodes": 2, "tensor_parallel": 2}
    yield {**titan, "model": "Qwen/Qwen3-30B-A3B", "num_gpus": 8, "expert_parallel": 2}
    yield {**full, "num_gpus": 2, "parallelism": "fsdp", "fsdp_version": "2"}
    for model, seq, gpu in (("Qwen/Qwen2.5-0.5B", 5873, "rtx4090"), ("meta-llama/Llama-3.2-1B", 12000, "rtx4090")):
        yield {"model": model, "seq_len": seq, "gpu": gpu}
    for model, method in itertools.product(("Qwen/Qwen2.5-0.5B", "mistralai/Mixtral-8x7B-v0.1",
                                            "Qwen/Qwen2.5-VL-3B-Instruct", "openai/gpt-oss-20b"), ("lora", "qlora")):
        yield {"model": model, "method": method, "num_gpus": 4, "parallelism": "fsdp"}


def pt_scenarios():
    """A broad grid of scenarios (stages, references, generation, frameworks and releases, layouts, near-full
    cards); the invalid combinations are skipped by :func:`assumptions_of`."""
    yield from _stage_scenarios()
    yield from _framework_scenarios()
    yield from _layout_scenarios()


def assumptions_of(scenarios) -> tuple[set[str], int]:
    from vramfit.estimate import estimate

    seen, ok = set(), 0
    for keys in scenarios:
        try:
            seen.update(estimate(keys).assumptions)
        except ScenarioError:
            continue
        ok += 1
    return seen, ok


def test_every_assumption_of_the_grid_has_portuguese():
    from vramfit.web.translate import untranslated

    seen, ok = assumptions_of(pt_scenarios())
    assert ok > 250 and len(seen) > 200
    assert untranslated(sorted(seen)) == []


IMPORT_AND_DATASET = [
    "dataset: my_data.jsonl holds no rows",
    "dataset: line 3 of my_data.jsonl is not JSON: Expecting value: line 1 column 1 (char 0)",
    "lora_r: an adapter needs lora_r (Axolotl has no default rank)",
    "seq_len: must be a whole number from 1 to 10000000, got 1.5",
    "max_gpus: must be from 1 to 100,000, got 0",
    "values: must be a non-empty list",
    "completion_len: must be shorter than seq_len (2048), which holds the prompt and the completion",
    "seq_len: must be an integer from 1 to 10000000, got an integer of about 309 digits",
    "no chat template found: messages rendered in the ChatML layout",
    "dataset: row 2 of my_data.jsonl has no column 'completion' (the dataset's prompt-completion column, found in the "
    "first row)",
    "dataset: my_data.jsonl has no tokens: the text in 'prompt', 'completion' is empty in every row",
]


def test_import_and_dataset_sentences_have_portuguese():
    from vramfit.web.translate import to_pt, untranslated

    assert untranslated(IMPORT_AND_DATASET) == []
    assert to_pt("max_gpus: must be from 1 to 100,000, got 0") == "max_gpus: tem de estar entre 1 e 100 000 (recebido: 0)"
    assert "309 algarismos" in to_pt(IMPORT_AND_DATASET[7])


@pytest.mark.parametrize("name", ["importer.js", "dataset.js"])
def test_import_and_dataset_errors_go_through_the_translator(name):
    js = (STATIC / name).read_text()
    assert "textContent = data.error" not in js
    assert "VFTr.text(data.error)" in js
    if name == "importer.js":
        assert "VFTr.text(e.note)" in js


def _upload_error(name: str, raw: bytes) -> ScenarioError:
    from vramfit.web.dataset_upload import analyze_upload

    with pytest.raises(ScenarioError) as info:
        analyze_upload(name, raw)
    return info.value


def test_upload_errors_name_the_users_file_and_speak_of_the_page():
    from vramfit.web.translate import untranslated

    empty = _upload_error("../my data.jsonl", b"")
    assert str(empty) == "dataset: my_data.jsonl holds no rows" and "upload.jsonl" not in str(empty)
    bad = _upload_error("rows.jsonl", b"not json\n")
    assert "line 1 of rows.jsonl is not JSON" in str(bad) and "vramfit-upload-" not in str(bad)
    nofield = _upload_error("pairs.jsonl", b'{"foo": 1}\n')
    assert nofield.key == "field" and nofield.valid == ["foo"] and "--field" not in str(nofield)
    assert untranslated([str(empty), str(bad), str(nofield)]) == []


def test_upload_notes_speak_of_the_page_and_the_cli_keeps_its_wording(tmp_path):
    from vramfit.dataset import analyze_dataset
    from vramfit.web.dataset_upload import analyze_upload, safe_name
    from vramfit.web.translate import untranslated

    raw = b'{"text": "hello world"}\n{"text": "a longer line of text"}\n'
    notes = analyze_upload("mine.jsonl", raw)["notes"]
    assert notes and not any("--tokenizer for" in n for n in notes) and untranslated(notes) == []
    (tmp_path / "cli.jsonl").write_bytes(raw)
    assert any("give --tokenizer for exact counts" in n for n in analyze_dataset(tmp_path / "cli.jsonl").notes)
    assert safe_name("C:\\x\\ü data.JSONL", ".jsonl") == "data.jsonl"
    assert safe_name("..", ".csv") == "upload.csv" and safe_name(None, ".json") == "upload.json"


def test_gpu_list_uses_the_page_language_for_decimals(client):
    pt = client.get("/?lang=pt").text
    en = client.get("/").text
    sizes = re.findall(r'<option value="[^"]+">[^<]* · ([^<]+) GiB</option>', pt)
    assert sizes and all(re.fullmatch(r"\d+,\d", s) for s in sizes), sizes[:5]
    assert all(re.fullmatch(r"\d+\.\d", s) for s in re.findall(r'<option value="[^"]+">[^<]* · ([^<]+) GiB</option>', en))


def test_every_catalog_note_has_portuguese():
    """The catalog's notes on its entries reach the page as assumptions (Mixtral-8x22B's v3 tokenizer, ...)."""
    from vramfit.models import load_catalog
    from vramfit.web.translate import to_pt, untranslated

    notes = sorted({e["notes"] for e in load_catalog() if e.get("notes")})
    assert len(notes) >= 7 and untranslated(notes) == []
    mixtral = next(n for n in notes if n.startswith("mistralai/Mixtral-8x22B"))
    assert "tokenizador v3" in to_pt(mixtral) and "9,4 M" in to_pt(mixtral)


def _scenario_error(keys) -> str:
    from vramfit.scenario import parse_scenario

    with pytest.raises(ScenarioError) as info:
        parse_scenario(keys)
    return str(info.value)


PLANNER_AND_BOUNDS = [
    "transformers 5 + bitsandbytes cannot (fused 3-D experts): use transformers 4, torchtune or litgpt",
    "use_liger_kernel needs `pip install liger-kernel` (the fused cross-entropy the plan assumes)",
    "deepspeed_config: the pasted config is nested too deeply (more than 12 levels: MAX_CONFIG_DEPTH)",
    "deepspeed_config: the pasted config holds a number too large to read (over 4,300 digits)",
    "text: <pasted config>: holds a number too large to read (over 4,300 digits)",
    "dataset: line 1 of big.jsonl is not JSON: holds a number too large to read (over 4,300 digits)",
    "scenario: the scenario field gives the key 'gpu' twice",
    "scenario: the scenario field is nested too deeply",
]


def test_planner_layout_and_bounded_input_sentences_have_portuguese():
    from vramfit.plan import changes, export_trl
    from vramfit.web.translate import to_pt, untranslated

    # the planner's own wording, so that a change of it fails here rather than going English on the page
    assert PLANNER_AND_BOUNDS[0] in Path(changes.__file__).read_text()
    assert PLANNER_AND_BOUNDS[1] in Path(export_trl.__file__).read_text()
    layout = _scenario_error({"model": L8, "num_gpus": 3, "tensor_parallel": 2})
    assert layout.startswith("num_gpus: must be a multiple of tensor_parallel")
    assert untranslated([layout, *PLANNER_AND_BOUNDS]) == []
    assert to_pt(layout).startswith("num_gpus: tem de ser um múltiplo de tensor_parallel × pipeline_parallel × "
                                    "context_parallel (2 × 1 × 1 = 2); recebido: 3")


def test_pt_select_options_use_the_shared_value_words(client):
    """Options without a label of their own read as the page's words for yes, no and none, not the API's tokens."""
    pt, en = client.get("/?lang=pt").text, client.get("/").text

    def options(page: str, key: str) -> dict[str, str]:
        body = re.search(rf'<select id="f-{key}"[^>]*>(.*?)</select>', page, re.S).group(1)
        return dict(re.findall(r'<option value="([^"]*)">([^<]*)</option>', body))

    assert options(pt, "quantize_experts") == {"auto": "auto", "yes": "sim", "no": "não"}
    assert options(pt, "parallelism")["none"] == "nenhum" and options(pt, "offload")["optimizer"] == "otimizador"
    assert options(en, "quantize_experts")["yes"] == "yes" and options(en, "parallelism")["none"] == "none"
    leftover = {(m.group(1), v) for m in re.finditer(r'<select id="f-([^"]+)"[^>]*>(.*?)</select>', pt, re.S)
                for v, text in re.findall(r'<option value="([^"]*)">([^<]*)</option>', m.group(2))
                if v == text and v in ("yes", "no", "none")}
    assert leftover == set()
