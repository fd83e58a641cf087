"""Validation errors the page can trigger have Portuguese (about 17 stayed English on the PT page: rules anchored at
the sentence's end missed the " (valid values: ...)" after it, and others had no rule at all)."""

import pytest

from vramfit.web.translate import to_pt, untranslated

M = "meta-llama/Llama-3.1-8B"
CASES = [
    {"model": M, "generation": "vllm-colocate"},
    {"model": M, "tensor_parallel": 2, "num_gpus": 2},
    {"model": M, "framework": "litgpt", "parallelism": "fsdp", "num_gpus": 2, "fsdp_version": 2},
    {"model": M, "framework": "torchtune", "parallelism": "fsdp", "num_gpus": 2, "fsdp_version": 1},
    {"model": M, "num_nodes": 2},
    {"model": M, "stage": "dpo", "reference": "none"},
    {"model": M, "vllm_sleep": True},
    {"model": M, "vllm_gpu_memory_utilization": 0.3},
    {"model": M, "shard_scope": "node"},
    {"model": M, "stage": "grpo", "reference": "precomputed"},
    {"model": M, "deepspeed_config": "ds.json"},
    {"model": "meta-llama/Llama-4-Scout-17B-16E-Instruct", "images_per_sample": 1},
    {"model": M, "framework": "torchtitan", "method": "full", "num_gpus": 4, "pipeline_parallel": 4, "grad_accum": 2},
    {"model": M, "stage": "ppo", "reference": "none"},
    {"model": "Qwen/Qwen2.5-0.5B", "stage": "grpo", "micro_batch_size": 3, "grad_accum": 1},
    {"model": M, "framework_version": "trl-9.9"},
    {"model": M, "stage": "kto", "micro_batch_size": 1},
]


@pytest.mark.parametrize("body", CASES, ids=lambda b: ",".join(f"{k}" for k in b if k != "model"))
def test_each_error_the_page_can_trigger_has_portuguese(client, body):
    r = client.post("/api/estimate", json=body)
    assert r.status_code == 422, r.text
    msg = r.json()["error"]
    assert untranslated([msg]) == [], (msg, to_pt(msg))
    assert "(valid values" not in to_pt(msg)


def test_import_advice_speaks_of_the_page(client):
    """The page reads one pasted config and no file: the CLI's --from and --num-gpus advice is said its way."""
    r = client.post("/api/import", json={"text": "base_model: meta-llama/Llama-3.1-8B\nadapter: lora\n"
                                                 "lora_r: 8\nlora_target_linear: true\ndeepspeed: ds_z2.json\nmicro_batch_size: 1\n"})
    assert r.status_code == 422
    msg = r.json()["error"]
    assert "--from" not in msg and "paste the file's JSON into the DeepSpeed config field" in msg
    assert "cola o JSON do ficheiro no campo da configuração do DeepSpeed" in to_pt(msg)


def test_the_gpu_count_advice_names_the_pages_field(client):
    from pathlib import Path

    text = (Path(__file__).parents[1] / "config_import" / "fixtures" / "torchtune_qlora.yaml").read_text()
    r = client.post("/api/import", json={"text": text + "custom_sharded_layers: ['tok_embeddings', 'output']\n"})
    assert r.status_code == 200, r.text
    notes = [e["note"] for e in r.json()["report"] if e["key"] == "num_gpus"]
    assert notes == ["not in the file: the GPU count is set at launch; set the GPU count on the page"]
    assert untranslated(notes) == []


def test_a_pasted_config_with_a_quantization_config_says_so_as_the_cli_does(client):
    """A pasted config.json's quantization_config was ignored without a word (the CLI's file path notes it)."""
    from vramfit.models import load_catalog

    config = dict(next(e for e in load_catalog() if e["id"] == "mistralai/Mistral-7B-v0.1")["config"])
    config["quantization_config"] = {"quant_method": "gptq", "bits": 4}
    r = client.post("/api/estimate", json={"config_json": config})
    assert r.status_code == 200, r.text
    said = [a for a in r.json()["assumptions"] if "declares quantization_config" in a]
    assert said == ["config.json declares quantization_config (quant_method=gptq); the architecture is read from it, "
                    "the weight format is chosen separately"]
    assert untranslated(said) == []
