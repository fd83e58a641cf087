"""Memory probes: where the three peak figures of a run come from.

The step loop calls ``probe.checkpoint(label)`` at every phase boundary (``step2.mb1.backward`` ...)
and ``probe.peaks()`` at the end; nothing else in the harness touches a device counter, so the same
loop runs on CUDA with :class:`CudaProbe` and on the CPU with :class:`FakeProbe` (tests) or
:class:`NullProbe` (``--device cpu``: timings only).

:class:`CudaProbe`:

- ``allocated`` / ``reserved``: ``torch.cuda.max_memory_allocated`` / ``max_memory_reserved`` after
  ``reset_peak_memory_stats`` at :meth:`CudaProbe.start` (after the model is built, so the figures cover
  the training steps, not the load);
- ``device``: the whole process on the card, as nvidia-smi shows it: NVML's per-process
  ``usedGpuMemory`` for this pid, sampled every ``interval_s`` by a thread and at every checkpoint; where
  the pid is not visible (containers), the device's ``used`` minus its value before this process created
  a CUDA context; without ``nvidia-ml-py``, ``torch.cuda.mem_get_info`` (whole device, other processes
  included). The method used is recorded in the environment (``memory_probe``).
"""

from __future__ import annotations

import os
import threading
from typing import Any, Protocol

OOM_MARKERS = ("out of memory", "cublas_status_alloc_failed", "cudaerrormemoryallocation")


def is_oom(exc: BaseException) -> bool:
    """Whether an exception is the device running out of memory (a result, not a crash)."""
    try:
        import torch

        if isinstance(exc, torch.OutOfMemoryError):
            return True
    except ImportError:  # pragma: no cover - the loop always has torch
        pass
    text = str(exc).lower()
    return isinstance(exc, (RuntimeError, MemoryError)) and any(m in text for m in OOM_MARKERS)


class MemoryProbe(Protocol):
    method: str

    def start(self) -> dict[str, int]: ...
    def checkpoint(self, label: str) -> None: ...
    def synchronize(self) -> None: ...
    def peaks(self) -> dict[str, int | None]: ...
    def stop(self) -> None: ...


class NullProbe:
    """No memory figures (``--device cpu``): the harness runs, the peaks are unknown."""

    method = "none"

    def start(self) -> dict[str, int]:
        return {}

    def checkpoint(self, label: str) -> None:
        return None

    def synchronize(self) -> None:
        return None

    def peaks(self) -> dict[str, int | None]:
        return {"allocated_bytes": None, "reserved_bytes": None, "device_bytes": None}

    def stop(self) -> None:
        return None


class FakeProbe(NullProbe):
    """Fixed figures and an optional simulated out-of-memory at a named phase (tests, dry runs).

    ``oom_at``: a checkpoint label (``step2.mb1.backward``) or prefix (``step2``); when the loop reaches
    it, ``torch.OutOfMemoryError`` is raised with the text PyTorch's allocator uses.
    """

    method = "fake"

    def __init__(self, allocated: int = 3 * 2**30, reserved: int = 4 * 2**30, device: int = 5 * 2**30,
                 oom_at: str | None = None) -> None:
        self.figures = {"allocated_bytes": allocated, "reserved_bytes": reserved, "device_bytes": device}
        self.oom_at = oom_at
        self.labels: list[str] = []

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> FakeProbe:
        return cls(int(spec.get("allocated", 3 * 2**30)), int(spec.get("reserved", 4 * 2**30)),
                   int(spec.get("device", 5 * 2**30)), spec.get("oom_at"))

    def checkpoint(self, label: str) -> None:
        self.labels.append(label)
        if self.oom_at and (label == self.oom_at or label.startswith(self.oom_at + ".")):
            import torch

            raise torch.OutOfMemoryError(
                "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB "
                "(simulated by vramfit's FakeProbe)"
            )

    def peaks(self) -> dict[str, int | None]:
        return dict(self.figures)


