"""The HTML pages, static files, OpenAPI schema and `vramfit serve`, in-process."""

from __future__ import annotations

import json
import re

import pytest

from vramfit.scenario import SCENARIO_KEYS
from vramfit.web import guide
from vramfit.web.i18n import STRINGS
from vramfit.web.schemas import ScenarioIn

EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["'](?:https?:)?//""", re.I)


@pytest.mark.parametrize("path", ["/", "/?lang=pt", "/guide", "/guide?lang=pt"])
def test_pages_render_and_load_nothing_from_elsewhere(client, path):
    r = client.get(path)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert not EXTERNAL.search(r.text), "a page links a script or style from another host"
    assert '<script src="/vendor/plotly.min.js">' in r.text
    assert "script-src 'self'" in r.headers["content-security-policy"]


def test_calculator_has_a_field_for_every_scenario_key(client):
    html = client.get("/").text
    for key in SCENARIO_KEYS:
        assert f'id="f-{key}"' in html, f"no form field for scenario key {key}"


def test_schema_has_every_scenario_key():
    assert set(SCENARIO_KEYS) <= set(ScenarioIn.model_fields)


def test_every_string_has_both_languages():
    assert all(len(v) == 2 for v in STRINGS.values())
    missing = [k for k, (en, pt) in STRINGS.items() if not (en and pt) and k != "assumptions.en"]
    assert not missing


@pytest.mark.parametrize(("lang", "title", "html_lang"), [
    ("en", "GPU memory for fine-tuning", 'lang="en"'), ("pt", "Memória de GPU para ajuste fino", 'lang="pt-PT"')])
def test_calculator_language(client, lang, title, html_lang):
    html = client.get("/", params={"lang": lang}).text
    assert title in html and html_lang in html


def test_language_switch_keeps_the_scenario(client):
    html = client.get("/?model=meta-llama%2FLlama-2-7b-hf&seq_len=4096").text
    link = re.search(r'id="lang-switch" href="([^"]+)"', html).group(1)
    assert "seq_len=4096" in link and "lang=pt" in link
    html = client.get("/?model=x&lang=pt").text
    link = re.search(r'id="lang-switch" href="([^"]+)"', html).group(1)
    assert "lang=" not in link and "model=x" in link


@pytest.mark.parametrize("lang", ["en", "pt"])
def test_guide_tables_are_computed(client, lang):
    from vramfit.web.i18n import fmt_number

    html = client.get("/guide", params={"lang": lang}).text
    sizing = guide.sizing()
    assert len(sizing["rows"]) == 12
    n = lambda v, d=1: fmt_number(v, lang, d)  # noqa: E731 - as the page writes it
    for row in sizing["rows"]:
        assert f'>{n(row["peak_gib"])}</a>' in html and f'>{n(row["ckpt_gib"])}</a>' in html
        for claim in row["claims"]:
            assert f'>{n(claim["gib"])}</td>' in html
    for row in guide.lora_share()["rows"]:
        wide_s = row["wide_s"].replace(".", ",") if lang == "pt" else row["wide_s"]
        assert wide_s in html and fmt_number(row["wide"], lang) in html
    for row in guide.accumulation()["rows"]:
        assert f'>{n(row["peak_gib"])}</a>' in html
    assert 'id="fig-breakdown"' in html and 'id="fig-seq"' in html


def test_guide_numbers_follow_the_estimator():
    from vramfit.estimate import estimate
    from vramfit.plan import guide_table

    row = guide.sizing()["by"]["7B"]["lora"]
    s = guide_table().settings
    keys = {"model": "meta-llama/Llama-2-7b-hf", "method": "lora", "seq_len": s["seq_len"],
            "micro_batch_size": s["micro_batch_size"], "lora_rank": s["lora_rank"]}
    assert row["peak_gib"] == round(estimate(keys).peak.device_bytes / 2**30, 1)
    assert row["ckpt_gib"] == round(estimate(keys, gradient_checkpointing="full").peak.device_bytes / 2**30, 1)
    bar = guide.breakdown()["bars"][2]
    assert bar["recipe"] == "lora" and bar["peak_gib"] == row["peak_gib"]


