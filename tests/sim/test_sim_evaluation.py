"""The evaluation pass (eval_batch_size) in the simulator: transformers' own forward and ForCausalLMLoss under
torch.no_grad() on fake tensors after the optimizer steps (sim/run.py ``_evaluate``), against the estimator's
``evaluate`` phase (estimate/evaluation.py). Qwen2.5-0.5B (vocabulary 151,936) at 1,024 tokens."""

from __future__ import annotations

import pytest

from vramfit.estimate import estimate
from vramfit.estimate.allocator import segment_size
from vramfit.scenario import parse_scenario
from vramfit.sim import simulate

T, V = 1024, 151936
BASE = {"model": "Qwen/Qwen2.5-0.5B", "seq_len": T, "gradient_checkpointing": "full", "method": "full",
        "framework_version": "transformers-4.53", "eval_batch_size": 1}


def _eval_allocs(sc: dict, depth: int = 3) -> list[tuple[int, bool]]:
    """(bytes, opened a new segment) of each eval-phase allocation above 50 MiB, replayed through the allocator."""
    from vramfit.sim.build import build_model
    from vramfit.sim.cuda_allocator import CachingAllocatorModel
    from vramfit.sim.engine import resolve_config, workspaces_for
    from vramfit.sim.run import run_training

    s = parse_scenario(sc)
    built = build_model(resolve_config(s)[1], s, depth)
    tr = run_training(built, s, workspaces=workspaces_for(s)).trace
    start = next(i for i, label in tr.marks if label == "evaluate")
    alloc, live, out = CachingAllocatorModel(), {}, []
    for n, ev in enumerate(tr.events):
        if ev >= 0 and ev not in tr.host:
            before = alloc.stats.reserved
            live[ev] = alloc.malloc(tr.nbytes[ev], tr.streams.get(ev, 0))
            if n >= start and tr.nbytes[ev] > 50 * 2**20:
                out.append((tr.nbytes[ev], alloc.stats.reserved > before))
        elif ev < 0 and ~ev in live:
            alloc.free(live.pop(~ev))
    return out


@pytest.mark.slow
def test_eval_phase_allocated_matches_simulator():
    sim = {p.phase: p.allocated_bytes for p in simulate({**BASE, "loss": "fused"}, layers=(3, 4)).result.phases}
    est = {p.phase: p.allocated_bytes for p in estimate({**BASE, "loss": "fused"}).phases}
    assert abs(est["evaluate"] / sim["evaluate"] - 1) < 0.03  # 4,329 vs 4,365 MiB when written


def test_fused_training_loss_eval_opens_the_estimators_segments():
    allocs = _eval_allocs({**BASE, "loss": "fused"})
    # lm_head's bf16 logits, ForCausalLMLoss's logits.float(), log_softmax's output: each a new segment
    assert allocs == [(2 * T * V, True), (4 * T * V, True), (4 * T * V, True)]
    est = estimate({**BASE, "loss": "fused"}).peak.reserved_bytes
    est0 = estimate({**BASE, "loss": "fused", "eval_batch_size": 0}).peak.reserved_bytes
    assert est - est0 == sum(segment_size(n) for n, _ in allocs)


def test_standard_training_loss_segments_are_reused():
    allocs = _eval_allocs({**BASE, "loss": "standard"})
    assert [n for n, _ in allocs] == [2 * T * V, 4 * T * V, 4 * T * V]
    assert not any(new for _, new in allocs)
    est = estimate({**BASE, "loss": "standard"}).peak.reserved_bytes
    assert est == estimate({**BASE, "loss": "standard", "eval_batch_size": 0}).peak.reserved_bytes


@pytest.mark.slow
def test_zero3_eval_keeps_the_flat_gradient_partition():
    """DeepSpeed's engine under no_grad (sim/deepspeed_zero.py): the gathered parameters, the optimizer partitions and
    the flat gradient partition stay; 4,342 vs 4,331 MiB, gradients 237 vs 236 MiB when written."""
    sc = {**BASE, "loss": "fused", "num_gpus": 4, "parallelism": "zero3",
          "framework_version": "transformers-4.53+deepspeed-0.16"}
    sim = {p.phase: p for p in simulate(sc, layers=(3, 4)).result.phases}["evaluate"]
    est = {p.phase: p for p in estimate(sc).phases}["evaluate"]
    assert abs(est.allocated_bytes / sim.allocated_bytes - 1) < 0.03
    sim_grads, est_grads = dict(sim.breakdown)["gradients"], dict(est.breakdown)["gradients"]
    assert abs(est_grads / sim_grads - 1) < 0.03
