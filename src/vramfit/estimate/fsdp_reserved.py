"""Reserved memory that FSDP's side streams and its wrapping of a host-resident model add.

Three allocator mechanisms, replayed through the simulator's caching-allocator model
(:class:`vramfit.sim.cuda_allocator.CachingAllocatorModel`, pytorch/pytorch@eb42ad6e
``c10/cuda/CUDACachingAllocator.cpp``). The common rule: blocks cached on one stream are never reused on
another ("Once freed, blocks can be re-allocated on the same stream, but not on any other stream").

1. Sharded gradients on the reduce-scatter stream. FSDP2 allocates each unit's reduce-scatter output,
   whose views become the sharded ``.grad``, on its reduce-scatter stream (torch v2.13.0
   distributed/fsdp/_fully_shard/_fsdp_collectives.py ``foreach_reduce``: "The RS output is allocated in
   the RS stream and used in the default stream (for optimizer)"); FSDP1 allocates the sharded gradient on
   its post-backward stream (_runtime_utils.py ``_post_backward_hook``: ``with
   state._device_handle.stream(state._post_backward_stream)`` -> ``_get_reduce_scatter_tensors``:
   ``torch.empty_like(chunks[0])``). ``zero_grad(set_to_none=True)`` frees them into that stream's pool,
   where the next forward's activations (default stream) cannot reuse them: the reserved figure is the
   default stream's high-water (every phase without its sharded gradients) plus that pool.
2. Wrap residue. ``FullyShardedDataParallel(module, device_id=...)`` on a model whose parameters are on
   the CPU builds every unit in turn, innermost first (torch v2.13.0 distributed/fsdp/_init_utils.py
   ``_init_param_handle_from_module``): ``_move_module_to_device`` copies the unit's parameters to the
   GPU one tensor at a time (``param.data = param.to(device)``), ``FlatParamHandle`` concatenates them
   into the unsharded flat parameter (_flat_param.py ``flatten_tensors_into_flat_param``: ``torch.cat``),
   ``shard()`` clones this rank's chunk (``_get_shard``: ``chunk.clone()``) and frees the flat parameter
   (``_typed_storage()._resize_(0)``); the moved originals die when ``managed_params`` goes out of scope.
   Each large request opens a segment of its own the first time; the freed ones stay cached
   (no ``empty_cache``), so ``memory_reserved`` after wrapping exceeds the shards by the largest units'
   transients. With ``sync_module_states=True`` rank 0 first broadcasts the moved tensors
   (_init_utils.py ``_sync_module_params_and_buffers`` -> ``_sync_params_and_buffers(...,
   PARAM_BROADCAST_BUCKET_SIZE = 250 MiB)`` -> ``dist._broadcast_coalesced``): torch/csrc/distributed/c10d
   comm.cpp ``broadcast_coalesced`` flattens each bucket into one tensor (``flatten_dense_tensors``) with
   "a maximum of 2 in flight broadcast operations", and reducer.cpp ``compute_bucket_assignment_by_size``
   closes a bucket once its size reaches the limit. A unit under 250 MiB (a 4-bit block) is one bucket the
   size of its flat parameter, which then reuses it; a larger unit (a 16-bit 7B block, the root's embedding
   and lm_head) leaves buckets in separate segments no later flat parameter of that size can reuse.
   Rank 0 is modelled (the rank the measurements report; the others ``to_empty`` the same tensors).
   Which engines do this is profile data (``fsdp1_host_wrap``, ``fsdp1_sync_module_states``).
3. All-gather pool. FSDP1 allocates each unit's padded unsharded flat parameter on its unshard stream
   (_runtime_utils.py ``_unshard``: ``with state._device_handle.stream(unshard_stream): handle.unshard()``,
   _flat_param.py ``_alloc_padded_unsharded_flat_param``): the root unit, gathered from forward to the end
   of backward, and ``FSDP_INFLIGHT_ALLGATHERS`` block units open segments beside the wrap residue. Under
   ``CPUOffload(offload_params=True)`` each unshard first copies the host shard to the GPU on a third
   stream (``_unshard``: ``with state._device_handle.stream(pre_unshard_stream): handle.pre_unshard()``;
   _flat_param.py ``pre_unshard``: ``self.flat_param_to(self.device, non_blocking=True)``), freed once the
   all-gather has read it (``_use_unsharded_flat_param`` rebinds ``flat_param.data``): that stream's pool
   holds the largest shard copied (one at a time).

The host-wrap floor is what 2 and 3 leave reserved before the first forward, plus the gradient pool of 1
and the persistent bytes the units do not hold (e.g. 4-bit quantization states kept whole on the module).
The floor binds while the step fits in that residue; the part of the residue the step's tensors are too
large for stays beside the step's own segments (estimate/wrap_step.py, :func:`wrap_residue`).
Not modelled: FSDP1's cast of the unsharded gradient to a different ``reduce_dtype`` (none under accelerate's
policy, which reduces in the parameter dtype: profile ``fsdp_reduce_in_param_dtype``) and its padding copy
(both on the post-backward stream, freed per unit), ``record_stream``'s deferred frees.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from vramfit.estimate.constants import FSDP_INFLIGHT_ALLGATHERS
from vramfit.estimate.phases import StepPhase
from vramfit.scenario import Method, Offload, Parallelism, Precision, Quantize

UNSHARD_STREAM = 1  # any stream other than the default stream 0
PRE_UNSHARD_STREAM = 2  # FSDP1's third stream (the offloaded shard's host-to-device copy)
# torch v2.13.0 distributed/fsdp/_init_utils.py PARAM_BROADCAST_BUCKET_SIZE = int(250 * 1024 * 1024)
SYNC_BUCKET_BYTES = 250 * 2**20
SYNC_IN_FLIGHT = 2  # torch/csrc/distributed/c10d/comm.cpp broadcast_coalesced: max_in_flight = 2


def sync_buckets(tensors: tuple[int, ...], limit: int) -> list[int]:
    """Bytes each coalesced broadcast bucket of ``tensors`` (in parameter order) allocates: a bucket
    closes once it reaches ``limit`` (reducer.cpp ``compute_bucket_assignment_by_size``: ``if (bucket.size
    >= limit)``); a bucket of several tensors is copied into one (torch/csrc/utils/tensor_flatten.h
    ``flatten_dense_tensors``: ``at::cat``), a bucket of one is a view of it (``tensors.size() == 1``): 0."""
    out, cur, count = [], 0, 0
    for n in tensors:
        cur, count = cur + n, count + 1
        if cur >= limit:
            out.append(cur if count > 1 else 0)
            cur, count = 0, 0
    return out + [cur if count > 1 else 0] if count else out


def _weight_bytes(lin, sc) -> int:
    """Bytes of one linear's ``weight`` parameter as FSDP flattens it."""
    n = lin.in_features * lin.out_features
    if sc.quantize is Quantize.NONE or sc.method is Method.FULL:
        return n * sc.precision.param_bytes
    if sc.quantize in (Quantize.NF4, Quantize.NF4_DQ, Quantize.FP4, Quantize.FP4_DQ):
        # bitsandbytes Params4bit: two 4-bit codes per byte; absmax and code live in quant_state, outside the flat param
        return -(-n // 2)
    from vramfit.estimate.state import quantized_weight_bytes

    return quantized_weight_bytes(lin.out_features, lin.in_features, sc.quantize)


def wrap_units(spec, sc, adapters, adapter_elem_bytes: int) -> tuple[tuple[int, ...], ...]:
    """FSDP units in construction order, each as the byte sizes of its tensors in move order.

    Per decoder block: each LoRA A/B tensor is a unit of its own (FSDP1 flattens tensors of uniform
    ``requires_grad`` only when ``use_orig_params=False``: _flat_param.py ``_validate_tensors_to_flatten``;
    AnswerDotAI/fsdp_qlora@4cd6923 train.py l. 474 wraps every trainable leaf), then the block in
    ``module.parameters()`` order (the linears with their biases, then the norms: the order
    ``sync_module_states`` buckets them in; the norms are small-pool blocks, so that ``_move_module_to_device``
    moves them first does not change the large segments); last the root (embeddings, final norm, output layer).
    """
    L, b = spec.num_hidden_layers, sc.precision.param_bytes
    # each linear's and adapter's tensors once, not once per layer: a layer only decides which apply
    linears = [(spec.layers_of(lin), [_weight_bytes(lin, sc)] * lin.count
                + [lin.out_features * b] * (lin.count if lin.bias else 0)) for lin in spec.block_linears]
    per_layer = [(ad.layers or L, [(t.numel * adapter_elem_bytes,) for t in ad.tensors(sc.lora_rank, L)
                                   for _ in range(ad.per_layer)]) for ad in adapters if ad.per_layer]
    norms = [spec.block_norm_params * b] if spec.block_norm_params else []
    changes = {layers for layers, _ in linears}  # the layers where the block's set of linears changes
    units: list[tuple[int, ...]] = []
    block: tuple[int, ...] | None = None
    for layer in range(L):
        for layers, ad_units in per_layer:
            if layer < layers:
                units.extend(ad_units)
        if block is None or layer in changes:
            block = tuple([n for layers, sizes in linears if layer < layers for n in sizes] + norms)
        units.append(block)
    units += [(t.numel * adapter_elem_bytes,) for ad in adapters if not ad.per_layer
              for t in ad.tensors(sc.lora_rank, L)]  # adapters on lm_head / embed_tokens
    root = (spec.embedding_params * b, spec.final_norm_params * b, spec.lm_head_params * b)
    units.append(tuple(n for n in root if n))
    return tuple(units)


@lru_cache(maxsize=1024)
def replay_wrap(units: tuple[tuple[int, ...], ...], group: int, elem: int,
                gathered: tuple[int, ...] = (), shards_to_host: bool = False,
                sync_bucket: int = 0, release: bool = False) -> tuple[int, int]:
    """(allocated, reserved) after building ``units`` as FSDP1 does on rank 0 of ``group`` ranks
    (``elem``: bytes per flat-parameter element), then all-gathering ``gathered`` (bytes, held at once)
    on the unshard stream. ``shards_to_host``: ``CPUOffload(offload_params=True)`` moves each shard to the
    CPU once built (_init_utils.py ``_init_param_handle_from_params``: ``handle.flat_param_to(cpu_device)``)
    and each all-gather first copies its shard in (module docstring, 3). ``sync_bucket``: the broadcast
    bucket limit of ``sync_module_states`` (0: no broadcast). ``release``: ``torch.cuda.empty_cache()`` between
    the wrap and the all-gathers (``fsdp1_empty_cache_after_wrap``)."""
    a, _ = wrapped(units, group, elem, gathered, shards_to_host, sync_bucket, release)
    return a.stats.allocated, a.stats.reserved


@lru_cache(maxsize=64)
def wrapped(units: tuple[tuple[int, ...], ...], group: int, elem: int, gathered: tuple[int, ...] = (),
            shards_to_host: bool = False, sync_bucket: int = 0, release: bool = False):
    """(the allocator as :func:`build_wrap` leaves it, never changed: callers replay on its ``clone()``; (allocated,
    reserved) after the wrap and its ``release``, before the all-gathers). The units are built once per model and
    sharding (:func:`_units_built`, the longest part: tens of thousands of units for a MoE's per-expert adapters) and
    each release and set of all-gathers replayed on a copy, which holds every block a later request can take
    (``CachingAllocatorModel.clone``): the same state and statistics as building it all again."""
    a = _units_built(units, group, elem, shards_to_host, sync_bucket).clone()
    if release:
        a.empty_cache()
    before = (a.stats.allocated, a.stats.reserved)
    _gather(a, gathered, group, elem, shards_to_host)
    return a, before


@lru_cache(maxsize=16)
def _units_built(units: tuple[tuple[int, ...], ...], group: int, elem: int, shards_to_host: bool, sync_bucket: int):
    """The allocator after :func:`build_wrap`'s units alone (never changed: :func:`wrapped` copies it)."""
    from vramfit.sim.cuda_allocator import CachingAllocatorModel  # light: no torch

    a = CachingAllocatorModel()
    _build_units(a, units, group, elem, shards_to_host, sync_bucket)
    return a


def build_wrap(a, units: tuple[tuple[int, ...], ...], group: int, elem: int, gathered: tuple[int, ...],
               shards_to_host: bool, sync_bucket: int, release: bool = False) -> None:
    """Replay :func:`replay_wrap`'s wrap and all-gathers on allocator ``a`` (the step may follow on it)."""
    _build_units(a, units, group, elem, shards_to_host, sync_bucket)
    if release:
        a.empty_cache()
    _gather(a, gathered, group, elem, shards_to_host)


def _build_units(a, units: tuple[tuple[int, ...], ...], group: int, elem: int, shards_to_host: bool,
                 sync_bucket: int) -> None:
    """:func:`build_wrap`'s units: each moved, broadcast, flattened and sharded in turn."""
    for tensors in units:
        originals = [a.malloc(n) for n in tensors]
        _broadcast(a, sync_buckets(tensors, sync_bucket) if sync_bucket else [])
        total = sum(tensors)
        flat = a.malloc(total)
        if group > 1:  # NO_SHARD (any strategy at world size 1) keeps the flat parameter (estimate/no_shard.py)
            kept = a.malloc(elem * -(-(total // elem) // group))  # this rank's shard
            a.free(flat)
        else:
            kept = flat
        if shards_to_host:
            a.free(kept)
        for block in originals:
            a.free(block)


def _gather(a, gathered: tuple[int, ...], group: int, elem: int, shards_to_host: bool) -> None:
    """:func:`build_wrap`'s all-gathers on the unshard stream (each offloaded shard first copied in)."""
    for n in gathered:
        copy = a.malloc(elem * -(-(n // elem) // group), PRE_UNSHARD_STREAM) if shards_to_host else None
        a.malloc(n, UNSHARD_STREAM)
        a.free(copy)


def _broadcast(a, buckets: list[int]) -> None:
    """Replay ``broadcast_coalesced``: each bucket's flat tensor lives until the bucket two later starts."""
    live: list = []
    for n in buckets:
        if len(live) >= SYNC_IN_FLIGHT:
            a.free(live.pop(0))
        live.append(a.malloc(n))
    for block in live:
        a.free(block)


def gathered_units(spec, sc, units: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    """The unsharded flat parameters held on the unshard stream at once: the root unit's and
    ``FSDP_INFLIGHT_ALLGATHERS`` of the largest block unit's (rate limiter, torch v2.13.0 _limiter_utils.py)."""
    largest = max((sum(u) for u in units[:-1]), default=0)
    return (sum(units[-1]),) + (largest,) * FSDP_INFLIGHT_ALLGATHERS.value


# the parallelisms whose sharded gradients live on a side stream (mechanism 1: FSDP1 FULL_SHARD /
# SHARD_GRAD_OP and FSDP2 reduce-scatter them the same way)
GRADS_ON_SIDE_STREAM = frozenset({Parallelism.FSDP, Parallelism.FSDP_GRAD_OP})


def gradient_pool(r, phases: dict[str, dict[str, int]]) -> int:
    """Bytes of sharded gradients cached on the reduce-scatter stream: the most any phase holds
    (0 unless the parallelism reduce-scatters on a side stream across several GPUs)."""
    from vramfit.estimate.fsdp2 import shards_offloaded

    if r.sc.parallelism not in GRADS_ON_SIDE_STREAM or r.sc.shard_group < 2 or shards_offloaded(r):
        return 0  # offloaded FSDP2 shards go to the host: the stream caches outputs only (estimate/fsdp2.py, 8)
    return max((parts.get("gradients", 0) for parts in phases.values()), default=0)


def fsdp_reserved(r, phases: dict[str, dict[str, int]], allocated: int, reserved: int, required: bool = False) -> int:
    """``reserved`` raised to what FSDP's side-stream pools and host wrap hold (module docstring).

    ``phases``: each phase's allocated components; ``allocated``: the peak phase's total; ``reserved``:
    the single-stream figure. The default stream's high-water is every phase without its sharded
    gradients, plus the single-stream slack (``reserved - allocated``: rounding, cached transients).
    ``required``: the fit verdict's figure, without the wrap's wholly free segments, which the allocator's ``malloc``
    releases and retries before it fails (:func:`wrap_args`): only the free remainders of segments that hold a shard
    stay, so the figure grows with the step instead of trading the residue the step reuses for its own segments.
    """
    from vramfit.estimate.fsdp2 import allgather_pool_idle, reduce_output_pool
    from vramfit.estimate.fsdp2_end import end_of_backward_segments

    # beyond the blocks' segments, all still cached (estimate/fsdp2_end.py); not in the fit figure: those segments hold
    # nothing by then, and where a new one does not fit beside them the allocator's retry releases them first
    # (CUDACachingAllocator.cpp ``release_cached_blocks``), so the end of backward needs its own live bytes (phase
    # backward-end, within the step's high point) in segments of their size
    if not required and (opened := end_of_backward_segments(r)):
        block = sum(phases[StepPhase.BACKWARD_BLOCK].values()) if StepPhase.BACKWARD_BLOCK in phases else allocated
        reserved = max(reserved, block + (reserved - allocated) + opened)
    pool = gradient_pool(r, phases)
    if pool:
        default_peak = max(sum(parts.values()) - parts.get("gradients", 0) for parts in phases.values())
        reserved = max(reserved, default_peak + (reserved - allocated) + pool)
    reserved += allgather_pool_idle(r)  # FSDP2's all-gather copy-in stream (estimate/fsdp2.py, 7)
    reserved += reduce_output_pool(r)  # and its reduce-scatter stream's transient outputs (estimate/fsdp2.py, 8)
    if not required:
        return _with_wrap(r, reserved, pool, False)
    # the retry releases the wrap's free segments only when an allocation fails: a card that holds the step beside the
    # whole residue (the step reusing it) needs no more, so the fit figure is never above that one (fuzzing,
    # 2026-12-05: Llama-3.1-8B full, FSDP on 4 GPUs, 256 tokens: required 194 MiB above the device figure)
    return min(_with_wrap(r, reserved, pool, True), _with_wrap(r, reserved, pool, False))


def _with_wrap(r, reserved: int, pool: int, required: bool) -> int:
    """``reserved`` beside FSDP1's host-wrap residue (``required``: as the out-of-memory retry leaves it)."""
    floor = host_wrap_floor(r, required)
    if not floor:
        return reserved
    # the residue is a floor for a step that fits in it, and stays beside the step's own segments where the
    # step's tensors are too large for its blocks (estimate/wrap_step.py); no replay where even the whole
    # residue beside the step stays under the floor
    if reserved + residue_bound(r, required) <= floor + pool:
        return floor + pool
    return max(reserved + wrap_residue(r, required), floor + pool)


def fsdp_reserved_notes(r, reserved: int) -> list[str]:
    """The assumptions behind the side-stream and host-wrap terms, where they add to ``reserved`` (the
    gradient pool from 1 % of it: a presentation threshold, below it the pool is within the figure's rounding)."""
    phases = {p.phase.value: dict(p.parts) for p in r.phases}
    pool, floor, out = gradient_pool(r, phases), host_wrap_floor(r), []
    if 100 * pool >= reserved > 0:
        out.append(f"Reserved includes {pool / 2**30:,.2f} GiB of sharded gradients cached on FSDP's reduce-scatter "
                   "stream: after zero_grad their blocks serve only later reduce-scatters, not the forward.")
    from vramfit.estimate.fsdp2 import reduce_output_pool
    from vramfit.estimate.fsdp2_end import end_of_backward_segments

    if 100 * (opened := end_of_backward_segments(r)) >= reserved > 0:
        out.append(f"Reserved includes {opened / 2**30:,.2f} GiB of segments the end of backward opens: the input "
                   "embedding's gradient and the last FSDP2 unit's flat reduce-scatter input are larger than any "
                   "block the step freed before them.")
    if 100 * (outputs := reduce_output_pool(r)) >= reserved > 0:
        out.append(f"Reserved includes {outputs / 2**30:,.2f} GiB of FSDP2 reduce-scatter outputs cached on its "
                   "reduce-scatter stream (each dropped once copied to the host or added into the held shard).")
    # the loop's own empty_cache after the wrap (fsdp1_empty_cache_after_wrap) leaves only free remainders
    # of segments that hold a shard, which no empty_cache returns
    release = ("the loop's torch.cuda.empty_cache() after wrapping has returned the segments left wholly free"
               if r.profile.fsdp1_empty_cache_after_wrap else "torch.cuda.empty_cache() after wrapping releases")
    if floor and reserved == floor + pool:
        gathers = ("" if r.sc.parallelism is Parallelism.FSDP_NO_SHARD  # no all-gather (estimate/no_shard.py)
                   else " plus the all-gather segments of its unshard stream")
        out.append(f"Reserved ({reserved / 2**30:,.2f} GiB) is what FSDP1 leaves wrapping a model loaded on the CPU "
                   f"(each unit's moved and flattened parameters stay cached){gathers}; {release}"
                   f"{'' if r.profile.fsdp1_empty_cache_after_wrap else ' the first part'}.")
    elif floor and 100 * (residue := wrap_residue(r)) >= reserved:
        out.append(f"Reserved includes {residue / 2**30:,.2f} GiB that FSDP1 leaves cached wrapping a model loaded on "
                   "the CPU and the step's tensors are too large to reuse (they open segments beside it); "
                   f"worked out for micro-batches of {r.sc.seq_len} tokens (how much of it the step reuses depends on "
                   f"its tensors' sizes, so variable-length batches change it); {release}"
                   f"{'' if r.profile.fsdp1_empty_cache_after_wrap else ' it'}.")
    return out


@lru_cache(maxsize=256)
def _wrap_plan(spec, quantize, method, precision, lora_rank, adapters, adapter_elem: int
               ) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
    """(units, gathered) of :func:`wrap_units` and :func:`gathered_units`: a pure function of the architecture
    and the scenario keys ``wrap_units`` reads, so it is worked out once per combination."""
    sc = _WrapKeys(quantize, method, precision, lora_rank)
    units = wrap_units(spec, sc, adapters, adapter_elem)
    return units, gathered_units(spec, sc, units)


class _WrapKeys(NamedTuple):
    """The scenario keys :func:`wrap_units` and :func:`_weight_bytes` read."""

    quantize: Quantize
    method: Method
    precision: Precision
    lora_rank: int


def wrap_args(r, required: bool = False) -> tuple | None:
    """:func:`replay_wrap`'s arguments for this step, the all-gathered units included (None where the engine
    does not wrap a host-resident model: ``fsdp1_host_wrap`` unset, another parallelism, or one GPU).
    ``required``: the wrap as the out-of-memory retry leaves it, its wholly free segments released (pytorch/pytorch@
    eb42ad6e c10/cuda/CUDACachingAllocator.cpp ``malloc``: ``release_cached_blocks`` and retry), as an
    ``empty_cache`` after the wrap does (``release``)."""
    sc = r.sc
    no_shard = sc.parallelism is Parallelism.FSDP_NO_SHARD  # a group of one: the flat parameters kept whole
    if not r.profile.fsdp1_host_wrap or not (no_shard or sc.parallelism is Parallelism.FSDP and sc.shard_group > 1):
        return None
    from vramfit.estimate.framework import adapter_bytes

    units, gathered = _wrap_plan(r.spec, sc.quantize, sc.method, sc.precision, sc.lora_rank, r.adapters,
                                 adapter_bytes(r.profile, sc.precision))
    if no_shard:  # no all-gather; the MixedPrecision casts where there are any (estimate/no_shard.py)
        from vramfit.estimate.no_shard import mixed_precision_units

        gathered = mixed_precision_units(units, sc, r.profile)
    bucket = SYNC_BUCKET_BYTES if r.profile.fsdp1_sync_module_states else 0
    group = 1 if no_shard else sc.shard_group
    return (units, group, sc.precision.param_bytes, gathered, sc.offload is Offload.OPTIMIZER_PARAMS, bucket,
            r.profile.fsdp1_empty_cache_after_wrap or required)


def host_wrap_floor(r, required: bool = False) -> int:
    """Reserved bytes left by wrapping a host-resident model with FSDP1 plus its all-gather segments
    (0 where the engine does not: see :func:`wrap_args`)."""
    args = wrap_args(r, required)
    if args is None:
        return 0
    a, (shards, _) = wrapped(*args)  # the shards: allocated before the all-gathers
    reserved = a.stats.reserved
    if required:  # the wrap's own high point still has to fit: each unit's moved originals and flat parameter
        reserved = max(reserved, a.stats.peak_required)
    persistent = r.parts.weights + r.parts.quantized_base + r.parts.adapters
    return reserved + max(0, persistent - shards)


def residue_bound(r, required: bool = False) -> int:
    """The whole wrap residue (reserved less allocated after the wrap and its all-gathers): the most
    :func:`wrap_residue` can be."""
    args = wrap_args(r, required)
    if args is None:
        return 0
    allocated, reserved = replay_wrap(*args)
    return reserved - allocated


def wrap_residue(r, required: bool = False) -> int:
    """Bytes of the wrap residue the step cannot reuse (estimate/wrap_step.py), 0 where nothing is wrapped.
    A step is a pure function of its architecture, scenario, card and profile, so the figure is kept per
    those (an estimate asks twice: for the figure and for its note)."""
    key = (r.spec, r.sc, r.card, r.profile, required)
    found = _RESIDUES.get(key)  # read once: the web server's worker threads share this cache
    if found is None:
        if len(_RESIDUES) >= _RESIDUES_KEPT:
            _RESIDUES.clear()
        found = _RESIDUES[key] = _wrap_residue(r, required)
    return found


_RESIDUES: dict = {}
_RESIDUES_KEPT = 512  # a bound on the cache, not a memory figure


def _wrap_residue(r, required: bool = False) -> int:
    args = wrap_args(r, required)
    if args is None:
        return 0
    from vramfit.estimate.transients import step_transients
    from vramfit.estimate.wrap_step import step_alone, step_program, unreused_residue

    transients = step_transients(r)  # built once for both (a long list where the loss is cut fine)
    program = step_program(r, transients)
    return unreused_residue(*args, program, step_alone(r, program, transients))


__all__ = ["fsdp_reserved", "fsdp_reserved_notes", "gradient_pool", "host_wrap_floor", "replay_wrap", "wrap_units",
           "gathered_units", "sync_buckets", "build_wrap", "residue_bound", "wrap_args", "wrap_residue", "wrapped"]
