"""What a review of the running server found: a pasted config's image-token fields unbounded (a request that never
ended and grew without limit), slow requests holding every other one up, the upload without a body timeout or a
field allow-list, an export error naming a count nobody gave, and a request without a model told to give a Hub id or
a path, which this API refuses."""

from __future__ import annotations

import copy
import threading
import time

import pytest
from tests.web.conftest import send_and_wait


def _config(model_type: str) -> dict:
    from vramfit.models import load_catalog

    return copy.deepcopy(next(e["config"] for e in load_catalog() if (e.get("config") or {}).get("model_type") == model_type))


@pytest.mark.parametrize(("model_type", "field", "value", "said"), [
    ("gemma3", "mm_tokens_per_image", 10**18, "must be an integer from 1 to 1,048,576, got 1000000000000000000"),
    ("gemma3", "mm_tokens_per_image", "", "must be an integer from 1 to 1,048,576, got ''"),
    ("gemma3", "mm_tokens_per_image", None, "got None"),
    ("llava_next", "image_grid_pinpoints", [[0, 0]], "[height, width] pairs of integers from 1 to 65,536, got [[0, 0]]"),
    ("llava_next", "image_grid_pinpoints", "x", "got 'x'"),
    ("internvl", "max_patches", "x", "must be an integer from 1 to 256, got 'x'"),
    ("internvl", "max_patches", 10**6, "got 1000000"),
])
def test_pasted_image_token_fields_are_bounded(client, model_type, field, value, said):
    config = _config(model_type)
    config[field] = value
    started = time.monotonic()
    r = client.post("/api/estimate", json={"config_json": config, "images_per_sample": 1})
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert r.json()["key"] == "config_json" and f"config.json field '{field}' must be" in error and error.endswith(said)
    assert time.monotonic() - started < 30  # it was minutes and unbounded memory at 10^8 tokens per image


def test_a_large_but_bounded_token_count_is_estimated(client):
    config = _config("gemma3")
    config["mm_tokens_per_image"] = 4096
    r = client.post("/api/estimate", json={"config_json": config, "images_per_sample": 2})
    assert r.status_code == 200
    low = client.post("/api/estimate", json={"config_json": _config("gemma3"), "images_per_sample": 2}).json()
    assert r.json()["peak"]["allocated_bytes"] > low["peak"]["allocated_bytes"]


def test_every_catalog_tower_passes_the_field_check():
    from vramfit.models import load_catalog
    from vramfit.models.catalog import catalog_spec
    from vramfit.models.vlm_fields import check_vision_fields

    towers = 0
    for entry in load_catalog():
        spec = catalog_spec(entry["id"])
        if spec.vision is not None:
            check_vision_fields(spec.vision.image_config)
            towers += 1
    assert towers >= 7


def test_a_slow_request_does_not_hold_up_the_others(client, monkeypatch):
    """The estimate, plan, sweep, export and import routes run in worker threads (app.off_loop)."""
    from vramfit.web import planning

    release, entered = threading.Event(), threading.Event()

    def slow_plan(body):
        entered.set()
        release.wait(20)
        return {"held": True}

    monkeypatch.setattr(planning, "plan", slow_plan)
    answers: list = []
    worker = threading.Thread(target=lambda: answers.append(client.post("/api/plan", json={"scenario": {}})))
    worker.start()
    try:
        assert entered.wait(10)
        started = time.monotonic()
        assert client.get("/api/gpus").status_code == 200  # answered while the plan is still running
        assert time.monotonic() - started < 5
        assert not answers
    finally:
        release.set()
        worker.join(20)
    assert answers[0].json() == {"held": True}


def test_an_upload_that_never_arrives_times_out(live_server):
    reply, took = send_and_wait(live_server, b"POST /api/dataset HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                                b"multipart/form-data; boundary=xx\r\nContent-Length: 1000\r\n\r\n--xx\r\n")
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
    assert took < 3


def test_an_upload_with_another_field_is_refused(client):
    rows = b'{"text": "hello world"}\n' * 3
    r = client.post("/api/dataset", files={"file": ("d.jsonl", rows)}, data={"x": "1"})
    assert r.status_code == 422 and r.json()["key"] == "body"
    assert r.json()["error"] == "body: unknown multipart field 'x'" and r.json()["valid"] == ["file", "scenario"]
    assert client.post("/api/dataset", files={"file": ("d.jsonl", rows)}).status_code == 200


def test_export_without_a_count_names_the_card(client):
    body = {"scenario": {"model": "meta-llama/Llama-3.1-405B", "method": "full"}, "gpu_id": "rtx3060-12gb",
            "max_gpus": 1}
    r = client.post("/api/export", json=body)
    assert r.status_code == 422
    assert r.json()["key"] == "gpu_id" and r.json()["error"] == "gpu_id: no plan on rtx3060-12gb fits (up to max_gpus of them)"


def test_a_request_without_a_model_names_what_this_api_takes(client):
    from vramfit.web.translate import to_pt

    r = client.post("/api/estimate", json={})
    assert r.status_code == 422 and r.json()["key"] == "model"
    msg = r.json()["error"]
    assert msg.startswith("model: is required: a catalog id or alias, a parameter count (params) or a pasted config.json")
    assert "Hub" not in msg and "meta-llama/Llama-3.1-8B" in r.json()["valid"]
    assert to_pt(msg).startswith("model: é obrigatório: um modelo do catálogo")
    assert client.post("/api/estimate", json={"params": "7B"}).status_code == 200


def test_unknown_paths_and_methods_answer_in_the_error_shape(client):
    r = client.get("/api/nothing")
    assert r.status_code == 404 and r.json()["key"] == "path"
    assert r.json()["error"] == "path: no page or endpoint '/api/nothing'"
    assert {"/api/estimate", "/api/plan", "/api/sweep"} <= set(r.json()["valid"])
    r = client.put("/api/estimate", json={})
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert r.json() == {"error": "method: PUT is not allowed on '/api/estimate'", "key": "method", "valid": ["POST"]}
