"""The planner's context-parallel and interleaved layouts: a long-context 70B plan that only context parallel
makes fit, the ring's traffic on NVLink, interleaving's halved bubble and doubled sends, and when interleaving
is tried at all."""

from unittest import mock

import pytest

from vramfit import estimate
from vramfit.estimate import resolve_spec
from vramfit.plan import layouts, plan
from vramfit.plan.search import TIE
from vramfit.plan.throughput import model_flops, step_work
from vramfit.scenario import parse_scenario

# torchtitan v0.2.2's whole-logits loss, whose cached loss segments these layouts were written against (v0.3.0's
# chunked loss makes no whole logits: tests/estimate/test_titan_chunked_loss.py)
LONG = {"model": "meta-llama/Llama-3.1-70B", "method": "full", "framework": "torchtitan", "seq_len": 131072,
        "framework_version": "torchtitan-0.2.2"}


def _plans(cp_from: int = layouts.CP_MIN_SEQ):
    with mock.patch.object(layouts, "CP_MIN_SEQ", cp_from):
        r = plan(LONG, effective_batch=64, max_gpus=64, gpu_ids="a100-80gb-sxm", with_changes=False)
    return {p.num_gpus: p for p in r.plans}


def test_128k_tokens_on_four_nodes_fit_with_context_parallel():
    with_cp, without = _plans(), _plans(cp_from=10**9)
    p = with_cp[32]
    # without context parallel the best layout of 32 A100s (tp 8 x pp 2) only fits because the caching allocator
    # releases the last stage's cached loss segments before an OOM (peak.required_bytes, plan/verdict.py): what
    # nvidia-smi would show with room (device) is over the card, what the run needs is under it
    tight = without[32]
    assert tight.device_bytes > tight.limit_bytes >= tight.required_bytes
    assert p.scenario["context_parallel"] == 8 and p.scenario["tensor_parallel"] * 8 <= 8  # tp x cp in a node
    assert p.device_bytes <= p.limit_bytes
    assert any("context parallel 8 inside each node" in n for n in p.notes)
    keys = {k: p.scenario[k] for k in ("num_gpus", "num_nodes", "parallelism", "tensor_parallel", "pipeline_parallel",
                                       "pipeline_schedule", "pipeline_virtual_stages", "micro_batch_size",
                                       "grad_accum", "gradient_checkpointing")}
    # the same layout without context parallel: each rank holds 8 x the tokens' activations
    whole = estimate({**LONG, **keys, "gpu": "a100-80gb-sxm", "context_parallel": 1})
    split = estimate({**LONG, **keys, "gpu": "a100-80gb-sxm", "context_parallel": 8})
    assert whole.peak.device_bytes > p.limit_bytes >= split.peak.device_bytes == p.device_bytes
    acts = [max(r.activations_bytes for r in e.ranks) for e in (whole, split)]
    assert acts[0] / acts[1] == pytest.approx(8, rel=0.01)


def _work(**kw):
    sc = parse_scenario({**LONG, "seq_len": 32768, "num_gpus": 64, "num_nodes": 8, "parallelism": "fsdp",
                         "micro_batch_size": 1, **kw})
    spec = resolve_spec(sc)[1]
    return step_work(sc, model_flops(spec, sc.seq_len), spec.num_params)


def test_context_parallel_ring_bytes_on_nvlink():
    base, ring = _work(tensor_parallel=2, grad_accum=2), _work(tensor_parallel=2, context_parallel=4, grad_accum=8)
    # 3 (c-1)/c x one layer's K and V (1024 wide in 70B: 8 kv heads x 128) per rank, tokens/c, heads/t, 80 layers,
    # 8 micro-batches; tp x cp = 8 GPUs: the ring stays inside the node (peer link), the network sees none of it
    kv = 32768 / 4 * 2 * 1024 / 2 * 2
    assert base.peer_bytes == 0  # FSDP rings of 32 ranks, 4 per node: on the network
    assert ring.peer_bytes == pytest.approx(3 * 3 / 4 * kv * 80 * 8)


def test_interleaving_halves_the_bubble_and_doubles_the_sends():
    one = _work(tensor_parallel=8, pipeline_parallel=4, grad_accum=8)
    two = _work(tensor_parallel=8, pipeline_parallel=4, grad_accum=8, pipeline_schedule="interleaved-1f1b",
                pipeline_virtual_stages=2)
    assert (one.bubble, two.bubble) == (pytest.approx(3 / 8), pytest.approx(3 / 16))
    assert two.pp_bytes == pytest.approx(2 * one.pp_bytes)  # Narayanan et al. 2021 sec. 2.2.2
    assert two.flops == one.flops


@pytest.mark.parametrize("tp,pp,cp,pays", [
    (1, 8, 1, True),  # 1F1B bubble 7/8 with 8 micro-batches: interleaving saves up to 23 %
    (4, 2, 1, True),  # 1/8 -> 1/16: up to 5.6 %
    (8, 2, 1, False),  # 1/16 -> 1/32: at most 2.9 %, inside the planner's 5 % tie
    (8, 4, 1, False),  # 3/32: 4.3 %
    (8, 8, 1, True),  # 7/64: 4.9 %
    (1, 2, 8, False),  # context parallel's 8 ranks also feed the pipeline: 1/16
])
def test_interleaving_tried_only_where_it_can_beat_the_tie(tp, pp, cp, pays):
    assert TIE == 0.05
    assert layouts.interleaving_pays(tp, pp, cp, TIE) is pays
    spec = resolve_spec(parse_scenario(LONG))[1]
    got = layouts.layouts_for(64, spec, 131072, TIE)
    assert (layouts.Degrees("fsdp", tp, pp, cp, 2) in got) is pays and layouts.Degrees("fsdp", tp, pp, cp) in got


def test_a_1f1b_pipeline_uses_no_more_than_its_interleaved_twin():
    """The screen's order (plan/screen.py): where the 1F1B twin does not fit, the interleaved one does not either."""
    from vramfit.plan.screen import saves_more
    from vramfit.plan.search import Config

    one = Config(64, "fsdp+tp4+pp4", "none", "full", "adamw", "standard")
    two = one._replace(parallelism="fsdp+tp4+pp4+vpp2")
    assert saves_more(one, two) and not saves_more(two, one)
    for mb, ga in ((1, 16), (2, 8), (4, 4)):
        keys = {**LONG, "seq_len": 8192, "num_gpus": 64, "num_nodes": 8, "parallelism": "fsdp", "tensor_parallel": 4,
                "pipeline_parallel": 4, "gradient_checkpointing": "full", "micro_batch_size": mb, "grad_accum": ga}
        a = estimate(keys)
        b = estimate({**keys, "pipeline_schedule": "interleaved-1f1b", "pipeline_virtual_stages": 2})
        assert a.peak.device_bytes < b.peak.device_bytes, mb
