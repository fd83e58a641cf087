"""FSDP2 on a fake process group: the memory of rank 0 of ``num_gpus``.

PyTorch's fake backend (``torch.testing._internal.distributed.fake_pg.FakeStore`` with
``init_process_group("fake")``) accepts every collective without communicating, so the real FSDP2
code runs in one process: ``fully_shard`` on every decoder layer, then on the root model
(``reshard_after_forward=True``, the full-shard strategy; ``False`` for ``fsdp-grad-op``, FSDP1's
SHARD_GRAD_OP), as torchtitan and accelerate's FSDP2 plugin wrap transformer blocks. Sharded parameters
are DTensors whose local shards are the tracked storage; all-gather outputs are allocated and freed by FSDP2 itself (storage ``resize_``), so the two in-flight
all-gathers of implicit forward prefetch and the reduce-scatter buffers of backward appear as FSDP2
allocates them. Collective outputs hold no data, which does not change memory.

Mixed precision: ``-mixed`` precisions shard fp32 parameters and all-gather them in the 16-bit dtype. The
reduce dtype is the profile's: accelerate (the HF profile, ``fsdp_reduce_in_param_dtype``) builds
``MixedPrecisionPolicy(param_dtype=d, reduce_dtype=d, output_dtype=d)`` (accelerate v1.15.0
utils/dataclasses.py ``FullyShardedDataParallelPlugin.set_mixed_precision``), so the reduce-scatter input is
16-bit; torchtitan reduces in fp32, an fp32 reduce-scatter input twice the block's 16-bit gradients.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from vramfit.estimate.framework import scenario_profile
from vramfit.scenario import Parallelism, Scenario
from vramfit.sim.build import BuiltModel
from vramfit.sim.run import decoder_layers


@contextlib.contextmanager
def fake_process_group(world_size: int) -> Iterator[Any]:
    """A fake default process group of ``world_size`` ranks (this process is rank 0)."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


def shard_model(built: BuiltModel, sc: Scenario) -> None:
    """Apply FSDP2 ``fully_shard`` to each decoder layer and the root (on the meta model)."""
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    with unset_fake_temporarily():  # the mesh is built from real rank tensors; the model is on meta
        _shard(built, sc, init_device_mesh("cpu", (dist.get_world_size(),)), MixedPrecisionPolicy, fully_shard)


def _shard(built: BuiltModel, sc: Scenario, mesh: Any, policy: Any, fully_shard: Any) -> None:
    reshard = sc.parallelism is Parallelism.FSDP  # fsdp-grad-op keeps every unit gathered until its backward
    kwargs: dict[str, Any] = {"mesh": mesh, "reshard_after_forward": reshard}
    param_dtype = built.autocast_dtype or built.mp_param_dtype
    # accelerate's policy keeps every dtype the parameter one (module docstring); torchtitan's reduces in fp32
    in_param_dtype = param_dtype is not None and scenario_profile(sc).fsdp_reduce_in_param_dtype
    reduce_dtype = param_dtype if in_param_dtype else torch.float32
    if param_dtype is not None:
        kwargs["mp_policy"] = policy(param_dtype=param_dtype, reduce_dtype=reduce_dtype,
                                     output_dtype=param_dtype if in_param_dtype else None)
    if scenario_profile(sc).fsdp2_tail_unit:
        _accelerate_fsdp2(built, sc, mesh, kwargs)
        return
    for layer in decoder_layers(built.model):
        fully_shard(layer, **kwargs)
    fully_shard(built.model, **kwargs)
    built.assumptions.append(
        f"FSDP2 {'full shard' if reshard else 'grad-op shard'} (fully_shard per decoder layer and on the root, "
        f"reshard_after_forward={reshard}) over "
        f"{sc.num_gpus} ranks on a fake process group; figures are rank 0's."
        + (" Mixed precision: fp32 shards all-gathered in 16 bits, gradients reduce-scattered in "
           f"{str(reduce_dtype).removeprefix('torch.')} (MixedPrecisionPolicy)." if param_dtype is not None else "")
    )


def _accelerate_fsdp2(built: BuiltModel, sc: Scenario, mesh: Any, kwargs: dict[str, Any]) -> None:
    """accelerate's own ``fsdp2_prepare_model`` (v1.15.0 utils/fsdp_utils.py) on the meta model: its transformer
    auto wrap policy, the embedding and tail units, the root, the fp32 upcast of trainable weights under mixed
    precision. The plugin is accelerate's (``fsdp_version=2``, ``reshard_after_forward`` from the parallelism, the
    policy the Trainer's mixed precision sets); ``cpu_ram_efficient_loading`` off: the model is on meta already."""
    from types import SimpleNamespace

    from accelerate.utils import FullyShardedDataParallelPlugin
    from accelerate.utils.fsdp_utils import fsdp2_prepare_model

    plugin = FullyShardedDataParallelPlugin(fsdp_version=2, reshard_after_forward=kwargs["reshard_after_forward"],
                                            mixed_precision_policy=kwargs.get("mp_policy"),
                                            auto_wrap_policy="transformer_based_wrap", cpu_ram_efficient_loading=False)
    accelerator = SimpleNamespace(
        state=SimpleNamespace(fsdp_plugin=plugin), torch_device_mesh={("dp_shard",): mesh},
        parallelism_config=SimpleNamespace(fsdp_dim_names=("dp_shard",)), is_main_process=False,
        mixed_precision="no" if kwargs.get("mp_policy") is None else "bf16", device=torch.device("cpu"))
    fsdp2_prepare_model(accelerator, built.model)
    built.assumptions.append(
        f"FSDP2 as accelerate 1.15 prepares it (fsdp2_prepare_model: fully_shard per decoder layer, the embedding "
        f"and the final norm + lm_head as units, then the root; reshard_after_forward={kwargs['reshard_after_forward']})"
        f" over {sc.num_gpus} ranks on a fake process group; figures are rank 0's.")
