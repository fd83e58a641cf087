"""The ASGI middleware of the web server: the security headers and the Host check.

Both are pure ASGI classes; the answers they send themselves (the generic 500, the Host refusal) use
the API's ``{error, key, valid}`` body.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

#: Host names the server answers to without being told (``--host`` and ``--allow-host`` add more):
#: a page at another name that resolves to this machine (DNS rebinding) is refused.
LOCAL_HOSTS = ("localhost", "127.0.0.1", "[::1]")
_WILDCARDS = ("0.0.0.0", "::", "[::]", "")
_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; connect-src 'self'; font-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)


class SecurityHeaders:
    """Pure ASGI middleware adding the security headers (CSP: scripts and styles from this server only)."""

    HEADERS = [
        (b"content-security-policy", _CSP.encode()),
        (b"x-content-type-options", b"nosniff"),
        (b"referrer-policy", b"no-referrer"),
        (b"x-frame-options", b"DENY"),
    ]

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        started = False

        async def send_with_headers(message: dict) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message["headers"] = list(message.get("headers", [])) + self.HEADERS
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        except Exception:
            # The generic 500: Starlette's own error page is sent from outside every middleware, so
            # it would lack these headers. Answer here, then re-raise so the server logs the error.
            if not started:
                await send_json(send_with_headers, 500, {
                    "error": "server: internal error (the server's log has the details)",
                    "key": "server", "valid": None})
            raise


async def send_json(send: Any, status: int, body: dict[str, Any]) -> None:
    """A whole JSON response sent on a raw ASGI channel (for middleware)."""
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})


def served_hosts(host: str = "127.0.0.1", allow: Iterable[str] = ()) -> tuple[str, ...]:
    """The Host header names answered: :data:`LOCAL_HOSTS`, the address served and ``allow``."""
    names = [*LOCAL_HOSTS]
    for name in (host, *allow):
        name = name.strip().lower()
        if name in _WILDCARDS:
            continue
        names.append(f"[{name}]" if ":" in name and not name.startswith("[") else name)
    return tuple(dict.fromkeys(names))


class HostCheck:
    """Pure ASGI middleware: 400 unless the Host header names this server (see :func:`served_hosts`)."""

    def __init__(self, app: Any, hosts: Iterable[str]):
        self.app = app
        self.hosts = frozenset(hosts)

    @staticmethod
    def host_name(header: str) -> str:
        header = header.strip().lower()
        if header.startswith("["):  # [v6]:port
            return header[:header.find("]") + 1]
        return header.rsplit(":", 1)[0] if ":" in header else header

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            raw = next((v for k, v in scope.get("headers") or () if k == b"host"), b"")
            name = self.host_name(raw.decode("latin-1"))
            if name not in self.hosts:
                shown = name if len(name) <= 60 else name[:60] + "…"
                await send_json(send, 400, {
                    "error": f"host: {shown!r} is not a name this server answers to (start it with "
                             "--allow-host NAME to add one)", "key": "host", "valid": sorted(self.hosts)})
                return
        await self.app(scope, receive, send)
