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
from vramfit.scenario import Method, Parallelism, Quantize, Scenario
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


def traces_fsdp1(sc: Scenario) -> bool:
    """The scenario runs FSDP1 (``FullyShardedDataParallel``) and the simulator traces it as such: the profile's FSDP
    is accelerate's FSDP1 for this scenario (hf's ``fsdp_version`` auto or 1), FULL_SHARD full fine-tuning, LoRA or
    QLoRA over more than one GPU (LoRA with the Trainer's wrap policy: :func:`shard_model_fsdp1`). QLoRA's 4-bit codes
    are then stored in the model's dtype (sim/qlora.py ``prepare_qlora``), as the recipes that shard it set
    ``bnb_4bit_quant_storage``; after ``prepare_model_for_kbit_training`` the fp32 norms would share a block unit with
    them, which FSDP1 refuses: that runs as accelerate's FSDP2 (sim/engine.py ``as_fsdp2``)."""
    from vramfit.estimate.framework import profile_for

    # accelerate's FSDP1: the frameworks that prepare their FSDP through accelerate, which offers FSDP2 as well
    accelerates = profile_for(sc.framework, sc.framework_version).fsdp2_variant is not None
    # SHARD_GRAD_OP skips the sharded views after forward, and FSDP1's writeback then asserts the unsharded flat
    # parameter is allocated by its data pointer (torch v2.13.0 distributed/fsdp/_flat_param.py l. 2264-2274
    # ``_data_ptr_allocated``), which a fake tensor does not have: traced as FSDP2
    profile = scenario_profile(sc)
    # QLoRA: the 4-bit codes stored in the model's dtype (sim/qlora.py prepare_qlora) beside norms and embeddings left
    # in it (kbit_prepare no, as TRL leaves a sharded QLoRA model); prepare_model_for_kbit_training's fp32 norms would
    # mix dtypes in a block unit, which FSDP1 refuses (_flat_param.py _validate_tensors_to_flatten)
    uniform = sc.quantize is Quantize.NONE or (sc.method is Method.QLORA and not profile.qlora_unquantized_fp32)
    fsdp1 = sc.parallelism is Parallelism.FSDP and sc.num_gpus > 1 and accelerates and not profile.fsdp2 and uniform
    return fsdp1 and (sc.method is Method.FULL or not _expert_banks(sc))


def _expert_banks(sc: Scenario) -> bool:
    """The model has MoE experts: LoRA on transformers 5's 3-D expert banks (PEFT's ParamWrapper) fails inside
    FSDP1's flattening on fake tensors (Qwen3-30B-A3B: "inconsistent tensor size"), so those run as FSDP2."""
    from vramfit.estimate import resolve_spec

    return bool(resolve_spec(sc)[1].num_experts)


def shard_model_fsdp1(built: BuiltModel, sc: Scenario) -> None:
    """FSDP1 as accelerate prepares it for the HF Trainer, on the model materialised on fake CPU tensors: the
    ``transformer_based_wrap`` policy (one unit per decoder layer, the rest in the root), FULL_SHARD,
    ``MixedPrecision(param_dtype, reduce_dtype, buffer_dtype)`` all the compute dtype under -mixed
    precision (accelerate v1.16.0 utils/dataclasses.py ``FullyShardedDataParallelPlugin.set_mixed_precision``),
    ``limit_all_gathers`` and ``use_orig_params`` on (the Trainer's default), BACKWARD_PRE (torch's default and
    ``accelerate config``'s; the Trainer's own default is no prefetch), no forward prefetch. ``built.materialized``
    tells run_training the model is on its device already (FSDP1 flattens materialised parameters).

    LoRA: the Trainer replaces the plugin's policy with PEFT's before ``accelerator.prepare`` (transformers v5.24.0
    distributed/fsdp.py ``update_fsdp_plugin_peft``: ``auto_wrap_policy = fsdp_auto_wrap_policy(model)``), whose
    ``_or_policy`` wraps every childless module with a trainable weight (each LoRA A and B) as a unit of its own
    beside the decoder layers (peft v0.21.2 utils/other.py ``fsdp_auto_wrap_policy``): the block units hold only
    frozen weights, and the fp32 adapters a FlatParameter apart from the bf16 block's (one dtype per unit:
    _flat_param.py ``_validate_tensors_to_flatten``)."""
    import functools
    import warnings

    from torch.distributed.fsdp import BackwardPrefetch, MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

    from vramfit.sim.build import materialize

    # FSDP1 compares storages by data pointer (_flat_param.py ``_same_storage``), which fake tensors answer with a
    # deprecation warning on every unit: nothing of the trace depends on it
    warnings.filterwarnings("ignore", message="Accessing the data pointer of FakeTensor")
    materialize(built, "cpu")
    layers = {type(layer) for layer in decoder_layers(built.model)}
    dtype = built.autocast_dtype
    # QLoRA: the simulator's 4-bit layers hold bitsandbytes' quant state as buffers, which the real Params4bit keeps
    # outside the module, out of reach of FSDP's buffer cast: their buffers keep their dtypes
    buffers = None if sc.quantize is not Quantize.NONE else dtype
    mp = MixedPrecision(param_dtype=dtype, reduce_dtype=dtype, buffer_dtype=buffers) if dtype is not None else None
    strategy = ShardingStrategy.FULL_SHARD
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls=layers)
    lora = sc.method is not Method.FULL
    if lora:  # the Trainer's policy for a PEFT model (docstring)
        from peft.utils.other import fsdp_auto_wrap_policy

        policy = fsdp_auto_wrap_policy(built.model)
    built.model = FSDP(built.model, sharding_strategy=strategy, mixed_precision=mp,
                       auto_wrap_policy=policy,
                       backward_prefetch=BackwardPrefetch.BACKWARD_PRE, forward_prefetch=False, limit_all_gathers=True,
                       use_orig_params=True, device_id=torch.device("cpu"))
    built.materialized = True
    built.assumptions.append(
        f"FSDP1 {strategy.name} as accelerate prepares it for the HF Trainer (FullyShardedDataParallel, one unit per "
        "decoder layer" + (" and per LoRA A and B (PEFT's fsdp_auto_wrap_policy, as the Trainer sets it)" if lora else "")
        + " and the rest in the root, BACKWARD_PRE, limit_all_gathers, use_orig_params"
        + (f", MixedPrecision in {str(dtype).removeprefix('torch.')}" if dtype is not None else "")
        + f") over {sc.num_gpus} ranks on a fake process group; figures are rank 0's.")


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
    from vramfit.sim.titan_loss import runs_titan_chunked_loss

    # torchtitan 0.3 (sim/titan_loss.py) makes the same units (distributed/fsdp.py apply_fsdp_to_decoder l. 165-310);
    # its policy's cast_forward_inputs=False changes nothing here: every unit's floating inputs are 16-bit already
    titan = " (torchtitan 0.3's apply_fsdp_to_decoder makes the same units)" if runs_titan_chunked_loss(sc) else ""
    built.assumptions.append(
        f"FSDP2 as accelerate 1.15 prepares it{titan} (fsdp2_prepare_model: fully_shard per decoder layer, the "
        f"embedding and the final norm + lm_head as units, then the root; "
        f"reshard_after_forward={kwargs['reshard_after_forward']})"
        f" over {sc.num_gpus} ranks on a fake process group; figures are rank 0's.")
