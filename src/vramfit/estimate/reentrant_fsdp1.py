"""FSDP1 under reentrant checkpointing: every block's input and its gradient live until the end of backward.

The mechanism, in the code that runs:

1. FSDP1's pre-forward registers, for a unit whose FlatParameter does not require grad (a LoRA/QLoRA block's frozen
   weights, the adapters wrapped as units of their own), a multi-grad hook on the unit's forward inputs that require
   grad, to reshard it once their gradients exist (torch v2.5.1 and v2.13.0 distributed/fsdp/_runtime_utils.py
   ``_register_post_backward_reshard_only_hook``: ``register_multi_grad_hook(inp_tensors, ...)``, its handle kept as
   ``flat_param._post_backward_hook_state`` and removed only by ``_post_backward_final_callback`` at the end of the
   whole backward).
2. ``register_multi_grad_hook`` keeps each input's grad_fn or gradient accumulator in the hook's closure
   (torch v2.5.1 / v2.13.0 autograd/graph.py: ``grad_fns = list(map(_get_grad_fn_or_grad_acc, tensors))``), and the
   closure sits in the input tensor's own hook dict.
3. Reentrant checkpointing re-runs a block in its backward on detached leaf copies of its inputs and returns their
   ``.grad`` (torch v2.5.1 utils/checkpoint.py CheckpointFunction.backward l. 298-321: ``detach_variable``,
   ``torch.autograd.backward(outputs_with_grad, args_with_grad)``, ``inp.grad``). Where the checkpoint wraps the FSDP
   unit (transformers <= v4.51's layer loop, ``profile.ckpt_around_fsdp_units``), FSDP's pre-forward runs in that
   re-run and registers the hook on the detached leaf. The leaf's AccumulateGrad node owns the leaf (the block's saved
   input) and its ``.grad`` (the gradient the block passes down); with the hook closure in the leaf's hook dict, that
   cycle runs through C++ and is not collected until the final callback removes the hook.

So each block's saved input stays allocated through the rest of backward, and so does the gradient of its input.
Under non-reentrant checkpointing, or with the checkpoint inside the unit (transformers >= v4.52
GradientCheckpointingLayer), the hook is registered in forward on the previous block's output, a non-leaf whose
grad_fn holds no activation: nothing is kept. With full fine-tuning the FlatParameter requires grad and no such hook
exists. FSDP2 registers no multi-grad hook.

At the lowest block's backward, against the top block's position, the L - 2 gradients of the block inputs above it
are still allocated, in the residual stream's dtype (:func:`retained_input_grads`). The saved inputs are all still
allocated too, as at the top block. One gathered block unit fewer is in flight there: nothing below it to prefetch
(:func:`lowest_block_gathers`).

Measured, CPU/gloo, 2 ranks (torch 2.13.0, transformers 4.45.2, peft 0.13.2): a bf16 16-layer Mistral (hidden 1,024),
LoRA r16 on q/k/v/o, peft's fsdp_auto_wrap_policy, FULL_SHARD, BACKWARD_PRE. Process memory rose by 2.0-2.4 MiB with
each block backward (one 1,024 x 1,024 bf16 block input is 2 MiB). The peak over the step grew 152 MiB per 1,024
tokens with reentrant checkpointing, against 126 MiB without it and 129 MiB on one process without FSDP.
tests/test_reentrant_fsdp1_torch.py traces the same with vramfit's live-storage tracker on a torch-only model of
five frozen blocks with adapter units: at the lowest block's re-run 9 block-input-shaped tensors are alive under FSDP1
(5 inputs, 4 gradients), 2 without FSDP, 1 with non-reentrant checkpointing. Under transformers 5.24's
GradientCheckpointingLayer (checkpoint inside the unit) the same trace keeps 2.

Published: fms-acceleration's A100 benchmarks (transformers 4.43-4.48, torch 2.4, the Trainer's default checkpointing)
read 1.2-2.6 GiB above the estimate on two GPUs with Mistral-7B LoRA/QLoRA and 9.9 GiB with Llama-2-70B QLoRA before
this term (benchmarks/data/measured/README.md); with it, -4.5 to +5.5 %. Their one-GPU runs, which have no FSDP, agree
either way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vramfit.choices import FSDP_FAMILY
from vramfit.estimate.allocator import round_allocation
from vramfit.estimate.constants import FSDP_INFLIGHT_ALLGATHERS
from vramfit.estimate.core import _layer_param_bytes
from vramfit.estimate.fsdp1_units import mixed_block_units
from vramfit.estimate.saved import dtypes_for
from vramfit.scenario import Checkpointing, Method, Parallelism

if TYPE_CHECKING:
    from vramfit.estimate.framework import FrameworkProfile
    from vramfit.models.spec import ModelSpec
    from vramfit.scenario import Scenario


def keeps_block_inputs(sc: Scenario, profile: FrameworkProfile) -> bool:
    """Reentrant whole-block checkpointing around FSDP1 block units whose FlatParameter is frozen (LoRA/QLoRA with the
    adapters outside it)."""
    return (profile.ckpt_reentrant and profile.ckpt_around_fsdp_units and sc.gradient_checkpointing is Checkpointing.FULL
            and sc.parallelism in FSDP_FAMILY and not profile.fsdp2 and sc.method is not Method.FULL
            and not mixed_block_units(sc, profile))


def retained_input_grads(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """Bytes of the block-input gradients still allocated in the lowest block's backward beyond the top block's
    position (module docstring): those of the L - 2 blocks between, each micro-batch tokens x hidden in the residual
    stream's dtype. 0 where the mechanism does not run."""
    if not keeps_block_inputs(sc, profile) or spec.num_hidden_layers < 3:
        return 0
    from vramfit.estimate.stages import policy_scenario
    from vramfit.estimate.vision import lm_scenario

    lm = lm_scenario(spec, policy_scenario(sc))  # the sequences the blocks run: paired stages, a VLM's image tokens
    per = round_allocation(dtypes_for(sc, profile, spec).residual * lm.micro_batch_size * lm.seq_len * spec.hidden_size)
    return (spec.num_hidden_layers - 2) * per


def lowest_block_gathers(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> int:
    """Gathered bytes the lowest block's backward holds fewer than ``parts.comm_buffers`` counts: under FULL_SHARD the
    backward prefetch (BACKWARD_PRE) gathers the unit that ran before the current one in forward (torch v2.13.0
    distributed/fsdp/_runtime_utils.py ``_prefetch_handle`` / ``_get_handle_to_prefetch``); below the lowest block that
    is the root, gathered already (``_post_forward_reshard`` keeps the root's parameters after forward), so one block
    unit is in flight instead of ``FSDP_INFLIGHT_ALLGATHERS``."""
    if sc.parallelism is not Parallelism.FSDP or profile.fsdp2:
        return 0
    return (FSDP_INFLIGHT_ALLGATHERS.value - 1) * _layer_param_bytes(spec, sc, profile)


def reentrant_notes(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> list[str]:
    """The assumption line where the mechanism runs (module docstring)."""
    retained = retained_input_grads(spec, sc, profile)
    if not retained:
        return []
    return [f"Reentrant gradient checkpointing under FSDP1 (use_reentrant: {sc.use_reentrant.value}): "
            "torch's reshard-only hook on each frozen block unit keeps every block's input and its gradient to the end "
            f"of backward, {retained / 2**30:,.2f} GiB more in the lowest block's backward; use_reentrant=False "
            "(gradient_checkpointing_kwargs) avoids it."]
