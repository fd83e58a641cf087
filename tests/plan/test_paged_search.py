"""The plan search tries bitsandbytes' paged 8-bit AdamW for full fine-tuning and times its paging."""

import pytest

from vramfit.gpus import get_gpu
from vramfit.plan.changes import at_effective_batch
from vramfit.plan.evaluate import Evaluator
from vramfit.plan.kernels import card_speed
from vramfit.plan.paged import paged_state, timing
from vramfit.plan.screen import saves_more
from vramfit.plan.search import Config, Search, configs_for
from vramfit.plan.throughput import model_flops
from vramfit.scenario import parse_scenario

Q = "Qwen/Qwen2.5-0.5B"


def _search(sc: dict, eff: int = 8) -> Search:
    base = at_effective_batch(parse_scenario(sc), eff)
    ev = Evaluator(base)
    return Search(ev, eff, model_flops(ev.spec, base.seq_len), ev.estimate().model.num_trainable_params, None)


@pytest.mark.parametrize(("sc", "paged"), [
    ({"model": Q, "method": "full"}, True),
    ({"model": Q, "method": "full", "optimizer": "adamw-8bit"}, True),
    ({"model": Q, "method": "lora"}, False),  # adapters' state is small: nothing to page
    ({"model": Q, "method": "full", "framework": "torchtitan"}, False),  # torch.optim only
])
def test_paged_optimizer_is_searched_where_the_framework_runs_it(sc, paged):
    opts = {c.optimizer for c in configs_for(2, parse_scenario(sc))}
    assert ("paged-adamw-8bit" in opts) is paged


def test_paged_state_is_never_combined_with_cpu_offload():
    """ZeRO/FSDP offload steps the optimizer on the host: a paged optimizer has nothing left to page."""
    cs = configs_for(4, parse_scenario({"model": Q, "method": "full"}))
    assert {c.offload for c in cs if "paged" in c.optimizer} == {"none"}
    assert {c.offload for c in cs} == {"none", "optimizer", "optimizer+params"}


def test_paged_setting_is_timed_apart_and_saves_more_than_8bit_adamw():
    a = Config(2, "fsdp", "none", "full", "paged-adamw-8bit", "standard")
    b = a._replace(optimizer="adamw-8bit")
    c = a._replace(optimizer="adamw")
    assert timing(b) == timing(c) != timing(a)
    assert saves_more(a, b) and saves_more(b, c) and not saves_more(b, a) and not saves_more(c, a)


def test_paging_adds_its_bytes_in_and_out_over_the_host_link():
    s = _search({"model": Q, "method": "full", "optimizer": "adamw"})
    g = get_gpu("rtx4090")
    c = Config(2, "fsdp", "none", "full", "paged-adamw-8bit", "standard")
    state = s.trainable * 2 // 2  # two 8-bit moments per parameter, sharded over 2 GPUs
    assert paged_state(s.trainable, c) == state
    worst, none = s.speed(c, 4, g), s.speed(c, 4, g, paged=0)
    host = card_speed(g).host_bytes
    assert worst.step_s - none.step_s == pytest.approx(2 * state / host, rel=1e-9)
    assert s.speed(c._replace(optimizer="adamw-8bit"), 4, g).step_s == pytest.approx(none.step_s, rel=1e-12)
