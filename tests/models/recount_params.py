"""Recount ``published_params`` in ``src/vramfit/data/models.json`` with transformers (one-off tool).

Not a test (pytest does not collect it) and not used at run time: it needs torch and
transformers, which vramfit itself does not. For every catalog entry it builds the real
transformers model from the stored ``config`` on the meta device (no memory, no download) and
counts ``sum(p.numel() for p in model.parameters())`` (tied weights counted once); entries of families
without a torch-free reader also get the spec read from those modules (``"spec"``). Qwen 1 is a
remote-code model that transformers does not ship; its count is computed by hand here from the
published ``modeling_qwen.py`` layout, independently of ``vramfit.models.hf_config``.

Run:  .venv/bin/python tests/models/recount_params.py [--write]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

CATALOG = Path(__file__).resolve().parents[2] / "src" / "vramfit" / "data" / "models.json"
TRANSFORMERS_SOURCE = (
    "transformers {version}: AutoModelForCausalLM.from_config(AutoConfig.for_model(**config)) "
    "built on the meta device; sum(p.numel() for p in model.parameters()), tied weights once"
)
VLM_SOURCE = TRANSFORMERS_SOURCE.replace("AutoModelForCausalLM", "AutoModelForImageTextToText")
QWEN1_SOURCE = (
    "computed by hand from Qwen's modeling_qwen.py (remote code, not in transformers): "
    "V*h (wte) + L*(2h [ln_1, ln_2] + h*3h + 3h [c_attn] + h*h [c_proj] + 3*h*(ff/2) [w1, w2, "
    "mlp.c_proj]) + h [ln_f] + V*h (untied lm_head)"
)


def count_qwen1(cfg: dict) -> int:
    h, ff, layers, vocab = (
        cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    )
    proj = cfg["kv_channels"] * cfg["num_attention_heads"]
    block = 2 * h + (h * 3 * proj + 3 * proj) + proj * h + 3 * h * (ff // 2)
    return vocab * h + layers * block + h + vocab * h


def count_transformers(cfg: dict) -> int:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText

    config = AutoConfig.for_model(**cfg)
    # vision-language checkpoints (a vision_config) are built whole, vision tower included
    auto = AutoModelForImageTextToText if "vision_config" in cfg else AutoModelForCausalLM
    with torch.device("meta"):
        model = auto.from_config(config)
    return sum(p.numel() for p in model.parameters())


def main() -> None:
    import transformers

    from vramfit.models.hf_config import SUPPORTED_MODEL_TYPES, spec_from_hf_config
    from vramfit.models.spec_data import spec_to_data

    data = json.loads(CATALOG.read_text())
    changed = 0
    for entry in data["models"]:
        cfg = entry["config"]
        if cfg["model_type"] == "qwen":
            n, src = count_qwen1(cfg), QWEN1_SOURCE
        else:
            n = count_transformers(cfg)
            fmt = VLM_SOURCE if "vision_config" in cfg else TRANSFORMERS_SOURCE
            src = fmt.format(version=transformers.__version__)
        old = entry.get("published_params")
        flag = "" if old == n else f"  (was {old})"
        print(f"{entry['id']:55s} {n:>16,d}{flag}", flush=True)
        if old != n or entry.get("published_params_source") != src:
            changed += 1
        entry["published_params"], entry["published_params_source"] = n, src
        if cfg["model_type"] not in SUPPORTED_MODEL_TYPES:  # read from transformers' modules: stored, torch-free
            entry["spec"] = spec_to_data(spec_from_hf_config(cfg))
    if "--write" in sys.argv:
        CATALOG.write_text(json.dumps(data, indent=2) + "\n")
        print(f"wrote {CATALOG} ({changed} entries changed)")


if __name__ == "__main__":
    main()
