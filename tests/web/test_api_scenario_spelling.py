"""A scenario field named twice (``seq-len`` and ``seq_len``) is refused naming both spellings, and numbers must be
written with the digits 0-9: Python's int() and float() read Arabic-Indic and fullwidth digits."""

from __future__ import annotations

import pytest

from vramfit.errors import ScenarioError
from vramfit.scenario import parse_scenario

L8 = "meta-llama/Llama-3.1-8B"


def test_a_field_named_twice_is_a_422_naming_both(client):
    r = client.post("/api/estimate", json={"model": L8, "seq-len": 1024, "seq_len": 2048})
    assert r.status_code == 422, r.text
    assert r.json() == {"error": "seq_len: is given twice, as 'seq-len' and 'seq_len'; give it once",
                        "key": "seq_len", "valid": None}
    with pytest.raises(ScenarioError, match=r"^micro_batch_size: is given twice, as 'micro_batch_size' and "
                                            r"'micro-batch-size'"):
        parse_scenario({"model": L8, "micro_batch_size": 1, "micro-batch-size": 2})  # a YAML file or the CLI


@pytest.mark.parametrize(("key", "value", "what"), [
    ("seq_len", "٣٢", "an integer from 1 to 10000000"), ("seq_len", "１０２４", "an integer from 1 to 10000000"),
    ("lora_alpha", "٣٢", "a positive number")])
def test_numbers_in_other_digits_are_refused(client, key, value, what):
    r = client.post("/api/estimate", json={"model": L8, key: value})
    assert r.status_code == 422, r.text
    assert r.json()["key"] == key
    assert r.json()["error"] == f"{key}: must be {what} written with the digits 0-9, got '{value}'"


def test_the_new_messages_have_portuguese():
    from vramfit.web.translate import untranslated

    assert untranslated(["seq_len: is given twice, as 'seq-len' and 'seq_len'; give it once",
                         "seq_len: must be an integer from 1 to 10000000 written with the digits 0-9, got '٣٢'",
                         "lora_alpha: must be a positive number written with the digits 0-9, got '٣٢'"]) == []
