"""HSDP beside tensor/context parallelism as torchtitan runs it (v0.3.0 ``ParallelDims``: ``dp_replicate x
dp_shard x cp x tp x pp``): FSDP shards over one node's data-parallel ranks and replicates across nodes."""

import dataclasses

import pytest

from vramfit import estimate
from vramfit.errors import ScenarioError
from vramfit.estimate import resolve_spec
from vramfit.plan import plan
from vramfit.plan.export import export_plan
from vramfit.plan.export_titan import TOML_FILE
from vramfit.plan.throughput import model_flops, step_work
from vramfit.scenario import parse_scenario

BASE = {"model": "meta-llama/Llama-3.1-70B", "method": "full", "framework": "torchtitan", "parallelism": "fsdp",
        "seq_len": 4096, "num_gpus": 32, "num_nodes": 4, "tensor_parallel": 4}


def _opt(r):
    return r.component("optimizer_state")


def test_hsdp_shards_the_tp_share_over_the_node_only():
    flat, hsdp = estimate(BASE), estimate({**BASE, "shard_scope": "node"})
    share = hsdp.ranks[0].params  # this TP rank's parameters (1/4 of each linear)
    # AdamW's two fp32 moments of the TP share, over the 8 / 4 = 2 data-parallel ranks of a node, or all 8
    assert _opt(hsdp) == pytest.approx(8 * share / 2, rel=1e-6)
    assert _opt(flat) == pytest.approx(8 * share / 8, rel=1e-6)
    assert any("HSDP: FSDP over the 2 data-parallel ranks of a node" in a and "replicated 4 times" in a
               for a in hsdp.assumptions)


@pytest.mark.parametrize("keys,words", [
    ({"tensor_parallel": 8, "context_parallel": 2, "seq_len": 8192}, "must fit its 8 GPUs"),
    ({"tensor_parallel": 8, "pipeline_parallel": 3, "num_gpus": 48, "num_nodes": 6, "grad_accum": 4}, None),
    ({"tensor_parallel": 4, "pipeline_parallel": 8, "num_gpus": 64, "num_nodes": 8, "grad_accum": 8}, None),
    ({"tensor_parallel": 2, "pipeline_parallel": 3, "num_gpus": 48, "num_nodes": 6, "grad_accum": 4}, None),
])
def test_hsdp_layouts_torchtitan_can_build(keys, words):
    sc = {**BASE, "shard_scope": "node", **keys}
    if words:
        with pytest.raises(ScenarioError) as e:
            parse_scenario(sc)
        assert e.value.key == "shard_scope" and words in str(e.value)
    else:
        parse_scenario(sc)


def test_pipeline_that_does_not_divide_the_nodes_is_refused():
    with pytest.raises(ScenarioError) as e:
        parse_scenario({**BASE, "shard_scope": "node", "tensor_parallel": 2, "pipeline_parallel": 2, "num_gpus": 24,
                        "num_nodes": 3, "grad_accum": 2})
    assert e.value.key == "shard_scope" and "pipeline_parallel divide num_nodes (3)" in str(e.value)


def _work(**kw):
    sc = parse_scenario({**BASE, "num_gpus": 64, "num_nodes": 8, "micro_batch_size": 1, "grad_accum": 16, **kw})
    spec = resolve_spec(sc)[1]
    return step_work(sc, model_flops(spec, sc.seq_len), spec.num_params)


def test_hsdp_keeps_the_gathers_inside_the_node():
    flat, hsdp = _work(), _work(shard_scope="node")
    assert flat.peer_bytes == 0 and hsdp.peer_bytes > 0  # gathers and reduce-scatters on NVLink
    # across nodes only the gradient shards' all-reduce, every micro-batch: 8 replica rings per node (4 TP ranks
    # x 2 shards), each all-reducing half a TP share over 8 nodes, 2 (k-1)/k of it, through the node's NICs
    spec = resolve_spec(parse_scenario(BASE))[1]
    grads = 2 * spec.num_params / 4  # bytes: bf16 gradients of one TP rank's share
    assert hsdp.net_bytes == pytest.approx(8 * 2 * 7 / 8 * grads / 2 * 16, rel=0.01)
    assert hsdp.net_bytes < flat.net_bytes / 1.4


def test_hsdp_with_tensor_parallel_exports_the_degrees_torchtitan_takes():
    from torchtitan.distributed.parallel_dims import ParallelDims

    tomllib = pytest.importorskip("tomllib")
    titan = pytest.importorskip("torchtitan.config")
    r = plan({**BASE, "model": "meta-llama/Llama-3.1-70B"}, effective_batch=64, max_gpus=32, gpu_ids="h100-sxm",
             with_changes=False)
    p = next(x for x in r.plans if x.num_gpus == 32)
    p = dataclasses.replace(p, scenario={**p.scenario, "parallelism": "fsdp", "num_nodes": 4, "shard_scope": "node", "tensor_parallel": 4,
                                         "pipeline_parallel": 1, "context_parallel": 1}, grad_accum=64 // 8)
    par = titan.ParallelismConfig(**tomllib.loads(export_plan(p, "torchtitan").files[TOML_FILE])["parallelism"])
    dims = ParallelDims(dp_replicate=par.data_parallel_replicate_degree, dp_shard=par.data_parallel_shard_degree,
                        cp=par.context_parallel_degree, tp=par.tensor_parallel_degree, pp=par.pipeline_parallel_degree,
                        ep=1, world_size=32)
    assert (dims.dp_replicate, dims.dp_shard, dims.tp) == (4, 2, 4)
