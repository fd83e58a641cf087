"""Several nodes: scenario keys, HSDP / ZeRO++ hpZ per-rank model state, the network table."""

import csv
from pathlib import Path

import pytest

from vramfit import estimate
from vramfit.choices import Interconnect
from vramfit.errors import ScenarioError
from vramfit.estimate import resolve_spec
from vramfit.estimate.step import compute
from vramfit.nodes import network_for, networks, ring_seconds
from vramfit.scenario import parse_scenario

LLAMA70 = "meta-llama/Llama-3.1-70B"
P70 = 70_553_706_496  # Llama-3.1-70B parameters (config.json: 80 layers, hidden 8192, vocab 128256)


def _parts(**kw) -> dict[str, int]:
    """The per-rank model state of the step record (every part, whatever the peak phase)."""
    sc = parse_scenario({"model": LLAMA70, "method": "full", "gradient_checkpointing": "full", **kw})
    parts = compute(resolve_spec(sc)[1], sc).parts
    return {"weights": parts.weights, "gradients": parts.gradients, "optimizer_state": parts.optimizer_state}


def test_hsdp_shards_inside_the_node_only():
    # bf16-true AdamW (the hf default for full): weights 2 B, gradients 2 B, two 2-byte Adam states.
    # HSDP over 2 nodes x 8: each node holds one copy split 8 ways -> 1/8 of each per rank.
    hsdp = _parts(parallelism="fsdp", num_gpus=16, num_nodes=2, shard_scope="node")
    flat = _parts(parallelism="fsdp", num_gpus=16, num_nodes=2)
    for name, per_param in (("weights", 2), ("gradients", 2), ("optimizer_state", 4)):
        assert hsdp[name] == pytest.approx(per_param * P70 / 8, rel=2e-4), name
        assert flat[name] == pytest.approx(per_param * P70 / 16, rel=2e-4), name
    # HSDP on 2 nodes of 8 holds what FSDP on one node of 8 holds
    one_node = _parts(parallelism="fsdp", num_gpus=8)
    assert {k: hsdp[k] for k in ("weights", "gradients", "optimizer_state")} == {
        k: one_node[k] for k in ("weights", "gradients", "optimizer_state")}


def test_zero3_hpz_adds_a_node_local_16bit_weight_copy():
    # ZeRO-3, 4 nodes x 8: primary shards over 32 ranks; hpZ adds 2 B x P / 8 of 16-bit weights
    # (deepspeed 0.19.8 partition_parameters.py: secondary_partition_size = tensor_size // 8)
    base = _parts(parallelism="zero3", num_gpus=32, num_nodes=4)
    hpz = _parts(parallelism="zero3", num_gpus=32, num_nodes=4, shard_scope="node")
    # the 161 norm weights (80 x 2 x 8192 + 8192 = 1,318,912 parameters) stay whole on every rank: DeepSpeed keeps
    # parameters under stage3_param_persistence_threshold unpartitioned
    norms = 1_318_912
    assert base["weights"] == pytest.approx(2 * (P70 - norms) / 32 + 2 * norms, rel=2e-5)
    assert hpz["weights"] - base["weights"] == pytest.approx(2 * P70 / 8, rel=2e-4)
    assert hpz["gradients"] == base["gradients"] and hpz["optimizer_state"] == base["optimizer_state"]


def test_one_node_is_unchanged_by_the_node_keys():
    a = estimate(model=LLAMA70, method="full", parallelism="fsdp", num_gpus=8)
    b = estimate(model=LLAMA70, method="full", parallelism="fsdp", num_gpus=8, num_nodes=1, shard_scope="node")
    assert a.peak.device_bytes == b.peak.device_bytes


def test_node_keys_are_validated_with_one_line():
    with pytest.raises(ScenarioError, match=r"num_nodes: must divide num_gpus \(12\).*valid values: 1, 2, 3, 4, 6, 12"):
        parse_scenario({"params": "7B", "num_gpus": 12, "num_nodes": 5, "parallelism": "fsdp"})
    with pytest.raises(ScenarioError, match="shard_scope: sharding inside a node needs zero3"):
        parse_scenario({"params": "7B", "num_gpus": 16, "num_nodes": 2, "parallelism": "ddp", "shard_scope": "node"})
    with pytest.raises(ScenarioError, match="interconnect: unknown value 'ib'"):
        parse_scenario({"params": "7B", "interconnect": "ib"})
    sc = parse_scenario({"params": "7B", "num_gpus": 16, "num_nodes": 2, "parallelism": "fsdp", "shard_scope": "node"})
    assert (sc.gpus_per_node, sc.shard_group) == (8, 8)


def test_the_network_table_agrees_with_the_enum_and_cites_each_row():
    path = Path(__file__).resolve().parents[2] / "src" / "vramfit" / "data" / "interconnects.csv"
    rows = list(csv.DictReader(path.open(encoding="utf-8")))
    assert {r["interconnect"] for r in rows} == set(Interconnect.values()) - {"auto"}
    assert all(len(r["source"]) > 40 for r in rows)
    assert networks()[Interconnect.IB_3200].node_bytes_s == 400e9  # 8 x 400 Gb/s = 400 GB/s
    assert network_for(Interconnect.AUTO, "h100-sxm").interconnect is Interconnect.IB_3200
    assert network_for(Interconnect.AUTO, "a100-80gb-sxm").interconnect is Interconnect.IB_1600
    assert network_for(Interconnect.AUTO, "rtx4090").interconnect is Interconnect.ETH_100


def test_ring_time_is_the_nccl_bus_bandwidth_formula():
    ib = networks()[Interconnect.IB_3200]
    # all-gather of 1 GB per rank over 16 ranks on 2 nodes at 400 GB/s: 15/16 x 1e9 / 400e9 s + 1 step x 9.6 us
    assert ring_seconds(1e9, 16, 2, 400e9, ib) == pytest.approx(15 / 16 / 400 + 9.6e-6)
    assert ring_seconds(1e9, 16, 2, 400e9, ib, all_reduce=True) == pytest.approx(2 * 15 / 16 / 400 + 2 * 9.6e-6)
    assert ring_seconds(1e9, 1, 1, 400e9, ib) == 0.0


def test_changing_the_gpu_count_drops_the_node_layout_it_implied():
    sc = parse_scenario({"params": "7B", "num_gpus": 16, "num_nodes": 2, "parallelism": "fsdp", "shard_scope": "node"})
    one = sc.replace(num_gpus=4)
    assert (one.num_nodes, one.shard_scope.value, one.parallelism.value) == (1, "all", "fsdp")  # the chosen engine stays, the node layout goes
    assert sc.replace(num_gpus=32, num_nodes=4, parallelism="fsdp", shard_scope="node").gpus_per_node == 8
