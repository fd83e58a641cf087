"""Parameters transformers keeps in fp32 in a 16-bit model: their bytes, and the FSDP units they break.

``from_pretrained`` in 16 bits keeps some parameters in fp32 (``ModelSpec.fp32_kept_strict`` on bf16 and fp16 loads,
``fp32_kept_fp16`` on fp16 loads; transformers v5.24.0 modeling_utils.py ``_get_dtype_plan``), e.g. DeepSeek-V3's
router ``gate.weight``. Where the run works they hold 4 B per element, and so do their gradient and the optimizer's
states (torch.optim keeps states in the parameter's dtype). Two FSDPs refuse such a model:

- FSDP2 (torch v2.13.0 distributed/fsdp/_fully_shard/_fsdp_param_group.py ``FSDPParamGroup._init_mp_dtypes``,
  l. 276-285) takes the original dtype of the *trainable* parameters of each ``fully_shard`` unit and raises
  ``AssertionError: FSDP expects uniform original parameter dtype but got {torch.bfloat16, torch.float32}`` when
  there are two. ``orig_dtype`` is the sharded parameter's own dtype (_fsdp_param.py ``init_dtype_attrs``), so a
  ``MixedPrecisionPolicy`` does not change it. Full fine-tuning of a 16-bit load fails: the router sits in its
  decoder layer's unit with the 16-bit attention weights. Under LoRA the frozen base is not counted and PEFT
  casts every adapter to fp32 (``autocast_adapter_dtype``), so the run works; with ``-mixed`` the trainable
  weights are fp32 (accelerate's FSDP2 upcast), so it works too.
- FSDP1 (torch v2.13.0 distributed/fsdp/_flat_param.py ``FlatParamHandle._validate_tensors_to_flatten``, l. 806-816)
  flattens every parameter of a unit, frozen or not, into one FlatParameter and raises ``ValueError: Must flatten
  tensors with uniform dtype but got torch.bfloat16 and torch.float32``; ``use_orig_params=True`` relaxes only the
  uniform ``requires_grad``. So any method whose base stays in 16 bits fails (the HF Trainer wraps each decoder
  layer, router included).

DeepSpeed's engine casts the whole module to 16 bits (``module.bfloat16()``), so nothing stays fp32 there; frameworks
that do not run transformers' modeling (torchtune, torchtitan, litgpt) build their own modules.
"""

from __future__ import annotations

from vramfit.choices import FSDP_FAMILY
from vramfit.errors import ScenarioError
from vramfit.estimate.framework import FrameworkProfile
from vramfit.models.spec import ModelSpec
from vramfit.scenario import Method, Precision, Scenario


def fp32_kept(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> tuple[str, ...]:
    """Names (estimate/params.py base_tensors) of the parameters a 16-bit load of this scenario keeps in fp32."""
    if not profile.runs_transformers_modeling or sc.precision.param_bytes != 2:
        return ()
    return spec.fp32_kept_strict + (spec.fp32_kept_fp16 if sc.precision is Precision.FP16_TRUE else ())


def param_bytes(name: str, w: int, kept: tuple[str, ...]) -> int:
    """Bytes per element of base tensor ``name`` stored at ``w`` bytes: 4 where a 16-bit load keeps it fp32."""
    return 4 if w == 2 and name in kept else w


def check_uniform_dtype(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile) -> None:
    """One ScenarioError where FSDP refuses the model's mixed parameter dtypes (module docstring); nothing otherwise."""
    kept = fp32_kept(spec, sc, profile)
    if not kept or sc.parallelism not in FSDP_FAMILY:
        return
    names = ", ".join(kept)
    load = (f"a {'fp16' if sc.precision is Precision.FP16_TRUE else 'bf16'} load of this model keeps {names} in fp32 "
            "(transformers' _keep_in_fp32_modules)")
    valid = ["bf16-mixed", "fp16-mixed", "fp32"]
    if profile.fsdp2 and sc.method is Method.FULL:
        raise ScenarioError("precision", f"{load}, and FSDP2 needs one dtype for the trainable parameters of each unit "
                            "(FSDP expects uniform original parameter dtype); use bf16-mixed (fp32 weights), LoRA, or "
                            "DeepSpeed ZeRO", valid)
    if not profile.fsdp2:
        raise ScenarioError("precision", f"{load}, and FSDP1 flattens each unit's parameters, frozen ones too, into "
                            "one tensor of one dtype (Must flatten tensors with uniform dtype); use bf16-mixed (fp32 "
                            "weights), LoRA under fsdp_version 2, or DeepSpeed ZeRO", valid)
