"""Expert parallel as torchtitan v0.3.0 runs it, checked on the catalog's Qwen3-30B-A3B (config.json: hidden
2048, 32 heads of 128, 4 key/value heads, 128 experts of width 768, top-8, 48 layers, vocabulary 151936,
untied, no shared expert). ``models/common/moe_sharding.py`` ``expert_param_placement_sparse``: the routed
experts ``Shard(0)`` over ``ep`` (whole experts, no TP split), FSDP over ``efsdp = dp_shard * cp * tp / ep``
(``distributed/parallel_dims.py`` ``build_mesh``); the router and the experts run on the rank's sequence shard,
tokens exchanged by all-to-all (``models/common/token_dispatcher.py`` ``AllToAllTokenDispatcher``)."""

import dataclasses

import pytest
import tomllib
from typer.testing import CliRunner

from vramfit import estimate
from vramfit.cli.main import app
from vramfit.errors import ScenarioError
from vramfit.estimate import resolve_spec
from vramfit.estimate.ranks import a2a_buffers
from vramfit.estimate.step import compute
from vramfit.scenario import parse_scenario

QWEN = {"model": "Qwen/Qwen3-30B-A3B", "method": "full", "framework": "torchtitan", "parallelism": "fsdp",
        "num_gpus": 8, "seq_len": 4096, "gradient_checkpointing": "none"}
H, E, W, L, VOCAB, T, K = 2048, 128, 768, 48, 151936, 4096, 8
ATTN = H * 4096 + 2 * H * 512 + 4096 * H  # q, k, v, o
DENSE = ATTN + H * E + 2 * H + 2 * 128  # attention, router gate, input/post-attention norms, q/k norms
EXPERTS = E * 3 * H * W  # gate/up/down of the 128 routed experts in one layer
N = L * (DENSE + EXPERTS) + 2 * VOCAB * H + H  # 30,532,122,624 parameters


