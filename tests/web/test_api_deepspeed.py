"""The API takes a DeepSpeed config as pasted JSON, never as a path on the server; results carry accuracy."""

from __future__ import annotations

MODEL = "meta-llama/Llama-3.1-8B"


def test_pasted_deepspeed_config_is_read_and_a_path_is_refused(client):
    ds = '{"zero_optimization": {"stage": 2, "reduce_bucket_size": 1e8, "overlap_comm": false}}'
    r = client.post("/api/estimate", json={"model": MODEL, "method": "full", "num_gpus": 4, "deepspeed_config": ds})
    assert r.status_code == 200, r.text
    d = r.json()
    block = next(p for p in d["phases"] if p["phase"] == "backward-block")  # ZeRO-2's bucket: from the first hook on
    assert block["breakdown"]["comm_buffers"] == 100_000_000 * 2
    # measured since DeepSpeed's Muon blog figure (found.jsonl DS_MUON_2605-1: Qwen2.5-3B full fine-tuning, ZeRO-2)
    assert d["accuracy"]["path"]["sharding"] == "zero2" and d["accuracy"]["measured_path"] is True
    assert d["accuracy"]["cases"] == ["DS_MUON_2605-1"]
    bad = client.post("/api/estimate", json={"model": MODEL, "deepspeed_config": "/etc/hostname"})
    assert bad.status_code == 422 and "paste the DeepSpeed config's JSON" in bad.text


def test_a_pasted_deepspeed_config_is_bounded_like_every_pasted_text(client):
    deep = client.post("/api/estimate", json={"model": MODEL, "deepspeed_config": '{"a":' * 3000 + "1" + "}" * 3000})
    assert deep.status_code == 422, deep.text
    assert deep.json() == {"error": "deepspeed_config: the pasted config is nested too deeply (more than 12 levels: "
                                    "MAX_CONFIG_DEPTH)", "key": "deepspeed_config", "valid": None}
    big = client.post("/api/estimate", json={"model": MODEL, "deepspeed_config": '{"a": 1' + "0" * 5000 + "}"})
    assert big.status_code == 422, big.text
    assert big.json()["error"] == "deepspeed_config: the pasted config holds a number too large to read (over 4,300 digits)"
    twice = client.post("/api/estimate", json={"model": MODEL, "deepspeed_config": '{"a": 1, "a": 2}'})
    assert twice.status_code == 422 and twice.json()["error"] == "deepspeed_config: the pasted config gives the key 'a' twice"


def test_an_offload_section_that_is_not_a_mapping_is_422(client):
    """DeepSpeed's config model takes ``offload_param: {"device": "cpu"}``; the word alone used to read as no offload."""
    ds = '{"zero_optimization": {"stage": 3, "offload_param": "cpu"}}'
    r = client.post("/api/estimate", json={"model": MODEL, "method": "full", "num_gpus": 4, "deepspeed_config": ds})
    assert r.status_code == 422 and r.json()["key"] == "deepspeed_config"
    assert "offload_param must be a mapping such as {\"device\": \"cpu\"}, got 'cpu'" in r.json()["error"]
