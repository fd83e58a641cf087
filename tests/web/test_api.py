"""The JSON API in-process (TestClient): results, and every kind of bad input answered with 422."""

from __future__ import annotations

import json

import pytest

from vramfit.errors import ScenarioError
from vramfit.estimate import estimate
from vramfit.models import load_catalog
from vramfit.plan.verdict import estimate_fits
from vramfit.scenario import SCENARIO_KEYS, parse_scenario
from vramfit.web.service import MAX_BODY_BYTES

MODEL = "meta-llama/Llama-2-7b-hf"
CONFIG = next(e["config"] for e in load_catalog() if e["id"] == MODEL)


def post(client, path, body):
    return client.post(path, json=body)


def assert_error(r, key, status=422):
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error", "key", "valid"}
    assert body["key"] == key
    assert body["error"].startswith(f"{key}:")
    return body


# ----------------------------------------------------------------------------- results
def test_estimate_is_the_result_object_of_the_library(client):
    body = {"model": MODEL, "method": "qlora", "seq_len": 4096, "gpu": "rtx4090"}
    r = post(client, "/api/estimate", body)
    assert r.status_code == 200
    # the library figure, with the card verdicts the planner adds at the face (vramfit.plan.verdict)
    assert r.json() == json.loads(json.dumps(estimate_fits(body).to_dict()))
    assert set(r.json()) >= {"scenario", "model", "peak", "components", "assumptions"}


@pytest.mark.parametrize("alias", ["meta-llama/Llama-2-7b-chat-hf", " META-LLAMA/llama-2-7b-HF "], ids=["alias", "case"])
def test_catalog_aliases_are_accepted(client, alias):
    r = post(client, "/api/estimate", {"model": alias})
    assert r.status_code == 200 and r.json()["model"]["id"] == MODEL


def test_params_give_a_generic_model(client):
    r = post(client, "/api/estimate", {"params": "7B", "method": "lora"})
    assert r.status_code == 200 and r.json()["model"]["origin"] == "generic"


def test_dashed_keys_are_accepted_as_on_the_cli(client):
    r = post(client, "/api/estimate", {"model": MODEL, "micro-batch-size": 2})
    assert r.status_code == 200 and r.json()["scenario"]["micro_batch_size"] == 2


def test_pasted_config_gives_the_catalog_figure(client):
    r = post(client, "/api/estimate", {"config_json": CONFIG, "method": "lora"})
    assert r.status_code == 200
    cat = estimate(model=MODEL, method="lora").to_dict()
    assert r.json()["peak"] == cat["peak"]
    assert r.json()["model"]["num_params"] == cat["model"]["num_params"]
    assert r.json()["model"]["origin"] == "config-file"


def test_sweep_returns_one_point_per_value(client):
    values = [1024, 2048, 4096]
    r = post(client, "/api/sweep", {"scenario": {"model": MODEL}, "key": "seq_len", "values": values})
    assert r.status_code == 200
    points = r.json()["points"]
    assert [p["value"] for p in points] == values
    peaks = [p["peak"]["device_bytes"] for p in points]
    assert peaks == sorted(peaks) and peaks[0] < peaks[-1]
    assert peaks[1] == estimate(model=MODEL, seq_len=2048).peak.device_bytes


def test_sweep_of_a_pasted_config(client):
    r = post(client, "/api/sweep", {"scenario": {"config_json": CONFIG}, "key": "micro_batch_size", "values": [1, 2]})
    assert r.status_code == 200
    assert r.json()["points"][0]["peak"]["device_bytes"] == estimate(model=MODEL).peak.device_bytes


def test_sweep_point_that_is_invalid_carries_its_error(client):
    r = post(client, "/api/sweep", {"scenario": {"model": MODEL, "method": "full"}, "key": "quantize",
                                    "values": ["none", "nf4"]})
    assert r.status_code == 200
    a, b = r.json()["points"]
    assert "peak" in a and b["error"].startswith("quantize:")


def test_models_search_by_words(client):
    r = client.get("/api/models", params={"q": "llama 8b"})
    ids = [m["id"] for m in r.json()]
    assert r.status_code == 200 and "meta-llama/Llama-3.1-8B" in ids
    assert all("8b" in i.lower() for i in ids)
    assert len(client.get("/api/models").json()) == len(load_catalog())


