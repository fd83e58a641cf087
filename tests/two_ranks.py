"""Run a function on two CPU/gloo ranks (torch.multiprocessing.spawn) and read back what rank 0 wrote: the torch FSDP1
behaviour tests (test_fsdp1_no_sync_torch.py, test_reentrant_fsdp1_torch.py)."""

from __future__ import annotations

import ast
import socket
from collections.abc import Callable
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_two(rank_fn: Callable[[int, int, str], None], folder: Path) -> dict:
    """``rank_fn(rank, port, out)`` on ranks 0 and 1; the Python literal rank 0 wrote to ``out``."""
    import torch.multiprocessing as mp

    out = folder / "seen.txt"
    mp.spawn(rank_fn, args=(free_port(), str(out)), nprocs=2)
    return ast.literal_eval(out.read_text())
