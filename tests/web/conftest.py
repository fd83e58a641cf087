"""Fixtures of the web tests: an in-process client, and a guard that no request reaches a path or the Hub."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi", reason="the web extra (fastapi) is not installed")


@pytest.fixture(scope="session")
def app():
    from vramfit.web import create_app

    return create_app()


@pytest.fixture(scope="session")
def client(app):
    from fastapi.testclient import TestClient

    with TestClient(app, base_url="http://localhost") as c:
        yield c


@pytest.fixture(autouse=True)
def no_paths_no_hub(monkeypatch):
    """Fail any test in which the library would read a local config path or ask the Hub."""
    from vramfit.models import catalog

    def refuse(*args, **kwargs):
        raise AssertionError(f"the web server made the library read a path or the Hub: {args!r}")

    monkeypatch.setattr(catalog, "_from_path", refuse)
    monkeypatch.setattr(catalog, "_from_hub", refuse)
