"""fsdp-grad-op on the simulator: torch's own fully_shard with reshard_after_forward=False on a fake process group
(sim/fsdp.py) against the estimator's model of it (estimate/grad_op.py): at the end of forward every block and the
root are gathered in bf16 beside their fp32 shards."""

from __future__ import annotations

import pytest
from simconfigs import titan_llama

from vramfit.estimate import estimate
from vramfit.sim import simulate

LAYERS = 4


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> str:
    return titan_llama(tmp_path_factory.mktemp("gradop"), LAYERS, hidden=2048, vocab=2048)


# the simulator runs FSDP2 (hf: accelerate's fsdp_version 2), so the estimate is asked for the same; hf's default is
# FSDP1, which has no all-gather output beside the unsharded parameters (estimate/fsdp2_forward.py _grad_op_copy_out)
_FSDP2 = {"torchtitan": {}, "hf": {"fsdp_version": 2}}


def _forward(result) -> int:
    return next(p.allocated_bytes for p in result.phases if p.phase == "forward")


@pytest.mark.parametrize("framework", ["torchtitan", "hf"])
def test_the_end_of_forward_holds_every_unit_gathered(llama, framework):
    def sc(parallelism: str) -> dict:
        return {"model": llama, "framework": framework, "method": "full", "num_gpus": 2, "precision": "bf16-mixed",
                "parallelism": parallelism, "seq_len": 256, "gradient_checkpointing": "full",
                "attention": "flash" if framework == "torchtitan" else "sdpa", **_FSDP2[framework]}

    sim = simulate(sc("fsdp-grad-op"), layers=LAYERS).result
    sim_full = simulate(sc("fsdp"), layers=LAYERS).result
    est = estimate(sc("fsdp-grad-op"))
    # the trace's forward grows by what reshard_after_forward=False keeps: three more bf16 blocks than full shard's
    # in-flight one (4 x 2048-wide Llama blocks), so the model must keep them too
    assert _forward(sim) - _forward(sim_full) > 2 * 100_000_000
    assert _forward(est) == pytest.approx(_forward(sim), rel=0.01)
    # the optimizer step runs on the resharded state (post_backward reshards every unit)
    opt = {p.phase: p.allocated_bytes for p in est.phases}["optimizer-step"]
    assert opt == pytest.approx(next(p.allocated_bytes for p in sim.phases if p.phase == "optimizer-step"), rel=0.001)
    # backward is not refined for grad-op (the generic reduce buffers): the estimate stays above the trace
    assert est.peak.allocated_bytes >= sim.peak.allocated_bytes


@pytest.fixture(scope="module")
def llama8(tmp_path_factory) -> str:
    return titan_llama(tmp_path_factory.mktemp("gradop8"), 8, hidden=2048, vocab=2048)


@pytest.mark.parametrize("framework,extra", [("torchtitan", {}), ("hf", {"precision": "bf16-mixed"}), ("hf", {})])
def test_the_peak_on_eight_gpus_follows_the_kept_gathered_blocks(llama8, framework, extra):
    """8 blocks on 8 GPUs: the shards are small and the kept bf16 copies make the peak. Traced: 1.44, 1.40 and
    1.14 GB; estimated +1.0, +4.0 and +4.0 % (before, with the unsharded copies missing or counted as persistent
    weights: -31, 0 (autocast copies stood in for them) and +9.7 %)."""
    sc = {"model": llama8, "framework": framework, "method": "full", "num_gpus": 8, "parallelism": "fsdp-grad-op",
          "seq_len": 256, "gradient_checkpointing": "full", "attention": "flash" if framework == "torchtitan" else "sdpa",
          **extra, **_FSDP2[framework]}
    sim = simulate(sc, layers=8).result
    est = estimate(sc)
    assert est.peak.allocated_bytes == pytest.approx(sim.peak.allocated_bytes, rel=0.05)
    assert _forward(est) == pytest.approx(_forward(sim), rel=0.01)


def test_qlora_keeps_every_gathered_4bit_block_to_the_end_of_forward(llama8):
    """The frozen 4-bit base is kept gathered just the same; the adapters' gradients need no block-sized reduce
    buffer. FSDP2 (``fsdp_version: 2``, what the simulator runs: accelerate's units) peaks at the top block's
    copy-out, blocks 6's and 7's all-gather outputs beside every block's unsharded weights and the embedding's, the
    tail not yet gathered (estimate/fsdp2_forward.py _grad_op_copy_out). Forward traced 312.3 MB, estimated -0.5 %
    (+14 % with two block-sized gradient buffers; -0.7 % against FSDP1's estimate only while the fp32 root, which the
    Trainer's bf16 policy gathers in bf16, and the absmax, which no all-gather moves, stood in for the outputs)."""
    sc = {"model": llama8, "framework": "hf", "method": "qlora", "quantize": "nf4", "num_gpus": 8,
          "parallelism": "fsdp-grad-op", "seq_len": 256, "gradient_checkpointing": "full", "fsdp_version": 2}
    sim = simulate(sc, layers=8).result
    assert _forward(estimate(sc)) == pytest.approx(_forward(sim), rel=0.01)
