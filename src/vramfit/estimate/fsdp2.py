"""What FSDP2 (``fully_shard``) does differently from the generic FSDP model, for the profiles that run it
(``FrameworkProfile.fsdp2``: torchtune, torchtitan; hf with ``fsdp_version: 2``, its ``fsdp2_variant``).

1. The reduce-scatter input. Each unit's post-backward copies the whole gradients of its parameters into one
   flat buffer in the reduce dtype and reduce-scatters it into a 1/N output (FSDP2 as of torch 2.4,
   torch/distributed/_composable/fsdp/_fsdp_collectives.py ``foreach_reduce``): ``reduce_scatter_input =
   torch.empty((reduce_scatter_input_numel,), dtype=reduce_dtype)``, ``foreach_reduce_scatter_copy_in``
   (``torch._chunk_cat(unsharded_grads, ..., out=reduce_scatter_input)``), then ``unsharded_grads.clear()``;
   ``reduce_scatter_input_numel`` sums the gradients padded on dim 0 to a multiple of the world size
   (``_get_dim0_padded_size``), ``reduce_dtype`` is the MixedPrecisionPolicy's, else the gradient's. From
   torch 2.5 (pytorch/pytorch#129721, "[FSDP2] Ran reduce-scatter copy-in in default stream", merged
   2024-06-28) the input is allocated on the default stream and ``FSDPParamGroup.post_backward`` keeps it
   (``self.comm_ctx.reduce_scatter_state = ReduceScatterState(reduce_scatter_input, ...)``) until the next
   unit's post-backward drops it, "to overlap up to the current reduce-scatter": one block's input is alive
   through the next block's backward, and the end of backward holds a unit's whole gradients beside its
   input. Full fine-tuning only: a LoRA unit's gradients are its adapters', a few MiB. (The default stream
   reuses the freed input, so it adds nothing reserved beyond these moments.)
2. Blocks resharded after forward. ``fully_shard(block, reshard_after_forward=True)`` frees each block's
   unsharded parameters in its post-forward, and the root's post-forward frees the last all-gather result
   (torch 2.4/2.5 _composable/fsdp/_fsdp_state.py ``_post_forward``: ``self._comm_ctx.all_gather_state = None  # free the
   all-gather result``); a block is gathered again only when its pre-backward hook fires, i.e. once the
   gradient of its output exists, after the loss and the output layer's backward (``_register_pre_backward_hook``
   on the block's outputs). So at the logits and the loss only the root unit is gathered (plus the last block
   where the framework keeps it, ``fsdp2_last_block_kept``), and forward's high point is either that moment
   or a block's (two blocks' all-gathers and its de-quantized weight), not both.
3. The gathered root is a buffer of its own. ``foreach_all_gather`` allocates the whole unit's all-gather output
   (``all_gather_output = torch.empty((all_gather_input_numel * world_size,), ...)``) and copies the local
   shard into it; the sharded parameter keeps its own storage, so a gathered unit adds all of its bytes, not
   all but its shard (the simulator's torchtitan trace holds both).
4. accelerate's units (profile ``fsdp2_tail_unit``; accelerate v1.15.0 utils/fsdp_utils.py fsdp2_prepare_model
   l. 857-885). An untied input embedding is a unit of its own, resharded after forward like a block; the final
   norm and lm_head are one unit with ``reshard_after_forward=False``, gathered from the end of forward until
   their post-backward, which runs (and reshards them) before the top block's backward. So the logits and the
   loss see the tail gathered and not the embedding; backward's blocks see neither, bar the embedding the lowest
   block prefetches, and the embedding is the last unit to reduce-scatter (the tail reduce-scatters right after
   the output layer's backward). Tied, the embedding is in the tail unit: the whole root stays gathered.
   The untied tail is the last unit gathered in forward, and its all-gather output outlives the copy-out into
   the unsharded parameters until the root's post-forward (torch v2.13.0 distributed/fsdp/_fully_shard/
   _fsdp_param_group.py l. 417-483 ``wait_for_unshard``/``unshard`` keep ``comm_ctx.all_gather_state`` for
   the next unit's copy-out; _fsdp_state.py l. 324-342 ``_post_forward`` of the root frees it); transformers
   computes the loss inside the model's forward when labels are given, so the forward's logits and loss see
   the tail gathered twice.
5. The root's pre-backward prefetch. FSDP2 registers a unit's pre-backward hook on its forward outputs and, in it,
   prefetches the unit that ran forward before it (torch v2.13.0 _fsdp_state.py l. 381 ``_pre_backward`` ->
   _fsdp_param_group.py l. 795 ``_backward_prefetch``). Where the loss is computed inside the model's forward (profile
   ``loss_in_model_forward``) and the root unit holds the output layer (no tail unit), that hook fires on the loss's
   gradient: the last block is all-gathered while the loss's backward runs.
6. Gradient accumulation keeps shards. Every micro-batch's post-backward reduce-scatters and adds the result into
   the sharded gradient (torch v2.13.0 distributed/fsdp/_fully_shard/_fsdp_collectives.py l. 710-749
   ``foreach_reduce``: ``to_accumulate_grad = fsdp_param.sharded_param.grad is not None`` ...
   ``sharded_param.grad._local_tensor += new_sharded_grad``); nothing skips it: ``FSDPModule`` has no
   ``no_sync`` (only ``set_requires_gradient_sync``, which accelerate@9359a0194 never calls: accelerator.py
   l. 1131 ``context = getattr(model, "no_sync", context)``, the context the HF Trainer enters for every micro-batch
   but the last, transformers v4.55.0 trainer.py l. 2576). So the gradients held between micro-batches are the
   shards, and each backward makes the same whole-unit gradients, reduce-scatter inputs and output-layer gradient
   as a single micro-batch's does, beside them. accelerate >= v1.11.0 (PR #3762) turns the sync off instead
   (``no_sync`` -> ``set_requires_gradient_sync(False)``): the whole gradients are then accumulated unsharded
   until the last micro-batch (profile ``fsdp_unsharded_accum_grads``: accelerate 1.15's FSDP2, not axolotl 0.12's).
7. The all-gather outputs' own pool. ``foreach_all_gather`` allocates each unit's all-gather output on the
   all-gather copy-in stream (torch v2.13.0 _fsdp_collectives.py l. 336-356: ``with
   device_handle.stream(all_gather_copy_in_stream)`` ... ``all_gather_output = all_gather_comm.allocate(...)``),
   whose cached blocks no default-stream tensor can take (estimate/fsdp_reserved.py). In forward a unit's output
   is kept as ``comm_ctx.all_gather_state`` until the next unit's ``wait_for_unshard`` (_fsdp_param_group.py
   l. 429-432, 478-489), which runs after that unit's all-gather was issued: two units' outputs at once, the
   first unit's (the root, or the embedding's) beside the lowest block's. In backward each output is freed at
   its copy-out and one prefetched block's is in flight, which the step's communication buffers count; the
   rest of the stream's segments stay reserved (:func:`allgather_pool_idle`). Under ``CPUOffloadPolicy`` the
   unit's host shards are first copied to the GPU on that stream (``_get_param_all_gather_inputs`` ->
   _fsdp_param.py l. 839-841 ``sharded_local_tensor.to(self.device, non_blocking=True)``) and stay alive until
   the output exists (``del param_all_gather_inputs`` after ``all_gather_copy_in``): taken as one block per unit.
8. The reduce-scatter outputs' own pool. ``foreach_reduce`` allocates each unit's 1/N output on the reduce-scatter
   stream (torch v2.7 ``with device_handle.stream(reduce_scatter_stream): reduce_output =
   reduce_scatter_input.new_empty((reduce_scatter_output_numel,))``; v2.13.0 l. 611-612 the same through
   ``reduce_scatter_comm.allocate``). Kept, it is the sharded gradient (the gradient pool of
   estimate/fsdp_reserved.py). It is dropped, and its block cached on that stream for later reduce-scatters only,
   where the shard goes to the host (``CPUOffloadPolicy``: l. 734-737 "Since the GPU sharded gradient is
   allocated in the RS stream, we can free it here", ``new_sharded_grad.to(torch.device("cpu"), ...)``) and where
   it is added into a held shard (6: l. 749 ``sharded_param.grad._local_tensor += new_sharded_grad``, every
   micro-batch but the first).
   Those transient outputs, one unit at a time in backward order, replayed through the caching allocator, are the
   stream's segments beyond the held shards (:func:`reduce_output_pool`): a block's and, where larger, the last
   unit's. Offloaded, the stream holds no gradient: autograd's whole ones are the default stream's.
9. The end of backward's default-stream segments (embedding gradient, last unit's flat input): estimate/fsdp2_end.py.

Not modelled: where the first step puts the optimizer state. AdamW makes it at the first ``step()`` (torch v2.13.0
optim/adam.py ``_init_group`` l. 160-185, ``torch.zeros_like`` per shard), after forward and backward left their
blocks cached; best fit and splitting (CUDACachingAllocator.cpp ``get_free_block``, ``should_split``) put it in
holes of those segments, and the next backwards open new ones for the tensors that lost their blocks. Steady
reserved less that with the state made before the first forward, per-stream replay over 3 steps
(tests/sim/test_sim_fsdp2_lazy_state.py): +136 MiB (+5 %) on a 4-layer hidden-2048 model; at Llama-3.1-8B's 32
layers +0.4 % (torchtitan, 8 GPUs, 16k tokens), -0.6 % (128 GPUs), -1.6 % and -7.3 % (HF, 8 GPUs, 512 tokens and
4096 x GA 2). The sign depends on the whole block layout at the first step, which this analytic model lacks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vramfit.choices import FSDP_FAMILY
from vramfit.estimate.allocator import round_allocation, transient_reserved
from vramfit.estimate.constants import FSDP_INFLIGHT_ALLGATHERS
from vramfit.scenario import Method, Offload, Parallelism, ShardScope

if TYPE_CHECKING:
    from vramfit.estimate.step import Step


def fsdp2_shards(sc, profile, grad_op: bool = False) -> bool:
    """fully_shard splits units over >1 GPU (fsdp; fsdp-grad-op too with ``grad_op``); a TP/PP rank's own: estimate/ranks.py."""
    kinds = (Parallelism.FSDP, Parallelism.FSDP_GRAD_OP) if grad_op else (Parallelism.FSDP,)
    return profile.fsdp2 and sc.parallelism in kinds and sc.shard_group > 1 and not sc.per_rank_layout


