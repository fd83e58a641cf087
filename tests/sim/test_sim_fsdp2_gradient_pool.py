"""FSDP2's reduce-scatter stream caches the sharded gradients, no more (estimate/fsdp_reserved.py ``gradient_pool``).

Its reduce-scatter outputs, whose views the shards are, are what that stream allocates (torch v2.13.0
_fully_shard/_fsdp_collectives.py ``foreach_reduce``); a unit's whole gradients and its flat reduce-scatter input are
the default stream's. The estimate had taken the most any phase's gradients came to (the end of backward's, the
embedding's whole gradient among them) as that pool. Checked against the simulator's trace replayed per stream
(sim/trace.py streams, sim/cuda_allocator.py): Qwen2.5-0.5B at 6 layers, full, bf16, 2 GPUs, 1 x 1,024
checkpointed, the stream caches 236,978,176 B; the shards are 225,613,824 B; the most a phase's gradients came to was
770,152,448 B."""

from __future__ import annotations

import json

import pytest
from simconfigs import catalog_config

from vramfit.estimate import estimate
from vramfit.estimate.fsdp_reserved import gradient_pool
from vramfit.estimate.step import compute
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario
from vramfit.sim.build import build_model
from vramfit.sim.cuda_allocator import CachingAllocatorModel
from vramfit.sim.engine import workspaces_for
from vramfit.sim.fsdp import fake_process_group, shard_model
from vramfit.sim.run import run_training

LAYERS = 6


@pytest.fixture(scope="module")
def qwen(tmp_path_factory) -> str:
    cfg = catalog_config("Qwen/Qwen2.5-0.5B")  # tied embeddings: 136M of its parameters in one weight
    cfg["num_hidden_layers"] = LAYERS
    path = tmp_path_factory.mktemp("pool") / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def _stream_segments(sc) -> dict[str, int]:
    """Bytes of the segments the trace leaves on the default stream and on the side stream(s) only backward uses."""
    built = build_model(json.loads(open(sc.model).read()), sc, LAYERS)
    with fake_process_group(sc.num_gpus):
        tr = run_training(built, sc, prepare=lambda b: shard_model(b, sc), workspaces=workspaces_for(sc)).trace
    forward = {s for sid, s in tr.streams.items() if ".forward" in tr.phases[sid]}
    a, live, seg_stream = CachingAllocatorModel(), {}, {}
    for ev in tr.events:
        if ev >= 0 and ev not in tr.host:
            stream = tr.streams.get(ev, 0)
            before = a.segments()
            live[ev] = a.malloc(tr.nbytes[ev], stream)
            seg_stream.update(dict.fromkeys(a.segments() - before, stream))
        elif ev < 0 and ~ev in live:
            a.free(live.pop(~ev))
    out = {"default": 0, "reduce-scatter": 0}
    for seg, stream in seg_stream.items():
        key = "default" if stream == 0 else "reduce-scatter" if stream not in forward else None
        if key:
            out[key] += a._seg_size[seg]
    return out


def test_the_reduce_scatter_stream_caches_the_shards(qwen):
    sc = parse_scenario({"model": qwen, "method": "full", "precision": "bf16-true", "seq_len": 1024,
                         "gradient_checkpointing": "full", "num_gpus": 2, "parallelism": "fsdp", "fsdp_version": 2})
    traced = _stream_segments(sc)["reduce-scatter"]
    r = compute(resolve_model(qwen).spec, sc)
    phases = {p.phase.value: dict(p.parts) for p in r.phases}
    pool = gradient_pool(r, phases)
    assert pool == r.parts.gradients == phases["optimizer-step"]["gradients"]  # every shard, at the step
    assert abs(pool - traced) <= 0.10 * traced, (pool, traced)
    # the most a phase's gradients come to (the end of backward's: the embedding's whole gradient beside the shards)
    most = max(p.get("gradients", 0) for p in phases.values())
    assert most > 1.5 * traced
    assert estimate(sc).peak.reserved_bytes > 0
