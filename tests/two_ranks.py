"""Run a function on two CPU/gloo ranks (torch.multiprocessing.spawn) and read back what rank 0 computed: the torch FSDP1
behaviour tests (test_fsdp1_no_sync_torch.py, test_reentrant_fsdp1_torch.py)."""

from __future__ import annotations

import ast
import os
import socket
from collections.abc import Callable
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, compute: Callable[[], object], port: int, out: str) -> None:
    """One rank: join the gloo group, run ``compute``, rank 0 writes its result (whole, by rename), then both ranks
    meet at a barrier before tearing the group down together."""
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    seen = compute()
    if rank == 0:
        Path(out + ".part").write_text(repr(seen))
        os.replace(out + ".part", out)
    dist.barrier()
    dist.destroy_process_group()


def spawn_two(compute: Callable[[], object], folder: Path) -> object:
    """``compute()`` on ranks 0 and 1 of a gloo group; the value rank 0 returned (a Python literal).

    A rank that aborts after rank 0 has written its whole result is gloo's teardown, not the behaviour under test (a
    loaded machine has shown "terminate called without an active exception" from a gloo worker thread there): the
    result stands. A failure before it raises as usual."""
    import torch.multiprocessing as mp

    out = folder / "seen.txt"
    try:
        mp.spawn(_rank, args=(compute, free_port(), str(out)), nprocs=2)
    except mp.ProcessExitedException:
        if not out.exists():
            raise
    return ast.literal_eval(out.read_text())
