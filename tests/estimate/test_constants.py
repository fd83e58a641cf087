"""Every documented constant earns its place: it is read by the code, and its source is pinned to a
version or commit (issue 10 item 7)."""

import re
from pathlib import Path

import pytest

from vramfit.estimate import constants
from vramfit.estimate.constants import Constant

SRC = Path(__file__).resolve().parents[2] / "src" / "vramfit"
NAMES = sorted(n for n, v in vars(constants).items() if isinstance(v, Constant))
# a release (v0.4.0, 0.49.2, "torch v2.13.0"), a commit (@eb42ad6e), or an arXiv paper version
PINNED = re.compile(r"(@[0-9a-f]{7,40}\b|\bv?\d+\.\d+(\.\d+)?\b|arXiv \d{4}\.\d{4,5}v\d)")


def _code_outside_constants() -> str:
    return "\n".join(p.read_text() for p in SRC.rglob("*.py") if p.name != "constants.py" or p.parent.name != "estimate")


def test_there_are_constants():
    assert len(NAMES) >= 25 and "K_ROUND_LARGE" in NAMES


@pytest.mark.parametrize("name", NAMES)
def test_constant_is_used_in_src(name):
    assert re.search(rf"\b{name}\b", _code_outside_constants()), f"{name} is defined but never used"


@pytest.mark.parametrize("name", NAMES)
def test_constant_source_is_pinned(name):
    c = getattr(constants, name)
    assert PINNED.search(c.source), f"{name}: source names no version or commit: {c.source!r}"
    assert c.unit and c.value > 0


def test_sourced_values_are_the_ones_the_code_once_inlined():
    """The literals the constants replaced (issue 10: core.py 2*h*h, 2*1024**2, 512 tokens)."""
    assert constants.NCCL_CUDA_IPC_MIN.value == 2 * 1024**2
    assert constants.BNB_GEMM_4BIT_FUSED_MAX_TOKENS.value == 512
    assert constants.FSDP_INFLIGHT_ALLGATHERS.value == 2
    assert constants.LITGPT_LM_HEAD_CHUNK.value == 128
