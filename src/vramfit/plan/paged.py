"""bitsandbytes paged optimizers in the plan search: which are tried, how they are timed.

A paged optimizer keeps its state in CUDA managed memory that the driver pages out to host RAM when the
card is full (bitsandbytes optim/optimizer.py ``get_state_buffer`` -> ``F.get_paged``); the search ranks it
as if all of its state moved in and out every step, the plan times what really pages out
(``verdict.result_paging``, ``throughput.step_time(paged_bytes=)``).
"""

from __future__ import annotations

from vramfit.plan import layouts
from vramfit.scenario import Optimizer

#: paged optimizers tried beside an AdamW (HF Trainer optim paged_adamw_8bit; torchtune and litgpt take
#: bitsandbytes.optim.PagedAdamW8bit as their optimizer component); the 8-bit one only: it pages a quarter of
#: the bytes of the 32-bit one, which would add a setting to search for no memory it saves on the card
PAGED_FOR = {Optimizer.ADAMW: [Optimizer.PAGED_ADAMW_8BIT.value], Optimizer.ADAMW_8BIT: [Optimizer.PAGED_ADAMW_8BIT.value]}

_PAGED = frozenset((Optimizer.PAGED_ADAMW.value, Optimizer.PAGED_ADAMW_8BIT.value))


def is_paged(c) -> bool:
    """Whether the search setting ``c`` runs a bitsandbytes paged optimizer."""
    return c.optimizer in _PAGED


def timing(c) -> tuple:
    """What the speed model reads of a search setting (``search.Config``): GPUs, sharding, offload,
    checkpointing, and its optimizer if paged (timed with its paging); loss and other optimizers not."""
    return (*c[:4], c.optimizer if is_paged(c) else "")


def paged_state(trainable: int, c) -> int:
    """Bytes of optimizer state per GPU of a paged optimizer: two moments of each trainable parameter in
    fp32 (4 B each), or 8-bit (1 B each; bitsandbytes optim/optimizer.py Optimizer2State, optim_bits),
    sharded over the GPUs by ZeRO/FSDP."""
    shards = c.num_gpus if layouts.parse(c.parallelism).parallelism not in ("none", "ddp") else 1
    return int(trainable * (2 if c.optimizer == Optimizer.PAGED_ADAMW_8BIT.value else 8) // shards)
