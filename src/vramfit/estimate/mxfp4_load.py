"""The load of an MXFP4 checkpoint's expert banks (gpt-oss), de-quantized to bf16 on the GPU.

Training a model whose checkpoint holds MXFP4 experts (``spec.experts_mxfp4``) goes through
``Mxfp4Config(dequantize=True)``: transformers' MXFP4 quantizer is not trainable otherwise
(transformers v4.55.0 quantizers/quantizer_mxfp4.py ``is_trainable``). Each bank is converted by
``convert_moe_packed_tensors`` (transformers v4.55.0 integrations/mxfp4.py l. 84-136, v5.24.0 l. 229-285)
on the GPU the weights load to (v4.55.0 l. 94-96 moves CPU blocks there; v5.24.0 materializes them on the
parameter's device, core_model_loading.py l. 1938-1957), while every bank loaded before it is already there.
Its high point, per byte of ``blocks`` (two 4-bit values):

* the blocks (1 B) and scales (uint8, 1/16 B, and the int32 copy ``scales.to(torch.int32) - 127``, 4/16 B);
* ``out``, the bf16 result (4 B): the same size as the final parameter, which is the
  ``transpose(1, 2).contiguous()`` copy made after the loop, so it is counted as the weight;
* the nibble indices ``(blk & 0x0F).to(...)`` (``profile.mxfp4_index_bytes``, both alive at once where
  ``profile.mxfp4_indices_together``) and ``lut[idx]``, one bf16 value per index (2 B).

Nothing empties the cache when the weights load to the GPU (v4.55.0 l. 329-330 calls
``torch.cuda.empty_cache()`` only for a CPU target), so ``max_memory_reserved`` keeps this high point; it
is the step's peak where the training step needs less (a LoRA run of gpt-oss on one GPU). Modelled where
the whole model loads to each GPU (no FSDP/ZeRO-3 sharding, whose loads go through the host); the largest
bank is taken as the last converted, with every other weight resident (an upper bound: the checkpoint's
tensor order is not modelled).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from vramfit.estimate.phases import Contribution, StepPhase
from vramfit.scenario import Parallelism, Quantize

if TYPE_CHECKING:
    from vramfit.estimate.step import Step

#: parallelisms that load the whole model onto every GPU (DDP and ZeRO-1/2 replicate the weights)
_WHOLE_MODEL_LOADS = (Parallelism.NONE, Parallelism.DDP, Parallelism.ZERO1, Parallelism.ZERO2)
_BF16_BYTES = 2  # Mxfp4Dequantize converts to the parameter's dtype: bf16 (FP4_VALUES lut in that dtype)


def dequantizes_on_gpu(step: Step) -> bool:
    """The load phase happens: MXFP4 experts, a framework that de-quantizes them, the whole model per GPU."""
    sc = step.sc
    return (step.spec.experts_mxfp4 and step.profile.mxfp4_index_bytes > 0 and sc.quantize is Quantize.NONE
            and sc.parallelism in _WHOLE_MODEL_LOADS)


def dequant_transient(step: Step) -> int:
    """Bytes above the converted bank's final bf16 weight at the high point of its conversion (module doc)."""
    banks = [lin for lin in step.spec.block_linears if lin.group == "expert"]
    if not banks:
        return 0
    blocks = max(lin.weight_params for lin in banks) // 2  # two 4-bit values a byte
    indices = step.profile.mxfp4_index_bytes * (2 if step.profile.mxfp4_indices_together else 1)
    scales = blocks // 16 + 4 * (blocks // 16)  # uint8 scale and its int32 copy, one per 16 bytes (32 values)
    return blocks + scales + blocks * (indices + _BF16_BYTES)


def load_phase(step: Step) -> Iterator[Contribution]:
    """The model's weights on the GPU and the conversion's transient, before the first step."""
    if not dequantizes_on_gpu(step):
        return
    yield Contribution("weights", StepPhase.LOAD, step.parts.weights)
    yield Contribution("temporaries", StepPhase.LOAD, dequant_transient(step))