def test_guide_cells_link_to_the_calculator(client):
    html = client.get("/guide?lang=pt").text
    assert 'href="/?model=meta-llama%2FLlama-2-7b-hf' in html and "&amp;lang=pt" in html


def test_guide_prose_differs_by_language(client):
    en = client.get("/guide").text
    pt = client.get("/guide?lang=pt").text
    assert "Memory decides first" in en and "A memória decide primeiro" in pt


def test_plotly_is_served_locally(client):
    r = client.get("/vendor/plotly.min.js")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/javascript")
    assert len(r.content) > 1_000_000


def test_plotly_is_sent_precompressed_or_plain(client):
    """gzip from the cached compressed copy (the middleware leaves it alone); identity when not accepted."""
    from vramfit.web.app import plotly_js_path

    original = plotly_js_path().read_bytes()
    gz = client.get("/vendor/plotly.min.js", headers={"Accept-Encoding": "gzip"})
    assert gz.headers["content-encoding"] == "gzip" and gz.headers["vary"] == "Accept-Encoding"
    assert int(gz.headers["content-length"]) < len(original) // 2  # compressed on the wire
    assert gz.content == original  # httpx decodes it: the same bundle
    plain = client.get("/vendor/plotly.min.js", headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in plain.headers and plain.content == original


@pytest.mark.parametrize("name", ["app.js", "form.js", "fits.js", "charts.js", "guide.js", "style.css"])
def test_static_files_are_served_and_reference_no_cdn(client, name):
    r = client.get(f"/static/{name}")
    assert r.status_code == 200
    assert "cdn." not in r.text and "https://" not in r.text


def test_security_headers(client):
    h = client.get("/api/gpus").headers
    assert h["x-content-type-options"] == "nosniff" and h["x-frame-options"] == "DENY"


def test_openapi_documents_the_bodies(client):
    spec = client.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    for path, model in [("/api/estimate", "ScenarioIn"), ("/api/plan", "PlanIn"), ("/api/sweep", "SweepIn")]:
        body = spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert body == {"$ref": f"#/components/schemas/{model}"}
        assert model in schemas
        assert "422" in spec["paths"][path]["post"]["responses"]
    assert set(SCENARIO_KEYS) <= set(schemas["ScenarioIn"]["properties"])
    method = json.dumps(schemas["ScenarioIn"]["properties"]["method"])
    assert all(f'"{v}"' in method for v in ("full", "lora", "qlora"))
    assert "EstimateOut" in str(spec["paths"]["/api/estimate"]["post"]["responses"]["200"])
    for ref in re.findall(r'"#/components/schemas/([^"]+)"', str(spec).replace("'", '"')):
        assert ref in schemas, f"dangling $ref {ref}"
    assert {"/api/models", "/api/gpus"} <= set(spec["paths"])


def test_no_swagger_ui_from_a_cdn(client):
    """/docs is our own page (static/apidocs.js reads /openapi.json), not Swagger UI from a CDN."""
    html = client.get("/docs").text
    assert "swagger" not in html.lower() and client.get("/redoc").status_code == 404


def test_serve_prints_the_address(monkeypatch):
    import uvicorn
    from typer.testing import CliRunner

    from vramfit.cli.main import app as cli

    seen = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: seen.update(kw))
    out = CliRunner().invoke(cli, ["serve"])
    assert out.exit_code == 0, out.output
    assert "http://127.0.0.1:8000/" in out.output
    assert seen["host"] == "127.0.0.1" and seen["port"] == 8000
    out = CliRunner().invoke(cli, ["serve", "--host", "0.0.0.0", "--port", "9001"])
    assert "http://0.0.0.0:9001/" in out.output and seen["port"] == 9001


