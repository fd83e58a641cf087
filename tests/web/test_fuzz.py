"""Property-based fuzz of the API: schemathesis over every operation, hypothesis over pasted configs.

Reproducible (a fixed seed: ``derandomize``) and bounded (examples per operation, and a wall-clock
budget per test after which the remaining examples are not sent), so CI runs it in seconds. Every
answer must be documented, carry the security headers and never be a 500.
"""

from __future__ import annotations

import time

import pytest

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is not installed")
from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from vramfit.web import create_app  # noqa: E402

#: Seconds each fuzz test may spend sending requests (the examples left after it are skipped).
BUDGET_S = 20.0
# schemathesis's in-process client calls itself "testserver": that is the name this app serves.
schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(allow_hosts=["testserver"]))
_started: dict[str, float] = {}


def within_budget(name: str) -> bool:
    return time.monotonic() - _started.setdefault(name, time.monotonic()) < BUDGET_S


@schema.parametrize()
@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_api_never_fails_with_a_server_error(case):
    if not within_budget(f"{case.method} {case.path}"):
        return
    response = case.call()
    case.validate_response(response, checks=[not_a_server_error, status_code_conformance,
                                             content_type_conformance, response_schema_conformance])
    assert response.status_code < 500
    assert response.headers["x-content-type-options"] == ["nosniff"]
    assert "default-src 'self'" in response.headers["content-security-policy"][0]


# ------------------------------------------------ pasted config.json: any JSON object, never a 500
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from vramfit.models import load_catalog  # noqa: E402

CONFIGS = [e["config"] for e in load_catalog()]
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@given(base=st.sampled_from(CONFIGS), changes=st.dictionaries(
    st.sampled_from(sorted({k for c in CONFIGS for k in c})), JSON, min_size=1, max_size=4),
    path=st.sampled_from(["/api/estimate", "/api/sweep"]))
@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_mutated_config_json_is_answered_200_or_422(client, base, changes, path):
    if not within_budget("config_json"):
        return
    scenario = {"config_json": {**base, **changes}, "method": "qlora"}
    body = scenario if path == "/api/estimate" else {"scenario": scenario, "key": "seq_len", "values": [512, 2048]}
    # allow_nan: NaN and Infinity literals are what a careless client sends; the server refuses them
    r = client.post(path, content=__import__("json").dumps(body, allow_nan=True),
                    headers={"content-type": "application/json"})
    assert r.status_code in (200, 422), r.text
    if r.status_code == 422:
        assert r.json()["key"] in ("config_json", "body"), r.text
