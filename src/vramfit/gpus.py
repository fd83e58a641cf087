"""The GPU catalog: specs and dated rental prices from ``data/gpus.csv`` (sources per row).

Two memory figures per card, never mixed up:

- ``memory_gb`` is the marketing figure as vendors print it ("80 GB"): a name, the real total lying between it x 10^9
  and x 1024^3 bytes;
- ``usable_bytes`` is what a run must fit in: the total the CUDA driver exposes to a process
  (``torch.cuda.get_device_properties(0).total_memory``, ``cudaDeviceProp.totalGlobalMem``), which
  is what ``device_bytes`` of an estimate is compared with. ``usable_kind`` says where it comes from:
  ``cuda`` (a published CUDA total), ``nvidia-smi`` (the ``nvidia-smi`` total, which on datacenter
  cards is up to ~0.7 GiB above the CUDA total because the driver reserves part of it),
  ``marketing`` (memory_gb x 10^9 bytes: no published figure; below the real total on every card we
  checked, so a conservative reading) or ``user`` (a ``usable_bytes``/``usable_mib`` cell in a user file).

Users add or override cards and prices with a CSV of the same columns: ``load_user_gpus(path)``
(``--gpus my-gpus.csv``), and automatically ``$VRAMFIT_CONFIG_DIR/gpus.csv`` (default
``~/.config/vramfit/gpus.csv``). A row whose ``gpu_id`` is already in the catalog overrides only the
cells it fills (a price-only file is enough); a new ``gpu_id`` needs at least ``memory_gb``.
"""

from __future__ import annotations

import contextlib
import csv
import difflib
import io
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from importlib import resources
from pathlib import Path

from vramfit.errors import ScenarioError
from vramfit.safe_input import read_text_file, shown, user_path
from vramfit.units import GB, GiB, MiB

#: GPUs in one node (one machine): 8 on the HGX/DGX boards the catalog's SXM cards come in
#: (NVIDIA DGX H100/H200/B200 user guides: 8 GPUs per system). The planner rents at most one node;
#: an estimate for more GPUs says that it models them as one flat group (see the assumptions).
GPUS_PER_NODE = 8


class Arch(str, Enum):
    """GPU architecture family, read from the catalog's ``architecture`` column (first word)."""

    VOLTA = "volta"
    TURING = "turing"
    AMPERE = "ampere"
    ADA = "ada"
    HOPPER = "hopper"
    BLACKWELL = "blackwell"
    CDNA = "cdna"
    GAUDI = "gaudi"
    UNKNOWN = "unknown"

    @classmethod
    def parse(cls, text: str) -> Arch:
        """``"Hopper (GH100) + Grace CPU"`` -> HOPPER; an empty or unknown text -> UNKNOWN."""
        words = text.strip().lower().replace("(", " ").split()
        first = words[0] if words else ""
        return next((a for a in cls if a.value == first), cls.UNKNOWN)


#: Columns of gpus.csv (a user file may use any subset, plus ``usable_bytes`` or ``usable_mib``).
COLUMNS: tuple[str, ...] = (
    "gpu_id", "name", "vendor", "architecture", "form_factor", "memory_gb", "memory_type", "mem_bandwidth_gbs",
    "bf16_fp16_dense_tflops", "bf16_fp16_dense_tflops_derived_est", "fp8_dense_tflops", "fp32_tflops", "tdp_w",
    "interconnect", "gpu_interconnect_bw_gbs_bidir", "supports_bf16", "supports_flash_attn2", "price_usd_per_gpu_hr_low",
    "price_usd_per_gpu_hr_high", "price_details", "source", "notes", "aliases", "rental_gpus", "rental_source",
    "peer_to_peer", "usable_bytes", "usable_mib",
)
_POSITIVE = ("memory_gb", "mem_bandwidth_gbs", "bf16_fp16_dense_tflops", "bf16_fp16_dense_tflops_derived_est",
             "fp8_dense_tflops", "fp32_tflops", "tdp_w", "gpu_interconnect_bw_gbs_bidir", "usable_bytes", "usable_mib")