def test_guide_breakdown_bars_add_up_to_the_peak():
    for bar in guide.breakdown()["bars"]:
        assert abs(sum(bar["components"].values()) - bar["peak_gib"]) <= 0.1 * len(bar["components"])


# ---------------------------------------------------------------- issue 18: Portuguese all the way, numbers by page

PT_SCENARIOS = [
    {"model": "meta-llama/Llama-3.1-8B"},
    {"model": "meta-llama/Llama-3.1-8B", "method": "qlora", "optimizer": "paged-adamw-8bit"},
    {"model": "mistralai/Mixtral-8x7B-v0.1", "method": "qlora"},
    {"model": "meta-llama/Llama-2-7b-hf", "method": "full", "precision": "bf16-mixed", "num_gpus": 4,
     "parallelism": "zero3", "gradient_checkpointing": "offload"},
    {"model": "meta-llama/Llama-2-7b-hf", "framework": "torchtune", "method": "qlora"},
    {"params": "7B", "method": "full", "precision": "fp32"},
    {"model": "meta-llama/Llama-3.1-8B-Instruct", "method": "lora", "num_gpus": 2, "parallelism": "ddp"},
]


@pytest.mark.parametrize("keys", PT_SCENARIOS, ids=lambda k: "-".join(str(v) for v in k.values())[:40])
def test_every_assumption_has_portuguese(keys):
    from vramfit.estimate import estimate
    from vramfit.web.translate import untranslated

    assert untranslated(list(estimate(keys).assumptions)) == []


def test_pasted_config_note_has_portuguese():
    from vramfit.models import load_catalog
    from vramfit.web.service import spec_from_pasted
    from vramfit.web.translate import to_pt

    config = next(e["config"] for e in load_catalog() if e["id"] == "Qwen/Qwen2.5-0.5B")
    note = spec_from_pasted(config)[2][0]
    assert to_pt(note).endswith("um config.json colado, lido como dados (24 camadas, hidden 896, vocabulário 151936).")


def test_planner_sentences_have_portuguese():
    from vramfit.plan import plan
    from vramfit.web.translate import to_pt, untranslated

    seen = []
    for keys in ({"model": "meta-llama/Llama-3.1-8B", "method": "full", "gpu": "rtx4090"},
                 {"model": "codellama/CodeLlama-34b-hf", "method": "full", "precision": "bf16-mixed",
                  "gpu": "a100-80gb-sxm"},
                 {"model": "meta-llama/Llama-3.1-8B", "method": "qlora", "gpu": "rtx3060-12gb", "seq_len": 16384},
                 {"model": "mistralai/Mixtral-8x7B-v0.1", "method": "qlora", "optimizer": "paged-adamw-8bit"},
                 {"model": "meta-llama/Llama-2-7b-hf", "method": "full", "precision": "bf16-mixed", "num_gpus": 4,
                  "parallelism": "zero3", "offload": "optimizer+params"}):
        r = plan(keys, dataset_tokens="50M").to_dict()
        seen += [x for cs in r["changes"].values() for c in cs for x in (c["description"], c["tradeoff"])]
        seen += [e["reason"] for e in r["excluded"]] + [n for p in r["plans"] for n in p["notes"]]
    assert untranslated(sorted(set(seen))) == []
    assert to_pt("does not fit 1 x a100-80gb-sxm even with ZeRO-3, checkpointing and offload (at micro-batch 1); "
                 "effective batch 1 allows at most 1 GPUs") == (
        "não cabe em 1 × a100-80gb-sxm nem com ZeRO-3, checkpointing e descarga (com micro-batch 1); "
        "o batch efetivo 1 permite no máximo 1 GPU(s)")


def test_translated_numbers_use_the_decimal_comma():
    from vramfit.web.translate import to_pt

    assert to_pt("Activations are counted tensor by tensor from what autograd saves in a mixtral block "
                 "(3,689.6 MiB per block per micro-batch without checkpointing).").endswith(
        "(3689,6 MiB por bloco e por micro-batch, sem checkpointing).")


