"""Start the measuring process(es) and collect their figures (no torch in this process).

One GPU: ``python -m vramfit.measure.worker``. Several: ``python -m torch.distributed.run --standalone
--nproc-per-node N -m vramfit.measure.worker`` (``torchrun``). Each rank writes its own result file;
:func:`merge_ranks` makes the per-GPU figure the highest over the ranks, keeps each rank's figures,
and reports the worst status (one rank out of memory makes the run out of memory).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

_STATUS_ORDER = {"ok": 0, "oom": 1, "error": 2, "setup-error": 3}
PEAK_KEYS = ("allocated_bytes", "reserved_bytes", "device_bytes")


def worker_command(num_gpus: int, request: Path, output: Path, python: str | None = None) -> list[str]:
    py = python or sys.executable
    tail = ["-m", "vramfit.measure.worker", "--request", str(request), "--output", str(output)]
    if num_gpus == 1:
        return [py, *tail]
    return [py, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={num_gpus}", *tail]


def merge_ranks(results: list[dict[str, Any]], expected: int | None = None) -> dict[str, Any]:
    """One result from the ranks' results; ``expected``: how many ranks were started."""
    if not results:
        return {"status": "error", "error": "no rank reported a result"}
    if len(results) == 1 and (expected or 1) == 1:
        return results[0]
    results = sorted(results, key=lambda r: r.get("rank", 0))
    worst = max(results, key=lambda r: _STATUS_ORDER.get(r.get("status", "error"), 2))
    out = dict(results[0])
    for key in ("status", "failed_at", "error"):
        out[key] = worst.get(key)
    for key in PEAK_KEYS:
        values = [r.get(key) for r in results if r.get(key) is not None]
        out[key] = max(values) if values else None
    out["steps_done"] = min(int(r.get("steps_done") or 0) for r in results)
    out["per_rank"] = [{"rank": r.get("rank"), "status": r.get("status"), "failed_at": r.get("failed_at"),
                        **{k: r.get(k) for k in PEAK_KEYS}} for r in results]
    missing = sorted(set(range(expected or 0)) - {r.get("rank") for r in results})
    if missing:
        out["ranks_without_result"] = missing
        if out["status"] == "ok":
            out.update(status="error", error=f"rank(s) {missing} reported no result")
    return out


def _child_env() -> dict[str, str]:
    """This environment, with the directory holding ``vramfit`` first on PYTHONPATH (uninstalled checkouts)."""
    import vramfit

    root = str(Path(vramfit.__file__).resolve().parents[1])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    return env


def run_worker(request: dict[str, Any], *, num_gpus: int = 1, timeout_s: float | None = None,
               python: str | None = None, stream: bool = False) -> dict[str, Any]:
    """Run the worker(s) for ``request`` and return the merged result.

    A worker that dies without a result (crash, host out of memory, timeout) gives ``status: error``
    with the end of its output. ``KeyboardInterrupt`` propagates (the children get the same signal).
    """
    with tempfile.TemporaryDirectory(prefix="vramfit-measure-") as tmp:
        req = Path(tmp) / "request.json"
        out = Path(tmp) / "result.json"
        req.write_text(json.dumps(request), encoding="utf-8")
        cmd = worker_command(num_gpus, req, out, python)
        log = Path(tmp) / "worker.log"
        timed_out = False
        with open(log, "w", encoding="utf-8") as fh:
            proc = subprocess.Popen(cmd, stdout=None if stream else fh, stderr=None if stream else subprocess.STDOUT,
                                    env=_child_env())
            try:
                rc = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
                timed_out = True
            except BaseException:
                proc.kill()
                proc.wait()
                raise
        results = []
        for rank in range(num_gpus):
            path = out.with_name(f"{out.name}.rank{rank}")
            if path.is_file():
                results.append(json.loads(path.read_text(encoding="utf-8")))
        tail = "" if stream else "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-25:])
    if results:
        return merge_ranks(results, num_gpus)
    if timed_out:
        return {"status": "error", "error": f"timed out after {timeout_s:g} s", "log_tail": tail}
    return {"status": "error", "error": f"the measuring process exited with code {rc} without a result",
            "log_tail": tail}