def test_gpus_lists_the_catalog_by_memory(client):
    gpus = client.get("/api/gpus").json()
    assert {"rtx4090", "h100-sxm"} <= {g["gpu_id"] for g in gpus}
    assert [g["usable_bytes"] for g in gpus] == sorted(g["usable_bytes"] for g in gpus)


def test_estimate_says_a_sequence_past_the_trained_context(client):
    """The page shows the API's assumptions: the line estimate's CLI prints (vramfit.models.context)."""
    from vramfit.models.context import past_context_note

    r = post(client, "/api/estimate", {"model": "meta-llama/Llama-2-7b-hf", "method": "qlora", "seq_len": 8192})
    assert r.status_code == 200
    assert r.json()["assumptions"][0] == past_context_note(8192, 4096)
    r = post(client, "/api/estimate", {"model": "meta-llama/Llama-2-7b-hf", "method": "qlora", "seq_len": 4096})
    assert not [a for a in r.json()["assumptions"] if "past the model's context" in a]


def test_gpus_say_which_cards_have_no_bf16(client):
    """bf16_tflops (a contract name, kept) is the FP16 peak where the card has no BF16: supports_bf16 says which,
    and the schema says what the figure is."""
    gpus = {g["gpu_id"]: g for g in client.get("/api/gpus").json()}
    assert (gpus["t4"]["bf16_tflops"], gpus["t4"]["supports_bf16"]) == (65.0, False)
    assert (gpus["v100-sxm2-16gb"]["bf16_tflops"], gpus["v100-sxm2-16gb"]["supports_bf16"]) == (125.0, False)
    assert (gpus["a100-80gb-sxm"]["bf16_tflops"], gpus["a100-80gb-sxm"]["supports_bf16"]) == (312.0, True)
    props = client.get("/openapi.json").json()["components"]["schemas"]["GpuOut"]["properties"]
    assert "FP16 peak" in props["bf16_tflops"]["description"] and "supports_bf16" in props


def test_plan_ranks_cards_with_time_and_cost(client):
    r = post(client, "/api/plan", {"scenario": {"model": MODEL, "method": "qlora"}, "dataset_tokens": "50M"})
    assert r.status_code == 200
    report = r.json()
    assert report["plans"] and report["inputs"]["dataset_tokens"] == 50_000_000
    cards = {p["gpu_id"] for p in report["plans"]}
    assert "rtx4090" in cards and all(p["device_bytes"] <= p["usable_bytes"] for p in report["plans"])
    assert any(p["hours"] and p["cost_usd_low"] for p in report["plans"])


def test_plan_for_a_named_card_gives_changes_that_fit(client):
    body = {"scenario": {"model": MODEL, "seq_len": 8192, "gpu": "rtx4090"}}
    report = post(client, "/api/plan", body).json()
    assert {p["gpu_id"] for p in report["plans"]} <= {"rtx4090"}
    assert any(c["fits"] for c in report["changes"]["rtx4090"])


def test_plan_of_a_pasted_config_is_refused_with_a_reason(client):
    assert_error(post(client, "/api/plan", {"scenario": {"config_json": CONFIG}}), "config_json")


BAD_PLANS = [
    ("tokens", {"dataset_tokens": "lots"}, "dataset_tokens"),
    ("negative-tokens", {"dataset_tokens": -5}, "dataset_tokens"),
    ("epochs", {"epochs": 0}, "epochs"),
    ("epochs-text", {"epochs": "two"}, "epochs"),
    ("margin", {"safety_margin": 1.5}, "safety_margin"),
    ("mfu", {"mfu": 2}, "mfu"),
    ("max-gpus", {"max_gpus": 0}, "max_gpus"),
    ("budget", {"budget_usd": -1}, "budget_usd"),
    ("gpu-ids-type", {"gpu_ids": 7}, "gpu_ids"),
    ("gpu-ids-unknown", {"gpu_ids": ["rtx9090"]}, "gpu_ids"),
    ("object-option", {"epochs": {"a": 1}}, "epochs"),
    ("unknown-option", {"price": 3}, "price"),
    ("effective-batch", {"effective_batch": 0}, "effective_batch"),
]


@pytest.mark.parametrize(("extra", "key"), [(e, k) for _, e, k in BAD_PLANS], ids=[i for i, _, _ in BAD_PLANS])
def test_bad_plan_input_is_422(client, extra, key):
    assert_error(post(client, "/api/plan", {"scenario": {"model": MODEL}, **extra}), key)


