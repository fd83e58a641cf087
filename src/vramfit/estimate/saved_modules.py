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
from vramfit.estimate.profile_enums import SavedCopyDtype
from vramfit.models.spec import ModelSpec
from vramfit.scenario import Method, Parallelism, Precision, Scenario

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
                            "modules_to_save under framework hf, and Unsloth's from its 2024.11 release, are modelled)")
    both = sorted(set(saved) & set(kw.get("lora_targets", ())))
    if both:
        raise ScenarioError("modules_to_save", f"{', '.join(both)} is also in lora_targets; PEFT wraps a module as a "
                            "LoRA layer or as a trained copy, not both (ModulesToSaveWrapper raises a TypeError for a "
                            "LoRA layer): remove it from one of them")
    parallelism = kw.get("parallelism", Parallelism.NONE)
    if parallelism in FSDP_FAMILY or parallelism in ZERO_FAMILY:
        raise ScenarioError("modules_to_save", f"is modelled on one GPU and under DDP; where {parallelism.value} "
                            "places the copies' gradients and states is not modelled")


def check_copied_targets(kw: dict[str, Any], profile: Any, name: str) -> None:  # noqa: ANN401
    """LoRA targets the framework trains as whole copies instead (profile ``targets_trained_as_copies``): refused,
    naming modules_to_save, rather than counted as rank-r adapters."""
    copied = [t for t in kw.get("lora_targets", ()) if t in profile.targets_trained_as_copies]
    if copied:
        names = ", ".join(copied)
        release = f" ({kw['framework_version']})" if kw.get("framework_version") else ""
        raise ScenarioError("lora_targets", f"{name}{release} trains {names} named in its target modules as a whole "
                            f"copy (modules_to_save), not as a LoRA layer: move {names} to modules_to_save")


def copy_bytes(sc: Scenario, profile: Any, original: int) -> int:  # noqa: ANN401
    """Bytes per element of a trained copy whose original has ``original`` bytes per element (profile
    ``saved_copy_dtype``): fp32 for an fp16 original where the framework upcasts it, else the original's."""
    fp16 = sc.precision in (Precision.FP16_TRUE, Precision.FP16_MIXED)
    return 4 if profile.saved_copy_dtype is SavedCopyDtype.FP16_AS_FP32 and fp16 and original == 2 else original


def original_on_disk(spec: ModelSpec, sc: Scenario, profile: Any, base: ParamTensor) -> bool:  # noqa: ANN401
    """Whether the frozen original of copies is off the GPU (profile ``saved_originals_to_disk_*``): every module that
    uses the tensor is copied, since a tied head left uncopied keeps the embedding on the card (Unsloth replaces only
    the embedding or head it is asked to train with the offloaded one)."""
    if sc.gradient_checkpointing is not profile.saved_originals_to_disk_under or base.name == "embed_extra":
        return False
    dispatched = spec.model_type in profile.saved_originals_to_disk_model_types
    if not dispatched or sc.quantize not in profile.saved_originals_to_disk_quantizations:
        return False
    users = {"embedding": {"embed_tokens"} | (set() if spec.lm_head_params else {"lm_head"}), "lm_head": {"lm_head"}}
    return base.kind in users and users[base.kind] <= set(sc.modules_to_save)


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


def copy_element_bytes(spec: ModelSpec, copy_grads: tuple[int, int]) -> tuple[int, int]:
    """Bytes per element of the (embedding, output layer) copies, 0 for one not made: ``copy_grads`` (Parts.copy_grads)
    holds each copy's gradient, the size of the copy, over its V x H elements (the tied embedding's for a head that
    has no weight of its own)."""
    embed, head = copy_grads
    return (round(embed / spec.embedding_params) if embed else 0,
            round(head / (spec.lm_head_params or spec.embedding_params)) if head else 0)


def notes(sc: Scenario, spec: ModelSpec, profile: Any, copy_grads: tuple[int, int]) -> list[str]:  # noqa: ANN401
    """The assumption line of the copies (none without them); ``copy_grads``: Parts.copy_grads, whose bytes per
    element are the copies' dtype."""
    if not sc.modules_to_save:
        return []
    per = max(copy_element_bytes(spec, copy_grads))
    dtype = {2: "16-bit", 4: "fp32"}.get(per, f"{per}-byte")
    why = ("the original's dtype" if profile.saved_copy_dtype is SavedCopyDtype.ORIGINAL
           else "the load's dtype, fp32 for an fp16 load")
    tensors = (("embed_tokens", "embedding"), ("lm_head", "lm_head")) if spec.lm_head_params else \
        (("embed_tokens=lm_head", "embedding"),)
    away = [name for name, kind in tensors if original_on_disk(spec, sc, profile, ParamTensor(kind, (1, 1), 1, kind))]
    where = (f"the frozen originals moved to disk before the copy, off the GPU: {', '.join(away)}" if away
             else "the originals stay frozen on the GPU")
    return [f"modules_to_save: whole trained copies of {', '.join(sc.modules_to_save)} in {dtype} ({why}), each with "
            f"its gradient and optimizer state; {where}."]
