"""The web server under hostile input: no 500, no hang, no answer to a foreign Host name.

Each test is one class of failure found by the fuzzing pass of issue 12 (huge integers, pasted configs
with ill-typed fields, a planner input that makes the hours infinite, a body that never arrives, ...).
"""

from __future__ import annotations

import pytest
from tests.web.conftest import send_and_wait

from vramfit.models import load_catalog
from vramfit.web import app as web_app
from vramfit.web.service import MAX_JSON_INT

MODEL = "meta-llama/Llama-2-7b-hf"
MISTRAL = next(e["config"] for e in load_catalog() if e["config"].get("sliding_window"))
HUGE = "1" + "0" * 5000  # over Python's 4,300-digit int-str limit
BEYOND_FLOAT = "1" + "0" * 309  # >= 10**309: float() overflows


def raw_post(client, path, text):
    return client.post(path, content=text.encode(), headers={"content-type": "application/json"})


def assert_422(r, key):
    assert r.status_code == 422, r.text
    assert r.json()["key"] == key and r.json()["error"].startswith(f"{key}:"), r.text
    assert r.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize("digits", [HUGE, BEYOND_FLOAT, str(MAX_JSON_INT + 1), "-" + HUGE])
@pytest.mark.parametrize("key", ["lora_alpha", "lora_dropout", "seq_len", "lora_rank"])
def test_huge_integer_in_a_scenario_field_is_422_naming_it(client, key, digits):
    r = raw_post(client, "/api/estimate", f'{{"model": "{MODEL}", "method": "lora", "{key}": {digits}}}')
    assert_422(r, key)
    assert f"{len(digits.lstrip('-'))} digits" in r.json()["error"]


@pytest.mark.parametrize("key", ["epochs", "budget_usd", "safety_margin", "mfu", "effective_batch",
                                 "dataset_tokens", "max_gpus"])
@pytest.mark.parametrize("digits", [HUGE, BEYOND_FLOAT])
def test_huge_integer_in_a_plan_option_is_422_naming_it(client, key, digits):
    assert_422(raw_post(client, "/api/plan", f'{{"scenario": {{"model": "{MODEL}"}}, "{key}": {digits}}}'), key)


def test_largest_64_bit_integer_is_read_and_judged_by_the_field(client):
    r = raw_post(client, "/api/estimate", f'{{"model": "{MODEL}", "seq_len": {MAX_JSON_INT}}}')
    assert_422(r, "seq_len")
    assert "digits" not in r.json()["error"]  # the field's own range check, not the JSON bound


def test_huge_integer_in_a_pasted_config_names_config_json_and_the_path(client):
    r = raw_post(client, "/api/estimate", f'{{"config_json": {{"vocab_size": {HUGE}}}}}')
    assert_422(r, "config_json")
    assert "at vocab_size" in r.json()["error"]


@pytest.mark.parametrize("window", ["abc", [1], -4096, 0, 1.5, True])
@pytest.mark.parametrize("path", ["/api/estimate", "/api/sweep"])
def test_pasted_config_with_a_bad_sliding_window_is_422(client, path, window):
    scenario = {"config_json": {**MISTRAL, "sliding_window": window}}
    body = scenario if path == "/api/estimate" else {"scenario": scenario, "key": "seq_len", "values": [1024]}
    r = client.post(path, json=body)
    assert_422(r, "config_json")
    assert "field 'sliding_window' must be an integer" in r.json()["error"]  # the library's config check (config_check.py)


def test_pasted_config_with_a_valid_window_still_works(client):
    assert client.post("/api/estimate", json={"config_json": MISTRAL}).status_code == 200


@pytest.mark.parametrize("mfu", [5e-324, 1e-300, 0.0099])
def test_plan_with_a_vanishing_mfu_is_422_with_the_bound(client, mfu):
    r = client.post("/api/plan", json={"scenario": {"model": MODEL}, "mfu": mfu, "dataset_tokens": 10**15,
                                       "epochs": 1000})
    assert_422(r, "mfu")
    assert "at least 0.01" in r.json()["error"]


def test_plan_at_the_extremes_is_finite_json(client):
    r = client.post("/api/plan", json={"scenario": {"model": MODEL}, "mfu": 0.01, "dataset_tokens": 10**15,
                                       "epochs": 1000, "gpu_ids": ["h200-sxm"]})
    assert r.status_code == 200, r.text
    assert "Infinity" not in r.text and "NaN" not in r.text


