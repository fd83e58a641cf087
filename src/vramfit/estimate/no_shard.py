"""FSDP1 ``ShardingStrategy.NO_SHARD`` (``parallelism: fsdp-no-shard``): FSDP's wrapping with a shard degree of 1.

What torch v2.13.0 keeps (distributed/fsdp):

- ``_flat_param.py`` ``FlatParamHandle.shard``: for a non-sharded strategy it only records the shard metadata
  (``_init_shard_metadata(0, 0, numel - 1)``); the flat parameter ``torch.cat`` built from the unit's
  tensors stays the parameter, whole, on every rank (no ``_get_shard`` clone). So parameters, gradients and
  optimizer states are per rank what one GPU holds (``state.sharding_for``: degree 1), in FlatParameters.
- ``needs_unshard`` returns False for it: no all-gather and no padded unsharded copy. Under ``MixedPrecision``
  (``param_dtype``) ``pre_unshard`` still casts the unit to its low-precision ``_mp_shard`` (on the pre-unshard
  stream), which ``post_reshard`` frees after the unit's forward and again after its backward ("For
  ``NO_SHARD``, ``_mp_shard`` is not freed in the post-unshard ... we delay the free until the reshard"); the
  root unit's forward and backward enclose every block's, and ``BACKWARD_PRE`` prefetch casts the next unit
  before the current one's backward: the root's copy and two blocks' (:func:`mixed_precision_copies`).
- ``_runtime_utils.py`` ``_reduce_grad_no_shard``: ``dist.all_reduce(flat_param.grad)`` in place; the
  gradient "is produced in the computation stream" (``_cast_grad_to_param_dtype``). No reduce-scatter buffer,
  no gradient pool on a side stream, and no DDP bucket copy of the gradients (core.comm_buffers).
- ``_init_utils.py`` ``_init_core_state``: FSDP clamps any strategy to NO_SHARD at world size 1, so the wrap residue of a model
  loaded on the CPU (estimate/fsdp_reserved.py, mechanism 2) is :func:`fsdp_reserved.build_wrap` with a group of
  one: the moved originals and ``sync_module_states``' broadcast buckets freed, the flat parameter kept.

Not modelled: the concatenation of the per-parameter view gradients into the unit's flat gradient (the
backward of ``split``, one unit's gradients twice for a moment; LoRA units hold adapters only) and FSDP1's
cast of a low-precision gradient back to the parameter dtype under ``MixedPrecision`` (per unit, transient).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vramfit.scenario import Parallelism

if TYPE_CHECKING:
    from vramfit.estimate.framework import FrameworkProfile
    from vramfit.models.spec import ModelSpec
    from vramfit.scenario import Scenario

#: Block units whose low-precision copy is alive at once under MixedPrecision: the unit running and, in
#: backward, the one ``BackwardPrefetch.BACKWARD_PRE`` casts before it (torch v2.13.0
#: distributed/fsdp/_runtime_utils.py ``_pre_backward_hook`` -> ``_prefetch_handle``); the rate limiter never
#: waits (``_reshard`` enqueues a free event only when it frees an unsharded flat parameter, never for NO_SHARD)
MP_BLOCK_COPIES = 2


def is_no_shard(sc: Scenario) -> bool:
    return sc.parallelism is Parallelism.FSDP_NO_SHARD


def mixed_precision_copies(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """Bytes of the low-precision ``_mp_shard`` copies alive at once under FSDP1 ``MixedPrecision`` (module
    docstring): the root unit's and :data:`MP_BLOCK_COPIES` blocks', in the compute dtype; 0 without a
    parameter cast (``bf16-true``: the flat parameters are used as they are)."""
    from vramfit.estimate.core import _layer_param_bytes, _root_gathered_bytes
    from vramfit.estimate.framework import casts_params

    if not casts_params(sc, profile):
        return 0
    return MP_BLOCK_COPIES * _layer_param_bytes(spec, sc, profile) + _root_gathered_bytes(spec, sc, profile)


def mixed_precision_units(units: tuple[tuple[int, ...], ...], sc: Scenario, profile: FrameworkProfile
                          ) -> tuple[int, ...]:
    """The same copies as flat sizes for the allocator replay (``units``: fsdp_reserved.wrap_units, root
    last; ``()`` without a parameter cast)."""
    from vramfit.estimate.framework import casts_params

    if not casts_params(sc, profile):
        return ()
    ratio_num, ratio_den = sc.precision.compute_bytes, sc.precision.param_bytes
    largest = max((sum(u) for u in units[:-1]), default=0)
    return tuple(n * ratio_num // ratio_den for n in (sum(units[-1]),) + (largest,) * MP_BLOCK_COPIES)


__all__ = ["MP_BLOCK_COPIES", "is_no_shard", "mixed_precision_copies", "mixed_precision_units"]
