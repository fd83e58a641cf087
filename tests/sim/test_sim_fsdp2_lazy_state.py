"""FSDP2 full fine-tuning over three optimizer steps: where AdamW's lazily created state lands, and what the second
step then opens (the mechanism estimate/fsdp2.py's "Not modelled" paragraph records, with the figures at real sizes).

torch v2.13.0 optim/adam.py ``Adam._init_group`` l. 160-185 (AdamW subclasses Adam): at the FIRST ``step()`` each
parameter's ``exp_avg`` and ``exp_avg_sq`` are made (``torch.zeros_like(p)``: one tensor per FSDP2 shard, 1/N of
the parameter) after forward and backward have left their cached blocks on the default stream. The caching
allocator places each in the smallest free block that fits and splits it (pytorch/pytorch@eb42ad6e
CUDACachingAllocator.cpp ``get_free_block``, ``should_split``: a large block splits when more than 1 MiB remains),
so the states sit in segments the step's whole-parameter tensors (the root unit's copied-out parameters, the output
layer's and the embedding's gradients, the flat reduce-scatter inputs) were opened for; those can no longer take a
tensor of their size, and the next backward opens new segments, one pass more until the layout settles.
"""

from __future__ import annotations

import json

import pytest
from simconfigs import titan_llama

import vramfit.sim.run as sim_run
from vramfit.estimate import estimate
from vramfit.scenario import parse_scenario
from vramfit.sim.build import build_model
from vramfit.sim.cuda_allocator import CachingAllocatorModel
from vramfit.sim.engine import workspaces_for
from vramfit.sim.fsdp import fake_process_group, shard_model

MiB = 2**20


def _trace(path: str, grad_accum: int, monkeypatch):
    sc = {"model": path, "method": "full", "precision": "bf16-true", "micro_batch_size": 1, "seq_len": 256,
          "attention": "flash", "num_gpus": 2, "parallelism": "fsdp", "fsdp_version": 2,
          "framework_version": "axolotl-0.12", "gradient_checkpointing": "full", "grad_accum": grad_accum}
    parsed = parse_scenario(sc)
    built = build_model(json.loads(open(path).read()), parsed, 4)
    monkeypatch.setattr(sim_run, "ITERATIONS", 3)
    with fake_process_group(2):
        tr = sim_run.run_training(built, parsed, prepare=lambda b: shard_model(b, parsed),
                                  workspaces=workspaces_for(parsed)).trace
    return sc, tr


def _replay(tr, events) -> tuple[list[tuple[str, int]], int]:
    """(phase, bytes) of every default-stream segment opened for a request above 8 MiB, and the reserved peak."""
    a, live, opened = CachingAllocatorModel(), {}, []
    for ev in events:
        if ev >= 0 and ev not in tr.host:
            before, stream = a.stats.reserved, tr.streams.get(ev, 0)
            live[ev] = a.malloc(tr.nbytes[ev], stream)
            if a.stats.reserved > before and tr.nbytes[ev] > 8 * MiB and stream == 0:
                opened.append((tr.phases[ev], a.stats.reserved - before))
        elif ev < 0 and ~ev in live:
            a.free(live.pop(~ev))
    return opened, a.stats.peak_reserved


def _states(tr) -> list[int]:
    """The first step's allocations alive to the end of the run: the optimizer state."""
    last = max(i for i, ev in enumerate(tr.events) if ev >= 0)
    freed = {~ev for i, ev in enumerate(tr.events) if ev < 0 and i < last}
    return [ev for ev in tr.events if ev >= 0 and tr.phases[ev] == "it1.optimizer" and ev not in freed]


def _eager(tr, states: list[int]) -> list[int]:
    """The same events with the state made right after loading (as if created before the first forward)."""
    first = next(i for i, ev in enumerate(tr.events) if ev >= 0 and tr.phases[ev] != "load")
    kept = set(states)
    return tr.events[:first] + states + [ev for ev in tr.events[first:] if ev not in kept]


@pytest.mark.parametrize("grad_accum, later", [(1, [("it2.mb1.backward", 126), ("it2.mb1.backward", 82),
                                                     ("it2.mb1.backward", 252), ("it3.mb1.backward", 252)]),
                                                (2, [("it2.mb1.backward", 126), ("it2.mb1.backward", 82),
                                                     ("it2.mb1.backward", 252), ("it2.mb2.backward", 252)])])
def test_the_first_steps_state_takes_cached_segments_the_next_backward_reopens(tmp_path, monkeypatch, grad_accum, later):
    path = titan_llama(tmp_path, 4, hidden=2048, vocab=32000)  # untied: embedding and lm_head 125 MiB each in bf16
    sc, tr = _trace(path, grad_accum, monkeypatch)
    states = _states(tr)
    # two bf16 states per parameter shard: (2 x 32000 x 2048 + 4 blocks' 80 MiB) / 2 ranks x 2 states x 2 bytes
    big = [tr.nbytes[ev] for ev in states if tr.nbytes[ev] > MiB]
    assert sum(big) == 570 * MiB and sorted(big)[-4:] == [32000 * 2048 // 2 * 2] * 4
    opened, lazy = _replay(tr, tr.events)
    # the first step opens nothing: every state is placed in a block forward and backward left cached
    assert not [seg for phase, seg in opened if phase == "it1.optimizer"]
    # the next backwards open the output layer's gradient, a block's and the root's flat reduce-scatter inputs and
    # (one pass later) the root's input again: the blocks they had are split by states; nothing opens after that
    assert [(phase, seg // MiB) for phase, seg in opened if phase.startswith(("it2", "it3"))] == later
    _, eager = _replay(tr, _eager(tr, states))
    assert lazy - eager == 136 * MiB  # what the lazy placement costs here: 5 % of the 2.6-2.8 GiB reserved
    if grad_accum == 1:
        # the estimator models the step with its state in place: within 1 % of the eager replay (2,554 MiB)
        assert estimate(sc).peak.reserved_bytes == pytest.approx(eager, rel=0.01)
