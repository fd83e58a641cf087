"""Parameter counts of a built torch model, shared by the simulator and the measure harness.

One rule for both: a tensor shared by several modules (tied embeddings and ``lm_head``) counts once,
and a packed 4-bit weight (``uint8`` storage or the layer's ``quant_storage``: bitsandbytes ``Params4bit``, or the
simulator's own packing) counts as the ``in_features x out_features`` it stands for.
"""

from __future__ import annotations

from typing import Any


def count_parameters(model: Any) -> tuple[int, int]:
    """(all, trainable) parameters of ``model``, tied tensors once, packed 4-bit weights unpacked."""
    import torch

    total = trainable = 0
    seen: set[int] = set()
    for mod in model.modules():
        for name, p in mod.named_parameters(recurse=False):
            if id(p) in seen:  # tied weights count once
                continue
            seen.add(id(p))
            # ZeRO-3 empties a partitioned parameter between uses (numel 0); DeepSpeed keeps its full size in ds_numel
            # (deepspeed/runtime/zero/partition_parameters.py _convert_to_deepspeed_param)
            n = getattr(p, "ds_numel", None) or p.numel()
            # the codes may be stored in another dtype (bnb_4bit_quant_storage, as FSDP QLoRA recipes set it)
            packed = p.dtype == torch.uint8 or getattr(mod, "quant_storage", None) == p.dtype
            if name == "weight" and packed and hasattr(mod, "in_features") and n < mod.in_features * mod.out_features:
                n = mod.in_features * mod.out_features
            total += n
            if p.requires_grad:
                trainable += n
    return total, trainable
