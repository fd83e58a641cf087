"""The web page and its JSON API: ``create_app()`` builds the FastAPI application.

Pages: ``/`` (the calculator) and ``/guide`` (the fine-tuning memory guide, EN/PT), both rendered
from templates, with plain JavaScript and Plotly served from this server (no CDN).
API: ``POST /api/estimate``, ``/api/plan``, ``/api/sweep``, ``/api/import``; ``GET /api/models``, ``/api/gpus``;
the schema at ``/openapi.json``. Validation is :func:`vramfit.scenario.parse_scenario` (see
:mod:`vramfit.web.service`), so errors read as the CLI's; they come back as HTTP 422
``{"error", "key", "valid"}``.
"""

from __future__ import annotations

import functools
import gzip
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import anyio
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.gzip import GZipMiddleware

from vramfit.errors import VramfitError
from vramfit.safe_input import shown
from vramfit.web import dataset_upload, importing, pages, planning
from vramfit.web.middleware import HostCheck, SecurityHeaders, served_hosts
from vramfit.web.schemas import (
    REQUEST_MODELS,
    ErrorOut,
    EstimateOut,
    GpuOut,
    ModelEntryOut,
)
from vramfit.web.service import (
    MAX_BODY_BYTES,
    ApiError,
    check_scenario,
    error_body,
    parse_body,
    run_estimate,
)

HERE = Path(__file__).resolve().parent
#: Seconds a request may take to send its body once its headers are in; a client that declares a
#: body and never sends it would otherwise hold a connection (and a worker task) forever. 256 KiB
#: (MAX_BODY_BYTES) takes well under a second even at 10 Mbit/s, so 10 s only cuts off stalled peers.
BODY_TIMEOUT_S = 10.0
_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorOut, "description": "the Host header does not name this server"},
    408: {"model": ErrorOut, "description": "the request body did not arrive in time"},
    413: {"model": ErrorOut, "description": "request body too large"},
    415: {"model": ErrorOut, "description": "a JSON route's body not sent as Content-Type: application/json"},
    422: {"model": ErrorOut, "description": "invalid input: the field at fault and its valid values"},
}
class SafeJSONResponse(JSONResponse):
    """A JSON response; a result that is not finite (JSON has no Infinity) is a 422, not a 500."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except ValueError:
            path = _non_finite(content) or ("result",)
            raise ApiError(422, path[-1], "the result is not a finite number with these inputs; "
                           "make them smaller or more realistic") from None


def _non_finite(value: Any, path: tuple[str, ...] = ()) -> tuple[str, ...] | None:
    if isinstance(value, float) and not math.isfinite(value):
        return path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        found = _non_finite(v, (*path, str(k)) if isinstance(k, str) else path)
        if found:
            return found
    return None


def _body_doc(model: str) -> dict[str, Any]:
    ref = {"$ref": f"#/components/schemas/{model}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


async def read_body(request: Request) -> Any:
    """The JSON body, read up to :data:`MAX_BODY_BYTES` (413 beyond) within the app's body
    timeout (:data:`BODY_TIMEOUT_S`; 408 after it)."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY_BYTES):
        raise ApiError(413, "body", f"request body is larger than {MAX_BODY_BYTES} bytes")
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":  # a form or text/plain post needs no CORS preflight: another site's page could send it
        raise ApiError(415, "body", f"the body must be sent as Content-Type: application/json, got {kind or 'none'!r}",
                       ["application/json"])
    chunks: list[bytes] = []
    size = 0
    timeout = request.app.state.body_timeout_s
    try:
        with anyio.fail_after(timeout):  # anyio (Starlette's own): asyncio.timeout needs Python 3.11
            async for chunk in request.stream():
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    raise ApiError(413, "body", f"request body is larger than {MAX_BODY_BYTES} bytes")
                chunks.append(chunk)
    except TimeoutError:
        raise ApiError(408, "body", f"request body not received within {timeout:g} s") from None
    return parse_body(b"".join(chunks))


