"""Framework profiles: typed choices, pinned sources, and the helpers that read them."""

import ast
import inspect
import re
from dataclasses import fields, replace
from pathlib import Path

import pytest

from vramfit.estimate.core import Parts, optimizer_temporaries
from vramfit.estimate.framework import (
    PROFILES,
    FrameworkProfile,
    LossLayout,
    OptimizerImpl,
    adapter_bytes,
    profile_for,
    runs_under_autocast,
)
from vramfit.scenario import Framework, Precision, parse_scenario

SRC = Path(__file__).resolve().parents[2] / "src" / "vramfit"
PINNED = re.compile(r"(@[0-9a-f]{7,40}\b|\bv?\d+\.\d+(\.\d+)?\b)")


def _field_comments() -> dict[str, str]:
    """The comment block above each FrameworkProfile field, plus its inline comment."""
    lines = Path(inspect.getsourcefile(FrameworkProfile)).read_text().splitlines()
    cls = next(n for n in ast.parse("\n".join(lines)).body if isinstance(n, ast.ClassDef) and n.name == "FrameworkProfile")
    out = {}
    for node in cls.body:
        if isinstance(node, ast.AnnAssign):
            i, text = node.lineno - 1, [lines[node.lineno - 1]]
            while lines[i - 1].strip().startswith("#"):
                i -= 1
                text.append(lines[i])
            out[node.target.id] = "\n".join(text)
    return out


def test_every_profile_field_cites_a_pinned_source():
    comments = _field_comments()
    assert set(comments) == {f.name for f in fields(FrameworkProfile)}
    unpinned = [n for n, c in comments.items() if n != "name" and not PINNED.search(c)]
    assert unpinned == []


def test_choices_are_enums():
    for p in PROFILES.values():
        assert isinstance(p.standard_loss, LossLayout) and isinstance(p.torch_optimizer_impl, OptimizerImpl)
    assert profile_for(Framework.LITGPT).torch_optimizer_impl is OptimizerImpl.FOREACH
    assert profile_for(Framework.HF).runs_transformers_modeling
    assert not profile_for(Framework.TORCHTUNE).runs_transformers_modeling
    assert profile_for(Framework.HF).qlora_fused_max_tokens == 512


def test_no_code_compares_a_profile_display_name():
    pattern = re.compile(r"(profile|prof)\.name\s*(==|!=|in\b)|hf_quantizer_rules")
    hits = [f"{p.relative_to(SRC)}:{i}" for p in SRC.rglob("*.py")
            for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert hits == []


@pytest.mark.parametrize(("fw", "precision", "expected"), [
    (Framework.HF, Precision.BF16_TRUE, 4),  # PEFT autocast_adapter_dtype: fp32 adapters
    (Framework.TORCHTUNE, Precision.BF16_TRUE, 2),
    (Framework.LITGPT, Precision.FP32, 4),
    (Framework.LITGPT, Precision.BF16_MIXED, 4),  # mixed: fp32 parameters
])
def test_adapter_bytes(fw, precision, expected):
    assert adapter_bytes(profile_for(fw), precision) == expected


@pytest.mark.parametrize(("keys", "fw", "expected"), [
    ({"method": "lora", "precision": "bf16-mixed"}, "torchtune", True),
    ({"method": "lora", "precision": "bf16-true"}, "hf", False),
    ({"method": "qlora", "precision": "bf16-true"}, "hf", True),  # HF QLoRA recipe: Trainer bf16=True
    ({"method": "qlora", "precision": "bf16-true"}, "torchtune", False),
    ({"method": "qlora", "precision": "fp32"}, "hf", False),
])
def test_runs_under_autocast(keys, fw, expected):
    sc = parse_scenario({"params": "1B", "framework": fw, **keys})
    assert runs_under_autocast(sc, profile_for(Framework(fw))) is expected


def test_foreach_adamw_copies_the_second_moment_fused_does_not():
    sc = parse_scenario({"params": "1B", "method": "full"})
    parts = Parts(optimizer_state=8 * 1024**3)
    foreach = replace(profile_for(Framework.HF), torch_optimizer_impl=OptimizerImpl.FOREACH)
    assert optimizer_temporaries(sc, parts, foreach, largest_param=10**8) == 4 * 1024**3
    assert optimizer_temporaries(sc, parts, profile_for(Framework.HF), largest_param=10**8) == 0
