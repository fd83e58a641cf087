"""Load benchmark of the web API: requests/s and latency of ``POST /api/estimate``.

Starts ``uvicorn`` (one worker, its own process) on 127.0.0.1 only, sends a bounded number of
requests from a local asyncio client (httpx) with a fixed concurrency, and reports throughput,
p50/p99 latency and errors. Exits non-zero if any request fails.

    python benchmarks/web_load.py                      # 2000 requests, 8 in flight
    python benchmarks/web_load.py --requests 500 --concurrency 4 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time

import httpx

HOST = "127.0.0.1"  # never anything else: the benchmark talks to this machine only
SCENARIOS = [
    {"model": "meta-llama/Llama-2-7b-hf", "method": "qlora", "gpu": "rtx4090"},
    {"model": "meta-llama/Llama-3.1-8B", "method": "lora", "seq_len": 4096, "gradient_checkpointing": "full"},
    {"model": "meta-llama/Llama-2-70b-hf", "method": "full", "precision": "bf16-mixed", "num_gpus": 8,
     "parallelism": "fsdp"},
    {"model": "Qwen/Qwen2.5-7B", "method": "lora", "micro_batch_size": 4, "attention": "eager"},
    {"params": "13B", "method": "qlora", "seq_len": 8192, "loss": "chunked"},
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def server_kind(pure_python: bool) -> str:
    """Which HTTP parser and event loop uvicorn runs (``auto`` picks httptools/uvloop when installed)."""
    if pure_python:
        return "h11 + asyncio"
    import importlib.util

    http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    return f"{http} + {loop}"


def start_server(port: int, pure_python: bool = False) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "uvicorn", "vramfit.web:create_app", "--factory", "--host", HOST,
           "--port", str(port), "--log-level", "warning", "--no-access-log"]
    if pure_python:
        cmd += ["--loop", "asyncio", "--http", "h11"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 30
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"uvicorn exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            if httpx.get(f"http://{HOST}:{port}/api/gpus", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("uvicorn did not start within 30 s")


async def _post(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> tuple[int, bytes]:
    """One request on a kept-alive HTTP/1.1 connection: (status, body). A minimal client, so that
    the benchmark measures the server rather than the client's own overhead."""
    writer.write(request)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    length = next(int(v) for k, _, v in (ln.partition(":") for ln in lines[1:]) if k.lower() == "content-length")
    return status, await reader.readexactly(length)


async def run_load(host: str, port: int, requests: int, concurrency: int) -> dict:
    latencies: list[float] = []
    errors: list[str] = []
    counter = iter(range(requests))
    payloads = []
    for body in SCENARIOS:
        data = json.dumps(body).encode()
        payloads.append(b"POST /api/estimate HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (host.encode(), port, len(data), data))

    async def worker() -> None:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            for i in counter:
                t0 = time.perf_counter()
                try:
                    status, body = await _post(reader, writer, payloads[i % len(payloads)])
                    if status != 200 or b'"peak"' not in body:
                        errors.append(f"{status}: {body[:200]!r}")
                except (OSError, ValueError, asyncio.IncompleteReadError, StopIteration) as exc:
                    errors.append(repr(exc))
                    reader, writer = await asyncio.open_connection(host, port)
                latencies.append(time.perf_counter() - t0)
        finally:
            writer.close()

    with httpx.Client(timeout=30) as client:  # warm-up: imports, catalog, first estimate of each model
        for body in SCENARIOS:
            client.post(f"http://{host}:{port}/api/estimate", json=body).raise_for_status()
    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - t0
    lat = sorted(latencies)
    q = statistics.quantiles(lat, n=100, method="inclusive") if len(lat) > 1 else [lat[0]] * 99
    return {
        "endpoint": "POST /api/estimate", "requests": requests, "concurrency": concurrency,
        "errors": len(errors), "first_errors": errors[:3], "seconds": round(wall, 3),
        "requests_per_s": round(requests / wall, 1), "p50_ms": round(q[49] * 1000, 2),
        "p99_ms": round(q[98] * 1000, 2), "max_ms": round(lat[-1] * 1000, 2),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000, help="requests to send (at most 100000)")
    ap.add_argument("--concurrency", type=int, default=8, help="requests in flight (at most 256)")
    ap.add_argument("--json", action="store_true", help="print the result as one JSON object")
    ap.add_argument("--pure-python", action="store_true", help="run uvicorn with h11 and asyncio even if "
                    "httptools/uvloop (uvicorn[standard]) are installed")
    args = ap.parse_args(argv)
    requests = max(1, min(args.requests, 100_000))
    concurrency = max(1, min(args.concurrency, 256, requests))
    port = free_port()
    server = start_server(port, args.pure_python)
    try:
        result = asyncio.run(run_load(HOST, port, requests, concurrency))
        result["server"] = f"uvicorn, 1 worker, {server_kind(args.pure_python)}"
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['endpoint']}: {result['requests']} requests, {result['concurrency']} in flight; "
              f"{result['server']} on {HOST}; {result['machine']}")
        print(f"  {result['requests_per_s']} requests/s   p50 {result['p50_ms']} ms   "
              f"p99 {result['p99_ms']} ms   max {result['max_ms']} ms   errors {result['errors']}")
        for e in result["first_errors"]:
            print("  error:", e)
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
