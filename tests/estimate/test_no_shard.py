"""fsdp-no-shard (FSDP1 ShardingStrategy.NO_SHARD): FSDP's wrapping with a shard degree of 1 - the flat parameters
whole on every rank, no all-gather, gradients all-reduced in place (estimate/no_shard.py)."""

from __future__ import annotations

import pytest

from vramfit.errors import ScenarioError
from vramfit.estimate import estimate
from vramfit.estimate.core import comm_buffers, model_state
from vramfit.estimate.framework import scenario_profile
from vramfit.estimate.fsdp_reserved import replay_wrap, wrap_args
from vramfit.estimate.step import compute
from vramfit.models.catalog import resolve_model
from vramfit.plan.traffic import comm_bytes
from vramfit.scenario import Parallelism, parse_scenario

QWEN = "Qwen/Qwen2.5-0.5B"  # 24 blocks, tied 151,936 x 896 embedding
MiB = 2**20


def _state(par: str, n: int, **kw):
    sc = parse_scenario({"model": QWEN, "method": "full", "precision": "bf16-mixed", "num_gpus": n,
                         "parallelism": par, **kw})
    spec, profile = resolve_model(QWEN).spec, scenario_profile(sc)
    parts, _ = model_state(spec, sc, profile)
    return parts, comm_buffers(spec, sc, profile, parts)


def test_the_value_parses_and_round_trips():
    sc = parse_scenario({"model": QWEN, "num_gpus": 2, "parallelism": "fsdp-no-shard"})
    assert sc.parallelism is Parallelism.FSDP_NO_SHARD
    assert sc.to_dict()["parallelism"] == "fsdp-no-shard"


def test_an_invalid_value_lists_it():
    with pytest.raises(ScenarioError) as ei:
        parse_scenario({"model": QWEN, "num_gpus": 2, "parallelism": "no-shard"})
    msg = str(ei.value)
    assert msg.startswith("parallelism") and "fsdp-no-shard" in msg and "\n" not in msg


def test_model_state_is_the_unsharded_fsdp1_state_per_rank():
    """Each rank holds what FULL_SHARD splits 4 ways, whole: 494,017,408 params' fp32 gradients (4 B), master
    weights (4 B) and Adam moments (8 B), as on one GPU; FULL_SHARD's shard is exactly a quarter of it."""
    one, _ = _state("none", 1)
    no_shard, _ = _state("fsdp-no-shard", 4)
    full, _ = _state("fsdp", 4)
    for name in ("gradients", "master_weights", "optimizer_state", "weights"):
        assert getattr(no_shard, name) == getattr(one, name) == 4 * getattr(full, name), name
    assert (no_shard.gradients, no_shard.master_weights, no_shard.optimizer_state) == (
        1_976_131_072, 1_976_131_072, 3_952_262_144)


def test_no_all_gather_and_no_ddp_bucket_copy():
    """bf16-true: nothing is cast, so no buffer at all (DDP would add a copy of every gradient); bf16-mixed under
    FSDP1 MixedPrecision: the root unit's and two blocks' bf16 copies (the cast _mp_shard)."""
    _, plain = _state("fsdp-no-shard", 4, precision="bf16-true")
    ddp_parts, ddp = _state("ddp", 4, precision="bf16-true")
    assert plain == 0 and ddp == ddp_parts.gradients == 988_096_512  # bf16, each tensor rounded to 512 B
    _, mixed = _state("fsdp-no-shard", 4)
    block = 29_824_768  # one Qwen2.5-0.5B block: 14,912,384 params in bf16
    root = (151_936 * 896 + 896) * 2  # the tied embedding and the final norm in bf16
    assert mixed == 2 * block + root == 331_920_640


def test_estimate_matches_one_gpu_and_adds_the_wrap_residue():
    """HF LoRA bf16-true on 2 GPUs: allocated is one GPU's (DDP's is higher by its bucket copy of the adapter
    gradients); reserved adds what wrapping the CPU-loaded model leaves cached."""
    kw = {"model": QWEN, "method": "lora", "precision": "bf16-true", "seq_len": 512, "micro_batch_size": 2}
    one = estimate({**kw, "num_gpus": 1, "parallelism": "none"}).peak
    ns = estimate({**kw, "num_gpus": 2, "parallelism": "fsdp-no-shard"}).peak
    ddp = estimate({**kw, "num_gpus": 2, "parallelism": "ddp"}).peak
    assert ns.allocated_bytes == one.allocated_bytes == 4_996_741_120
    assert ddp.allocated_bytes > ns.allocated_bytes
    assert ns.reserved_bytes - one.reserved_bytes == 108_576_768
    sc = parse_scenario({**kw, "num_gpus": 2, "parallelism": "fsdp-no-shard"})
    units, group, elem, gathered, host, bucket, _ = wrap_args(compute(resolve_model(QWEN).spec, sc))
    assert (group, elem, gathered, host, bucket) == (1, 2, (), False, 250 * MiB)


def test_the_wrap_keeps_each_flat_parameter_whole():
    """NO_SHARD's shard() keeps the torch.cat flat parameter (no clone of a chunk): 4+4, 8 and 30 MiB units stay
    46 MiB allocated; sharded over 2 ranks the clones are 4, 4 and 15 MiB (16 MiB with the allocator's rounding)."""
    units = ((4 * MiB, 4 * MiB), (8 * MiB,), (30 * MiB,))
    assert replay_wrap(units, 1, 2) == (46 * MiB, 100 * MiB)
    assert replay_wrap(units, 2, 2) == (24 * MiB, 100 * MiB)


def test_traffic_is_an_all_reduce_of_the_gradients():
    kw = {"model": QWEN, "method": "lora", "num_gpus": 4}
    ns = comm_bytes(parse_scenario({**kw, "parallelism": "fsdp-no-shard"}), 10**9, 10**8, 10**8)
    ddp = comm_bytes(parse_scenario({**kw, "parallelism": "ddp"}), 10**9, 10**8, 10**8)
    assert ns == ddp == (2 * 3 / 4 * 10**8, 0.0)


def test_offload_under_no_shard_is_one_clear_line():
    with pytest.raises(ScenarioError) as ei:
        parse_scenario({"model": QWEN, "num_gpus": 2, "parallelism": "fsdp-no-shard", "offload": "optimizer"})
    assert ei.value.key == "offload" and "NO_SHARD" in str(ei.value) and "\n" not in str(ei.value)
