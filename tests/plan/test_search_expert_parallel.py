"""Expert parallel in the plan search: which degrees are tried (torchtitan's rules), what they save and cost in
the speed model, and that a mixture-of-experts model gets an expert-parallel plan where it beats the rest while a
dense model never does."""

from __future__ import annotations

from unittest import mock

import pytest

import vramfit.plan.layouts as layouts_module
from vramfit.estimate import resolve_spec
from vramfit.estimate.framework import scenario_profile
from vramfit.models import load_catalog, spec_from_hf_config
from vramfit.plan import plan
from vramfit.plan.layouts import Degrees, layouts_for
from vramfit.plan.search import TIE, configs_for
from vramfit.plan.throughput import model_flops, step_work
from vramfit.scenario import parse_scenario

TITAN = {"method": "full", "framework": "torchtitan", "seq_len": 4096}
MIXTRAL = "mistralai/Mixtral-8x7B-v0.1"  # 8 routed experts, top 2, 32 heads, 8 key/value heads
QWEN3_MOE = "Qwen/Qwen3-30B-A3B"  # 128 routed experts, top 8


def _spec(model: str):
    return resolve_spec(parse_scenario({**TITAN, "model": model}))[1]


def _ep(degrees):
    return {d[1:] for d in degrees if d.ep > 1}


def test_each_layout_gets_the_largest_degree_its_expert_mesh_allows():
    # 8 GPUs: the expert mesh borrows dp_shard x cp x tp = 8 / pp ranks; the degree divides them and the 8 experts
    got = _ep(layouts_for(8, _spec(MIXTRAL), 4096, TIE, expert_parallel=True))
    assert got == {(1, 1, 1, 1, 8), (1, 2, 1, 1, 4), (1, 4, 1, 1, 2), (2, 1, 1, 1, 8), (2, 2, 1, 1, 4),
                   (2, 4, 1, 1, 2), (4, 1, 1, 1, 8), (4, 2, 1, 1, 4), (8, 1, 1, 1, 8)}  # pp8: one rank, none
    # several nodes: HSDP's expert mesh is one node's ranks, never wider than the node
    hsdp = layouts_for(16, _spec("Qwen/Qwen3-30B-A3B"), 4096, TIE, expert_parallel=True)
    assert Degrees("hsdp", ep=8) in hsdp and Degrees("fsdp", ep=8) in hsdp
    assert max(d.ep for d in hsdp) == 8


def test_degree_divides_the_routed_experts():
    config = {**next(e["config"] for e in load_catalog() if e["id"] == MIXTRAL), "num_local_experts": 6}
    got = _ep(layouts_for(8, spec_from_hf_config(config), 4096, TIE, expert_parallel=True))
    assert (1, 1, 1, 1, 2) in got and all(ep == 2 for *_, ep in got)  # 4 and 8 do not divide 6 experts


def test_dense_models_and_engines_without_expert_parallel_never_get_it():
    dense = parse_scenario({**TITAN, "model": "meta-llama/Llama-3.1-70B"})
    assert not _ep(layouts_for(16, resolve_spec(dense)[1], 4096, TIE, expert_parallel=True))
    assert not [c for c in configs_for(16, dense, resolve_spec(dense)[1]) if "+ep" in c.parallelism]
    moe = parse_scenario({**TITAN, "model": MIXTRAL})
    assert [c for c in configs_for(8, moe, _spec(MIXTRAL)) if "+ep" in c.parallelism]
    with mock.patch.object(layouts_module, "runs_expert_parallel", lambda sc: False):
        assert not [c for c in configs_for(8, moe, _spec(MIXTRAL)) if "+ep" in c.parallelism]
    assert not scenario_profile(parse_scenario({**TITAN, "framework": "hf", "model": MIXTRAL})).expert_parallel


