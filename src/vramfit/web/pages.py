"""The two HTML pages (calculator and guide), rendered from Jinja2 templates in EN or PT."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import Request
from fastapi.templating import Jinja2Templates
from starlette.responses import Response

from vramfit.config_import.detect import DIALECTS
from vramfit.gpus import list_gpus
from vramfit.scenario import FIELD, FIELDS, SCENARIO_KEYS, Kind, Scenario
from vramfit.stage_keys import GRPO_NUM_GENERATIONS, kto_min_batch
from vramfit.units import GiB
from vramfit.web import guide as guide_data
from vramfit.web.dataset_upload import MAX_UPLOAD_BYTES
from vramfit.web.i18n import HTML_LANG, fmt_number, pick_lang, strings
from vramfit.web.schemas import BOOL_KEYS, ENUM_KEYS, INT_KEYS
from vramfit.web.translate import rules_for_js, to_pt

HERE = Path(__file__).resolve().parent
templates = Jinja2Templates(directory=str(HERE / "templates"))
templates.env.filters["num"] = fmt_number  # {{ value | num(lang) }}: 104,5 on the PT page

#: What the calculator shows before the user has chosen anything (not the scenario defaults:
#: the URL records every key that differs from those).
INITIAL = {"model": "meta-llama/Llama-3.1-8B", "gpu": "rtx4090"}
#: Keys the calculator template places by name; any other enum or integer key gets a generic field.
PLACED = ("method", "precision", "quantize", "framework", "micro_batch_size", "seq_len", "grad_accum",
          "optimizer", "lora_rank", "gradient_checkpointing", "attention", "loss", "num_gpus",
          "parallelism", "offload")
#: Free-text keys with no field of their own in the template (a DeepSpeed config is pasted as JSON)
EXTRA_TEXTS = tuple(f.name for f in FIELDS if f.kind is Kind.TEXT and f.name not in ("model", "gpu"))
#: Keys that are entered as text/number/select (booleans are checkboxes; model/params/config apart).
FIELD_KEYS = tuple(k for k in SCENARIO_KEYS if k not in BOOL_KEYS and k not in ("model", "params"))


def _switch_url(request: Request, lang: str) -> str:
    other = "en" if lang == "pt" else "pt"
    query = [(k, v) for k, v in request.query_params.multi_items() if k != "lang"]
    if other != "en":
        query.append(("lang", other))
    return request.url.path + ("?" + urlencode(query) if query else "")


def _context(request: Request, lang: str, page: str) -> dict[str, Any]:
    t = strings(lang)
    return {
        "lang": lang, "html_lang": HTML_LANG[lang], "t": t, "page": page,
        "switch_url": _switch_url(request, lang), "q": "?lang=pt" if lang == "pt" else "",
    }


def calculator(request: Request, lang: str) -> Response:
    lang = pick_lang(lang)
    ctx = _context(request, lang, "calculator")
    gpus = sorted(list_gpus(), key=lambda g: (g.usable_bytes, g.name))
    ctx.update(
        enums={k: [m.value for m in e] for k, e in ENUM_KEYS.items()},
        bool_keys=BOOL_KEYS,
        extra_enums=[k for k in ENUM_KEYS if k not in PLACED],
        # (key, lowest valid value): a key whose 0 is valid (eval_batch_size, images_per_sample) accepts 0 in the form
        extra_ints=[(k, int((FIELD[k].limits or (1, 0))[0])) for k in INT_KEYS if k not in PLACED],
        extra_texts=EXTRA_TEXTS,
        dialects=DIALECTS,
        gpus=[{"id": g.gpu_id, "name": g.name, "gib": fmt_number(g.usable_bytes / GiB, lang, 1)} for g in gpus],
        config={"strings": ctx["t"], "lang": lang, "keys": list(SCENARIO_KEYS),
                "defaults": Scenario(params=1).to_dict(), "initial": INITIAL,
                "field_keys": FIELD_KEYS, "bool_keys": BOOL_KEYS, "int_keys": list(INT_KEYS),
                # the batch keys a stage derives when left empty (stage_keys.check_stage_keys), for the placeholders
                "stage_batch": {"kto_micro_batch": kto_min_batch(None, None), "grpo_generations": GRPO_NUM_GENERATIONS},
                "dataset_max_bytes": MAX_UPLOAD_BYTES,
                "capacity_cards": ["rtx4090", "l40s", "a100-80gb-sxm", "h200-sxm"],
                "tr": rules_for_js() if lang == "pt" else []},
    )
    return templates.TemplateResponse(request, "calculator.html", ctx)


def guide(request: Request, lang: str) -> Response:
    lang = pick_lang(lang)
    ctx = _context(request, lang, "guide")
    data = guide_data.guide_data()
    ctx.update(data=data, tr=to_pt if lang == "pt" else (lambda s: s), config={"strings": ctx["t"], "lang": lang, "figures": {
        "breakdown": data["breakdown"], "seq": data["seq"]}})
    return templates.TemplateResponse(request, f"guide_{lang}.html", ctx)


def api_docs(request: Request, lang: str) -> Response:
    """``/docs``: the API described from its OpenAPI schema, drawn by ``static/apidocs.js`` (no CDN)."""
    lang = pick_lang(lang)
    ctx = _context(request, lang, "docs")
    ctx["config"] = {"strings": ctx["t"], "lang": lang}
    return templates.TemplateResponse(request, "api_docs.html", ctx)
