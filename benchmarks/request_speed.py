"""In-process speed of the web estimate path (python benchmarks/request_speed.py [--repeats N]).

Times, for the five scenarios of ``benchmarks/web_load.py``: ``estimate()`` alone, the service call
(check + estimate + fit verdicts + ``to_dict``) and a whole ``POST /api/estimate`` through the ASGI
app (no sockets, no HTTP parser). Medians of several repeats, so that a shared machine's noise shows
as spread rather than as a figure; the best run is the least disturbed one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

from web_load import SCENARIOS

from vramfit import estimate
from vramfit.web import create_app
from vramfit.web.service import check_scenario, run_estimate


def _per_call(fn, rounds: int) -> float:
    """Mean seconds per call of ``fn(scenario)`` over ``rounds`` passes of the five scenarios."""
    t0 = time.perf_counter()
    for _ in range(rounds):
        for s in SCENARIOS:
            fn(s)
    return (time.perf_counter() - t0) / (rounds * len(SCENARIOS))


def _asgi_caller(app):
    """A function that posts one scenario to ``/api/estimate`` straight through the ASGI app."""
    loop = asyncio.new_event_loop()

    async def post(body: bytes) -> None:
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                 "scheme": "http", "path": "/api/estimate", "raw_path": b"/api/estimate", "query_string": b"",
                 "root_path": "", "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8000),
                 "headers": [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/json"),
                             (b"content-length", str(len(body)).encode())]}
        sent = False
        status = []

        async def receive():
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message):
            if message["type"] == "http.response.start":
                status.append(message["status"])

        await app(scope, receive, send)
        assert status == [200], status

    bodies = {id(s): json.dumps(s).encode() for s in SCENARIOS}
    return lambda s: loop.run_until_complete(post(bodies[id(s)]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=200)
    args = ap.parse_args()
    app = create_app()
    paths = {
        "estimate()": lambda s: estimate(s),
        "service (check + estimate + verdicts + to_dict)": lambda s: run_estimate(check_scenario(s)).to_dict(),
        "POST /api/estimate through the ASGI app": _asgi_caller(app),
    }
    for name, fn in paths.items():
        _per_call(fn, 5)  # warm the caches
        runs = [_per_call(fn, args.rounds) for _ in range(args.repeats)]
        print(f"{name}: median {1e3 * statistics.median(runs):.3f} ms per request, best {1e3 * min(runs):.3f} "
              f"(runs {', '.join(f'{1e3 * r:.3f}' for r in runs)})")


if __name__ == "__main__":
    main()
