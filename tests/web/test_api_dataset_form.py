"""POST /api/dataset reads its form as the JSON endpoints read their bodies: the ``scenario`` field is bounded JSON
(deep nesting, 4,300-digit integers and keys given twice are a 422, not a 500 or a silent pick), and a multipart body
Starlette cannot read is a 422 in the API's ``{error, key, valid}`` shape, not Starlette's 400 ``{detail}``."""

from __future__ import annotations

import pytest

ROW = b'{"text": "hello world"}\n'
L8 = "meta-llama/Llama-3.1-8B"


def _post(client, scenario: str):
    return client.post("/api/dataset", files={"file": ("s.jsonl", ROW)}, data={"scenario": scenario})


def test_a_deeply_nested_scenario_is_a_422(client):
    r = _post(client, '{"a":' * 3000 + "1" + "}" * 3000)
    assert r.status_code == 422, r.text
    assert r.json() == {"error": "scenario: the scenario field is nested too deeply", "key": "scenario", "valid": None}


@pytest.mark.parametrize("digits", [31, 5001])  # beyond 2**63-1, and beyond Python's 4,300-digit limit
def test_a_huge_integer_in_the_scenario_names_its_field(client, digits):
    r = _post(client, f'{{"model": "{L8}", "seq_len": 1{"0" * (digits - 1)}}}')
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["key"] == "seq_len" and body["valid"] is None
    assert body["error"].startswith(f"seq_len: an integer of {digits} digits is out of range")
    assert "set_int_max_str_digits" not in body["error"]


def test_a_key_given_twice_in_the_scenario_is_refused(client):
    r = _post(client, f'{{"model": "{L8}", "gpu": "rtx4090", "gpu": "h100-sxm"}}')
    assert r.status_code == 422, r.text
    assert r.json() == {"error": "scenario: the scenario field gives the key 'gpu' twice", "key": "scenario",
                        "valid": None}


def test_malformed_scenario_json_keeps_its_key(client):
    r = _post(client, "{")
    assert r.status_code == 422 and r.json()["key"] == "scenario"
    assert r.json()["error"].startswith("scenario: the scenario field is not valid JSON (")


@pytest.mark.parametrize(("kwargs", "detail"), [
    ({"files": [("file", ("a.jsonl", ROW)), ("file", ("b.jsonl", ROW))]}, "Too many files"),
    ({"files": {"file": ("a.jsonl", ROW)}, "data": {"a": "1", "b": "2", "c": "3"}}, "Too many fields"),
    ({"content": b"xx", "headers": {"content-type": "multipart/form-data; boundary=zz"}}, "Invalid multipart data"),
])
def test_unreadable_multipart_bodies_are_422_in_the_api_shape(client, kwargs, detail):
    r = client.post("/api/dataset", **kwargs)
    assert r.status_code == 422, r.text
    body = r.json()
    assert set(body) == {"error", "key", "valid"} and body["key"] == "body"
    assert body["error"].startswith("body: the multipart upload cannot be read: ") and detail in body["error"]
    assert body["valid"] == ["file", "scenario"]


def test_a_csv_upload_with_a_byte_order_mark_finds_its_text_column(client):
    r = client.post("/api/dataset", files={"file": ("excel.csv", b"\xef\xbb\xbftext\nhello there\n")})
    assert r.status_code == 200, r.text
    assert r.json()["rows"] == 1 and r.json()["fields"] == "text (text)"
