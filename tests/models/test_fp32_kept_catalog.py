"""Every catalog family whose transformers v5.24.0 class keeps parameters fp32 in a 16-bit load carries it as
ModelSpec data (``fp32_kept_strict`` / ``fp32_kept_fp16``, estimate/fsdp_dtype.py), and no other does. The reference
is transformers' own dtype plan on the family's model built on the meta device in bf16 (modeling_utils.py
``_get_dtype_plan`` l. 3844-3858, matched by regex search as core_model_loading.py l. 1919-1925 does) plus the
parameters the modeling code builds fp32 itself. In the catalog that is DeepSeek-V3 (modeling_deepseek_v3.py l. 551
``_keep_in_fp32_modules_strict = ["e_score_correction_bias", "gate.weight"]``, the bias a buffer) and gpt-oss
(modeling_gpt_oss.py l. 390 ``_keep_in_fp32_modules = ["post_attention_layernorm", "input_layernorm", "norm"]``)."""

from __future__ import annotations

import warnings
from functools import cache

import pytest

from vramfit.models import resolve_model
from vramfit.models.catalog import load_catalog

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

FAMILIES = {}
for _entry in load_catalog():
    if _entry["config"]["model_type"] != "qwen":  # remote code: transformers has no Qwen (1)
        FAMILIES.setdefault(_entry["config"]["model_type"], _entry["id"])


@cache
def _kept(model_type: str) -> tuple[bool, bool]:
    """(some parameter stays fp32 in a bf16 load, some more in an fp16 load), as transformers decides it."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText
    from transformers.core_model_loading import build_glob_alternation

    from vramfit.sim.build import hf_config, num_layers_of

    config = resolve_model(FAMILIES[model_type]).config
    cfg = hf_config(config, min(4, num_layers_of(config)))  # DeepSeek-V3's first MoE layer is layer 3
    cfg._attn_implementation = "eager"
    auto = AutoModelForImageTextToText if isinstance(config.get("vision_config"), dict) else AutoModelForCausalLM
    with warnings.catch_warnings(), torch.device("meta"):
        warnings.simplefilter("ignore")
        model = auto.from_config(cfg, dtype=torch.bfloat16)

    def matched(dtype: torch.dtype) -> set[str]:
        plan = model._get_dtype_plan(dtype)
        pattern = build_glob_alternation(list(plan))[0] if plan else None
        return {n for n, p in model.named_parameters()
                if p.dtype == torch.float32 or (pattern is not None and pattern.search(n))}

    strict, fp16 = matched(torch.bfloat16), matched(torch.float16)
    return bool(strict), bool(fp16 - strict)


@pytest.mark.parametrize("model_type", sorted(FAMILIES))
def test_the_spec_keeps_fp32_what_transformers_keeps(model_type):
    spec = resolve_model(FAMILIES[model_type]).spec
    assert (bool(spec.fp32_kept_strict), bool(spec.fp32_kept_fp16)) == _kept(model_type)


def test_the_catalog_families_that_keep_parameters_fp32():
    kept = {mt: _kept(mt) for mt in FAMILIES}
    assert {mt: k for mt, k in kept.items() if any(k)} == {"deepseek_v3": (True, False), "gpt_oss": (False, True)}
