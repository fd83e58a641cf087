"""A DeepSpeed config fixes its ZeRO stage and offload (estimate/deepspeed.scenario_keys refuses any other): the
planner searches cards, counts, micro-batches and memory savers under that layout (plan/search.py pinned_layout), so a
ZeRO-1, a LoRA ZeRO-2 or an optimizer-offload ZeRO-3 config gets plans, and a card without one says what was tried."""

import pytest

from vramfit import estimate
from vramfit.plan import plan

MODEL = "meta-llama/Llama-2-7b-hf"


@pytest.mark.parametrize(("zero", "parallelism", "offload"), [
    ({"stage": 1}, "zero1", "none"), ({"stage": 2}, "zero2", "none"),
    ({"stage": 3, "offload_optimizer": {"device": "cpu"}}, "zero3", "optimizer")])
def test_plans_keep_the_configs_layout(zero, parallelism, offload):
    r = plan({"model": MODEL, "method": "lora", "num_gpus": 2, "deepspeed_config": {"zero_optimization": zero}},
             effective_batch=16, gpu_ids="rtx4090,a100-80gb-sxm,h100-sxm")
    assert r.plans and {(p.parallelism, p.offload) for p in r.plans} == {(parallelism, offload)}
    top = r.plans[0]
    assert top.scenario["deepspeed_config"]["zero_optimization"]["stage"] == zero["stage"]
    assert estimate(top.scenario).peak.device_bytes == top.device_bytes


def test_a_card_it_cannot_fit_names_the_configs_layout():
    r = plan({"model": "meta-llama/Llama-2-70b-hf", "method": "full", "num_gpus": 2,
              "deepspeed_config": {"zero_optimization": {"stage": 2}}}, effective_batch=8, gpu_ids="rtx4090")
    assert not r.plans
    reason = next(e.reason for e in r.excluded if e.gpu_id == "rtx4090")
    assert "even with the DeepSpeed config's zero2 and offload none, with checkpointing (at micro-batch 1)" in reason
