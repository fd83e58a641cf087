"""Data-parallel wrapping for multi-GPU measurements (one process per GPU, launched by ``torchrun``).

- ``ddp``: ``torch.nn.parallel.DistributedDataParallel`` with its defaults (25 MiB buckets,
  ``gradient_as_bucket_view=False``); gradient sync skipped on all but the last micro-batch
  (``no_sync``), as accelerate does;
- ``fsdp`` / ``fsdp-grad-op``: FSDP2 ``fully_shard`` on every decoder layer (the model's
  ``_no_split_modules``) and on the root, ``reshard_after_forward`` True / False (ZeRO-3 / ZeRO-2
  layout); ``offload=optimizer+params`` adds ``CPUOffloadPolicy``; ``-mixed`` precision a
  ``MixedPrecisionPolicy`` (16-bit compute, fp32 reduce).

The model is built unsharded on each device and sharded before the peak counters are reset, so
the figures are the training steps' only; a model that only fits sharded cannot be measured yet.
"""

from __future__ import annotations

import os
from typing import Any

from vramfit.scenario import Parallelism, Scenario


def rank_info() -> tuple[int, int, int]:
    """(rank, local rank, world size) from torchrun's environment; (0, 0, 1) without it."""
    return (int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0")),
            int(os.environ.get("WORLD_SIZE", "1")))


def init(device_type: str, local_rank: int) -> None:
    import torch
    import torch.distributed as dist

    if device_type == "cuda":
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device_type == "cuda" else "gloo")


def finish() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def decoder_layers(model: Any) -> list[Any]:
    """The repeated blocks of a transformers model (classes named in ``_no_split_modules``)."""
    names = set()
    for mod in model.modules():
        names.update(getattr(mod, "_no_split_modules", None) or ())
    return [m for m in model.modules() if type(m).__name__ in names]


def wrap(model: Any, scenario: Scenario, device: str, local_rank: int, compute_dtype: Any = None) -> tuple[
    Any, Any, list[str]
]:
    """(model to train, ``no_sync`` context factory or None, assumptions) for the scenario's parallelism."""
    import torch

    par = scenario.parallelism
    if scenario.num_gpus == 1:
        return model, None, [] if par is Parallelism.NONE else [
            f"parallelism={par.value} on one GPU shards nothing: measured without a wrapper."]
    if par is Parallelism.DDP:
        from torch.nn.parallel import DistributedDataParallel

        ids = [local_rank] if torch.device(device).type == "cuda" else None
        ddp = DistributedDataParallel(model, device_ids=ids)
        return ddp, ddp.no_sync, [f"DDP over {scenario.num_gpus} processes (bucket_cap_mb=25, no bucket views); "
                                  "gradients synchronised on the last micro-batch only."]
    if par in (Parallelism.FSDP, Parallelism.FSDP_GRAD_OP):
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

        kwargs: dict[str, Any] = {"reshard_after_forward": par is Parallelism.FSDP}
        if scenario.offload.value == "optimizer+params":
            kwargs["offload_policy"] = CPUOffloadPolicy()
        if scenario.precision.mixed and compute_dtype is not None:
            kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
        layers = decoder_layers(model)
        for layer in layers:
            fully_shard(layer, **kwargs)
        fully_shard(model, **kwargs)
        return model, None, [f"FSDP2 fully_shard on {len(layers)} decoder layers and the root "
                             f"(reshard_after_forward={kwargs['reshard_after_forward']}"
                             + (", CPU offload" if "offload_policy" in kwargs else "") + ")."]
    raise ValueError(f"parallelism {par.value} is not measurable")  # check_measurable rejects it first
