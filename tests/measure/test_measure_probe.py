"""CudaProbe's logic on the CPU, against stand-ins for torch.cuda and NVML (the real ones run in test_measure_gpu)."""

from __future__ import annotations

import os
import sys
import types

import pytest

torch = pytest.importorskip("torch")

from vramfit.measure.probe import CudaProbe  # noqa: E402

MiB = 2**20


class FakeCuda:
    """The torch.cuda calls CudaProbe makes, with settable counters."""

    def __init__(self):
        self.allocated, self.reserved, self.peak_alloc, self.peak_res = 100 * MiB, 120 * MiB, 900 * MiB, 1000 * MiB
        self.free, self.total = 70_000 * MiB, 80_000 * MiB
        self.reset_calls = 0

    def install(self, monkeypatch):
        c = torch.cuda
        monkeypatch.setattr(c, "synchronize", lambda dev=None: None)
        monkeypatch.setattr(c, "empty_cache", lambda: None)
        monkeypatch.setattr(c, "current_device", lambda: 0)
        monkeypatch.setattr(c, "memory_allocated", lambda dev=None: self.allocated)
        monkeypatch.setattr(c, "memory_reserved", lambda dev=None: self.reserved)
        monkeypatch.setattr(c, "max_memory_allocated", lambda dev=None: self.peak_alloc)
        monkeypatch.setattr(c, "max_memory_reserved", lambda dev=None: self.peak_res)
        monkeypatch.setattr(c, "mem_get_info", lambda dev=None: (self.free, self.total))
        monkeypatch.setattr(c, "get_device_properties", lambda dev=None: types.SimpleNamespace(uuid="abcd-1234"))

        def reset(dev=None):
            self.reset_calls += 1

        monkeypatch.setattr(c, "reset_peak_memory_stats", reset)


def fake_nvml(used_before: int, used_now: int, pid_usage: int | None, by_uuid: bool = True):
    mod = types.ModuleType("pynvml")
    state = {"used": used_before}
    mod.nvmlInit = lambda: None
    mod.nvmlDeviceGetCount = lambda: 2
    mod.nvmlDeviceGetHandleByIndex = lambda i: f"h{i}"

    def by_uuid_fn(uuid):
        if not by_uuid:
            raise RuntimeError("NVML_ERROR_NOT_FOUND")
        assert uuid == "GPU-abcd-1234"
        return "h1"

    mod.nvmlDeviceGetHandleByUUID = by_uuid_fn
    mod.nvmlDeviceGetIndex = lambda h: int(h[1:])
    mod.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=state["used"] + (7 if h == "h0" else 0))
    procs = [] if pid_usage is None else [types.SimpleNamespace(pid=os.getpid(), usedGpuMemory=pid_usage)]
    mod.nvmlDeviceGetComputeRunningProcesses = lambda h: [types.SimpleNamespace(pid=1, usedGpuMemory=5)] + procs
    mod.set_used = lambda v: state.update(used=v)
    return mod


def _run(probe: CudaProbe) -> dict:
    probe.start()
    probe.checkpoint("step1.mb1.forward")
    out = probe.peaks()
    probe.stop()
    return out


def test_per_process_nvml_figure(monkeypatch):
    cuda = FakeCuda()
    cuda.install(monkeypatch)
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(500 * MiB, 0, pid_usage=1500 * MiB))
    probe = CudaProbe("cuda:0", interval_s=0.001)
    peaks = _run(probe)
    assert probe.method == "nvml-process" and cuda.reset_calls == 1
    assert peaks == {"allocated_bytes": 900 * MiB, "reserved_bytes": 1000 * MiB, "device_bytes": 1500 * MiB}


def test_device_used_minus_baseline_when_the_pid_is_hidden(monkeypatch):
    cuda = FakeCuda()
    cuda.install(monkeypatch)
    nv = fake_nvml(500 * MiB, 0, pid_usage=None)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    probe = CudaProbe("cuda:0", interval_s=0.001)  # baseline taken here, before any CUDA context
    nv.set_used(500 * MiB + 1400 * MiB)
    peaks = _run(probe)
    assert probe.method == "nvml-device-minus-baseline"
    assert peaks["device_bytes"] == 1400 * MiB  # the UUID picked device 1, whose baseline is 500 MiB


def test_index_fallback_when_uuid_lookup_fails(monkeypatch):
    FakeCuda().install(monkeypatch)
    nv = fake_nvml(500 * MiB, 0, pid_usage=None, by_uuid=False)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    probe = CudaProbe("cuda:0", interval_s=0.001)
    nv.set_used(500 * MiB + 1100 * MiB)
    assert _run(probe)["device_bytes"] == 1100 * MiB


def test_mem_get_info_without_nvml(monkeypatch):
    cuda = FakeCuda()
    cuda.install(monkeypatch)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    probe = CudaProbe("cuda:0", interval_s=0.001)
    peaks = _run(probe)
    assert probe.method == "mem_get_info" and peaks["device_bytes"] == 10_000 * MiB


def test_device_figure_is_never_below_reserved(monkeypatch):
    cuda = FakeCuda()
    cuda.install(monkeypatch)
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(0, 0, pid_usage=10 * MiB))
    assert _run(CudaProbe("cuda:0", interval_s=0.001))["device_bytes"] == cuda.peak_res
