"""The environment a measurement ran in: GPU, driver, CUDA and library versions.

:func:`gpu_family` is pure (no torch): it maps a CUDA device name (``NVIDIA A100-SXM4-80GB``) or a
catalog id (``a100-80gb-sxm``) to the family that :mod:`vramfit.measure.calibration` groups by
(``a100``). :func:`capture` imports torch and is called only inside the measuring process.
"""

from __future__ import annotations

import os
import platform
import re
from functools import lru_cache
from importlib import metadata
from typing import Any

#: Packages whose versions change memory behaviour (allocator, kernels, adapters, quantization).
PACKAGES = ("torch", "transformers", "peft", "bitsandbytes", "accelerate", "deepspeed", "vramfit")

#: Environment variables that change what the counters report.
ENV_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "CUDA_MODULE_LOADING", "CUBLAS_WORKSPACE_CONFIG",
            "CUBLASLT_WORKSPACE_SIZE", "NCCL_BUFFSIZE")


@lru_cache(maxsize=1)
def _catalog_families() -> tuple[str, ...]:
    from vramfit.gpus import list_gpus

    fams = {g.gpu_id.split("-")[0] for g in list_gpus()}
    return tuple(sorted(fams, key=len, reverse=True))


def _squash(text: str) -> str:
    out = text.lower()
    for word in ("nvidia", "geforce", "tesla", "amd", "instinct"):
        out = out.replace(word, "")
    return re.sub(r"[^a-z0-9]", "", out)


def gpu_family(name: str | None) -> str:
    """The catalog family (``a100``, ``h100``, ``rtx4090`` ...) of a device name or catalog id.

    The longest catalog family (first dash-separated part of a ``gpus.csv`` id) contained in the
    squashed name wins; a name matching none is returned squashed, ``unknown`` when empty.
    """
    if not name:
        return "unknown"
    squashed = _squash(name)
    for fam in _catalog_families():
        if _squash(fam) and _squash(fam) in squashed:
            return fam
    return squashed or "unknown"


def catalog_gpu_id(name: str | None, total_bytes: int | None = None) -> str | None:
    """The ``gpus.csv`` id of a CUDA device name (``NVIDIA H100 80GB HBM3`` → ``h100-sxm``), or None.

    Among the catalog cards of the name's family, one whose form factor (``pcie``, ``sxm``, ``nvl``)
    appears in the name wins (SXM when the name gives none), then the one whose memory is closest
    to ``total_bytes``.
    """
    from vramfit.gpus import list_gpus

    fam = gpu_family(name)
    cards = [g for g in list_gpus() if g.gpu_id.split("-")[0] == fam]
    if not name or not cards:
        return None
    squashed = _squash(name)
    forms = [f for f in ("pcie", "nvl", "sxm") if f in squashed] or ["sxm"]

    def score(g: Any) -> tuple[int, float]:
        form_ok = any(f in g.gpu_id for f in forms) or not any(f in g.gpu_id for f in ("pcie", "nvl", "sxm"))
        mem = abs(g.usable_bytes - total_bytes) / total_bytes if total_bytes else 0.0
        return (0 if form_ok else 1, mem)

    return min(cards, key=score).gpu_id


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for pkg in PACKAGES:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def capture(device: str, world_size: int = 1, probe_method: str | None = None) -> dict[str, Any]:
    """Everything about this process's machine that the figures depend on (JSON-ready)."""
    import torch

    env: dict[str, Any] = {
        "device": torch.device(device).type,
        "world_size": world_size,
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "packages": package_versions(),
        "cuda": torch.version.cuda,
        "env": {k: os.environ[k] for k in ENV_VARS if k in os.environ},
        "gpu_name": None,
        "gpu_family": None,
        "gpu_total_bytes": None,
        "compute_capability": None,
        "driver": None,
        "cudnn": None,
        "memory_probe": probe_method,
    }
    if env["device"] == "cuda" and torch.cuda.is_available():
        idx = torch.device(device).index
        idx = torch.cuda.current_device() if idx is None else idx
        props = torch.cuda.get_device_properties(idx)
        env["gpu_name"] = props.name
        env["gpu_family"] = gpu_family(props.name)
        env["gpu_total_bytes"] = int(props.total_memory)
        env["compute_capability"] = f"{props.major}.{props.minor}"
        env["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        env["driver"] = driver_version()
    return env


def driver_version() -> str | None:
    """The NVIDIA driver version from NVML (``nvidia-ml-py``), or None when NVML is unavailable."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else str(v)
    except Exception:  # NVML missing or too old: the version is informative only
        return None
