"""ZeRO-2 with ``overlap_comm``: the 16-bit gradient partition is the reduction stream's allocation, estimator
(estimate/zero2_step.py ``partition_grads_on_side_stream``) against DeepSpeed 0.19.8's own engine on fake tensors
with its reduction stream (sim/deepspeed_zero.py ``side_reduction_stream``).

DeepSpeed runtime/zero/stage_1_and_2.py ``reduce_ipg_grads`` runs ``copy_grads_in_partition`` under
``get_accelerator().stream(self.reduction_stream)`` when ``overlap_comm`` is set, so ``grads_in_partition`` (and,
with gradient accumulation, the second one each later micro-batch makes beside the sum) opens segments the
default stream's step tensors cannot take (CUDACachingAllocator: a block is reused only on its own stream).
"""

from __future__ import annotations

import json

import pytest
from simconfigs import tiny

from vramfit.estimate import estimate
from vramfit.scenario import parse_scenario
from vramfit.sim import simulate
from vramfit.sim.build import build_model
from vramfit.sim.deepspeed_zero import run_deepspeed

LAYERS = 4
MiB = 1024**2


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("dso") / "config.json"
    path.write_text(json.dumps(tiny("meta-llama/Llama-3.2-1B", layers=LAYERS, hidden=1024, vocab=32000)))
    return str(path)


def _scenario(path: str, overlap: bool, grad_accum: int) -> dict:
    # small buckets (5e6 elements, 9.5 MiB) so that the 67 MiB partition, not the IPG buckets, sizes the streams
    zero = {"stage": 2, "overlap_comm": overlap, "contiguous_gradients": True, "reduce_bucket_size": 5e6,
            "allgather_bucket_size": 5e6}
    return {"model": path, "method": "full", "precision": "bf16-true", "seq_len": 128, "micro_batch_size": 1,
            "attention": "flash", "num_gpus": 2, "parallelism": "zero2", "framework": "hf",
            "framework_version": "transformers-4.47", "grad_accum": grad_accum,
            "deepspeed_config": {"zero_optimization": zero}}


@pytest.mark.parametrize("grad_accum", [1, 2])
def test_the_partition_buffers_are_allocated_on_the_reduction_stream(model_path, grad_accum):
    sc = parse_scenario(_scenario(model_path, True, grad_accum))
    built = build_model(json.loads(open(model_path).read()), sc, LAYERS)
    tr = run_deepspeed(built, sc).trace
    partition = sum(p.numel() for p in built.model.parameters()) // 2  # 35,262,976 elements: an even split
    side = [tr.nbytes[sid] for sid in tr.streams if tr.phases[sid].startswith("it1.") and tr.nbytes[sid] > 50 * MiB]
    # one buffer per accumulation window, a second one with accumulation (the first's views hold the sum); its size
    # is rank 0's parameters counted whole (copy_grads_in_partition: ``total_size += param_in_partition.numel()``,
    # the one straddling the boundary included), 1.9 % above the partition the estimator sizes it by
    assert side == [2 * 35_913_728] * grad_accum
    assert side[0] == pytest.approx(2 * partition, rel=0.02)


@pytest.mark.parametrize(("grad_accum", "sim_mib"), [(1, 1508), (2, 1578)])
def test_reserved_matches_the_engine_with_the_reduction_stream(model_path, grad_accum, sim_mib):
    """`simulate` of the scenario: reserved 1508 / 1578 MiB with overlap_comm (1572 / 1642 before the simulator
    stopped allocating the tied output layer's own weight, sim/build.py: a 64 MiB segment); the estimate puts the
    partition buffers on the reduction stream (1240.5 MiB for both, -18 % / -21 %, with them on the default stream)."""
    sc = _scenario(model_path, True, grad_accum)
    sim = simulate(sc, layers=LAYERS).result
    assert sim.peak.reserved_bytes == sim_mib * MiB
    serial = estimate(_scenario(model_path, False, grad_accum)).peak.reserved_bytes
    assert estimate(sc).peak.reserved_bytes - serial >= 300 * MiB


@pytest.mark.xfail(strict=True, reason="known gap: the estimate is 1581.8 / 1651.8 MiB (+4.9 % / +4.7 %; 1558.5 / "
                   "1626.5 before the IPG bucket's flat copy, which the engine makes on its reduction stream too, a 20 MiB "
                   "segment): the step's replay alone is 1494 MiB (-0.9 %); the reserved slack estimate/reserved.py "
                   "adds over the step's allocated bytes counts again what the replay's segments hold")
@pytest.mark.parametrize(("grad_accum", "sim_mib"), [(1, 1508), (2, 1578)])
def test_reserved_estimate_within_the_bound_of_the_engine(model_path, grad_accum, sim_mib):
    assert estimate(_scenario(model_path, True, grad_accum)).peak.reserved_bytes == pytest.approx(sim_mib * MiB,
                                                                                                  rel=0.012)
