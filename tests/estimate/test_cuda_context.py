"""The CUDA context a training process holds outside PyTorch's allocator (estimate/constants.py): the sm90 figure
measured on this project's H200 runs, the general figure from PyTorch's out-of-memory texts elsewhere."""

import json
from pathlib import Path

from vramfit import estimate
from vramfit.estimate.constants import CUDA_CONTEXT, CUDA_CONTEXT_HOPPER

H200 = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "measured" / "vramfit_h200.jsonl"
MiB = 2**20
BASE = {"model": "meta-llama/Llama-3.1-8B", "method": "qlora", "seq_len": 2048, "micro_batch_size": 2}


def _runs() -> list[dict]:
    runs = {}
    for line in H200.read_text().splitlines():
        run = json.loads(line)["vramfit_run"]
        runs[run["id"]] = run
    return list(runs.values())


def test_the_hopper_context_is_what_the_h200_runs_measured():
    runs = _runs()
    assert len(runs) == 9 and all(r["environment"]["memory_probe"] == "nvml-process" for r in runs)
    outside = {r["scenario"]["attention"]: set() for r in runs}
    for r in runs:
        outside[r["scenario"]["attention"]].add(r["device_bytes"] - r["reserved_bytes"])
    assert outside == {"sdpa": {CUDA_CONTEXT_HOPPER.value}, "eager": {778_043_392}}  # eager loads no SDPA kernels
    assert CUDA_CONTEXT_HOPPER.value == 758 * MiB


def test_each_card_gets_its_architecture_s_context():
    for gpu, ctx in (("h200", CUDA_CONTEXT_HOPPER.value), ("h100-sxm", CUDA_CONTEXT_HOPPER.value),
                     ("a100-80gb-sxm", CUDA_CONTEXT.value), ("rtx4090", CUDA_CONTEXT.value), (None, CUDA_CONTEXT.value)):
        r = estimate({**BASE, "gpu": gpu} if gpu else BASE)
        assert r.peak.device_bytes - r.peak.reserved_bytes == ctx, gpu  # one GPU: no NCCL buffers
        (note,) = [a for a in r.assumptions if a.startswith("CUDA context")]
        assert f"assumed {ctx // MiB} MiB per GPU" in note
        assert ("measured on an H200" in note) is (ctx == CUDA_CONTEXT_HOPPER.value)
    assert CUDA_CONTEXT.value == 522 * MiB  # 0.51 GiB, the median of the cited out-of-memory texts


def test_the_estimate_of_the_h200_runs_sits_on_their_device_figure():
    """With the measured context the device error equals the reserved error (what the context cannot fix)."""
    for r in _runs():
        est = estimate({**r["scenario"]})
        assert est.peak.device_bytes - est.peak.reserved_bytes == CUDA_CONTEXT_HOPPER.value
        assert abs(est.peak.allocated_bytes - r["allocated_bytes"]) / r["allocated_bytes"] < 0.006
        assert abs(est.peak.reserved_bytes - r["reserved_bytes"]) / r["reserved_bytes"] < 0.043