@pytest.mark.parametrize("ep", [2, 8])
def test_each_rank_holds_e_over_ep_whole_experts(ep):
    r = estimate({**QWEN, "expert_parallel": ep})
    assert N == 30_532_122_624
    assert r.ranks[0].params == L * (DENSE + EXPERTS // ep) + 2 * VOCAB * H + H  # ep=8: 5,164,972,032


@pytest.mark.parametrize("ep", [2, 8])
def test_sharded_state_is_experts_over_dp_shard_cp_tp(ep):
    # efsdp x ep = dp_shard x cp x tp = 8: fp32 master weights 4 B and AdamW's two moments 8 B per parameter, / 8
    peak = dict(estimate({**QWEN, "expert_parallel": ep}).ranks[0].breakdown)
    assert peak["master_weights"] == 4 * N // 8 == 15_266_061_312
    assert peak["optimizer_state"] == 8 * N // 8


def test_fsdp_gathers_e_over_ep_experts_per_block():
    # two blocks in flight (bf16: 2 B), each with DENSE + EXPERTS/8 parameters, plus the root unit (embedding,
    # output layer, final norm) gathered whole: FSDP2 all-gathers into a buffer of its own beside the rank's
    # shard (estimate/fsdp2.py, 3)
    got = dict(estimate({**QWEN, "expert_parallel": 8}).ranks[0].breakdown)["comm_buffers"]
    root = 2 * (2 * VOCAB * H + H)
    assert got == 2 * 2 * (DENSE + EXPERTS // 8) + root == 1_623_217_152


def test_routed_tokens_stay_on_the_sequence_shard():
    # t = 1: balanced routing gives every rank its own tokens' worth (ep does not change activations);
    # t = 2: the MoE input, the router's fp32 scores and the experts' input/output are split 2 ways with ep
    acts = {(t, ep): estimate({**QWEN, "tensor_parallel": t, "expert_parallel": ep}).ranks[0].activations_bytes
            for t, ep in ((1, 2), (1, 8), (2, 1), (2, 2))}
    assert acts[1, 2] == acts[1, 8]
    whole = 2 * T * H + 4 * T * E + 2 * (2 * T * K * H)  # mlp_in, router softmax fp32, experts in/out
    assert acts[2, 1] - acts[2, 2] == pytest.approx(L * whole / 2, abs=2)


def test_all_to_all_buffers_are_send_and_receive_of_the_routed_tokens():
    sc = parse_scenario({**QWEN, "expert_parallel": 8})
    _, spec, _, _ = resolve_spec(sc)
    step = compute(spec, sc)
    assert a2a_buffers(step, sc) == 2 * T * K * H * 2 == 268_435_456  # bf16 send + receive, (T*K, H) each
    assert step.block_transient >= 268_435_456
    assert a2a_buffers(step, dataclasses.replace(sc, tensor_parallel=2)) == 268_435_456 // 2


@pytest.mark.parametrize("extra,key", [
    ({"expert_parallel": 3}, "expert_parallel: must divide the dp_shard × context_parallel × tensor_parallel ranks (8)"),
    ({"expert_parallel": 2, "framework": "hf"}, "framework: "),
    ({"expert_parallel": 2, "parallelism": "ddp"}, "parallelism: expert parallelism is modelled with FSDP2"),
    ({"expert_parallel": 8, "pipeline_parallel": 2, "grad_accum": 2},  # pp is outer: 8 / 2 ranks
     "expert_parallel: must divide the dp_shard × context_parallel × tensor_parallel ranks (4)"),
])
def test_impossible_degrees_are_refused_in_one_line(extra, key):
    with pytest.raises(ScenarioError, match=key.replace("(", r"\(").replace(")", r"\)")):
        parse_scenario({**QWEN, **extra})


def test_model_rules_and_cli_exit_2():
    with pytest.raises(ScenarioError, match="expert_parallel: must divide the model's 128 routed experts; got 3"):
        estimate({**QWEN, "num_gpus": 24, "expert_parallel": 3})  # divides the 24 ranks, not the experts
    out = CliRunner().invoke(app, ["estimate", "--model", "meta-llama/Llama-3.1-8B", "--method", "full",
                                   "--framework", "torchtitan", "--parallelism", "fsdp", "--num-gpus", "8",
                                   "--expert-parallel", "2"])
    assert out.exit_code == 2
    assert out.output.strip().splitlines() == [
        "error: expert_parallel: needs a mixture-of-experts model; this model has no routed experts (valid values: 1)"]


def test_export_writes_expert_parallel_degree_that_torchtitan_builds():
    """The TOML's [parallelism] loads into torchtitan's ParallelismConfig, and ParallelDims.build_mesh (on a fake
    process group of the plan's world) unflattens the sparse mesh ("pp", "dp_replicate", "efsdp", "ep")."""
    titan = pytest.importorskip("torchtitan.config")
    pytest.importorskip("spmd_types")
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from torchtitan.distributed.parallel_dims import ParallelDims

    from vramfit.plan import plan
    from vramfit.plan.export import export_plan
    from vramfit.plan.export_titan import TOML_FILE

    r = plan({"model": "Qwen/Qwen3-30B-A3B", "method": "full", "seq_len": 4096, "framework": "torchtitan"},
             effective_batch=16, max_gpus=16, gpu_ids="h100-sxm", with_changes=False)
    p = next(x for x in r.plans if x.num_gpus == 16)
    p = dataclasses.replace(p, scenario={**p.scenario, "parallelism": "fsdp", "expert_parallel": 8})
    par = titan.ParallelismConfig(**tomllib.loads(export_plan(p, "torchtitan").files[TOML_FILE])["parallelism"])
    assert par.expert_parallel_degree == 8
    dist.init_process_group("fake", rank=0, world_size=16, store=FakeStore())
    try:
        dims = ParallelDims.from_config(par, 16)
        dims.build_mesh()
        assert (dims.get_mesh("ep").size(), dims.get_mesh("efsdp").size()) == (8, 2)  # efsdp = 16 * 1 * 1 / 8
    finally:
        dist.destroy_process_group()


def test_the_simulator_refuses_expert_parallel_in_one_line():
    out = CliRunner().invoke(app, ["simulate", "--model", "Qwen/Qwen3-30B-A3B", "--method", "full", "--framework",
                                   "torchtitan", "--parallelism", "fsdp", "--num-gpus", "8", "--expert-parallel", "8"])
    assert out.exit_code == 2
    assert out.output.strip().splitlines() == [
        "error: expert_parallel: the simulator runs no expert parallelism; it is estimator-only (valid values: 1)"]


def test_step_time_adds_the_blocking_all_to_all():
    from vramfit.plan.throughput import model_flops, step_time, step_work

    sc = parse_scenario({**QWEN, "expert_parallel": 8})
    _, spec, _, _ = resolve_spec(sc)
    mf = model_flops(spec, T)
    assert mf.routed_elems_per_token == L * K * H
    # dispatch + combine in forward and in backward, 7/8 of each leaving the rank, bf16
    w8, w1 = step_work(sc, mf, spec.num_params), step_work(dataclasses.replace(sc, expert_parallel=1), mf, N)
    assert w8.ep_bytes == 4 * 7 / 8 * T * L * K * H * 2 == 22_548_578_304
    assert not w8.ep_net and w1.ep_bytes == 0
    kw = {"peak_tflops": 989, "mfu": 0.4, "mem_bandwidth_gbs": 3350, "peer_gbs": 450, "host_gbs": 25}
    s8, s1 = step_time(w8, **kw), step_time(w1, **kw)
    # ep 8 over the 8 ranks: each keeps its 16 experts whole (efsdp of 1), so their FSDP ring bytes are gone and the
    # overlapped traffic is the rest's; the all-to-all waits on top of the compute (plan/layouts.py)
    assert w8.peer_bytes == pytest.approx(w1.peer_bytes * (N - L * EXPERTS) / N)
    assert s8.step_s == pytest.approx(max(s8.compute_s, s8.comm_s) + 22_548_578_304 / 450e9)
    assert s8.comm_s < s1.comm_s and s8.compute_s == s1.compute_s


@pytest.mark.parametrize("extra,valid", [({"expert_parallel": 3}, ["1", "2", "4", "8"]),
                                         ({"num_gpus": 24, "expert_parallel": 3}, ["1", "2", "4", "8", "16", "32",
                                                                                   "64", "128"])])
def test_the_web_api_answers_422_naming_the_key(extra, valid):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from vramfit.web import create_app

    with TestClient(create_app(), base_url="http://localhost") as c:
        r = c.post("/api/estimate", json={**QWEN, **extra})
    assert r.status_code == 422 and r.json()["key"] == "expert_parallel" and r.json()["valid"] == valid
