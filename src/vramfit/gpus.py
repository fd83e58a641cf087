"""The GPU catalog: specs and dated rental prices from ``data/gpus.csv`` (sources per row).

``memory_gb`` is the marketing figure (GB = 10^9 bytes, as vendors print it);
``usable_bytes`` is what the card exposes to CUDA (the total ``nvidia-smi`` shows), which is what a
run must fit in. Users can add or override rows with a CSV of the same columns.
"""

from __future__ import annotations

import csv
import difflib
import io
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

from vramfit.errors import ScenarioError

MiB = 1024**2

#: Total memory the driver reports (nvidia-smi "MiB" total) where it differs from the marketing
#: figure; from NVIDIA's nvidia-smi output as published in vendor and user reports (see README).
#: Cards not listed fall back to memory_gb x 10^9 bytes, the conservative reading.
USABLE_MIB: dict[str, int] = {
    "rtx3090": 24576,
    "rtx3090ti": 24564,
    "rtx4090": 24564,
    "rtxa6000": 49140,
    "rtx6000ada": 49140,
    "l40s": 46068,
    "l40": 46068,
    "a10g": 23028,
    "l4": 23034,
    "a100-40gb-sxm": 40960,
    "a100-40gb-pcie": 40960,
    "a100-80gb-sxm": 81920,
    "a100-80gb-pcie": 81920,
    "h100-sxm": 81559,
    "h100-pcie": 81559,
    "h100-nvl": 95830,
    "h200-sxm": 143771,
    "h200-nvl": 143771,
    "t4": 15360,
}


@dataclass(frozen=True)
class GPU:
    gpu_id: str
    name: str
    vendor: str
    memory_gb: float
    usable_bytes: int
    bf16_tflops: float | None
    interconnect: str
    interconnect_gbs: float | None
    price_low: float | None
    price_high: float | None
    price_details: str
    source: str

    @property
    def memory_class_gb(self) -> int:
        return int(round(self.memory_gb))


def _num(text: str) -> float | None:
    text = (text or "").strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _row_to_gpu(row: dict[str, str], where: str) -> GPU:
    gid = (row.get("gpu_id") or "").strip()
    if not gid:
        raise ScenarioError("gpus", f"{where}: a row has no gpu_id")
    mem = _num(row.get("memory_gb", ""))
    if mem is None or mem <= 0:
        raise ScenarioError("gpus", f"{where}: {gid} needs a positive memory_gb, got {row.get('memory_gb')!r}")
    usable = _num(row.get("usable_bytes", "")) if "usable_bytes" in row else None
    if usable is None:
        usable = USABLE_MIB[gid] * MiB if gid in USABLE_MIB else int(mem * 1e9)
    tflops = _num(row.get("bf16_fp16_dense_tflops", "")) or _num(row.get("bf16_fp16_dense_tflops_derived_est", ""))
    return GPU(
        gpu_id=gid,
        name=(row.get("name") or gid).strip(),
        vendor=(row.get("vendor") or "").strip(),
        memory_gb=mem,
        usable_bytes=int(usable),
        bf16_tflops=tflops,
        interconnect=(row.get("interconnect") or "").strip(),
        interconnect_gbs=_num(row.get("gpu_interconnect_bw_gbs_bidir", "")),
        price_low=_num(row.get("price_usd_per_gpu_hr_low", "")),
        price_high=_num(row.get("price_usd_per_gpu_hr_high", "")),
        price_details=(row.get("price_details") or "").strip(),
        source=(row.get("source") or "").strip(),
    )


def parse_gpu_csv(text: str, where: str = "gpus.csv") -> dict[str, GPU]:
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames or "gpu_id" not in reader.fieldnames or "memory_gb" not in reader.fieldnames:
        raise ScenarioError("gpus", f"{where}: needs a header with at least gpu_id and memory_gb")
    out: dict[str, GPU] = {}
    for row in reader:
        g = _row_to_gpu(row, where)
        out[g.gpu_id] = g
    return out


@lru_cache(maxsize=1)
def _bundled() -> dict[str, GPU]:
    text = resources.files("vramfit").joinpath("data/gpus.csv").read_text(encoding="utf-8")
    return parse_gpu_csv(text, "bundled gpus.csv")


_extra: dict[str, GPU] = {}


def load_user_gpus(path: str | Path) -> list[str]:
    """Add or override catalog rows from a user CSV (same columns; gpu_id and memory_gb required)."""
    p = Path(path)
    if not p.is_file():
        raise ScenarioError("gpus", f"file not found: {p}")
    rows = parse_gpu_csv(p.read_text(encoding="utf-8"), str(p))
    _extra.update(rows)
    return list(rows)


def list_gpus() -> list[GPU]:
    merged = dict(_bundled())
    merged.update(_extra)
    return list(merged.values())


def get_gpu(gpu_id: str) -> GPU:
    catalog = {g.gpu_id: g for g in list_gpus()}
    key = gpu_id.strip().lower()
    if key in catalog:
        return catalog[key]
    close = difflib.get_close_matches(key, list(catalog), n=5, cutoff=0.4)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise ScenarioError("gpu", f"unknown GPU {gpu_id!r}.{hint}", sorted(catalog))


#: One representative card per common memory class, for "which cards does it fit".
COMMON_CARDS: tuple[str, ...] = ("rtx4090", "l40s", "a100-80gb-sxm", "h100-sxm", "h200-sxm")
