"""Issue 11 (trust): each answer is re-estimated where it will run, defaults are said, rankings are believable."""

import pytest

from vramfit.estimate import estimate
from vramfit.gpus import get_gpu
from vramfit.plan import changes_to_fit, plan
from vramfit.plan.evaluate import limit_bytes
from vramfit.scenario import parse_scenario

M7 = "mistralai/Mistral-7B-v0.1"
GiB = 2**30


def test_changes_are_estimated_at_the_accumulation_the_effective_batch_needs():
    # the case: 8-bit AdamW fits at grad_accum 1 (71.8 GiB) but not at the 32 steps that batch 32 needs
    sc = {"model": M7, "method": "full", "precision": "bf16-mixed", "seq_len": 2048}
    rep = plan(sc, effective_batch=32, dataset_tokens="100M", gpu_ids=["h100-sxm"])
    assert rep.scenario["grad_accum"] == 32 and rep.scenario["micro_batch_size"] == 1
    assert rep.scenario_device_bytes == estimate({**sc, "grad_accum": 32}).peak.device_bytes
    eight = next(c for c in rep.changes["h100-sxm"] if c.name == "8bit-optimizer")
    assert not eight.fits and eight.device_bytes > 95 * GiB
    limit = limit_bytes(get_gpu("h100-sxm"), 0.05)
    given = parse_scenario({**rep.scenario, "gpu": "h100-sxm"})  # the scenario the report states
    for c in rep.changes["h100-sxm"]:
        applied = given.replace(**c.changes)
        assert applied.effective_batch >= 32, c.name
        assert estimate(applied).peak.device_bytes == c.device_bytes
        assert (c.device_bytes <= limit) == c.fits, c.name


def test_changes_to_fit_without_effective_batch_keep_the_scenarios_accumulation():
    sc = {"model": M7, "method": "full", "precision": "bf16-mixed", "seq_len": 2048}
    eight = next(c for c in changes_to_fit(sc, "h100-sxm") if c.name == "8bit-optimizer")
    assert eight.fits and "grad_accum" not in eight.changes
    at32 = next(c for c in changes_to_fit(sc, "h100-sxm", effective_batch=32) if c.name == "8bit-optimizer")
    assert at32.changes["grad_accum"] == 32 and at32.device_bytes > eight.device_bytes
