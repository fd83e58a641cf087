"""GRPO's default accumulation (the least that holds whole groups of completions per step, stage_keys) follows the
micro-batch and the group size as it follows the stage and the GPU count: a sweep point, a fit probe and an estimate
typed by hand agree; an accumulation the user set stays set."""

from pathlib import Path

from vramfit import estimate
from vramfit.plan.sweep import sweep
from vramfit.scenario import parse_scenario

BASE = {"model": "Qwen/Qwen2.5-1.5B", "method": "full", "stage": "grpo", "gradient_checkpointing": "full"}


def _device(res, value):
    point = next(p for p in res.points if p.value == value)
    assert point.error is None, point.error
    return point.device_bytes


def test_a_sweep_over_the_micro_batch_re_derives_the_accumulation():
    res = sweep(BASE, "micro_batch_size", [1, 4, 8, 16])
    for mb, accum in ((1, 8), (4, 2), (8, 1), (16, 1)):
        by_hand = estimate(parse_scenario({**BASE, "micro_batch_size": mb}))
        assert by_hand.scenario.grad_accum == accum
        assert _device(res, mb) == by_hand.peak.device_bytes
    # mb 16 kept the base's 8 before: 29.6 GB where the run typed by hand needs 20.8
    assert _device(res, 16) == 20_750_467_072


def test_a_sweep_over_the_group_size_re_derives_it_too():
    lora = {**BASE, "method": "lora"}
    res = sweep(lora, "num_generations", [2, 8, 16])
    for n in (2, 8, 16):
        by_hand = estimate(parse_scenario({**lora, "num_generations": n}))
        assert by_hand.scenario.grad_accum == n  # one completion per micro-batch, one GPU
        assert _device(res, n) == by_hand.peak.device_bytes  # 16 was refused before


def test_an_accumulation_the_user_set_stays_set():
    sc = parse_scenario({**BASE, "grad_accum": 16})
    assert sc.replace(micro_batch_size=4).grad_accum == 16
    assert parse_scenario(BASE).replace(micro_batch_size=4).grad_accum == 2


def test_fit_keeps_the_scenarios_accumulation_and_says_so():
    """docs/stages.md: "21 × 8 accumulation (--grad-accum 8)" (Llama-3.1-8B LoRA, GRPO, one A100 80 GB): the search
    holds the accumulation, the answer typed with it is the same run; derived again, 43 needs 8 and 44 needs 2."""
    from vramfit.plan.fit import fit

    keys = {"model": "meta-llama/Llama-3.1-8B", "method": "lora", "stage": "grpo", "gradient_checkpointing": "full"}
    f = fit(keys, "a100-80gb-sxm")
    assert (f.max_micro_batch, f.max_micro_batch_grad_accum) == (21, 8)
    by_hand = estimate(parse_scenario({**keys, "micro_batch_size": 21, "grad_accum": 8, "gpu": "a100-80gb-sxm"}))
    assert f.max_micro_batch_required_bytes == by_hand.peak.required_bytes
    assert [parse_scenario({**keys, "micro_batch_size": m}).grad_accum for m in (43, 44)] == [8, 2]
    assert "21 × 8 accumulation (--grad-accum 8)" in (Path(__file__).resolve().parents[2] / "docs" / "stages.md").read_text()


def test_a_card_alias_keeps_what_the_user_set():
    """`--gpu 4090` (an alias) kept the scenario but not the record of the keys the user set, so a GRPO sweep derived
    the accumulation the user had given again (review of 2026-12-05)."""
    keys = {"model": "Qwen/Qwen2.5-0.5B", "method": "lora", "stage": "grpo", "num_generations": 8, "micro_batch_size": 8,
            "grad_accum": 4, "seq_len": 1024, "completion_len": 256}
    by_id = sweep({**keys, "gpu": "rtx4090"}, "micro_batch_size", [8, 16])
    by_alias = sweep({**keys, "gpu": "4090"}, "micro_batch_size", [8, 16])
    assert [p.required_bytes for p in by_alias.points] == [p.required_bytes for p in by_id.points]
    by_hand = estimate(parse_scenario({**keys, "micro_batch_size": 16, "gpu": "rtx4090"}))
    assert by_hand.scenario.grad_accum == 4 and by_id.points[1].required_bytes == by_hand.peak.required_bytes


def test_an_in_backward_step_needs_whole_groups_per_micro_batch():
    """Nothing accumulates under optimizer_in_backward, so GRPO's derived accumulation may not exceed 1: a micro-batch
    that holds no whole group is refused naming the micro-batch and the multiple that works (it was accepted with the
    accumulation 8 that the in-backward step cannot run); one that does runs with accumulation 1, and a sweep over the
    micro-batch keeps only those."""
    import pytest

    from vramfit.errors import ScenarioError
    from vramfit.web.translate import untranslated

    inbwd = {**BASE, "optimizer_in_backward": True}
    with pytest.raises(ScenarioError) as e:
        parse_scenario({**inbwd, "micro_batch_size": 2, "num_gpus": 2, "parallelism": "fsdp"})
    assert e.value.key == "micro_batch_size"
    assert str(e.value) == ("micro_batch_size: with optimizer_in_backward nothing accumulates, so micro_batch_size × "
                            "num_gpus (4) must hold whole groups of num_generations (8) completions: use a multiple of 4")
    assert untranslated([str(e.value)]) == []
    assert parse_scenario({**inbwd, "micro_batch_size": 8}).grad_accum == 1
    res = sweep({**inbwd, "micro_batch_size": 8}, "micro_batch_size", [1, 8])
    bad, good = (next(p for p in res.points if p.value == v) for v in (1, 8))
    assert bad.error and "whole groups of num_generations" in bad.error and good.error is None


def test_turning_the_in_backward_step_on_re_derives_the_accumulation():
    """optimizer_in_backward is followed by the derived accumulation: a sweep turning it on gives the micro-batch
    refusal, not "set grad_accum to 1" for an accumulation the user never set."""
    res = sweep(BASE, "optimizer_in_backward", [False, True])
    off, on = res.points
    assert off.error is None and on.error.startswith("micro_batch_size: with optimizer_in_backward nothing accumulates")