_NON_NEGATIVE = ("price_usd_per_gpu_hr_low", "price_usd_per_gpu_hr_high")

from vramfit.gpu_rows import MEMORY_NEW, USABLE, aliases_of, overridden  # noqa: E402  (gpus.USABLE for readers)
from vramfit.limits import MAX_GPU_MEMORY_GB  # noqa: E402


@dataclass(frozen=True)
class GPU:
    gpu_id: str
    name: str
    vendor: str
    memory_gb: float  # marketing figure ("80 GB"), not a byte count (module docstring)
    usable_bytes: int  # what CUDA exposes to a process (see usable_kind)
    bf16_tflops: float | None  # dense BF16/FP16 tensor peak (FP32 accumulate), TFLOPS
    interconnect: str
    interconnect_gbs: float | None  # GPU-to-GPU, bidirectional, GB/s per GPU
    price_low: float | None  # USD per GPU-hour, on demand
    price_high: float | None
    price_details: str
    source: str
    usable_kind: str = "marketing"  # cuda | nvidia-smi | marketing | user
    usable_source: str = ""
    mem_bandwidth_gbs: float | None = None
    supports_bf16: bool | None = None
    supports_flash_attn2: bool | None = None  # the catalog's column: FlashAttention-2 needs Ampere or newer
    form_factor: str = ""
    architecture: str = ""  # the catalog's text, e.g. "Hopper (GH100)"; see :attr:`arch`
    origin: str = "bundled"  # "bundled" or the path of the user file that added/changed it
    aliases: tuple[str, ...] = ()  # other names accepted for gpu_id ("4090", "h200")
    rental_gpus: tuple[int, ...] = ()  # GPU counts one instance is rented in; () = any count (per-GPU rental)
    rental_source: str = ""
    # GPU-to-GPU copies without the host (CUDA peer-to-peer): "no" for GeForce cards the driver keeps
    # it off on (gpus-notes.md, "peer_to_peer"); an empty cell means yes
    peer_to_peer: bool = True

    @property
    def arch(self) -> Arch:
        """The architecture family, from the ``architecture`` column (never from the id)."""
        return Arch.parse(self.architecture)

    @property
    def memory_class_gb(self) -> int:
        return int(round(self.memory_gb))

    @property
    def host_link_gbs(self) -> float:
        """Host link bandwidth per direction, GB/s, read from the interconnect/form-factor text.

        PCIe x16 per direction: 3.0 = 15.75, 4.0 = 31.5, 5.0 = 63 GB/s (PCI-SIG: 8/16/32 GT/s per
        lane, 128b/130b encoding); x8 halves it. NVLink-C2C (GH200/GB200) 450 GB/s per direction.
        Unknown: PCIe 4.0 x16 is assumed.
        """
        text = f"{self.interconnect} {self.form_factor}"
        if "C2C" in text:
            return 450.0
        rate = 31.5
        for gen, r in (("PCIe 3.0", 15.75), ("PCIe 4.0", 31.5), ("PCIe 5.0", 63.0)):
            if gen in text:
                rate = r
        return rate / 2 if "x8" in text else rate

    @property
    def peer_gbs(self) -> float:
        """GPU-to-GPU bandwidth per direction, GB/s: NVLink/fabric figure, else the host PCIe link."""
        return self.interconnect_gbs / 2 if self.interconnect_gbs else self.host_link_gbs


def _yes_no(row: dict, key: str, where: str, line: int, gid: str) -> bool | None:
    """A yes/no column (text may follow its first word: "no (FA2 needs Ampere+)", "yes*"; true/false, y/n, 1/0 alike),
    None when empty; other words are refused, as read "unknown" a card declared without bf16 got bf16 plans."""
    text = (row.get(key) or "").strip().lower()
    word = (text.replace("*", " ").replace("(", " ").split() or [""])[0]
    if word in ("yes", "true", "y", "1", "no", "false", "n", "0") or not text:
        return word in ("yes", "true", "y", "1") if text else None
    raise _bad(where, line, gid, key, f"must be yes or no (true/false, y/n and 1/0 read the same), got {shown(text)}")


