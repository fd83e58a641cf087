"""A release name (a catalog id with -Instruct, -GPTQ, -bnb-4bit ... suffixes) resolves offline in the CLI, and an
import on the page keeps it as the model; the web API refused it as "not in the bundled catalog", so a GPTQ config
that imported on the page could not be estimated there. It still reads no server file."""

import pytest

from vramfit import estimate


@pytest.mark.parametrize("model", ["TheBloke/Mistral-7B-v0.1-GPTQ", "unsloth/llama-3-8b-bnb-4bit",
                                   "NousResearch/Meta-Llama-3.1-8B"])
def test_release_names_are_estimated_as_the_cli_does(client, model):
    r = client.post("/api/estimate", json={"model": model})
    assert r.status_code == 200, r.text
    assert r.json()["peak"]["device_bytes"] == estimate({"model": model}).peak.device_bytes


def test_the_gptq_note_reaches_the_page(client):
    r = client.post("/api/estimate", json={"model": "TheBloke/Mistral-7B-v0.1-GPTQ", "method": "qlora",
                                           "quantize": "gptq-int4"})
    assert r.status_code == 200
    assert any(a.startswith("TheBloke/Mistral-7B-v0.1-GPTQ is a GPTQ checkpoint by its name") for a in r.json()["assumptions"])


@pytest.mark.parametrize("model", ["etc/passwd", "/etc/passwd", "../models/x", "foo/bar"])
def test_paths_and_unknown_names_stay_refused(client, model):
    r = client.post("/api/estimate", json={"model": model})
    assert r.status_code == 422 and r.json()["key"] == "model"