def test_translation_rules_are_valid_javascript_regexes():
    """The rules travel to the browser: no Python-only syntax (named groups, lookbehind, inline flags)."""
    from vramfit.web.translate import RULES

    for pattern, repl in RULES:
        assert not re.search(r"\(\?(P<|<[=!]|[aiLmsux])", pattern), pattern
        assert "\\" not in repl, repl


def test_number_format_by_page_language():
    from vramfit.web.i18n import fmt_number

    assert fmt_number(104.5, "pt", 1) == "104,5" and fmt_number(104.5, "en", 1) == "104.5"
    assert fmt_number(6738415616, "pt") == "6 738 415 616" and fmt_number(2048, "pt") == "2048"
    assert fmt_number(0.59, "pt", 2) == "0,59"


def test_pt_guide_numbers_and_why_lines_are_portuguese(client):
    html = client.get("/guide?lang=pt").text
    cells = re.findall(r'<td class="num"><a [^>]*>([^<]*)</a>', html)
    assert cells and all(re.fullmatch(r"\d+,\d", c) for c in cells), cells[:5]
    assert "Section 0" not in html and "The guide counts" not in html
    assert "pára" not in html


def test_api_docs_page_is_served_from_here(client):
    r = client.get("/docs")
    assert r.status_code == 200 and '<script src="/static/apidocs.js">' in r.text
    assert not EXTERNAL.search(r.text)


def test_export_gives_the_planner_files(client):
    from vramfit.plan import plan
    from vramfit.plan.export import export_plan

    scenario = {"model": "meta-llama/Llama-3.1-8B", "method": "lora"}
    r = client.post("/api/export", json={"scenario": scenario, "gpu_id": "rtx4090", "num_gpus": 1, "engine": "trl"})
    assert r.status_code == 200
    want = export_plan(plan(scenario, gpu_ids=["rtx4090"]).plans[0], "trl").to_dict()
    assert r.json() == want and set(want["files"]) == {"accelerate.yaml", "train.py", "train_config.yaml"}
    bad = client.post("/api/export", json={"scenario": scenario, "gpu_id": "rtx4090", "num_gpus": 3})
    assert bad.status_code == 422 and bad.json()["key"] == "num_gpus" and bad.json()["valid"] == ["1"]
    for body, key in (({"gpu_id": 123}, "gpu_id"), ({"gpu_id": "rtx4090", "num_gpus": "x"}, "num_gpus"),
                      ({"gpu_id": "rtx4090", "engine": "vim"}, "engine"), ({}, "gpu_id")):
        r = client.post("/api/export", json={"scenario": scenario, **body})
        assert r.status_code == 422 and r.json()["key"] == key, r.json()
    titan = client.post("/api/export", json={"scenario": scenario, "gpu_id": "rtx4090", "engine": "torchtitan"})
    assert titan.status_code == 422 and titan.json()["key"] == "engine" and "the plan is lora" in titan.json()["error"]


def test_export_notes_have_portuguese():
    from vramfit.plan import plan
    from vramfit.plan.export import ENGINES, export_plan
    from vramfit.plan.export_titan import refusals
    from vramfit.web.translate import untranslated

    notes = set()
    for keys in ({"model": "meta-llama/Llama-3.1-8B", "method": "full", "precision": "bf16-mixed"},
                 {"model": "meta-llama/Llama-3.1-8B", "method": "qlora", "gradient_checkpointing": "selective",
                  "loss": "chunked"},
                 {"model": "meta-llama/Llama-3.1-8B", "method": "full", "framework": "torchtitan"},
                 {"model": "meta-llama/Llama-3.1-8B", "method": "lora", "framework": "torchtune"}):
        for p in plan(keys, gpu_ids=["rtx4090", "a100-80gb-sxm"]).plans[:3]:
            for engine in ENGINES:
                if engine != "torchtitan" or not refusals(p.scenario):
                    notes.update(export_plan(p, engine).notes)
    assert notes and untranslated(sorted(notes)) == []


