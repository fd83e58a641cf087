"""Cells of the GPU catalog's rows (split from :mod:`vramfit.gpus`, which explains a card's two memory figures): the
usable memory of cards whose CUDA or nvidia-smi total is published, and how a user file's row lands on a catalog row."""

from __future__ import annotations

from pathlib import PurePath

_SMI = "nvidia-smi 'MiB' total as printed next to this card's name in public nvidia-smi output (code-corpus search)"
_TORCH = "torch.cuda.get_device_properties().total_memory as printed for this card in public logs (code-corpus search)"

#: Usable memory per card: (MiB, kind, source). Where reports disagree (driver versions), the
#: lowest is kept. Cards not listed fall back to memory_gb x 10^9 bytes ("marketing").
USABLE: dict[str, tuple[int, str, str]] = {
    "rtx3090": (24268, "cuda", _TORCH + "; 24268 MiB in the Hugging Face transformers docs (nvidia-smi shows 24576)"),
    "rtx4090": (24563, "cuda", _TORCH + "; nvidia-smi shows 24564 (h2oai/h2ogpt perf.md)"),
    "rtxa6000": (48676, "cuda", _TORCH + " (ECC off; nvidia-smi 49140, 46068 with ECC on)"),
    "rtx6000ada": (49140, "nvidia-smi", _SMI + "; h2oai/h2ogpt perf.md '1 x NVIDIA RTX 6000 Ada Generation (49140 MiB)'"),
    "rtx5090": (32607, "nvidia-smi", _SMI),
    "l40s": (45589, "cuda", _TORCH + " (ECC on, the datacenter default; nvidia-smi 46068)"),
    "l40": (46068, "nvidia-smi", _SMI + " (ECC on)"),
    "a40": (46068, "nvidia-smi", _SMI + " (ECC on)"),
    "a10g": (22587, "cuda", _TORCH + "; nvidia-smi shows 23028"),
    "a10": (23028, "nvidia-smi", _SMI),
    "l4": (23034, "nvidia-smi", _SMI),
    "t4": (14930, "cuda", _TORCH + " (lowest of 14930-15109 across drivers); nvidia-smi shows 15360"),
    "a100-40gb-sxm": (40536, "cuda", "cudaDeviceProp total printed as 'A100-SXM4-40GB ... total_memory=40536MB' (PaddlePaddle docs)"),
    "a100-80gb-sxm": (81221, "cuda", "cudaDeviceProp totalGlobalMem 81221.8 MiB printed for an A100-SXM4-80GB (code-corpus search); nvidia-smi shows 81920"),
    "h100-sxm": (81082, "cuda", _TORCH + " (81082-81090 across drivers); nvidia-smi shows 81559"),
    "h100-pcie": (81008, "cuda", _TORCH + "; nvidia-smi shows 81559"),
    "h100-nvl": (95830, "nvidia-smi", _SMI),
    "h200-sxm": (143156, "cuda", _TORCH + "; nvidia-smi shows 143771"),
    "b200": (182631, "cuda", _TORCH + " (182631-182642 across drivers)"),
}

#: marker cell of a merged row whose memory_gb a user file changed (:func:`overridden`)
MEMORY_NEW = "_memory_overridden"


def aliases_of(rows: dict[str, tuple]) -> dict[str, str]:
    """Every alias of the cards so far -> its card id."""
    return {a.strip().lower(): gid for gid, (row, *_) in rows.items()
            for a in (row.get("aliases") or "").split(";") if a.strip()}


def number_text(text: str) -> float | str:
    """A cell as a number where it is one (80 and 80.0 are the same memory), else as written."""
    try:
        return float(text)
    except ValueError:
        return text.strip()


def overridden(base: dict[str, str], filled: dict[str, str], where: str) -> dict[str, str]:
    """A catalog row with a user row's cells on top. A new ``memory_gb`` without a usable figure drops the catalog's
    published CUDA total (it was the old card's): the usable figure is then the new memory's; new prices without
    ``price_details`` drop the old offers' description, which named other prices; a new ``memory_gb`` without a new
    ``name`` says so in the name, which may state the old memory."""
    new_memory = "memory_gb" in filled and number_text(filled["memory_gb"]) != number_text(base.get("memory_gb") or "")
    if "usable_bytes" in filled or "usable_mib" in filled:
        base.pop("usable_bytes", None)
        base.pop("usable_mib", None)
    elif new_memory:
        base[MEMORY_NEW] = "1"
    if new_memory and base.get("name") and "name" not in filled:
        # the catalog's name may state the old memory ('H100 SXM5 80GB'): every table would print it beside the new one
        base["name"] = f"{base['name']} as {filled['memory_gb'].strip()} GB ({PurePath(where).name})"
    if {"price_usd_per_gpu_hr_low", "price_usd_per_gpu_hr_high"} & set(filled) and "price_details" not in filled:
        base["price_details"] = f"set in {where}"
    return base | filled