# ------------------------------------------------------------------------ bad scenarios
BAD_SCENARIOS = [
    ("enum", {"model": MODEL, "method": "dora"}, "method"),
    ("unknown-key", {"model": MODEL, "batch": 4}, "batch"),
    ("zero", {"model": MODEL, "seq_len": 0}, "seq_len"),
    ("too-big", {"model": MODEL, "micro_batch_size": 10**12}, "micro_batch_size"),
    ("not-a-number", {"model": MODEL, "grad_accum": "many"}, "grad_accum"),
    ("fraction", {"model": MODEL, "num_gpus": 1.5}, "num_gpus"),
    ("list-for-int", {"model": MODEL, "lora_rank": [8]}, "lora_rank"),
    ("bool-for-int", {"model": MODEL, "seq_len": True}, "seq_len"),
    ("negative-alpha", {"model": MODEL, "lora_alpha": -1}, "lora_alpha"),
    ("bad-bool", {"model": MODEL, "optimizer_in_backward": "maybe"}, "optimizer_in_backward"),
    ("bad-targets", {"model": MODEL, "lora_targets": ["q_proj; rm -rf /"]}, "lora_targets"),
    ("no-model", {"method": "lora"}, "model"),
    ("model-and-params", {"model": MODEL, "params": "7B"}, "model"),
    ("bad-params", {"params": "seven"}, "params"),
    ("huge-params", {"params": "1e20"}, "params"),
    ("full-quantized", {"model": MODEL, "method": "full", "quantize": "nf4"}, "quantize"),
    ("qlora-unquantized", {"model": MODEL, "method": "qlora", "quantize": "none"}, "quantize"),
    ("gpus-no-parallelism", {"model": MODEL, "num_gpus": 4, "parallelism": "none"}, "parallelism"),
    ("offload-ddp", {"model": MODEL, "offload": "optimizer"}, "offload"),
    ("unknown-gpu", {"model": MODEL, "gpu": "rtx9090"}, "gpu"),
    ("model-not-string", {"model": 7}, "model"),
    ("reference-free-with-copy", {"model": MODEL, "stage": "simpo", "reference": "copy"}, "reference"),
    ("grpo-indivisible", {"model": MODEL, "stage": "grpo", "num_generations": 4, "micro_batch_size": 2, "grad_accum": 1}, "num_generations"),
    ("colocate-no-card", {"model": MODEL, "stage": "grpo", "micro_batch_size": 8, "generation": "vllm-colocate"}, "gpu"),
    ("saved-module-unknown", {"model": MODEL, "modules_to_save": ["score"]}, "modules_to_save"),
    ("saved-module-full", {"model": MODEL, "method": "full", "modules_to_save": "lm_head"}, "modules_to_save"),
]


@pytest.mark.parametrize(("body", "key"), [(b, k) for _, b, k in BAD_SCENARIOS], ids=[i for i, _, _ in BAD_SCENARIOS])
def test_bad_scenario_is_422_with_the_cli_message(client, body, key):
    err = assert_error(post(client, "/api/estimate", body), key)
    if body.get("model") == MODEL or "params" in body and "model" not in body:
        with pytest.raises(ScenarioError) as exc:
            parse_scenario(body)
            estimate(body)
        assert err["error"] == str(exc.value)  # the CLI's message, word for word


def test_enum_error_lists_the_valid_values(client):
    err = assert_error(post(client, "/api/estimate", {"model": MODEL, "attention": "xformers"}), "attention")
    assert err["valid"] == ["sdpa", "flash", "eager"]


def test_unknown_key_lists_the_scenario_keys(client):
    err = assert_error(post(client, "/api/estimate", {"model": MODEL, "sequence_length": 4096}), "sequence_length")
    assert err["valid"] == list(SCENARIO_KEYS)


def test_the_cli_prints_the_same_message():
    from typer.testing import CliRunner

    from vramfit.cli.main import app as cli

    out = CliRunner().invoke(cli, ["estimate", "--model", MODEL, "--method", "dora"])
    assert out.exit_code == 2
    with pytest.raises(ScenarioError) as exc:
        parse_scenario({"model": MODEL, "method": "dora"})
    assert str(exc.value) in " ".join(out.output.split())


