"""A config.json routing each token to more experts than it has is refused (was accepted and estimated): one
ModelError naming both fields, for every MoE family's expert-count field, the CLI (exit 2) and the web API (422)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from vramfit.cli.main import app
from vramfit.errors import ModelError
from vramfit.models import load_catalog
from vramfit.models.hf_config import spec_from_hf_config


def _config(model_id: str) -> dict:
    return dict(next(e["config"] for e in load_catalog() if e["id"] == model_id))


@pytest.mark.parametrize("model_id, field, total", [
    ("mistralai/Mixtral-8x7B-v0.1", "num_local_experts", 8),
    ("Qwen/Qwen3-30B-A3B", "num_experts", 128),
    ("deepseek-ai/DeepSeek-V3", "n_routed_experts", 256),
])
def test_more_experts_per_token_than_experts_is_a_model_error(model_id, field, total):
    cfg = _config(model_id)
    assert cfg[field] == total
    spec_from_hf_config({**cfg, "num_experts_per_tok": total})  # all of them: allowed
    with pytest.raises(ModelError) as info:
        spec_from_hf_config({**cfg, "num_experts_per_tok": total + 1})
    assert str(info.value) == (f"model: config.json field 'num_experts_per_tok' ({total + 1}) must be at most "
                               f"{field!r} ({total}): a token is routed to that many of the experts")


def test_the_text_config_of_a_multimodal_moe_is_checked_too():
    cfg = _config("meta-llama/Llama-4-Scout-17B-16E")
    text = {**cfg["text_config"], "num_experts_per_tok": 17}
    with pytest.raises(ModelError, match=r"field 'text_config\.num_experts_per_tok' \(17\) must be at most "
                                         r"'num_local_experts' \(16\)"):
        spec_from_hf_config({**cfg, "text_config": text})


def test_cli_and_web_refuse_it(tmp_path, monkeypatch):
    bad = {**_config("mistralai/Mixtral-8x7B-v0.1"), "num_local_experts": 2, "num_experts_per_tok": 8}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(bad))
    r = CliRunner().invoke(app, ["estimate", "--model", str(path)])
    assert r.exit_code == 2 and r.stdout == "" and "Traceback" not in r.output
    assert r.stderr == (f"error: model: {path}: config.json field 'num_experts_per_tok' (8) must be at most "
                        "'num_local_experts' (2): a token is routed to that many of the experts\n")
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from vramfit.web import create_app

    with TestClient(create_app(), base_url="http://localhost") as client:
        w = client.post("/api/estimate", json={"config_json": bad})
    assert w.status_code == 422 and w.json()["key"] == "config_json"
    assert "'num_experts_per_tok' (8) must be at most 'num_local_experts' (2)" in w.json()["error"]
    from vramfit.web.translate import to_pt

    assert to_pt(w.json()["error"]) == ("config_json: o campo 'num_experts_per_tok' do config.json (8) não pode ser "
                                        "maior do que 'num_local_experts' (2): cada token é encaminhado para esse "
                                        "número de especialistas")
