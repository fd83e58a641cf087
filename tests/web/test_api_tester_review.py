"""A tester's review of the page (API side): the plan's paging flag, a pasted config.json that is not JSON, the import's
dialect, and Portuguese for the errors the page showed in English (each made by the API, not typed here)."""

from __future__ import annotations

import pytest

from vramfit.web.translate import to_pt, untranslated

SC = {"model": "meta-llama/Llama-3.1-8B"}
YAML_OK = "base_model: meta-llama/Llama-3.1-8B\nadapter: lora\nlora_r: 8\nlora_target_linear: true\n"


def test_a_plan_that_fits_only_by_paging_says_so(client):
    """Defect 1: /api/plan's plans carry ``paging`` (the CLI's "(paging)"): true exactly where the verdict's figure is
    over the card's limit."""
    sc = {"model": "meta-llama/Llama-3.1-70B", "method": "full", "num_gpus": 8, "parallelism": "zero3",
          "gradient_checkpointing": "full"}
    r = client.post("/api/plan", json={"scenario": sc, "gpu_ids": ["h100-sxm", "h200-sxm"]})
    assert r.status_code == 200, r.text
    plans = r.json()["plans"]
    h100 = [p for p in plans if p["gpu_id"] == "h100-sxm" and p["num_gpus"] == 8]
    assert h100 and h100[0]["paging"] is True
    assert h100[0]["required_bytes"] > h100[0]["limit_bytes"]
    for p in plans:
        assert p["paging"] is (p["required_bytes"] > p["limit_bytes"])
    assert any(not p["paging"] for p in plans)


@pytest.mark.parametrize(("text", "line", "column", "what"), [
    ('{"model_type": "llama",\n "hidden_size": 4096\n "x": 1}', 3, 2, "Expecting ',' delimiter"),
    ('{"model_type": }', 1, 16, "Expecting value"),
    ("{model_type: 1}", 1, 2, "Expecting property name enclosed in double quotes"),
])
def test_a_pasted_config_json_that_is_not_json_says_where(client, text, line, column, what):
    """Defect 7: the text the page sends when JSON.parse fails is said not to be JSON, at the parser's place."""
    r = client.post("/api/estimate", json={"config_json": text})
    assert r.status_code == 422 and r.json()["key"] == "config_json"
    err = r.json()["error"]
    assert err == f"config_json: the pasted config.json is not valid JSON ({what} at line {line} column {column})"
    assert untranslated([err]) == []
    assert f"na linha {line}, coluna {column}" in to_pt(err)


def test_json_text_of_an_object_is_still_refused_by_its_type(client):
    r = client.post("/api/estimate", json={"config_json": '{"model_type": "llama"}'})
    assert r.status_code == 422 and r.json()["error"].endswith("got str")


@pytest.mark.parametrize("dialect", [0, [], {}, False, 1.5])
def test_a_dialect_that_is_not_text_is_422(client, dialect):
    """Defect 13: 0, [] and {} are refused naming ``dialect`` and its valid values, not read as "detect"."""
    r = client.post("/api/import", json={"text": YAML_OK, "dialect": dialect})
    assert r.status_code == 422, r.text
    out = r.json()
    assert out["key"] == "dialect" and "axolotl" in out["valid"]
    assert out["error"].startswith("dialect: must be a dialect name or null, got ")
    assert untranslated([out["error"]]) == []


@pytest.mark.parametrize("dialect", [None, ""])
def test_null_or_empty_dialect_detects(client, dialect):
    r = client.post("/api/import", json={"text": YAML_OK, "dialect": dialect})
    assert r.status_code == 200 and r.json()["dialect"] == "axolotl"


