"""torchtune's ``optimizer_in_bwd``: read from the full recipes, which refuse it beside gradient accumulation
(v0.4.0 recipes/full_finetune_single_device.py l. 155: "Gradient accumulation is not supported with optimizer in
bwd"), and ignored in a LoRA recipe, which never reads it. Fuzzing, 2026-12-05: the import took both, and the
estimate dropped the accumulated gradients (38.5 GB against 54.6 GB without it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vramfit import from_config
from vramfit.errors import ScenarioError
from vramfit.plan import plan

FIX = Path(__file__).parent / "fixtures"


def _edited(tmp_path: Path, name: str, **keys) -> Path:
    text = (FIX / name).read_text()
    for k, v in keys.items():
        text = "\n".join(f"{k}: {v}" if line.startswith(f"{k}:") else line for line in text.splitlines())
        text += "" if f"\n{k}: " in text else f"\n{k}: {v}"
    out = tmp_path / name
    out.write_text(text + "\n")
    return out


def test_a_full_recipe_refuses_it_beside_accumulation(tmp_path):
    one = from_config(_edited(tmp_path, "torchtune_full_fsdp.yaml", optimizer_in_bwd="True")).scenario
    assert one.optimizer_in_backward and one.grad_accum == 1
    with pytest.raises(ScenarioError) as e:
        from_config(_edited(tmp_path, "torchtune_full_fsdp.yaml", optimizer_in_bwd="True", gradient_accumulation_steps=8))
    assert "optimizer_in_backward: steps each parameter during backward" in str(e.value)
    assert "accumulate over 8 micro-batches" in str(e.value)


def test_a_lora_recipe_never_reads_it(tmp_path):
    imp = from_config(_edited(tmp_path, "torchtune_qlora.yaml", optimizer_in_bwd="True"))
    assert not imp.scenario.optimizer_in_backward
    entry = next(e for e in imp.entries if e.key == "optimizer_in_bwd")
    assert entry.kind == "ignored" and "LoRA and QLoRA recipes do not read it" in entry.note


def test_the_planner_reaches_the_effective_batch_in_one_step():
    r = plan({"model": "meta-llama/Llama-3.1-8B", "method": "full", "framework": "torchtune",
              "optimizer_in_backward": True}, effective_batch=64, gpu_ids=["h100-sxm"], with_changes=False)
    assert r.plans and all(p.grad_accum == 1 and p.micro_batch_size * p.num_gpus >= 64 for p in r.plans)
    assert r.scenario["micro_batch_size"] == 64 and r.scenario["grad_accum"] == 1


def test_the_planners_variants_and_sweeps_hold_the_frameworks_refusals():
    """Review, 2026-12-05: the free keys the planner sets without parsing again (plan/evaluate.py) skipped check_runs:
    a sweep of grad_accum under optimizer_in_backward, and of loss under torchtitan (no fused loss), said "fits"."""
    from vramfit.plan.changes import changes_to_fit
    from vramfit.plan.sweep import sweep
    from vramfit.scenario import parse_scenario

    oib = {"model": "meta-llama/Llama-3.2-1B", "method": "full", "framework": "torchtune", "optimizer_in_backward": True}
    points = sweep(oib, "grad_accum", [1, 2], cards=["rtx4090"]).points
    assert points[0].error is None and "optimizer_in_backward" in points[1].error
    titan = sweep({"model": "meta-llama/Llama-3.2-1B", "method": "full", "framework": "torchtitan"}, "loss",
                  ["standard", "fused"], cards=["rtx4090"]).points
    assert titan[0].error is None and "does not call a fused linear + cross-entropy loss" in titan[1].error
    changes = changes_to_fit(parse_scenario({**oib, "micro_batch_size": 8, "gpu": "rtx4090"}), "rtx4090")
    assert changes and all(c.changes.get("grad_accum", 1) == 1 for c in changes)
