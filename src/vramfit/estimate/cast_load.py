"""The load of a model that a framework runs in its forced-float32 mode: loaded in bfloat16, then cast to float16.

Unsloth cannot train some model types in float16 (``FrameworkProfile.fp16_forced_fp32``, e.g. Gemma 3 on a T4). Its
loader then loads the checkpoint in bfloat16 (unslothai/unsloth@6a83bb53a5 (2025.6.6) unsloth/models/vision.py
l. 405-409: "Check if using forced float32 - we load it in bfloat16, then cast to float16!", ``torch_dtype =
torch.bfloat16``; unsloth@015bdef models/loader.py l. 1805-1820 alike) and hands the model to
``patch_model_and_tokenizer(do_forced_float32=True)``, which casts it one module at a time
(unslothai/unsloth-zoo@e8c8beae unsloth_zoo/patching_utils.py l. 244-266; unsloth-zoo@ce232d6c l. 401-431 alike):
``module.to(torch.float16)`` on every module whose name holds a linear's, the embedding's, lm_head's or a norm's name,
``torch.cuda.empty_cache()`` after each, then ``param.data = param.data.to(torch.float16)`` for any bfloat16
parameter left. ``Module.to`` builds the new float16 tensor while the bfloat16 one is still referenced, so the high
point of the load is every weight on the card plus one float16 copy of the largest 16-bit tensor cast (the
embedding, tied to lm_head, for Gemma 3: the shared parameter is cast once, a later ``.to`` of the same dtype is a
no-op). 4-bit weights are uint8 and ``Module.to(dtype)`` casts floating-point tensors only. The adapters, the
optimizer and the cuBLAS workspaces come later (``get_peft_model``, the trainer), so they are not on the card yet.
``torch.cuda.max_memory_reserved`` counts this high point when a notebook prints the process's peak.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vramfit.estimate.allocator import round_allocation
from vramfit.estimate.core import _is_quantized_linear
from vramfit.estimate.params import base_tensors
from vramfit.estimate.phases import Contribution, StepPhase

if TYPE_CHECKING:
    from collections.abc import Iterator

    from vramfit.estimate.step import Step

# the tensors of one module each (a ParamTensor of these kinds is `count` identical single tensors); norms, biases and
# a tower's small tensors are listed in aggregates and are far smaller than any of these
_SINGLE_KINDS = ("embedding", "lm_head", "linear", "router", "expert", "vision_linear", "vision_unused_linear")
_FP16_BYTES = 2


def casts_on_load(step: Step) -> bool:
    """The framework loads this model type in bfloat16 and casts it to float16 (module doc): its forced-float32 mode
    (activations.forced_fp32, full fine-tuning included), by a framework whose loader does so
    (``FrameworkProfile.forced_fp32_loads_bf16``)."""
    from vramfit.estimate.activations import forced_fp32

    return step.profile.forced_fp32_loads_bf16 and forced_fp32(step.spec, step.sc, step.profile) is not None


def _loaded_16bit(step: Step) -> list:
    """The base model's tensors the checkpoint loads in 16 bits (4-bit linears are uint8 and left as they are)."""
    return [t for t in base_tensors(step.spec) if not _is_quantized_linear(t, step.sc, step.profile, step.spec)]


def largest_cast_copy(step: Step) -> int:
    """Bytes of the float16 copy of the largest 16-bit weight tensor the cast makes."""
    return round_allocation(_FP16_BYTES * max((t.numel for t in _loaded_16bit(step) if t.kind in _SINGLE_KINDS),
                                              default=0))


def cast_load_phase(step: Step) -> Iterator[Contribution]:
    """The load's high point: the weights (16-bit and 4-bit) and the cast's float16 copy of the largest tensor. The
    16-bit weights are counted in 16 bits whatever the step keeps: full fine-tuning upcasts its trainable weights only
    after the cast (unsloth@6a83bb53a5 vision.py l. 466-471 the cast, l. 513 then ``post_patch_model`` ->
    unsloth-zoo@e8c8beae training_utils.py l. 109-163 ``prepare_model_for_training``: ``.to(float32)``), so in
    ``-mixed``, where ``parts.weights`` is 0 beside an fp32 master copy, the load's weights are these."""
    if not casts_on_load(step):
        return
    weights = sum(round_allocation(_FP16_BYTES * t.numel) * t.count for t in _loaded_16bit(step))
    yield Contribution("weights", StepPhase.LOAD, weights)
    yield Contribution("quantized_base", StepPhase.LOAD, step.parts.quantized_base)
    yield Contribution("temporaries", StepPhase.LOAD, largest_cast_copy(step))


def cast_is_peak(step: Step, breakdowns: dict[str, dict[str, int]], allocated: int) -> bool:
    """The cast's high point is the allocated peak of the run (the load phase above every phase of the step)."""
    return casts_on_load(step) and allocated == sum(breakdowns.get(StepPhase.LOAD.value, {}).values())


def cast_reserved(step: Step, breakdowns: dict[str, dict[str, int]]) -> tuple[int, int]:
    """(``max_memory_reserved`` at the cast, the step's own allocated peak) when the cast is the allocated peak. At the
    cast nothing of the step is cached yet and ``torch.cuda.empty_cache()`` has run after every module (module doc), so
    the load holds its tensors' own segments only; the step's reserved peak comes later, from its own allocated peak:
    every phase but the load and an evaluation pass, whose segments the caller adds (evaluation.evaluation_reserved)."""
    from vramfit.estimate.reserved import reserved_bytes

    load = sum(breakdowns[StepPhase.LOAD.value].values())
    at_load = reserved_bytes(load, step.parts, 0, step.spec.num_hidden_layers, (), step.profile.alloc_conf)
    own = max(sum(b.values()) for name, b in breakdowns.items()
              if name not in (StepPhase.LOAD.value, StepPhase.EVALUATE.value))
    return at_load, own