def _bad(where: str, line: int, gid: str, col: str, msg: str) -> ScenarioError:
    who = f" (gpu_id {shown(gid)})" if gid else ""
    return ScenarioError("gpus", f"{where} line {line}{who}: {col} {msg}")


def _num(row: dict[str, str], col: str, where: str, line: int, gid: str) -> float | None:
    text = (row.get(col) or "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise _bad(where, line, gid, col, f"must be a number, got {shown(text)}") from None
    if not math.isfinite(value):
        raise _bad(where, line, gid, col, f"must be a finite number, got {shown(text)}")
    if col == "memory_gb" and value > MAX_GPU_MEMORY_GB:  # 1e308 GB overflowed int(memory_gb x 10^9)
        raise _bad(where, line, gid, col, f"must be at most {MAX_GPU_MEMORY_GB:,} GB, got {shown(text)}")
    if col in _POSITIVE and value <= 0:
        raise _bad(where, line, gid, col, f"must be a positive number, got {shown(text)}")
    if col in _NON_NEGATIVE and value < 0:
        raise _bad(where, line, gid, col, f"must be zero or more (USD per GPU-hour), got {shown(text)}")
    return value


def _row_to_gpu(row: dict[str, str], where: str, line: int = 0, origin: str = "bundled") -> GPU:
    gid = (row.get("gpu_id") or "").strip().lower()
    if not gid:
        raise _bad(where, line, "", "gpu_id", "is empty (every row needs a card id)")
    n = {c: _num(row, c, where, line, gid) for c in _POSITIVE + _NON_NEGATIVE}
    mem = n["memory_gb"]
    if mem is None:
        raise _bad(where, line, gid, "memory_gb", "is required for a card not in the catalog (GB = 10^9 bytes)")
    low, high = n["price_usd_per_gpu_hr_low"], n["price_usd_per_gpu_hr_high"]
    if low is not None and high is None:
        high = low
    if high is not None and low is None:
        low = high
    if low is not None and high is not None and low > high:
        raise _bad(where, line, gid, "price_usd_per_gpu_hr_low", f"({low}) is above price_usd_per_gpu_hr_high ({high})")
    if n["usable_bytes"] is not None or n["usable_mib"] is not None:
        raw = n["usable_bytes"] if n["usable_bytes"] is not None else n["usable_mib"] * MiB
        usable, kind, usrc = int(min(raw, mem * GiB + 1)), "user", f"set in {where}"  # no int() of 1e308
        if raw > mem * GiB:  # CUDA totals lie between memory_gb x 10^9 and memory_gb x 1024^3 (module docstring)
            col = "usable_bytes" if n["usable_bytes"] is not None else "usable_mib"
            raise _bad(where, line, gid, col, f"({raw / GiB:,.1f} GiB) is above memory_gb ({mem:g} GB, at most "
                       f"{mem:g} GiB usable)")
    elif gid in USABLE and not row.get(MEMORY_NEW):
        mib, kind, usrc = USABLE[gid]
        usable = mib * MiB
    else:
        usable, kind = int(mem * GB), "marketing"
        usrc = "no published CUDA/nvidia-smi total found: memory_gb x 10^9 bytes (below the real total on known cards)"
    units = []
    for part in (row.get("rental_gpus") or "").replace(",", ";").split(";"):
        if part.strip():
            if not part.strip().isdigit() or int(part) < 1:
                raise _bad(where, line, gid, "rental_gpus", f"must be GPU counts such as 4 or 1;8, got {part.strip()!r}")
            units.append(int(part))
    return GPU(
        gpu_id=gid,
        name=(row.get("name") or gid).strip(),
        vendor=(row.get("vendor") or "").strip(),
        memory_gb=mem,
        usable_bytes=usable,
        bf16_tflops=n["bf16_fp16_dense_tflops"] or n["bf16_fp16_dense_tflops_derived_est"],
        interconnect=(row.get("interconnect") or "").strip(),
        interconnect_gbs=n["gpu_interconnect_bw_gbs_bidir"],
        price_low=low,
        price_high=high,
        price_details=(row.get("price_details") or "").strip(),
        source=(row.get("source") or "").strip(),
        usable_kind=kind,
        usable_source=usrc,
        mem_bandwidth_gbs=n["mem_bandwidth_gbs"],
        supports_bf16=_yes_no(row, "supports_bf16", where, line, gid),
        supports_flash_attn2=_yes_no(row, "supports_flash_attn2", where, line, gid),
        form_factor=(row.get("form_factor") or "").strip(),
        architecture=(row.get("architecture") or "").strip(),
        origin=origin,
        aliases=tuple(a.strip().lower() for a in (row.get("aliases") or "").split(";") if a.strip()),
        rental_gpus=tuple(sorted(set(units))),
        rental_source=(row.get("rental_source") or "").strip(),
        peer_to_peer=_yes_no(row, "peer_to_peer", where, line, gid) is not False,
    )


def _read_rows(text: str, where: str, strict: bool) -> list[tuple[int, dict[str, str]]]:
    reader = csv.DictReader(io.StringIO(text))
    header = reader.fieldnames or []
    twice = sorted({c for c in header if header.count(c) > 1})
    if twice:
        raise ScenarioError("gpus", f"{where}: column {shown(twice[0])} is given twice in the header", COLUMNS)
    if "gpu_id" not in header:
        raise ScenarioError("gpus", f"{where}: needs a header row with a gpu_id column", COLUMNS)
    if strict:
        unknown = [c for c in header if c not in COLUMNS]
        if unknown:
            raise ScenarioError("gpus", f"{where}: unknown column {shown(unknown[0])}", COLUMNS)
    rows, seen = [], {}
    for row in reader:
        if None in row:
            raise ScenarioError("gpus", f"{where} line {reader.line_num}: more cells than header columns")
        if any((v or "").strip() for v in row.values()):
            gid = (row.get("gpu_id") or "").strip().lower()
            if gid and gid in seen:  # the later row silently replaced the earlier one
                raise ScenarioError("gpus", f"{where} line {reader.line_num}: card {shown(gid)} is given again (first "
                                    f"on line {seen[gid]}); give each card one row")
            seen.setdefault(gid, reader.line_num)
            rows.append((reader.line_num, row))
    return rows


def parse_gpu_csv(text: str, where: str = "gpus.csv") -> dict[str, GPU]:
    """Cards of a complete CSV (every row needs gpu_id and memory_gb)."""
    out: dict[str, GPU] = {}
    for line, row in _read_rows(text, where, strict=False):
        g = _row_to_gpu(row, where, line)
        out[g.gpu_id] = g
    return out


@lru_cache(maxsize=1)
def _bundled_rows() -> dict[str, dict[str, str]]:
    text = resources.files("vramfit").joinpath("data/gpus.csv").read_text(encoding="utf-8")
    return {row["gpu_id"].strip().lower(): row for _, row in _read_rows(text, "bundled gpus.csv", strict=False)}


_user_files: list[Path] = []
_catalog_cache: dict[str, GPU] | None = None


def config_dir() -> Path:
    """``$VRAMFIT_CONFIG_DIR``, else ``$XDG_CONFIG_HOME/vramfit``, else ``~/.config/vramfit``."""
    env = os.environ.get("VRAMFIT_CONFIG_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CONFIG_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".config") / "vramfit"


def _merge(files: list[Path]) -> dict[str, GPU]:
    rows = {gid: (dict(r), "bundled", "bundled gpus.csv", 0) for gid, r in _bundled_rows().items()}
    for path in files:
        where = str(path)
        for line, row in _read_rows(read_text_file("gpus", path), where, strict=True):
            gid = (row.get("gpu_id") or "").strip().lower()
            if not gid:
                raise _bad(where, line, "", "gpu_id", "is empty (every row needs a card id)")
            owner = None if gid in rows else aliases_of(rows).get(gid)
            if owner:
                raise _bad(where, line, gid, "gpu_id", f"is the catalog's name for {owner}: override that card with "
                           f"gpu_id {owner}, or give yours another id")
            base = dict(rows[gid][0]) if gid in rows else {}
            filled = {k: v for k, v in row.items() if k and (v or "").strip()}
            rows[gid] = (overridden(base, filled, where) | {"gpu_id": gid}, where, where, line)
    out = {}
    for gid, (row, origin, where, line) in rows.items():
        out[gid] = _row_to_gpu(row, where, line, origin)
    return out


def _catalog() -> dict[str, GPU]:
    global _catalog_cache
    if _catalog_cache is None:
        files = list(_user_files)
        auto = config_dir() / "gpus.csv"
        if auto.is_file() and auto not in files:
            files.insert(0, auto)
        _catalog_cache = _merge(files)
    return _catalog_cache


def load_user_gpus(path: str | Path) -> list[str]:
    """Add or override catalog rows from a user CSV; returns the ids it names.

    The file is checked at once (unknown columns, non-numeric or negative cells are errors keyed
    ``gpus`` that name the file, line, card and column).
    """
    global _catalog_cache
    p = user_path("gpus", path)
    ids = [(r.get("gpu_id") or "").strip().lower() for _, r in _read_rows(read_text_file("gpus", p), str(p), True)]
    previous = list(_user_files)
    _user_files.append(p)
    _catalog_cache = None
    try:
        _catalog()
    except ScenarioError:
        _restore_user_files(previous)
        raise
    return ids


def _restore_user_files(files: list[Path]) -> None:
    global _catalog_cache
    _user_files[:] = files
    _catalog_cache = None


@contextlib.contextmanager
def user_gpus_added(path: str | Path) -> Iterator[list[str]]:
    """The catalog with ``path``'s cards added (:func:`load_user_gpus`) for the block, as before after it."""
    previous = list(_user_files)
    ids = load_user_gpus(path)
    try:
        yield ids
    finally:
        _restore_user_files(previous)


def reset_user_gpus() -> None:
    """Forget user files loaded with :func:`load_user_gpus` (and re-read the config directory)."""
    _restore_user_files([])


def list_gpus() -> list[GPU]:
    return list(_catalog().values())


def _names() -> dict[str, str]:
    """Every accepted name (id, alias; spaces dropped) -> gpu id. Ids win over aliases."""
    out: dict[str, str] = {}
    for g in _catalog().values():
        for a in g.aliases:
            out.setdefault(a.replace(" ", ""), g.gpu_id)
    out.update({gid: gid for gid in _catalog()})
    return out


def get_gpu(gpu_id: str) -> GPU:
    """A card by id or alias (``4090``, ``h200``, ``RTX 4090``); unknown names get up to 5 suggestions."""
    catalog = _catalog()
    key = gpu_id.strip().lower()
    if key in catalog:
        return catalog[key]
    names = _names()
    compact = key.replace(" ", "").removeprefix("nvidia").removeprefix("geforce")
    if compact in names:
        return catalog[names[compact]]
    close = difflib.get_close_matches(compact, list(names), n=10, cutoff=0.4)
    ids = list(dict.fromkeys(names[c] for c in close))[:5]
    hint = f"; did you mean: {', '.join(ids)}?" if ids else ""
    raise ScenarioError("gpu", f"unknown GPU {shown(gpu_id)}{hint} (`vramfit gpus` lists all {len(catalog)})")


#: One representative card per common memory class, for "which cards does it fit".
COMMON_CARDS: tuple[str, ...] = ("rtx4090", "l40s", "a100-80gb-sxm", "h100-sxm", "h200-sxm")