# ----------------------------------------------------- no paths, no URLs, no Hub lookups
@pytest.mark.parametrize("model", [
    "/etc/passwd", "../../config.json", "~/.ssh/config.json", "config.json", "C:\\models\\config.json",
    "https://example.com/config.json", "file:///etc/passwd", "some-org/some-model", "generic:7B",
], ids=["abs", "rel", "home", "bare", "windows", "url", "file-url", "hub-id", "generic"])  # a release name resolves
# offline to its catalog id, as the CLI reads it (tests/web/test_api_release_names.py)
def test_model_outside_the_catalog_is_refused_before_resolution(client, model):
    err = assert_error(post(client, "/api/estimate", {"model": model}), "model")
    assert "not in the bundled catalog" in err["error"]
    assert MODEL in err["valid"]


def test_refused_model_suggests_close_catalog_names(client):
    err = assert_error(post(client, "/api/estimate", {"model": "meta-llama/Llama-2-7b"[:-1] + "c"}), "model")
    assert "did you mean" in err["error"]


@pytest.mark.parametrize("path", ["/api/plan", "/api/sweep"])
def test_plan_and_sweep_refuse_paths_too(client, path):
    body = {"scenario": {"model": "/etc/passwd"}, "key": "seq_len", "values": [1]}
    if path == "/api/plan":
        body = {"scenario": {"model": "/etc/passwd"}}
    assert_error(post(client, path, body), "model")

JSON = {"content-type": "application/json"}


# ----------------------------------------------------------------------- bad bodies
@pytest.mark.parametrize("raw", [b"{", b"not json", b"\xff\xfe{}", b"", b'{"model": "x",}'],
                         ids=["truncated", "text", "not-utf8", "empty", "trailing-comma"])
def test_malformed_body_is_422(client, raw):
    assert_error(client.post("/api/estimate", content=raw, headers={"content-type": "application/json"}), "body")


@pytest.mark.parametrize("raw", [b"[]", b'"model"', b"7", b"null", b'[{"model": "x"}]'],
                         ids=["list", "string", "number", "null", "batch"])
def test_body_that_is_not_an_object_is_422(client, raw):
    assert_error(client.post("/api/estimate", content=raw, headers=JSON), "scenario")


@pytest.mark.parametrize("raw", [b'{"model": "%s", "lora_alpha": NaN}' % MODEL.encode(),
                                 b'{"model": "%s", "seq_len": Infinity}' % MODEL.encode()], ids=["nan", "infinity"])
def test_non_finite_numbers_are_422(client, raw):
    r = client.post("/api/estimate", content=raw, headers=JSON)
    assert r.status_code == 422 and r.json()["key"] in ("lora_alpha", "seq_len")


def test_deeply_nested_body_is_422(client):
    raw = b"[" * 100_000 + b"]" * 100_000
    r = client.post("/api/estimate", content=raw[: MAX_BODY_BYTES - 1], headers=JSON)
    assert r.status_code == 422


