"""Property-based fuzz of the API against its own OpenAPI schema (schemathesis): never a 500.

Bounded (a few dozen examples per operation, positive and negative data) so it runs in seconds.
"""

from __future__ import annotations

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

schema = schemathesis.openapi.from_asgi("/openapi.json", create_app())


@schema.parametrize()
@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_api_never_fails_with_a_server_error(case):
    response = case.call()
    case.validate_response(response, checks=[not_a_server_error, status_code_conformance,
                                             content_type_conformance, response_schema_conformance])
    assert response.status_code < 500


# ------------------------------------------------ pasted config.json: any JSON object, never a 500
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from vramfit.models import load_catalog  # noqa: E402

CONFIGS = [e["config"] for e in load_catalog()]
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@given(base=st.sampled_from(CONFIGS), changes=st.dictionaries(
    st.sampled_from(sorted({k for c in CONFIGS for k in c})), JSON, min_size=1, max_size=4))
@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_mutated_config_json_is_answered_200_or_422(client, base, changes):
    r = client.post("/api/estimate", json={"config_json": {**base, **changes}, "method": "qlora"})
    assert r.status_code in (200, 422), r.text
    if r.status_code == 422:
        assert r.json()["key"] == "config_json"
