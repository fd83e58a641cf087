"""Real CUDA measurements of the tiny model: the counters, the NVML figure and a real out-of-memory.

Skipped without a CUDA GPU (marker ``gpu``).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

GiB = 2**30


def test_counters_are_ordered_and_close_to_the_estimate(tiny, store):
    from vramfit.measure.runner import measure

    rec = measure(tiny(method="lora", micro_batch_size=2, seq_len=256), steps=3, store=store, simulate=False,
                  timeout_s=300)
    assert rec.status == "ok", rec.details
    assert 0 < rec.allocated_bytes <= rec.reserved_bytes
    assert rec.device_bytes is None or rec.device_bytes >= rec.reserved_bytes
    env = rec.environment
    assert env["gpu_name"] and env["gpu_total_bytes"] > GiB and env["cuda"]
    assert env["memory_probe"] in ("nvml-process", "nvml-device-minus-baseline", "mem_get_info")
    assert store.get(rec.id).allocated_bytes == rec.allocated_bytes


def test_qlora_on_cuda(tiny):
    from vramfit.measure.runner import measure

    rec = measure(tiny(method="qlora", gradient_checkpointing="full"), steps=2, simulate=False, timeout_s=300)
    assert rec.status == "ok", rec.details
    assert rec.allocated_bytes > 0


def test_real_out_of_memory_is_a_result(tiny):
    from vramfit.measure.runner import measure

    total = torch.cuda.get_device_properties(0).total_memory
    # eager attention materialises batch x heads x seq^2 scores: far beyond any card
    seq = 32768
    mbs = max(1, int(4 * total // (4 * seq * seq * 2)))
    rec = measure(tiny(method="full", attention="eager", seq_len=seq, micro_batch_size=mbs), steps=2,
                  simulate=False, timeout_s=300)
    assert rec.status == "oom", rec.details
    assert rec.steps_done == 0 and rec.details["failed_at"].startswith("step1")
    assert "out of memory" in rec.details["error"].lower()


def test_cuda_probe_sees_a_tensor():
    from vramfit.measure.probe import CudaProbe

    probe = CudaProbe("cuda:0")
    probe.start()
    x = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda:0")
    probe.checkpoint("after")
    peaks = probe.peaks()
    probe.stop()
    del x
    assert peaks["allocated_bytes"] >= 256 * 2**20 and peaks["reserved_bytes"] >= peaks["allocated_bytes"]
    assert peaks["device_bytes"] is None or peaks["device_bytes"] >= peaks["reserved_bytes"]
