"""The planner's parallel layouts: searched for torchtitan full fine-tuning, timed with TP collectives over
NVLink, the pipeline bubble and data-parallel rings on the node's NICs; the whole search under 1 s."""


import pytest

from vramfit.estimate import resolve_spec
from vramfit.plan import plan
from vramfit.plan.layouts import layouts_for, name, parse
from vramfit.plan.throughput import model_flops, step_work
from vramfit.scenario import parse_scenario

BASE = {"model": "meta-llama/Llama-3.1-70B", "method": "full", "framework": "torchtitan", "seq_len": 4096}


def test_layout_names_round_trip_and_respect_heads_and_nodes():
    assert parse(name("fsdp", 8, 2)) == ("fsdp", 8, 2, 1, 1, 1) and parse("hsdp") == ("hsdp", 1, 1, 1, 1, 1)
    assert name("fsdp", 2, 4, 2, 2) == "fsdp+tp2+pp4+vpp2+cp2" and parse("fsdp+tp2+pp4+vpp2+cp2") == ("fsdp", 2, 4, 2, 2, 1)
    assert name("fsdp", 2, ep=8) == "fsdp+tp2+ep8" and parse("fsdp+tp2+ep8") == ("fsdp", 2, 1, 1, 1, 8)
    spec = resolve_spec(parse_scenario(BASE))[1]  # 64 heads, 8 key/value heads, 80 layers
    got = {d[1:5] for d in layouts_for(16, spec, 4096)}
    assert {(8, 2, 1, 1), (8, 2, 1, 2), (2, 8, 1, 1), (1, 2, 1, 1)} <= got and (16, 1, 1, 1) not in got  # TP in a node
    assert all(cp == 1 for _, _, cp, _ in got)  # 4k tokens: no context parallel (CP_MIN_SEQ)
    long = {d[1:5] for d in layouts_for(16, spec, 32768)}
    assert {(1, 1, 8, 1), (2, 1, 4, 1), (4, 2, 2, 2)} <= long  # tp x cp inside the node of 8
    assert not any(tp * cp > 8 for tp, _, cp, _ in long)


def _work(**kw):
    sc = parse_scenario({**BASE, "num_gpus": 64, "num_nodes": 8, "parallelism": "fsdp", "micro_batch_size": 1, **kw})
    spec = resolve_spec(sc)[1]
    mf = model_flops(spec, sc.seq_len)
    return sc, mf, step_work(sc, mf, spec.num_params)


def test_tensor_parallel_traffic_and_pipeline_bubble():
    sc, mf, w = _work(tensor_parallel=8, pipeline_parallel=2, grad_accum=16)
    act = 4096 * 8192 * 2  # one micro-batch's activation, bytes
    # 4 all-reduces per layer per micro-batch, 2 (t-1)/t x A each, L/p = 40 layers, 16 micro-batches
    assert w.tp_bytes == pytest.approx(4 * 2 * 7 / 8 * act * 40 * 16)
    assert w.bubble == pytest.approx(1 / 16)  # (p - 1) / m, Narayanan et al. 2021 sec. 2.2.1
    _, _, dp = _work(grad_accum=4)
    # each GPU computes 1/(t p) of its group's 16 micro-batches = 1 micro-batch's FLOPs; plain FSDP: 4 of its own
    assert w.flops == pytest.approx(dp.flops / 4)
    assert w.tokens_per_step == 16 * 4096 * 4  # data-parallel degree 64 / 16 = 4
    # FSDP rings of 4 ranks, one per node: they cross the network, each share 1/8 of the NICs with 7 others
    assert w.net_bytes > 0 and w.peer_bytes == 0 and w.pp_net


def test_bubble_shrinks_with_interleaving():
    _, _, w = _work(tensor_parallel=8, pipeline_parallel=2, grad_accum=16, pipeline_schedule="interleaved-1f1b",
                    pipeline_virtual_stages=2)
    assert w.bubble == pytest.approx(1 / 32)


@pytest.mark.parametrize("model,eff", [("meta-llama/Llama-3.1-70B", 64), ("meta-llama/Llama-3.1-405B", 256)])
def test_full_fine_tuning_search_with_layouts(model, eff):
    # its speed (the whole search under 1 s) is checked by `benchmarks/plan_speed.py --nodes`, not here
    r = plan({**BASE, "model": model}, effective_batch=eff, max_gpus=256, dataset_tokens="100M", with_changes=False)
    # > 60: FSDP2's all-gather copy-in pool (estimate/fsdp2.py, 7: the 405B root's 8.4 GB output beside a block's)
    # and the end of backward's new segments (estimate/fsdp2_end.py: the 4.2 GB embedding gradient and the root's
    # flat reduce-scatter input) keep some plain-FSDP layouts off the smaller cards; torchtitan's fp32 AdamW and its
    # parameter-moving offload (profile runs_bnb_optimizers, offload_moves_params) keep more (63 plans for 405B)
    assert len(r.plans) > 60 and all(p.hours and p.cost_usd_low for p in r.plans if p.usd_per_gpu_hour_low)
    laid = [p for p in r.plans if p.scenario["tensor_parallel"] > 1]
    assert laid, "no tensor-parallel plan won on any card"
    p = laid[0]
    assert p.micro_batch_size * p.grad_accum * p.num_gpus // p.scenario["tensor_parallel"] // \
        p.scenario["pipeline_parallel"] == p.effective_batch == eff
    assert any("tensor parallel" in n and "torchtitan" in n for n in p.notes)
