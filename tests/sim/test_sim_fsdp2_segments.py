"""FSDP2 full fine-tuning as the simulator replays it per stream (real fully_shard on the fake process group,
axolotl-0.12's wrap: decoder layers and the root): the reduce-scatter stream's transient outputs (estimate/fsdp2.py, 8)
and the segments the end of backward opens on the default stream (estimate/fsdp2_end.py)."""

from __future__ import annotations

import json

from simconfigs import titan_llama

from vramfit.estimate.allocator import segment_size
from vramfit.estimate.fsdp2 import reduce_output_pool
from vramfit.estimate.fsdp2_end import end_of_backward_segments
from vramfit.estimate.step import compute
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario
from vramfit.sim.build import build_model
from vramfit.sim.cuda_allocator import CachingAllocatorModel
from vramfit.sim.engine import workspaces_for
from vramfit.sim.fsdp import fake_process_group, shard_model
from vramfit.sim.run import run_training

MiB = 2**20


def _new_segments(tr) -> list[tuple[str, int, int]]:
    """(phase, stream, segment bytes, request bytes) of every segment the per-stream replay opens for a request
    above 8 MiB."""
    a, live, out = CachingAllocatorModel(), {}, []
    for ev in tr.events:
        if ev >= 0 and ev not in tr.host:
            before, stream = a.stats.reserved, tr.streams.get(ev, 0)
            live[ev] = a.malloc(tr.nbytes[ev], stream)
            if a.stats.reserved > before and tr.nbytes[ev] > 8 * MiB:
                out.append((tr.phases[ev], stream, a.stats.reserved - before, tr.nbytes[ev]))
        elif ev < 0 and ~ev in live:
            a.free(live.pop(~ev))
    return out


def test_the_replay_opens_the_segments_the_estimate_adds(tmp_path):
    path = titan_llama(tmp_path, 4, hidden=2048, vocab=32000)  # untied: embedding and lm_head 125 MiB each in bf16
    sc = parse_scenario({"model": path, "method": "full", "precision": "bf16-true", "micro_batch_size": 1,
                         "seq_len": 256, "attention": "flash", "num_gpus": 2, "parallelism": "fsdp", "fsdp_version": 2,
                         "framework_version": "axolotl-0.12", "gradient_checkpointing": "full", "grad_accum": 2})
    built = build_model(json.loads(open(path).read()), sc, 4)
    with fake_process_group(2):
        tr = run_training(built, sc, prepare=lambda b: shard_model(b, sc), workspaces=workspaces_for(sc)).trace
    opened = _new_segments(tr)
    step = compute(resolve_model(path).spec, sc)
    embed = 32000 * 2048 * 2
    # the first backward ends with the embedding's gradient and the root's flat input on the default stream
    first = [seg for phase, stream, seg, _ in opened if phase == "it1.mb1.backward" and stream == 0][-2:]
    assert first == [segment_size(embed), segment_size(2 * embed + 2048 * 2)] == [126 * MiB, 252 * MiB]
    assert end_of_backward_segments(step) == sum(first)
    # the second micro-batch's outputs, added into the held shards and dropped: a block's 1/2 and the root's 1/2
    second = [seg for phase, stream, seg, _ in opened if phase == "it1.mb2.backward" and stream]
    assert sum(second) == reduce_output_pool(step) == 42 * MiB + 126 * MiB