def _work(ep: int, **kw):
    sc = parse_scenario({**TITAN, "model": MIXTRAL, "num_gpus": 8, "parallelism": "fsdp", "micro_batch_size": 1,
                         "seq_len": 1024, "gradient_checkpointing": "none", "expert_parallel": ep, **kw})
    spec = resolve_spec(sc)[1]
    mf = model_flops(spec, sc.seq_len)
    return mf, step_work(sc, mf, spec.num_params)


def test_expert_parallel_trades_expert_ring_bytes_for_all_to_all():
    mf, plain = _work(1)
    share = mf.routed_expert_params / mf.num_params
    assert mf.routed_expert_params == 45_097_156_608  # 32 layers x 8 experts x 3 x 4096 x 14336
    _, ep8 = _work(8)
    # ep 8 over 8 ranks: efsdp of 1, the experts are not sharded, their ring bytes gone
    assert ep8.peer_bytes == pytest.approx(plain.peer_bytes * (1 - share))
    # dispatch + combine, forward and backward: 4 x 7/8 of 1024 tokens x 32 layers x top 2 x 4096 x 2 bytes
    assert ep8.ep_bytes == pytest.approx(4 * 7 / 8 * 1024 * 32 * 2 * 4096 * 2)
    _, ep4 = _work(4)
    # ep 4: 1/4 of the experts over efsdp rings of 2 instead of all of them over 8: (1/4)(1/2)/(7/8) = 1/7
    assert ep4.peer_bytes == pytest.approx(plain.peer_bytes * (1 - share + share / 7))


def _plans(model: str, gpu: str, max_gpus: int, eff: int, seq: int, ep: bool = True):
    runs = layouts_module.runs_expert_parallel if ep else (lambda sc: False)
    with mock.patch.object(layouts_module, "runs_expert_parallel", runs):
        return plan({**TITAN, "model": model, "seq_len": seq}, effective_batch=eff, dataset_tokens="100M",
                    gpu_ids=[gpu], max_gpus=max_gpus, with_changes=False).plans


def test_moe_gets_expert_parallel_where_it_is_faster():
    # Qwen3-30B-A3B (128 routed experts, top 8) on one node of 8 H100 with few tokens per GPU: FSDP's expert gathers
    # outlast the compute; expert parallel 8 keeps every expert at home and moves only the routed tokens. (Mixtral
    # full fits 8 H100 only with 8-bit AdamW, which torchtitan v0.3.0 does not build: profile runs_bnb_optimizers.)
    best = next(p for p in _plans(QWEN3_MOE, "h100-sxm", 8, 8, 1024) if p.num_gpus == 8)
    without = next(p for p in _plans(QWEN3_MOE, "h100-sxm", 8, 8, 1024, ep=False) if p.num_gpus == 8)
    assert best.scenario["expert_parallel"] == 8 and without.scenario["expert_parallel"] == 1
    assert best.tokens_per_s > without.tokens_per_s * (1 + TIE)
    assert any("expert parallel 8" in n for n in best.notes)


def test_large_moe_on_several_nodes_plans_whole_nodes_and_takes_expert_parallel_only_where_faster():
    # DeepSeek-V3 (671 B, 256 experts) on B200 under torchtitan's fp32 AdamW: 64 cards need the optimizer state
    # offloaded with or without expert parallel (12 B a parameter of state alone is 126 GB a card); 128 cards (16 nodes)
    # hold it. Every plan is whole nodes of FSDP, and none with expert parallel is slower than its plain twin.
    with_ep = {p.num_gpus: p for p in _plans("deepseek-ai/DeepSeek-V3", "b200", 128, 256, 4096)}
    without = {p.num_gpus: p for p in _plans("deepseek-ai/DeepSeek-V3", "b200", 128, 256, 4096, ep=False)}
    assert with_ep[64].offload != "none" and without[64].offload != "none"
    assert with_ep[128].offload == "none" and with_ep[128].scenario["num_nodes"] == 16
    assert all(p.scenario["parallelism"] == "fsdp" for p in with_ep.values())
    assert all(with_ep[n].tokens_per_s >= without[n].tokens_per_s for n in with_ep)
