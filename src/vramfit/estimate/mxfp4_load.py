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
  ``profile.mxfp4_indices_together``) and ``lut[idx]``, one bf16 value per index (2 B), for one chunk of
  ``rows_per_chunk`` rows at a time (512 MiB of blocks: gpt-oss-120b's banks take two, gpt-oss-20b's one).

Nothing empties the cache when the weights load to the GPU (v4.55.0 l. 329-330 calls
``torch.cuda.empty_cache()`` only for a CPU target), so ``max_memory_reserved`` keeps this high point; it
is the step's peak where the training step needs less (a LoRA run of gpt-oss on one GPU). The largest bank
is taken as the last converted, with every other weight resident (an upper bound: the checkpoint's tensor
order is not modelled).

Where the framework loads the weights into host memory (profile ``weights_load_host``: FSDP and ZeRO-3, and
Axolotl's one GPU under ``accelerate launch``), no weight is on the GPU at load. transformers v4.55.0 still
converts each bank there (profile ``mxfp4_host_dequant_on_gpu``: l. 93-96 ``blocks.cuda()``), then moves the
result back (l. 327 ``.to(target_device)``, ``"cpu"``: modeling_utils.py l. 848-849) and empties the cache
(l. 329-330): the GPU sees one bank's conversion alone, its bf16 ``out`` included and the uint8 scales' GPU
copy already dropped by ``scales = scales.to(torch.int32) - 127`` (l. 98). v5.24.0 converts on the host.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from vramfit.estimate.phases import Contribution, StepPhase
from vramfit.scenario import Quantize

if TYPE_CHECKING:
    from vramfit.estimate.step import Step

_BF16_BYTES = 2  # Mxfp4Dequantize converts to the parameter's dtype: bf16 (FP4_VALUES lut in that dtype)
# the loop converts `rows_per_chunk: int = 32768 * 1024` rows of blocks at a time (transformers v4.55.0
# integrations/mxfp4.py l. 89, 112-127; v5.24.0 l. 234, 256-281), a row being one scale's 32 values in 16 bytes
_CHUNK_BYTES = 32768 * 1024 * 16


def loads_on_host(step: Step) -> bool:
    """The framework's from_pretrained gets no device_map under this parallelism: the weights load to the host."""
    return step.sc.parallelism in step.profile.weights_load_host


def dequantizes_on_gpu(step: Step) -> bool:
    """The load phase happens: MXFP4 experts, a framework that de-quantizes them, and a GPU that converts them
    (the weights' own, or the host-loaded banks' where the release converts on CUDA anyway)."""
    sc, profile = step.sc, step.profile
    return (step.spec.experts_mxfp4 and profile.mxfp4_index_bytes > 0 and sc.quantize is Quantize.NONE
            and (not loads_on_host(step) or profile.mxfp4_host_dequant_on_gpu))


def _largest_bank_blocks(step: Step) -> int:
    """Bytes of MXFP4 blocks of the largest expert bank (two 4-bit values a byte); 0 without expert banks."""
    return max((lin.weight_params for lin in step.spec.block_linears if lin.group == "expert"), default=0) // 2


def dequant_transient(step: Step) -> int:
    """Bytes above the converted bank's final bf16 weight at the high point of its conversion (module doc)."""
    blocks = _largest_bank_blocks(step)
    indices = step.profile.mxfp4_index_bytes * (2 if step.profile.mxfp4_indices_together else 1)
    scales = blocks // 16 + 4 * (blocks // 16)  # uint8 scale and its int32 copy, one per 16 bytes (32 values)
    return blocks + scales + min(blocks, _CHUNK_BYTES) * (indices + _BF16_BYTES)  # indices and lut[idx]: one chunk


def host_load_transient(step: Step) -> int:
    """The GPU's high point converting a host-loaded bank: the transient without the uint8 scales (their GPU copy
    is dropped at the int32 cast) plus the bank's bf16 ``out`` (module doc)."""
    blocks = _largest_bank_blocks(step)
    return dequant_transient(step) - blocks // 16 + blocks * 2 * _BF16_BYTES


def load_phase(step: Step) -> Iterator[Contribution]:
    """The model's weights on the GPU and the conversion's transient, before the first step; for host-loaded
    weights, the one bank's conversion alone."""
    if not dequantizes_on_gpu(step):
        return
    if loads_on_host(step):
        yield Contribution("temporaries", StepPhase.LOAD, host_load_transient(step))
        return
    yield Contribution("weights", StepPhase.LOAD, step.parts.weights)
    yield Contribution("temporaries", StepPhase.LOAD, dequant_transient(step))
