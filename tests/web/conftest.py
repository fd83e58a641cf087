"""Fixtures of the web tests: an in-process client, and a guard that no request reaches a path or the Hub."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from pathlib import Path

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


@contextlib.contextmanager
def serving(app, start_s: float = 20):
    """``app`` under uvicorn on a free local port, in a thread: yields the port."""
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + start_s
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture()
def live_server():
    """uvicorn on a free local port, with a 0.5 s body timeout."""
    from vramfit.web import app as web_app

    with serving(web_app.create_app(body_timeout_s=0.5)) as port:
        yield port


def send_and_wait(port: int, request: bytes) -> tuple[bytes, float]:
    """Send ``request`` on a raw socket; the reply's status line and headers and the seconds they took (a 5 s socket
    timeout bounds the wait)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        started = time.monotonic()
        reply = b""
        while b"\r\n\r\n" not in reply:
            chunk = sock.recv(4096)
            if not chunk:
                break
            reply += chunk
    return reply, time.monotonic() - started


# ------------------------------------------------------------------ browser fixtures (test_browser*.py)
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "web"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
DESKTOP = {"width": 1440, "height": 900}


@pytest.fixture(scope="module")
def base_url():
    from vramfit.web import create_app

    with serving(create_app()) as port:
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def browser():
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.fixture
def page_factory(browser):
    pages = []

    def make(viewport=DESKTOP, expect_422=False, allow=(), **context_args):
        context = browser.new_context(viewport=viewport, **context_args)
        page = context.new_page()
        page.errors = []
        allowed = ("status of 422",) if expect_422 else ()
        allowed += tuple(allow)
        page.on("pageerror", lambda e: page.errors.append(str(e)))
        page.on("console", lambda m: page.errors.append(m.text)
                if m.type == "error" and not any(a in m.text for a in allowed) else None)
        page.on("request", lambda r: page.errors.append("external request " + r.url)
                if not r.url.startswith(("http://127.0.0.1", "data:", "blob:")) else None)
        pages.append(page)
        return page

    yield make
    for p in pages:
        assert not p.errors, p.errors
        p.context.close()


