"""The simulator's allocator replay keeps FSDP2's side streams apart (sim/trace.py streams, sim/cuda_allocator.py).

FSDP2 on the fake process group runs its real stream contexts on CPU device handles; the reduce-scatter
outputs, whose views are the sharded gradients, are allocated on the reduce-scatter stream (torch v2.13.0
_fully_shard/_fsdp_collectives.py foreach_reduce: "The RS output is allocated in the RS stream")."""

from __future__ import annotations

import json

from simconfigs import catalog_config

from vramfit.scenario import parse_scenario
from vramfit.sim.build import build_model
from vramfit.sim.cuda_allocator import replay
from vramfit.sim.engine import workspaces_for
from vramfit.sim.fsdp import fake_process_group, shard_model
from vramfit.sim.run import run_training


def test_sharded_gradients_are_allocated_on_the_reduce_scatter_stream(tmp_path):
    cfg = catalog_config("meta-llama/Llama-3.2-1B")
    cfg["num_hidden_layers"] = 2
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    sc = parse_scenario({"model": str(path), "method": "full", "precision": "bf16-mixed", "seq_len": 256,
                         "micro_batch_size": 1, "num_gpus": 8, "parallelism": "fsdp", "framework": "torchtitan"})
    built = build_model(cfg, sc, 2)
    with fake_process_group(8):
        tr = run_training(built, sc, prepare=lambda b: shard_model(b, sc), workspaces=workspaces_for(sc)).trace
    # every parameter's local shard in fp32 (reduce_dtype): rows padded to a multiple of 8 ranks
    shards = sum(p.to_local().numel() * 4 for p in built.model.parameters())
    assert shards == 192_156_672
    per_stream: dict[tuple[int, str], int] = {}
    for sid, stream in tr.streams.items():
        if tr.dtypes[sid] == "float32" and tr.phases[sid] == "it1.mb1.backward":
            per_stream[stream, tr.dtypes[sid]] = per_stream.get((stream, tr.dtypes[sid]), 0) + tr.nbytes[sid]
    assert list(per_stream.values()) == [shards]
    # replayed per stream, the cached gradient blocks are not reused by the second step's forward
    one = replay(tr.events, tr.nbytes, tr.host)[2].peak_reserved
    per = replay(tr.events, tr.nbytes, tr.host, tr.streams)[2].peak_reserved
    assert per > one
