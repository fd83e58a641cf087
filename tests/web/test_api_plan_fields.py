"""/api/plan and /api/export name the body's fields in their errors (the planner names `vramfit plan`'s flags), an
unknown card lists the catalog's ids wherever it is named, and long unknown values are echoed cut at 80 characters."""

from __future__ import annotations

import pytest

from vramfit.gpus import list_gpus

SC = {"model": "meta-llama/Llama-3.1-8B", "gpu": "rtx4090"}
GPU_IDS = sorted(g.gpu_id for g in list_gpus())


@pytest.mark.parametrize(("path", "extra", "key", "text"), [
    ("/api/plan", {"budget_usd": -1}, "budget_usd", "budget_usd: must be a positive number of US dollars, got -1"),
    ("/api/plan", {"deadline_hours": -1}, "deadline_hours", "deadline_hours: must be a positive number of hours, got -1"),
    ("/api/plan", {"stacks": ["zzz"]}, "stacks", "stacks: unknown software stack 'zzz' (valid values: cuda, rocm, habana)"),
    ("/api/export", {"engine": "nope", "gpu_id": "rtx4090", "num_gpus": 1}, "engine",
     "engine: unknown engine 'nope' (valid values: accelerate, deepspeed, fsdp, trl, torchtitan)"),
])
def test_plan_errors_name_the_bodys_fields(client, path, extra, key, text):
    r = client.post(path, json={"scenario": SC, **extra})
    assert r.status_code == 422, r.text
    assert r.json()["key"] == key and r.json()["error"] == text


@pytest.mark.parametrize(("path", "body", "key"), [
    ("/api/plan", {"scenario": SC, "gpu_ids": ["rtx4090", "nope"]}, "gpu_ids"),
    ("/api/plan", {"scenario": SC, "gpu_ids": "h100-sxm,nope"}, "gpu_ids"),
    ("/api/export", {"scenario": SC, "gpu_id": "nope", "engine": "trl"}, "gpu_id"),
    ("/api/estimate", {**SC, "gpu": "nope"}, "gpu"),
    ("/api/plan", {"scenario": {**SC, "gpu": "nope"}}, "gpu"),
])
def test_an_unknown_gpu_lists_the_catalogs_ids(client, path, body, key):
    r = client.post(path, json=body)
    assert r.status_code == 422, r.text
    out = r.json()
    assert out["key"] == key and out["valid"] == GPU_IDS
    assert out["error"].startswith(f"{key}: unknown GPU 'nope'")


def test_a_known_alias_still_plans(client):
    r = client.post("/api/plan", json={"scenario": SC, "gpu_ids": ["4090"]})
    assert r.status_code == 200, r.text
    assert {p["gpu_id"] for p in r.json()["plans"]} == {"rtx4090"}


@pytest.mark.parametrize(("path", "extra", "key"), [
    ("/api/plan", {"stacks": ["z" * 500]}, "stacks"),
    ("/api/plan", {"sort": "z" * 500}, "sort"),
    ("/api/export", {"engine": "z" * 500, "gpu_id": "rtx4090"}, "engine"),
])
def test_long_unknown_values_are_cut_in_the_echo(client, path, extra, key):
    r = client.post(path, json={"scenario": SC, **extra})
    assert r.status_code == 422, r.text
    quoted = r.json()["error"].split("'", 1)[1].split(" (valid values")[0]
    assert quoted == "z" * 78 + "…" and r.json()["key"] == key


def test_the_renamed_errors_have_portuguese():
    from vramfit.web.translate import to_pt, untranslated

    sentences = ["gpu_ids: unknown GPU 'nope' (`vramfit gpus` lists all 43)",
                 "gpu_id: unknown GPU 'rtx409'; did you mean: rtx4090? (`vramfit gpus` lists all 43)",
                 "stacks: unknown software stack 'zzz' (valid values: cuda, rocm, habana)"]
    assert untranslated(sentences) == []
    assert to_pt(sentences[0]) == "gpu_ids: GPU desconhecida 'nope' (o `vramfit gpus` lista as 43)"
