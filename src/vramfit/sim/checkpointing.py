"""The two checkpointing modes the model API lacks or that fake tensors cannot run as is.

``selective``: recompute only the core attention (scores, softmax, dropout, attention over V), as in
Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", sec. 5, and
Megatron-LM's ``checkpoint_core_attention``: the model's own attention function (SDPA or its eager
function) runs under ``torch.utils.checkpoint`` (``use_reentrant=False``); everything else in the
layer keeps its saved activations. Registered as a transformers attention implementation.

``offload``: transformers' ``activation_checkpointing_enable(offload=True)`` wraps every checkpointed
layer in ``torch.autograd.graph.save_on_cpu(pin_memory=True)``, so the tensors the checkpoint saves
(the layer inputs) live in pinned host memory and come back to the GPU during the recompute. On fake
CPU tensors ``save_on_cpu`` would be a no-op copy, so :class:`OffloadHooks` does the same with the
tracker told which copies are host memory; on CUDA it behaves as ``save_on_cpu``.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import torch


def _core_attention(kind: str) -> Any:
    from torch.utils.checkpoint import checkpoint

    def attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  attention_mask: torch.Tensor | None, **kwargs: Any) -> Any:
        if kind == "sdpa":
            from transformers.integrations.sdpa_attention import sdpa_attention_forward as fn
        else:
            fn = sys.modules[type(module).__module__].eager_attention_forward
        return checkpoint(fn, module, query, key, value, attention_mask, use_reentrant=False, **kwargs)

    return attention


def selective_attention_implementation(kind: str) -> str:
    """Register (once) and return the name of the core-attention-checkpointing implementation."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    name = f"vramfit_selective_{kind}"
    if name not in AttentionInterface._global_mapping:
        AttentionInterface.register(name, _core_attention(kind))
        AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS[kind])
    return name


SELECTIVE_ASSUMPTION = (
    "Selective checkpointing: only the core attention (scores, softmax, attention over V) is recomputed "
    "(Korthikanti et al. 2022; Megatron checkpoint_core_attention), via torch.utils.checkpoint around the "
    "model's attention function."
)


class OffloadHooks:
    """``save_on_cpu`` for the checkpoint's saved inputs, with host copies reported to the tracker."""

    def __init__(self) -> None:
        self.tracker: Any = None  # the LiveTracker, set by the simulator

    def pack(self, t: torch.Tensor) -> tuple[torch.device, torch.Tensor]:
        if t.device.type == "cuda":
            packed = torch.empty(t.size(), dtype=t.dtype, layout=t.layout, pin_memory=True)
            packed.copy_(t)
            return t.device, packed
        tracker = self.tracker
        if tracker is not None:
            tracker.host_mode = True
        try:
            packed = torch.empty_like(t)
            packed.copy_(t)
        finally:
            if tracker is not None:
                tracker.host_mode = False
        return t.device, packed

    def unpack(self, packed: tuple[torch.device, torch.Tensor]) -> torch.Tensor:
        device, t = packed
        if device.type == "cuda":
            return t.to(device, non_blocking=True)
        return t.clone()  # the host-to-device copy, a new device tensor

    def checkpoint(self, function: Any, *args: Any, **kwargs: Any) -> Any:
        from torch.utils.checkpoint import checkpoint

        with torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack):
            return checkpoint(function, *args, **kwargs)


def install_offload(model: Any, assumptions: list[str]) -> OffloadHooks:
    """Route the model's checkpointed layers through :class:`OffloadHooks` (already checkpoint-enabled)."""
    hooks = OffloadHooks()
    func = functools.partial(hooks.checkpoint, use_reentrant=False)
    model._set_gradient_checkpointing(enable=True, gradient_checkpointing_func=func)
    assumptions.append(
        "Offloaded checkpointing: as transformers' activation_checkpointing_enable(offload=True), the inputs "
        "each checkpointed layer saves are kept in pinned host memory (save_on_cpu) and copied back for the "
        "recompute; host copies are not in the GPU figures."
    )
    return hooks


def _op_sac_context() -> Any:
    """torchtitan@9dec370 parallelisms/parallelize_llama.py _apply_ac_to_transformer_block, ac_mode="selective",
    selective_ac_option="op": a fresh per-block counter; save the output of every op in ``_save_list`` (mm, SDPA
    flash/efficient, reduce_scatter, max) except every second mm, recompute everything else."""
    from collections import defaultdict

    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    aten = torch.ops.aten
    save = {aten.mm.default, aten._scaled_dot_product_efficient_attention.default,
            aten._scaled_dot_product_flash_attention.default, aten.max.default}
    meta: dict[str, int] = defaultdict(int)

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
        key = f"{'recompute' if ctx.is_recompute else 'forward'}_mm_count"
        if func == aten.mm.default:
            meta[key] += 1
        keep = func in save and not (func == aten.mm.default and meta[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def install_op_sac(model: Any, assumptions: list[str]) -> None:
    """torchtitan's op-level selective activation checkpointing around every decoder layer
    (``checkpoint_wrapper(..., context_fn=selective_checkpointing_context_fn, preserve_rng_state=False)``)."""
    from torch.utils.checkpoint import checkpoint

    func = functools.partial(checkpoint, use_reentrant=False, context_fn=_op_sac_context, preserve_rng_state=False)
    model._set_gradient_checkpointing(enable=True, gradient_checkpointing_func=func)
    assumptions.append(
        "Op-level selective checkpointing as torchtitan's policy: each decoder layer under torch.utils.checkpoint "
        "with a selective context that saves every mm output but every second one and the SDPA outputs."
    )