class CudaProbe:
    """PyTorch's allocator counters plus the device-level peak from NVML (see the module docstring)."""

    def __init__(self, device: str = "cuda", interval_s: float = 0.01) -> None:
        # Construct before anything creates a CUDA context: the NVML baseline is taken here.
        self.device = device
        self.interval_s = interval_s
        self._nvml: Any = None
        self._handle: Any = None
        self._baseline_used = 0
        self._baselines: dict[int, int] = {}
        self.method = "mem_get_info"
        self._device_peak = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._init_nvml()

    def _init_nvml(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            # every device's used memory before this process has a CUDA context (its baseline)
            self._baselines = {i: int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).used)
                               for i in range(count)}
        except Exception:  # no nvidia-ml-py or no driver: fall back to mem_get_info
            return
        self._nvml = pynvml
        self.method = "nvml-device-minus-baseline"

    def _resolve_handle(self) -> None:
        """NVML's handle for this process's CUDA device: by UUID (CUDA and NVML may order devices
        differently), else by the physical index from ``CUDA_VISIBLE_DEVICES`` / ``LOCAL_RANK``."""
        if self._nvml is None or self._handle is not None:
            return
        nv = self._nvml
        handle = None
        try:
            import torch

            uuid = str(torch.cuda.get_device_properties(self._torch_device()).uuid)
            handle = nv.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
        except Exception:
            handle = None
        try:
            if handle is None:
                handle = nv.nvmlDeviceGetHandleByIndex(_physical_index())
            self._baseline_used = self._baselines.get(int(nv.nvmlDeviceGetIndex(handle)), 0)
            self._handle = handle
        except Exception:
            self._nvml = None
            self.method = "mem_get_info"

    def _torch_device(self) -> Any:
        import torch

        dev = torch.device(self.device)
        return dev if dev.index is not None else torch.device("cuda", torch.cuda.current_device())

    def _sample(self) -> int:
        if self._nvml is not None and self._handle is None:
            self._resolve_handle()
        if self._nvml is not None:
            pid = os.getpid()
            try:
                for proc in self._nvml.nvmlDeviceGetComputeRunningProcesses(self._handle):
                    if proc.pid == pid and proc.usedGpuMemory:
                        self.method = "nvml-process"
                        return int(proc.usedGpuMemory)
                if self.method != "nvml-process":
                    return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used) - self._baseline_used
            except Exception:
                return 0
            return 0
        import torch

        free, total = torch.cuda.mem_get_info(self._torch_device())
        return int(total - free)

    def _record(self) -> None:
        used = self._sample()
        with self._lock:
            self._device_peak = max(self._device_peak, used)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._record()

    def start(self) -> dict[str, int]:
        import gc

        import torch

        dev = self._torch_device()
        gc.collect()
        torch.cuda.synchronize(dev)
        torch.cuda.empty_cache()
        loaded = {"load_allocated_bytes": int(torch.cuda.memory_allocated(dev)),
                  "load_reserved_bytes": int(torch.cuda.memory_reserved(dev))}
        torch.cuda.reset_peak_memory_stats(dev)
        self._resolve_handle()
        self._device_peak = 0
        self._record()
        self._thread = threading.Thread(target=self._run, name="vramfit-nvml", daemon=True)
        self._thread.start()
        return loaded

    def checkpoint(self, label: str) -> None:
        self._record()

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize(self._torch_device())

    def peaks(self) -> dict[str, int | None]:
        import torch

        dev = self._torch_device()
        self._record()
        reserved = int(torch.cuda.max_memory_reserved(dev))
        with self._lock:
            device = self._device_peak
        return {
            "allocated_bytes": int(torch.cuda.max_memory_allocated(dev)),
            "reserved_bytes": reserved,
            # a sampler can miss a short-lived peak; the process holds at least what the allocator reserved
            "device_bytes": max(device, reserved) if device else None,
        }

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)


def _physical_index() -> int:
    """NVML index of this process's CUDA device (``LOCAL_RANK`` under torchrun, ``CUDA_VISIBLE_DEVICES``)."""
    local = int(os.environ.get("LOCAL_RANK", "0"))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        items = [v.strip() for v in visible.split(",") if v.strip()]
        if local < len(items) and items[local].isdigit():
            return int(items[local])
    return local


def make_probe(kind: str, device: str, spec: dict[str, Any] | None = None) -> MemoryProbe:
    """``cuda`` (real counters), ``fake`` (figures from ``spec``), ``none``."""
    if kind == "cuda":
        return CudaProbe(device)
    if kind == "fake":
        return FakeProbe.from_spec(spec or {})
    return NullProbe()
