"""PEFT's ``modules_to_save``: whole trained copies of the input embedding and the output layer beside LoRA.

What PEFT does (huggingface/peft@5d602fdbf, src/peft/utils/other.py):

- ``_set_trainable`` wraps each module whose name ends in a ``modules_to_save`` entry in a ``ModulesToSaveWrapper``
  after the adapters are injected; ``AuxiliaryTrainingWrapper.check_module`` raises a TypeError for a module that is
  already a LoRA layer (``BaseTunerLayer``), so a module is a LoRA target or a saved copy, not both.
- ``ModulesToSaveWrapper.update``: ``copy.deepcopy(self.original_module)``, the original ``requires_grad_(False)``,
  the copy trained (``_set_layer_requires_grad(..., True)``); ``_forward_wrapped`` runs the copy. So the model holds
  the frozen original and a trained copy of the same size, with a gradient and optimizer states of its own.
- The copy is no ``BaseTunerLayer``: ``cast_adapter_dtype`` (src/peft/tuners/tuners_utils.py), which upcasts the
  LoRA matrices to fp32, skips it. It keeps the original's dtype at the time it is copied, which is the dtype the
  estimator gives the frozen original (estimate/core.py ``_base_state``: bf16 in a bf16 load, fp32 after
  ``prepare_model_for_kbit_training`` and bf16 again where TRL casts embeddings back, since its loop matches the
  copy's name ``...embed_tokens.modules_to_save.default`` as well).
- ``ensure_weight_tying`` (off by default) shares one copy between a tied embedding and head; without it each named
  module of a tied model gets its own copy, and the two no longer share a gradient.

Where the gradients appear in backward: the output layer's copy makes its whole weight gradient at the top of
backward (its MmBackward), as full fine-tuning's head does (``Step.head_grad``); the embedding copy's comes last
(embedding_dense_backward after the lowest block), so neither is a block's share (estimate/step_grads.py).
"""

from __future__ import annotations

from typing import Any

from vramfit.choices import FSDP_FAMILY, ZERO_FAMILY
from vramfit.errors import ScenarioError
from vramfit.estimate.params import ParamTensor
from vramfit.models.spec import ModelSpec
from vramfit.scenario import Method, Parallelism, Scenario

#: a copy trained beside its frozen original (ParamTensor.kind)
COPY_KIND = "saved_copy"


def check_saved_modules(kw: dict[str, Any], profile: Any, name: str) -> None:  # noqa: ANN401
    """The refusals of ``modules_to_save``: it needs adapters, PEFT's wrapper, a module that is no LoRA target, and
    a layout whose gradient and state placement is modelled (one GPU or DDP)."""
    saved = kw["modules_to_save"]
    if kw.get("method", Method.LORA) is Method.FULL:
        raise ScenarioError("modules_to_save", "full fine-tuning already trains every module; it copies none")
    if not profile.runs_modules_to_save:
        release = f" ({kw['framework_version']})" if kw.get("framework_version") else ""
        raise ScenarioError("modules_to_save", f"{name}{release} trains no modelled copies of whole modules (PEFT's "
                            "modules_to_save, framework hf, is modelled)")
    both = sorted(set(saved) & set(kw.get("lora_targets", ())))
    if both:
        raise ScenarioError("modules_to_save", f"{', '.join(both)} is also in lora_targets; PEFT wraps a module as a "
                            "LoRA layer or as a trained copy, not both (ModulesToSaveWrapper raises a TypeError for a "
                            "LoRA layer): remove it from one of them")
    parallelism = kw.get("parallelism", Parallelism.NONE)
    if parallelism in FSDP_FAMILY or parallelism in ZERO_FAMILY:
        raise ScenarioError("modules_to_save", f"is modelled on one GPU and under DDP; where {parallelism.value} "
                            "places the copies' gradients and states is not modelled")


def copied_tensors(spec: ModelSpec, sc: Scenario, base: ParamTensor) -> list[ParamTensor]:
    """The trained copies ``sc.modules_to_save`` makes of one base tensor (estimate/params.py base_tensors): the
    token embedding's for ``embed_tokens``; the output layer's, or the tied embedding's for ``lm_head`` on a model
    whose head has no weight of its own."""
    if not sc.modules_to_save or base.kind not in ("embedding", "lm_head") or base.name == "embed_extra":
        return []
    names = []
    if base.kind == "embedding" and "embed_tokens" in sc.modules_to_save:
        names.append("embed_tokens")
    if "lm_head" in sc.modules_to_save and (base.kind == "lm_head" or (base.kind == "embedding" and not spec.lm_head_params)):
        names.append("lm_head")
    return [ParamTensor(f"{n}.modules_to_save", base.shape, base.count, COPY_KIND) for n in names]


def notes(sc: Scenario, spec: ModelSpec, copy_grads: tuple[int, int]) -> list[str]:
    """The assumption line of the copies (none without them); ``copy_grads``: Parts.copy_grads, whose bytes per
    element are the copies' dtype."""
    if not sc.modules_to_save:
        return []
    elements = sum((spec.lm_head_params or spec.embedding_params) if n == "lm_head" else spec.embedding_params
                   for n in sc.modules_to_save)
    copy_bytes = round(sum(copy_grads) / max(1, elements))
    dtype = {2: "16-bit", 4: "fp32"}.get(copy_bytes, f"{copy_bytes}-byte")
    return [f"modules_to_save: whole trained copies of {', '.join(sc.modules_to_save)} in {dtype} (the original's "
            "dtype), each with its gradient and optimizer state; the originals stay frozen."]