async def off_loop(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a worker thread (anyio's default limiter: 40 at once), so that one long plan, sweep, export,
    import or upload (seconds: a 405B plan over 100,000 GPUs took 20 s) does not hold the event loop and every other
    request with it; its errors are raised here as they were."""
    return await anyio.to_thread.run_sync(functools.partial(fn, *args))


def plotly_js_path() -> Path:
    """``plotly.min.js`` as shipped inside the installed ``plotly`` package."""
    import plotly

    return Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"


def create_app(host: str = "127.0.0.1", allow_hosts: Iterable[str] = (),
               body_timeout_s: float = BODY_TIMEOUT_S, calibration=None) -> FastAPI:
    """The FastAPI application (pages, static files, API) served at ``host``; the Host header must
    name it, a local name or one of ``allow_hosts``. ``calibration`` (:mod:`vramfit.calibration`) is
    applied to the estimates and plans of its GPU families."""
    from vramfit.web import service

    service.CALIBRATION = calibration
    app = _new_app()
    app.state.body_timeout_s = body_timeout_s
    _add_middleware(app, host, allow_hosts)
    _register_error_handlers(app)
    _register_page_routes(app)
    _register_scenario_routes(app)
    _register_dataset_route(app)
    _register_catalog_routes(app)
    _document_request_bodies(app)
    return app


def _new_app() -> FastAPI:
    """The bare FastAPI application: title, version and the description of the API."""
    return FastAPI(
        title="vramfit",
        version=_version(),
        summary="Per-GPU peak memory of LLM fine-tuning, and which GPUs fit it",
        description=(
            "Bodies are the scenario and result objects of vramfit's scenario schema. Invalid input "
            "is answered with HTTP 422 `{error, key, valid}`; bodies are at most "
            f"{MAX_BODY_BYTES // 1024} KiB. A model is a catalog id or alias, a parameter count, or "
            "a pasted config.json (`config_json`): the server reads no local path and fetches no URL."
        ),
        docs_url=None,  # Swagger UI would load from a CDN; the schema is at /openapi.json
        redoc_url=None,
    )


# zlib level for the dynamic answers (a 6.2 kB estimate: level 1 makes 2,472 bytes in 0.029 ms, level 9
# (Starlette's default) 2,280 bytes in 0.066 ms; measured with gzip.compress on this machine); these are
# answers of a local tool, where the CPU per request matters more than 200 bytes
GZIP_LEVEL = 1


def _add_middleware(app: FastAPI, host: str, allow_hosts: Iterable[str]) -> None:
    """Compression, the Host check and the security headers (added last, so the outermost)."""
    app.add_middleware(GZipMiddleware, minimum_size=1024, compresslevel=GZIP_LEVEL)
    app.add_middleware(HostCheck, hosts=served_hosts(host, allow_hosts))
    app.add_middleware(SecurityHeaders)  # the outermost: every answer carries the headers


def _register_error_handlers(app: FastAPI) -> None:
    """Answer vramfit's errors and FastAPI's query validation errors as 422 ``{error, key, valid}``."""

    @app.exception_handler(VramfitError)
    async def user_error(request: Request, exc: VramfitError) -> JSONResponse:
        status = exc.status if isinstance(exc, ApiError) else 422
        return JSONResponse(error_body(exc), status_code=status)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        """An unknown path (404) or method (405) in the API's error shape, naming what exists, not FastAPI's
        ``{"detail": ...}``; the 405's Allow header is kept."""
        path, headers = shown(request.url.path), getattr(exc, "headers", None)
        if exc.status_code == 404:
            valid = sorted({r.path for r in app.routes if getattr(r, "path", "").startswith("/api/")})
            body = {"error": f"path: no page or endpoint {path}", "key": "path", "valid": valid}
        elif exc.status_code == 405:
            allow = [m.strip() for m in (headers or {}).get("Allow", "").split(",") if m.strip()]
            body = {"error": f"method: {request.method} is not allowed on {path}", "key": "method", "valid": allow or None}
        else:
            body = {"error": f"request: {exc.detail}", "key": "request", "valid": None}
        return JSONResponse(body, status_code=exc.status_code, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def query_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": ("query",), "msg": "invalid"}
        key = str(first["loc"][-1])
        return JSONResponse({"error": f"{key}: {first['msg']}", "key": key, "valid": None}, status_code=422)


@functools.lru_cache(maxsize=1)
def plotly_js_gzip() -> bytes:
    """The vendored Plotly bundle, gzip-compressed at the best level (1.47 MB from 4.8 MB)."""
    return gzip.compress(plotly_js_path().read_bytes(), compresslevel=9, mtime=0)


def _register_page_routes(app: FastAPI) -> None:
    """The static files, the vendored Plotly and the pages (calculator, guide, API docs)."""
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")

    @app.get("/vendor/plotly.min.js", include_in_schema=False)
    def plotly_js(request: Request) -> Response:
        cache = {"Cache-Control": "public, max-age=86400", "Vary": "Accept-Encoding"}
        if "gzip" not in request.headers.get("accept-encoding", ""):
            return FileResponse(plotly_js_path(), media_type="text/javascript", headers=cache)
        # compressed once per process: GZipMiddleware would spend ~240 ms of CPU per page load on
        # the 4.8 MB bundle at level 9 (measured here with gzip.compress); it passes a response
        # that already names its Content-Encoding through untouched (starlette 1.10 middleware/gzip.py)
        return Response(plotly_js_gzip(), media_type="text/javascript",
                        headers={**cache, "Content-Encoding": "gzip"})

    @app.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
    def calculator(request: Request, lang: str = "en") -> Response:
        return pages.calculator(request, lang)

    @app.api_route("/guide", methods=["GET", "HEAD"], include_in_schema=False)
    def guide(request: Request, lang: str = "en") -> Response:
        return pages.guide(request, lang)

    @app.get("/docs", include_in_schema=False)
    def api_docs(request: Request, lang: str = "en") -> Response:
        return pages.api_docs(request, lang)

    @app.get("/pt", include_in_schema=False)
    def pt_home() -> Response:
        return RedirectResponse("/?lang=pt")


def _register_scenario_routes(app: FastAPI) -> None:
    """The JSON-body API: estimate, plan, export, sweep and import."""

    @app.post("/api/estimate", tags=["api"], response_model=None, openapi_extra=_body_doc("ScenarioIn"),
              responses={200: {"model": EstimateOut}, **_ERRORS})
    async def api_estimate(request: Request) -> JSONResponse:
        """Per-GPU peak memory of one scenario: the result object (bytes, components, assumptions)."""
        # in the event loop: one estimate takes milliseconds on bounded inputs, and a worker-thread hop cost the
        # request rate 44 % (benchmarks/web_load.py: 560 -> 314 requests/s on the 2-core machine)
        return SafeJSONResponse(run_estimate(check_scenario(await read_body(request))).to_dict())

    @app.post("/api/plan", tags=["api"], response_model=None, openapi_extra=_body_doc("PlanIn"),
              responses={200: {"description": "the planner's report (cards that fit, GPUs, time, cost)"},
                         **_ERRORS})
    async def api_plan(request: Request) -> JSONResponse:
        """Which cards fit the scenario, how many of each, and (given a dataset) time and cost."""
        return SafeJSONResponse(await off_loop(planning.plan, await read_body(request)))

    @app.post("/api/export", tags=["api"], response_model=None, openapi_extra=_body_doc("PlanIn"),
              responses={200: {"description": "{engine, files: {name: text}, command, notes}"}, **_ERRORS})
    async def api_export(request: Request) -> JSONResponse:
        """Ready configuration (accelerate, deepspeed, fsdp or trl) for the plan of ``num_gpus`` x ``gpu_id``:
        the body of /api/plan plus ``engine``, ``gpu_id`` and ``num_gpus``."""
        return SafeJSONResponse(await off_loop(planning.export, await read_body(request)))

    @app.post("/api/sweep", tags=["api"], response_model=None, openapi_extra=_body_doc("SweepIn"),
              responses={200: {"description": "the peak at each value of the swept key"}, **_ERRORS})
    async def api_sweep(request: Request) -> JSONResponse:
        """The scenario's peak as one key (seq_len, micro_batch_size, ...) takes each listed value."""
        return SafeJSONResponse(await off_loop(planning.sweep, await read_body(request)))

    @app.post("/api/import", tags=["api"], response_model=None, openapi_extra=_body_doc("ImportIn"),
              responses={200: {"description": "{dialect, scenario, report: [{kind, key, value, note, becomes}], "
                                              "defaults_source}"}, **_ERRORS})
    async def api_import(request: Request) -> JSONResponse:
        """A pasted training config (Axolotl, LLaMA-Factory, TRL, torchtune, litgpt) as scenario keys, with
        what became of each key; files the config names are never opened."""
        return SafeJSONResponse(await off_loop(importing.import_config, await read_body(request)))


def _register_dataset_route(app: FastAPI) -> None:
    """The multipart dataset upload: the histogram of its sample lengths."""

    @app.post("/api/dataset", tags=["api"], response_model=None,
              responses={200: {"description": "{rows, exact_tokens (false: chars-per-token approximation), "
                                              "percentiles, histogram: [{from, to, samples}], card, reserved_spread (the reserved "
                                              "figure's spread over random orders of the lengths, or null), "
                                              "reserved_spread_text}"}, **_ERRORS})
    async def api_dataset(request: Request) -> JSONResponse:
        """A small dataset file (multipart ``file``: .jsonl, .json, .csv; optional ``scenario`` JSON text):
        the histogram of its sample lengths (approximate tokens) and the card's longest fitting sequence."""
        declared = request.headers.get("content-length")
        limit = dataset_upload.MAX_UPLOAD_BYTES + 64 * 1024  # the file plus the multipart envelope
        if declared is None or not declared.isdigit() or int(declared) > limit:
            raise ApiError(413, "file", f"the upload needs a Content-Length of at most {limit} bytes")
        timeout = request.app.state.body_timeout_s
        try:
            with anyio.fail_after(timeout):  # the JSON routes' body timeout (read_body), for the upload too
                form = await request.form(max_files=1, max_fields=2)
        except StarletteHTTPException as exc:  # a malformed body, too many files or fields: Starlette's 400
            raise ApiError(422, "body", f"the multipart upload cannot be read: {exc.detail}",
                           list(dataset_upload.FORM_FIELDS)) from None
        except TimeoutError:
            raise ApiError(408, "body", f"request body not received within {timeout:g} s") from None
        try:
            unknown = sorted(set(form.keys()) - set(dataset_upload.FORM_FIELDS))
            if unknown:
                raise ApiError(422, "body", f"unknown multipart field {unknown[0]!r}", list(dataset_upload.FORM_FIELDS))
            upload, scenario = form.get("file"), form.get("scenario")
            if upload is None or isinstance(upload, str):
                raise ApiError(422, "file", "send the dataset as the multipart field 'file'")
            raw = await upload.read(dataset_upload.MAX_UPLOAD_BYTES + 1)
            name = upload.filename or ""
        finally:
            await form.close()
        text = scenario if isinstance(scenario, str) else None
        return JSONResponse(await off_loop(dataset_upload.analyze_upload, name, raw, text))


def _register_catalog_routes(app: FastAPI) -> None:
    """The read-only catalogs: models (searchable) and GPUs."""

    @app.get("/api/models", tags=["api"], response_model=list[ModelEntryOut], responses=_ERRORS)
    def api_models(q: str = Query("", max_length=100, description="words to find in id, alias, name, family")):
        """Catalog models matching every word of ``q`` (in the id, an alias, the name or the family)."""
        from vramfit.models import search_models

        words = q.split() or [""]
        found = [{e["id"] for e in search_models(w)} for w in words]
        return [
            {"id": e["id"], "display_name": e["display_name"], "family": e["family"],
             "params": e["published_params"], "aliases": list(e.get("aliases", ())),
             "source": e.get("source", "")}
            for e in search_models(words[0]) if all(e["id"] in f for f in found)
        ]

    @app.get("/api/gpus", tags=["api"], response_model=list[GpuOut], responses=_ERRORS)
    def api_gpus():
        """The GPU catalog: usable memory (bytes the card exposes), BF16 TFLOPS (FP16 on cards without BF16:
        ``supports_bf16`` false), rental prices."""
        from vramfit.gpus import list_gpus

        return [
            {k: getattr(g, k) for k in GpuOut.model_fields}
            for g in sorted(list_gpus(), key=lambda g: (g.usable_bytes, g.gpu_id))
        ]


def _document_request_bodies(app: FastAPI) -> None:
    """Put the request models (which the handlers validate with parse_scenario, not pydantic)
    into the OpenAPI components, so the schema describes the bodies the API takes."""
    from pydantic.json_schema import models_json_schema

    base = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = base()
        _, defs = models_json_schema([(m, "validation") for m in REQUEST_MODELS],
                                     ref_template="#/components/schemas/{model}")
        schema.setdefault("components", {}).setdefault("schemas", {}).update(defs.get("$defs", {}))
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("vramfit")
    except Exception:  # noqa: BLE001 - not installed (source checkout)
        return "0"