def _runs_fsdp2(step: Step) -> bool:
    return fsdp2_shards(step.sc, step.profile)


def _padded(numel: int, rows: int, world: int) -> int:
    """Elements of a ``rows x (numel / rows)`` gradient padded on dim 0 to a multiple of ``world``."""
    return -(-rows // world) * world * (numel // rows) if rows else numel


def _reduce_bytes(step: Step) -> int:
    return reduce_bytes(step.sc, step.profile)


def reduce_bytes(sc, profile) -> int:
    """Bytes per element of the reduce dtype: fp32 under a MixedPrecisionPolicy(param_dtype=16-bit,
    reduce_dtype=fp32) (torchtitan@9dec370 apply_fsdp), else the gradient's dtype (torchtune runs no policy)."""
    from vramfit.estimate.framework import casts_params

    if casts_params(sc, profile):
        return sc.precision.compute_bytes if profile.fsdp_reduce_in_param_dtype else 4
    return sc.precision.param_bytes


def _applies(step: Step) -> bool:
    """Full fine-tuning under FSDP2 with the step after backward (in-backward steps are not modelled here)."""
    return _runs_fsdp2(step) and step.sc.method is Method.FULL and not step.sc.optimizer_in_backward


def accumulates_shards(sc, profile) -> bool:
    """FSDP2 full fine-tuning over several micro-batches (module docstring, 6): the gradients held between them
    are the shards, and every backward still makes each unit's whole gradients, the output layer's included."""
    return (profile.fsdp2 and sc.parallelism is Parallelism.FSDP and sc.shard_group > 1 and not sc.per_rank_layout
            and sc.method is Method.FULL and not sc.optimizer_in_backward and sc.grad_accum > 1
            and not profile.fsdp_unsharded_accum_grads)


def _block_elements(spec, world: int) -> int:
    """Elements of one block's flat reduce-scatter input (each weight padded on dim 0)."""
    return sum((_padded(lin.in_features * lin.out_features, lin.out_features, world) + (lin.out_features if lin.bias
                else 0)) * lin.count for lin in spec.block_linears) + spec.block_norm_params


def _gather_units(step: Step) -> list[int]:
    """Bytes of each unit's all-gather output in forward order (module docstring, 3, 4, 7)."""
    from vramfit.estimate.core import _layer_param_bytes, _root_gathered_bytes

    spec, sc, prof = step.spec, step.sc, step.profile
    blocks = [_layer_param_bytes(spec, sc, prof)] * spec.num_hidden_layers
    if prof.fsdp_root_gathered and not split_root(step):
        return [_root_gathered_bytes(spec, sc, prof), *blocks]
    root = _root_gathered_bytes(spec, sc, prof)
    whole = spec.embedding_params + spec.lm_head_params + spec.final_norm_params
    tail = root * (spec.lm_head_params + spec.final_norm_params) // whole
    return [root - tail, *blocks, tail]


def allgather_pool_idle(step: Step) -> int:
    """Reserved bytes of FSDP2's all-gather copy-in stream beyond the one prefetched block output the step's
    communication buffers count (module docstring, 7): the stream's segments replayed through the caching
    allocator over forward (each output freed once the next unit's is allocated) and backward (one at a time);
    0 outside FSDP2."""
    if not _runs_fsdp2(step) or not step.spec.num_hidden_layers:
        return 0
    from vramfit.sim.cuda_allocator import CachingAllocatorModel  # light: no torch

    units, a = _gather_units(step), CachingAllocatorModel()
    group, host = step.sc.shard_group, step.sc.offload is Offload.OPTIMIZER_PARAMS

    def gather(n: int):
        inputs = a.malloc(-(-n // group)) if host else None  # the host shards' device copies
        out = a.malloc(n)
        a.free(inputs)
        return out

    held = None
    for n in units:
        block = gather(n)
        a.free(held)
        held = block
    a.free(held)
    # backward: the blocks, top first, and a resharded embedding unit last (the root and the tail stay gathered)
    for n in units[1:1 + step.spec.num_hidden_layers][::-1] + (units[:1] if split_root(step) else []):
        a.free(gather(n))
    return max(0, a.stats.peak_reserved - units[1])


def _reduce_outputs(step: Step) -> list[int]:
    """Bytes of each unit's reduce-scatter output in backward order (module docstring, 1, 4, 8): the output layer's
    own unit first where it has one (accelerate's tail with the final norm, torchtune's output), the blocks, then
    the last unit (:func:`_units`)."""
    spec, world, per = step.spec, step.sc.shard_group, _reduce_bytes(step)
    block, last = _units(step)
    first = 0
    if not (step.profile.fsdp_root_gathered and not split_root(step)):
        first = _padded(spec.lm_head_params, spec.vocab_size, world) + (spec.final_norm_params if split_root(step)
                                                                        else 0)
    return [-(-n // world) * per for n in (first, *[block] * spec.num_hidden_layers, last) if n]


def reduce_output_pool(step: Step) -> int:
    """Reserved bytes of FSDP2's reduce-scatter stream beyond the sharded gradients held there (module docstring,
    8): its transient outputs replayed through the caching allocator, each freed before the next unit's is made;
    0 where every output is kept (one micro-batch, shards on the GPU) or FSDP2 full fine-tuning does not apply."""
    if not _applies(step) or not step.spec.num_hidden_layers:
        return 0
    if step.sc.offload is not Offload.OPTIMIZER_PARAMS and not accumulates_shards(step.sc, step.profile):
        return 0
    events: list[int] = []
    for n in _reduce_outputs(step):
        events += [n, -(len(events) // 2 + 1)]
    return transient_reserved(events)[1]


def shards_offloaded(step: Step) -> bool:
    """FSDP2 under ``CPUOffloadPolicy``: the reduce-scatter stream keeps no sharded gradient (module docstring, 8).
    FSDP1's CPU offload keeps them on the GPU to the end of backward (estimate/state.py ``fsdp1_keeps_grad_shards``)."""
    return _runs_fsdp2(step) and step.sc.offload is Offload.OPTIMIZER_PARAMS


def fsdp2_notes(sc, profile) -> list[str]:
    """The assumption a scenario that picked FSDP2 (``fsdp_version: 2``) gets: whose wrapping, and what is left out;
    and, where the profile's releases differ there, what one rank per shard runs as (``one_shard_note``)."""
    return _one_shard(sc, profile) + _wrapping(sc, profile)


def _one_shard(sc, profile) -> list[str]:
    """``profile.one_shard_note`` where FSDP's shard group is one rank: no FSDP family, or data_parallel_shard_degree
    x context_parallel_degree = 1 (the data-parallel ranks, all replicas under HSDP, and no context parallel)."""
    if not profile.one_shard_note or not sc.precision.mixed:  # the note is about -mixed's cast
        return []
    shards = sc.data_parallel_size * sc.context_parallel
    if sc.shard_scope is ShardScope.NODE:
        shards = max(1, sc.gpus_per_node // sc.model_parallel_size) * sc.context_parallel
    return [profile.one_shard_note] if sc.parallelism not in FSDP_FAMILY or shards == 1 else []


def _wrapping(sc, profile) -> list[str]:
    variant = profile.fsdp2_variant
    if variant is None or not profile.fsdp2 or sc.parallelism not in FSDP_FAMILY or sc.num_gpus == 1:
        return []
    return [f"FSDP2 (fsdp_version 2) as {variant.name} wraps it; the transients of loading and "
            "sharding the model (each full tensor on the GPU before its shard) are not counted in the reserved figure."]


def split_root(step: Step) -> bool:
    """accelerate's untied embedding and tail units instead of one gathered root (module docstring, 4)."""
    return _runs_fsdp2(step) and step.profile.fsdp2_tail_unit and bool(step.spec.lm_head_params)


def root_resharded(step: Step, backward: bool) -> int:
    """Bytes of the gathered root in ``parts.comm_buffers`` that accelerate's split units leave resharded (module
    docstring, 4): the embedding's at the logits and the loss, the tail's (norm and lm_head) in backward's blocks."""
    if not split_root(step):
        return 0
    return _root_part(step, backward)


def _root_part(step: Step, tail: bool) -> int:
    """Bytes of the gathered root's tail unit (norm and lm_head) or, with ``tail`` False, of its embedding unit."""
    from vramfit.estimate.core import _root_gathered_bytes

    spec = step.spec
    root = _root_gathered_bytes(spec, step.sc, step.profile)
    whole = spec.embedding_params + spec.lm_head_params + spec.final_norm_params
    part = spec.lm_head_params + spec.final_norm_params if tail else spec.embedding_params
    return root * part // whole


def prefetched_at_loss_backward(step: Step) -> int:
    """Bytes of the last block's all-gather the root's pre-backward prefetches during the loss's backward (module
    docstring, 5); 0 where the framework keeps that block gathered anyway or the root holds no output layer."""
    from vramfit.estimate.fsdp1_moments import fsdp1_gathered_blocks, loss_backward_prefetch

    if fsdp1_gathered_blocks(step):  # FSDP1's root pre-backward prefetches the top block (estimate/fsdp1_moments.py)
        return loss_backward_prefetch(step)
    prof = step.profile
    # accelerate's tail unit (tied: embedding, norm and lm_head in it) ran forward last, so the root's pre-backward
    # prefetches it, gathered already: no block during the loss's backward (the simulator's accelerate FSDP2 of
    # Llama-3.2-1B, LoRA on 4 GPUs at 1 x 1,024: the loss's backward holds the tail and the loss's tensors alone; the
    # estimate with a block there read +4.2 %)
    one_block = gathered_blocks(step) // FSDP_INFLIGHT_ALLGATHERS.value
    # torchtitan 0.3 (loss outside the model, estimate/titan_loss.py): the loss's lm_head calls are partial forwards
    # of the tail unit that register no pre-backward (torch v2.13.0 _fsdp_param_group.py post_backward l. 592-601),
    # so its one pre-backward fires on the final norm's output, at the norm's backward, and prefetches the top block
    # then (the simulator's 0.3 step at the norm's backward: the top block's all-gather beside the gathered tail)
    if prof.fsdp2_tail_unit and not prof.loss_in_model_forward and split_root(step):
        return one_block
    if (not prof.loss_in_model_forward or prof.fsdp2_last_block_kept or prof.fsdp2_tail_unit
            or not prof.fsdp_root_gathered):
        return 0
    return one_block


def _units(step: Step) -> tuple[int, int]:
    """Elements of (one block's, the last unit's) flat reduce-scatter input. The last unit to reduce-scatter is
    the root (tok_embeddings, final norm, output layer) where those are one unit, else torchtune's
    tok_embeddings unit (custom_sharded_layers; its output unit reduce-scatters first, right after its backward)."""
    spec, world = step.spec, step.sc.shard_group
    embed = _padded(spec.embedding_params, spec.vocab_size, world)
    if step.profile.fsdp_root_gathered and not split_root(step):
        return _block_elements(spec, world), embed + _padded(spec.lm_head_params, spec.vocab_size, world) + \
            spec.final_norm_params
    return _block_elements(spec, world), embed


def reduce_scatter_input(step: Step) -> int:
    """Bytes of the largest unit's flat reduce-scatter input (module docstring, 1); 0 where it does not apply."""
    if not _applies(step):
        return 0
    sizes = (*_units(step), _padded(step.spec.lm_head_params, step.spec.vocab_size, step.sc.shard_group))
    return round_allocation(max(sizes) * _reduce_bytes(step))


def gathered_blocks(step: Step) -> int:
    """Bytes of the block units' all-gathers in ``parts.comm_buffers`` under FSDP2 (0 elsewhere)."""
    if not _runs_fsdp2(step):
        return 0
    from vramfit.estimate.core import _layer_param_bytes

    layer = _layer_param_bytes(step.spec, step.sc, step.profile)
    return min(step.parts.comm_buffers, FSDP_INFLIGHT_ALLGATHERS.value * layer)


def blocks_freed_at_loss(step: Step) -> int:
    """Bytes of the gathered block units in ``parts.comm_buffers`` that are resharded while the logits and the
    loss are alive (module docstring, 2); 0 outside FSDP2."""
    from vramfit.estimate.fsdp1_moments import fsdp1_gathered_blocks

    if fsdp1 := fsdp1_gathered_blocks(step):  # FSDP1 FULL_SHARD reshards every block after its forward too
        return fsdp1
    blocks = gathered_blocks(step)
    if not blocks or not step.profile.fsdp2_last_block_kept:
        return blocks
    from vramfit.estimate.core import _layer_param_bytes

    return max(0, blocks - _layer_param_bytes(step.spec, step.sc, step.profile))


def end_tensors(step: Step) -> tuple[int, int, int]:
    """Rounded bytes of a block's and the last unit's flat reduce-scatter inputs (``foreach_reduce``, torch v2.13.0
    _fsdp_collectives.py l. 597-601) and of the input embedding's gradient, as the end of backward makes them
    (:func:`end_of_backward`; estimate/fsdp2_end.py)."""
    block, last = (round_allocation(n * _reduce_bytes(step)) for n in _units(step))
    return block, last, round_allocation(step.spec.embedding_params * _grad_bytes(step))


def end_of_backward(step: Step) -> tuple[bool, int, int] | None:
    """FSDP2 full fine-tuning, the end of backward (module docstring, 1): (whether its high point is the last
    unit's reduce-scatter rather than the lowest block's, the communication buffers then, the gradients the last
    unit adds then); None elsewhere.

    The lowest block's post-backward reshards it before ``foreach_reduce`` (``FSDPParamGroup.post_backward``:
    ``self.reshard()``, then the reduce) and leaves nothing to prefetch: the root stays gathered beside the
    block's flat input. The last unit (the root, or torchtune's tok_embeddings unit) then reshards too and
    reduce-scatters its gradients, the embedding's among them (made after the lowest block's backward), while
    the block's gradients, recompute and working set are gone."""
    if not _applies(step):
        return None
    block, last, grad = end_tensors(step)
    root = step.parts.comm_buffers - gathered_blocks(step) - root_resharded(step, backward=True)
    at_block = step.block_grads + step.acts.recompute + step.block_transient + root + block
    return grad + last > at_block, (last if grad + last > at_block else root + block), grad


def tied_end(step: Step, out_of_place: bool) -> tuple[int, int, int] | None:
    """FSDP2 full fine-tuning of a model with tied embeddings, the embedding's backward in the unit that holds the
    shared weight (module docstring, 4: the whole root): (the reduced gradient shards, the shared weight's whole
    gradients, communication buffers) then; None elsewhere. The whole gradients are the default stream's, apart
    from the shards that the reduce-scatter stream holds (estimate/fsdp_reserved.py ``gradient_pool``), as the
    simulator classes them (temporaries).

    The shared weight is gathered whole; its output-layer gradient has waited in autograd's input buffer since the
    top of backward, and the embedding's own (``embedding_dense_backward``) meets it there, added out of place where
    the first is a view (``out_of_place``, estimate/loss.py ``head_grad_is_view``): three weight-sized tensors. Every
    other unit holds its reduced shard, and the lowest block's flat reduce-scatter input is still kept (module
    docstring, 1) until this unit's post-backward, which comes after the sum. The simulator's accelerate FSDP2 of
    Llama-3.2-1B (full, bf16, 2 GPUs, 1 x 512) peaks there: 6,926,992,384 B allocated, the shards 0.906 GiB, the
    gathered weight, the three gradients and the block's input 0.113 GiB; the estimate had the weight's shard in
    place of two of the three (-5.6 %)."""
    sc = step.sc
    if not (_applies(step) and step.spec.tie_word_embeddings and sc.shard_group > 1):
        return None
    block, _, _ = end_tensors(step)
    shards, whole = tied_gradients(step, out_of_place)
    root = step.parts.comm_buffers - gathered_blocks(step) - root_resharded(step, backward=True)
    return shards, whole, root + block


def tied_gradients(step: Step, out_of_place: bool) -> tuple[int, int]:
    """The gradients at a tied model's end of backward under FSDP1 or FSDP2 (:func:`tied_end`,
    estimate/fsdp1_moments.py ``fsdp1_tied_end``): (every unit's reduced shard but the shared weight's, the shared
    weight's whole gradients: the output layer's, the embedding's, and their out-of-place sum where the first is a
    view). The two differ only in the communication buffers beside them."""
    parts = step.parts
    tied_shard = parts.gradients * step.spec.embedding_params // max(1, parts.num_trainable)
    embedding = round_allocation(step.spec.embedding_params * _grad_bytes(step))
    return parts.gradients - tied_shard, step.head_grad + embedding + (step.head_grad if out_of_place else 0)


def _grad_bytes(step: Step) -> int:
    from vramfit.estimate.step_grads import _grad_dtype_bytes

    return _grad_dtype_bytes(step.sc, step.profile)


def forward_at_logits(step: Step) -> bool | None:
    """FSDP2 and FSDP1 FULL_SHARD: whether forward's high point is the logits moment (True) or a block's (False);
    None elsewhere, where forward adds both (the generic model). FSDP1's block moment holds one block unit
    (estimate/fsdp1_moments.py)."""
    from vramfit.estimate import fsdp2_forward as fwd
    from vramfit.estimate.fsdp1_moments import forward_unprefetched

    if not (freed := blocks_freed_at_loss(step)) and not fwd.grad_op_fsdp2(step):
        return None
    block_moment = freed - forward_unprefetched(step) + fwd.block_working(step) + fwd.previous_gather_at_copy_out(step)
    return step.loss.forward_peak + fwd.tail_gather_output(step) >= block_moment


def held_reduce_scatter_input(step: Step, top: bool = False) -> int:
    """Bytes a block's backward holds beyond ``parts.comm_buffers`` (module docstring, 1), at the lowest block
    unless ``top``. The lowest block holds the input of the block above it, and has no block below to prefetch
    (its pre-backward would prefetch the unit that ran forward before it: the root, gathered already), so one
    block's all-gather less. The top block holds the output layer's input where that is a unit of its own
    (torchtune's custom_sharded_layers, ``fsdp_root_gathered`` unset), which replaces the layer's whole
    gradient (counted as ``step.head_grad``): only a wider reduce dtype adds; a root unit reduce-scatters last.
    May be negative (a bf16 input smaller than the block's all-gather it stands beside)."""
    if not _applies(step):
        return 0
    world, spec = step.sc.shard_group, step.spec
    if top:
        if not spec.lm_head_params or step.profile.fsdp_root_gathered:
            return 0
        head = round_allocation(_padded(spec.lm_head_params, spec.vocab_size, world) * _reduce_bytes(step))
        return max(0, head - step.head_grad)
    held = round_allocation(_block_elements(spec, world) * _reduce_bytes(step))
    return held - gathered_blocks(step) // FSDP_INFLIGHT_ALLGATHERS.value


def second_lowest_block(step: Step) -> tuple[int, int, int, int] | None:
    """FSDP2 full fine-tuning: (gradients, activations, autocast copies, communication bytes beyond
    ``parts.comm_buffers``) at the end of the second-lowest block's backward, before its post-backward; None
    elsewhere. The high point of the blocks between the top and the lowest (module docstring, 1): the block and
    the one below it, prefetched, gathered; the input of the block above held; the block's whole gradients
    made; every block above reduced to its shard (the output layer whole while the root waits, counted in
    ``step.head_grad``); two blocks' kept tensors."""
    L = step.spec.num_hidden_layers
    if not _applies(step) or L < 3 or not step.parts.num_trainable:
        return None
    a, p = step.acts, step.parts
    block_params = _block_elements(step.spec, 1)
    head = 0 if split_root(step) else step.head_grad  # accelerate's tail reduce-scatters first (docstring, 4)
    unreduced = 2 * block_params + step.spec.embedding_params + (step.spec.lm_head_params if head else 0)
    # held between micro-batches, every shard exists already (module docstring, 6)
    shards = 0 if step.held_grads else p.gradients - p.gradients * min(p.num_trainable, unreduced) // p.num_trainable
    # accelerate's split units: the lowest block, not this one, prefetches the embedding unit (docstring, 4)
    held = round_allocation(_block_elements(step.spec, step.sc.shard_group) * _reduce_bytes(step)) - root_resharded(step, False)
    grads = step.held_grads + shards + head + step.block_grads
    return grads, a.lowest + a.blocks // L + a.masks + a.recompute, step.lowest_autocast, held


__all__ = ["accumulates_shards", "allgather_pool_idle", "reduce_output_pool", "shards_offloaded", "fsdp2_notes",
           "fsdp2_shards", "prefetched_at_loss_backward", "split_root", "root_resharded",
           "second_lowest_block", "reduce_scatter_input", "held_reduce_scatter_input", "gathered_blocks",
           "blocks_freed_at_loss", "end_of_backward", "forward_at_logits"]