def test_a_non_finite_result_is_422_not_500():
    with pytest.raises(web_app.ApiError) as info:
        web_app.SafeJSONResponse({"plans": [{"gpu": "x", "hours": float("inf")}]})
    assert info.value.status == 422 and info.value.key == "hours"


# ------------------------------------------------------------------------- server errors
def test_an_unexpected_error_is_a_json_500_with_the_security_headers(app, monkeypatch):
    from fastapi.testclient import TestClient

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(web_app, "run_estimate", broken)
    with TestClient(app, base_url="http://localhost", raise_server_exceptions=False) as c:
        r = c.post("/api/estimate", json={"model": MODEL})
    assert r.status_code == 500
    assert r.json() == {"error": "server: internal error (the server's log has the details)",
                        "key": "server", "valid": None}
    assert "boom" not in r.text
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["content-security-policy"].startswith("default-src 'self'")


# ------------------------------------------------------------------------- methods and hosts
@pytest.mark.parametrize("path", ["/", "/guide", "/?lang=pt"])
def test_head_of_a_page_is_200(client, path):
    r = client.head(path)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")


@pytest.mark.parametrize("host", ["localhost", "localhost:8000", "127.0.0.1:8000", "[::1]:8000", "LOCALHOST"])
def test_local_host_names_are_served(client, host):
    assert client.get("/api/gpus", headers={"host": host}).status_code == 200


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8000", "127.0.0.1.evil.example", "[::2]:80",
                                  "", "x" * 300])
def test_a_foreign_host_name_is_400(client, host):
    r = client.get("/", headers={"host": host})
    assert r.status_code == 400
    assert r.json()["key"] == "host" and "localhost" in r.json()["valid"]
    assert r.headers["x-content-type-options"] == "nosniff"
    assert len(r.json()["error"]) < 200


def test_served_hosts_take_the_bound_address_and_allowed_names():
    assert web_app.served_hosts("0.0.0.0", ["Box.lan", "::5"]) == ("localhost", "127.0.0.1", "[::1]", "box.lan", "[::5]")
    assert web_app.served_hosts("192.168.1.9")[-1] == "192.168.1.9"


# ------------------------------------------------------------------------- a body that never comes
def test_a_declared_body_that_never_arrives_times_out(live_server):
    reply, took = send_and_wait(live_server, b"POST /api/estimate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                                b"application/json\r\nContent-Length: 100\r\n\r\n{\"model\"")
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
    assert took < 3
    assert b"nosniff" in reply


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_a_non_finite_sweep_value_is_422(client, value):
    r = raw_post(client, "/api/sweep", f'{{"scenario": {{"model": "{MODEL}"}}, "key": "seq_len", "values": [1024, {value}]}}')
    assert_422(r, "values")
    assert "each value must be a finite number or a string" in r.json()["error"]


def test_a_key_given_twice_in_the_body_is_422(client):
    """json.loads keeps the last of two equal keys; the body is refused instead (service.parse_body, unique_pairs)."""
    r = client.post("/api/estimate", content=b'{"model": "meta-llama/Llama-2-7b-hf", "method": "lora", "method": "qlora"}',
                    headers={"content-type": "application/json"})
    assert r.status_code == 422
    assert r.json() == {"error": "body: request body gives the key 'method' twice", "key": "body", "valid": None}


@pytest.mark.parametrize("value, key, words", [
    (["x"], "stacks", "unknown software stack 'x' (valid values: cuda, rocm, habana)"),
    ([1], "stacks", "must be a list of at most 8 software stacks, or a comma-separated string (valid values: cuda, "
                    "rocm, habana)"),
    ({"a": 1}, "stacks", "must be a list of at most 8 software stacks")])
def test_plan_stacks_of_the_wrong_shape_name_the_valid_stacks(client, value, key, words):
    """A list of stacks was refused as 'must be a number', with no valid values."""
    r = client.post("/api/plan", json={"scenario": {"model": MODEL}, "stacks": value})
    assert_422(r, key)
    assert words in r.json()["error"] and r.json()["valid"] == ["cuda", "rocm", "habana"]


def test_plan_reads_its_own_stacks_list_back(client):
    """The plan's JSON writes ``stacks`` as a list; sent back, it plans on those stacks only."""
    body = {"scenario": {"model": MODEL, "method": "qlora"}, "max_gpus": 1, "stacks": ["rocm"]}
    r = client.post("/api/plan", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["inputs"]["stacks"] == ["rocm"]
    assert r.json()["plans"] and {p["stack"] for p in r.json()["plans"]} == {"rocm"}
    assert_422(client.post("/api/plan", json={**body, "stacks": None, "sort": ["time"]}), "sort")