ESTIMATE_ERRORS = [  # (body, key, the English start)
    ({**SC, "stage": "kto", "label_share": 2}, "label_share", "label_share: must be a fraction above 0 and at most 1"),
    ({**SC, "stage": "grpo", "generation": "vllm-colocate", "vllm_gpu_memory_utilization": 0},
     "vllm_gpu_memory_utilization", "vllm_gpu_memory_utilization: must be a fraction above 0"),
    ({"params": "1e7"}, "params", "params: a generic model needs at least 100,000,000 parameters"),
    ({"params": "1.5"}, "params", "params: parameter count '1.5' is not a whole number"),
    ({"params": "-5"}, "params", "params: parameter count must be positive"),
    ({"params": 0}, "params", "params: parameter count must be positive"),
    ({"params": "2e13"}, "params", "params: parameter count '2e13' is absurd"),
    ({"model": ""}, "model", "model: must be a catalog model id, got ''"),
    ({**SC, "method": "lora", "lora_targets": []}, "lora_targets", "lora_targets: must name at least one module"),
    ({**SC, "method": "lora", "lora_targets": ""}, "lora_targets", "lora_targets: '' is not a module name"),
    ({**SC, "num_gpus": 8, "parallelism": "zero1", "pipeline_parallel": 2, "pipeline_virtual_stages": 2},
     "pipeline_virtual_stages", "pipeline_virtual_stages: more than one model chunk per GPU"),
    ({**SC, "num_gpus": 8, "parallelism": "zero1", "pipeline_parallel": 2, "pipeline_schedule": "interleaved-1f1b",
      "pipeline_virtual_stages": 1}, "pipeline_virtual_stages", "pipeline_virtual_stages: interleaved-1f1b needs"),
    ({**SC, "num_gpus": 8, "parallelism": "zero1", "pipeline_schedule": "interleaved-1f1b",
      "pipeline_virtual_stages": 2}, "pipeline_schedule", "pipeline_schedule: interleaved-1f1b needs"),
    ({**SC, "deepspeed_config": {"zero_optimization": {}}}, "deepspeed_config",
     "deepspeed_config: applies to DeepSpeed ZeRO; set parallelism"),
    ({**SC, "num_gpus": 2, "parallelism": "zero2", "deepspeed_config": {"zero_optimization": {"stage": 9}}},
     "deepspeed_config", "deepspeed_config: zero_optimization.stage must be 0, 1, 2 or 3, got 9"),
    ({**SC, "num_gpus": 2, "parallelism": "ddp", "deepspeed_config": {"zero_optimization": {"stage": 2}}},
     "deepspeed_config", "deepspeed_config: zero_optimization.stage 2 means parallelism zero2"),
    ({**SC, "num_gpus": 2, "deepspeed_config": {"zero_optimization": {"stage": 2,
                                                                      "offload_optimizer": {"device": "gpu"}}}},
     "deepspeed_config", "deepspeed_config: zero_optimization.offload_optimizer.device must be one of"),
    ({**SC, "num_gpus": 2, "deepspeed_config": {"zero_optimization": 5}}, "deepspeed_config",
     "deepspeed_config: zero_optimization must be a mapping"),
    ({**SC, "num_gpus": 2, "offload": "none", "deepspeed_config": {"zero_optimization": {
        "stage": 2, "offload_optimizer": {"device": "cpu"}}}}, "deepspeed_config",
     "deepspeed_config: its offload sections mean offload optimizer"),
    ({**SC, "completion_len": 100}, "completion_len", "completion_len: is a key of stage grpo or ppo, not sft"),
]


@pytest.mark.parametrize(("body", "key", "start"), ESTIMATE_ERRORS, ids=[f"{k}-{i}" for i, (_, k, _) in
                                                                         enumerate(ESTIMATE_ERRORS)])
def test_the_estimates_errors_have_portuguese(client, body, key, start):
    """Defect 4: each error, as the API writes it, has a Portuguese rule that leaves no English word (nor the
    stages' "or")."""
    r = client.post("/api/estimate", json=body)
    assert r.status_code == 422, r.text
    out = r.json()
    assert out["key"] == key and out["error"].startswith(start), out["error"]
    assert untranslated([out["error"]]) == [], to_pt(out["error"])
    assert " or " not in to_pt(out["error"])


IMPORT_ERRORS = [
    ("", "text: paste a training config (YAML, JSON, TOML or a swift command)"),
    ("foo: 1\nbar: 2\n", "text: <pasted config>: is not a training config vramfit knows (no keys of axolotl, "
                         "llamafactory, trl, torchtune, litgpt, swift, torchtitan); choose its format in the Format list"),
    ("base_model: meta-llama/Llama-3.1-8B\nadapter: dora\n",
     "text: <pasted config>: adapter 'dora' is not modelled yet (valid values: lora, qlora)"),
    ("a: [1, 2\nb: {", "text: <pasted config>: is not valid YAML (line 2): expected ',' or ']', but got ':'"),
    ("a: 1\n b: 2\n", "text: <pasted config>: is not valid YAML (line 2): mapping values are not allowed here"),
]


@pytest.mark.parametrize(("text", "error"), IMPORT_ERRORS)
def test_the_importers_errors_have_portuguese(client, text, error):
    r = client.post("/api/import", json={"text": text})
    assert r.status_code == 422 and r.json()["key"] == "text"
    assert r.json()["error"] == error
    assert untranslated([error]) == [], to_pt(error)
    assert " or " not in to_pt(error)


def test_the_upload_size_refusal_has_portuguese(client):
    r = client.post("/api/dataset", content=b"x" * 16, headers={"content-length": str(10**8),
                                                                 "content-type": "multipart/form-data; boundary=x"})
    assert r.status_code == 413 and r.json()["key"] == "file"
    assert r.json()["error"] == "file: the upload needs a Content-Length of at most 4259840 bytes"
    assert to_pt(r.json()["error"]) == "file: o envio precisa de um Content-Length de no máximo 4259840 bytes"


@pytest.mark.parametrize("said", ["ZeRO-3, checkpointing and offload", "FSDP and checkpointing", "ZeRO-3 and offload",
                                  "FSDP", "checkpointing"])
@pytest.mark.parametrize("unit", ["", " (rented at most 8 per instance)"])
def test_every_form_of_a_card_that_does_not_fit_has_portuguese(said, unit):
    """Defect 4: every form search.tried_words builds (the engine, checkpointing, offload with the engine), with and
    without the rental unit, in a card's reason as the page shows it (its id replaced by "…")."""
    reason = f"does not fit 1 x …{unit} even with {said} (at micro-batch 1); effective batch 1 allows at most 1 GPUs"
    pt = to_pt(reason)
    assert untranslated([reason]) == [], pt
    words = said.replace(", checkpointing and offload", ", checkpointing e descarga").replace(" and offload", " e descarga")
    words = words.replace(" and checkpointing", " e checkpointing")
    assert pt.startswith(f"não cabe em 1 × …{' (alugada no máximo 8 por instância)' if unit else ''} nem com {words} "
                         "(com micro-batch 1); o batch efetivo 1 permite no máximo 1 GPU(s)"), pt