def test_oversized_body_is_413(client):
    body = {"model": MODEL, "lora_targets": ["q_proj"] * (MAX_BODY_BYTES // 8)}
    assert_error(post(client, "/api/estimate", body), "body", status=413)


def test_oversized_body_without_length_is_413(client):
    def chunks():
        for _ in range(64):
            yield b" " * 8192

    r = client.post("/api/estimate", content=chunks(), headers={"content-type": "application/json"})
    assert_error(r, "body", status=413)


@pytest.mark.parametrize("kind", [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data"])
@pytest.mark.parametrize("path", ["/api/estimate", "/api/plan", "/api/sweep", "/api/export", "/api/import"])
def test_a_json_route_takes_only_a_json_body(client, path, kind):
    """A form or text/plain post is a CORS "simple request": another site's page could send it to this server without
    a preflight; only application/json (with or without a charset) is read."""
    body = json.dumps({"model": MODEL}).encode()
    r = client.post(path, content=body, headers={"content-type": kind} if kind else {})
    assert_error(r, "body", status=415)
    assert r.json()["valid"] == ["application/json"]
    ok = client.post("/api/estimate", content=body, headers={"content-type": "Application/JSON; charset=utf-8"})
    assert ok.status_code == 200


def test_lying_content_length_is_413(client):
    r = client.post("/api/estimate", content=b"{}", headers={"content-length": str(10**9)})
    assert r.status_code in (400, 413)


# ------------------------------------------------------------------- pasted configs
BAD_CONFIGS = [
    ("not-object", [1, 2], "must be a JSON object"),
    ("string", "{\"model_type\": \"llama\"}", "must be a JSON object"),
    ("empty", {}, ""),
    ("unknown-type", {**CONFIG, "model_type": "evil_remote_code"}, ""),
    ("missing-field", {k: v for k, v in CONFIG.items() if k != "hidden_size"}, "hidden_size"),
    ("negative", {**CONFIG, "num_attention_heads": -4}, "num_attention_heads"),
    ("string-number", {**CONFIG, "hidden_size": "4096"}, "hidden_size"),
    ("too-many-layers", {**CONFIG, "num_hidden_layers": 10**9}, "layers"),
    ("long-list", {**CONFIG, "layer_types": ["full_attention"] * 5000}, "list"),
    ("deep", {**CONFIG, "x": json.loads("[" * 40 + "]" * 40)}, "nested"),
    ("code", {**CONFIG, "auto_map": {"AutoModel": "evil.Model"}, "model_type": "evil"}, ""),
]


@pytest.mark.parametrize(("config", "words"), [(c, w) for _, c, w in BAD_CONFIGS], ids=[i for i, _, _ in BAD_CONFIGS])
def test_bad_pasted_config_is_422(client, config, words):
    err = assert_error(post(client, "/api/estimate", {"config_json": config}), "config_json")
    assert words in err["error"]


def test_pasted_config_with_a_model_too_is_422(client):
    assert_error(post(client, "/api/estimate", {"config_json": CONFIG, "model": MODEL}), "config_json")


def test_pasted_config_with_auto_map_is_read_as_data_only(client):
    r = post(client, "/api/estimate", {"config_json": {**CONFIG, "auto_map": {"AutoModel": "evil.Model"}}})
    assert r.status_code == 200  # auto_map is ignored: nothing is imported or executed


# -------------------------------------------------------------------- sweep and plan
BAD_SWEEPS = [
    ("bad-key", {"scenario": {"model": MODEL}, "key": "model", "values": ["x"]}, "key"),
    ("no-key", {"scenario": {"model": MODEL}, "values": [1]}, "key"),
    ("no-values", {"scenario": {"model": MODEL}, "key": "seq_len"}, "values"),
    ("values-not-list", {"scenario": {"model": MODEL}, "key": "seq_len", "values": 4096}, "values"),
    ("empty-values", {"scenario": {"model": MODEL}, "key": "seq_len", "values": []}, "values"),
    ("too-many", {"scenario": {"model": MODEL}, "key": "seq_len", "values": list(range(1, 200))}, "values"),
    ("object-value", {"scenario": {"model": MODEL}, "key": "seq_len", "values": [{"a": 1}]}, "values"),
    ("no-scenario", {"key": "seq_len", "values": [1]}, "scenario"),
    ("extra-field", {"scenario": {"model": MODEL}, "key": "seq_len", "values": [1], "x": 1}, "x"),
    ("bad-scenario", {"scenario": {"model": MODEL, "loss": "l2"}, "key": "seq_len", "values": [1]}, "loss"),
    ("scenario-not-object", {"scenario": "llama", "key": "seq_len", "values": [1]}, "scenario"),
]


@pytest.mark.parametrize(("body", "key"), [(b, k) for _, b, k in BAD_SWEEPS], ids=[i for i, _, _ in BAD_SWEEPS])
def test_bad_sweep_is_422(client, body, key):
    assert_error(post(client, "/api/sweep", body), key)


def test_sweep_body_not_object_is_422(client):
    assert_error(post(client, "/api/sweep", [1]), "body")


def test_query_errors_use_the_same_shape(client):
    assert_error(client.get("/api/models", params={"q": "x" * 500}), "q")


def test_modules_to_save_from_a_list_or_the_form_string(client):
    """The form sends the field's comma-separated text; the API takes a list too: both train the two copies."""
    plain = post(client, "/api/estimate", {"model": MODEL}).json()
    for given in (["embed_tokens", "lm_head"], "embed_tokens, lm_head"):
        r = post(client, "/api/estimate", {"model": MODEL, "modules_to_save": given})
        assert r.status_code == 200
        body = r.json()
        assert body["scenario"]["modules_to_save"] == ["embed_tokens", "lm_head"]
        assert body["model"]["num_trainable_params"] > plain["model"]["num_trainable_params"]
        assert any(a.startswith("modules_to_save: whole trained copies of embed_tokens, lm_head") for a in body["assumptions"])