BAD = [{"seq_len": 0}, {"seq_len": "abc"}, {"method": "dora"}, {"num_gpus": 4, "parallelism": "none"},
       {"lora_alpha": -1}, {"lora_dropout": 2}, {"lora_targets": ["foo"]}, {"model": None, "params": "abc"},
       {"params": "7B"}, {"model": None}, {"method": "qlora", "quantize": "none"}, {"offload": "optimizer"},
       {"micro_batch_size": ""}, {"gpu": "rtx9999"}, {"model": "llama-9000"}, {"model": None, "params": "10T"},
       {"framework": "torchtitan", "method": "qlora"}]


@pytest.mark.parametrize("bad", BAD, ids=lambda b: ",".join(b))
def test_api_errors_have_portuguese(client, bad):
    from vramfit.web.translate import to_pt

    body = {k: v for k, v in {"model": "meta-llama/Llama-3.1-8B", **bad}.items() if v is not None}
    r = client.post("/api/estimate", json=body)
    assert r.status_code == 422
    pt = to_pt(r.json()["error"])
    assert pt != r.json()["error"] and not re.search(r"\b(must|got|valid values|is required|unknown)\b", pt), pt


def test_choices_said_to_be_ignored_have_portuguese():
    from vramfit.estimate import estimate
    from vramfit.web.translate import to_pt, untranslated

    base = {"model": "meta-llama/Llama-3.1-8B"}
    said = []
    for keys in ({"method": "lora", "kbit_prepare": "yes", "use_reentrant": "no", "gradient_checkpointing": "none",
                  "images_per_sample": 2}, {"method": "qlora", "quantize": "gptq-int4", "kbit_prepare": "yes",
                                            "quantize_experts": "yes", "quantize_vision": "no"},
                 {"model": "mistralai/Mixtral-8x7B-v0.1", "method": "lora", "quantize_experts": "no"}):
        said += [a for a in estimate({**base, **keys}).assumptions if "ignored" in a or "casts nothing" in a]
    assert len(said) == 7 and untranslated(said) == []
    ds = estimate({**base, "method": "full", "num_gpus": 4,
                   "deepspeed_config": {"zero_optimization": {"stage": 3, "mics_shard_size": 8}}}).assumptions
    line = next(a for a in ds if a.startswith("DeepSpeed config keys"))
    assert to_pt(line).startswith("Chaves da configuração DeepSpeed não modeladas") and "mics_shard_size" in to_pt(line)


def test_checkpointing_left_to_the_framework_from_the_form(client):
    """The calculator's checkpointing select starts with an empty "auto" option, which the form does not send: the API
    then gives the framework's own (litgpt on two GPUs: full under FSDP; Unsloth: offload), as the CLI does."""
    from vramfit.estimate import estimate

    html = client.get("/").text
    select = html[html.index('id="f-gradient_checkpointing"'):]
    assert re.match(r'id="f-gradient_checkpointing" name="gradient_checkpointing">\s*<option value="">', select)
    for keys, mode in (({"framework": "litgpt", "num_gpus": 2}, "full"), ({"framework": "unsloth", "method": "qlora"},
                                                                           "offload")):
        body = {"model": "meta-llama/Llama-3.1-8B", **keys}
        got = client.post("/api/estimate", json=body).json()
        assert got["scenario"]["gradient_checkpointing"] == mode
        assert got["peak"]["device_bytes"] == estimate(body).peak.device_bytes


def test_every_step_phase_has_a_label_in_both_languages():
    """The peak's phase showed as a raw id (backward-end-tied, backward-vision, load) in English and Portuguese."""
    from vramfit.estimate.phases import StepPhase
    from vramfit.web.i18n import STRINGS

    missing = [p.value for p in StepPhase if f"ph.{p.value}" not in STRINGS]
    assert missing == []
    assert all(all(STRINGS[f"ph.{p.value}"]) for p in StepPhase)
