"""DoRA (Liu et al. 2024, "DoRA: Weight-Decomposed Low-Rank Adaptation", arXiv:2402.09353, eq. 5 and sec. 4.3: the
column norm is detached) as PEFT runs it, ``LoraConfig(use_dora=True)``: peft v0.21.2 tuners/lora/dora.py
``DoraLinearLayer``, tuners/lora/variants.py ``DoraLinearVariant.forward``, tuners/lora/layer.py ``Linear.forward``,
tuners/lora/bnb.py ``Linear4bit.forward`` (dora.py is the same at huggingface/peft@51c2ff666, the release of the
measured MetaMathQA runs); and as torchtune runs it, ``use_dora=True`` in its LoRA builders: v0.4.0
modules/peft/dora.py ``DoRALinear``, the same tensors in the model's dtype (its adapters and input are not cast),
``x_eye`` in the input's dtype, and the base output always that of the undropped input (profile ``dora_base_output``).

Per adapted linear (``in`` x ``out`` weight, T tokens), besides LoRA's own tensors:

- **Parameters**: ``lora_magnitude_vector``, one trained value per output (``DoraLinearLayer.weight``), in the
  adapters' dtype (estimate/params.py ``Adapter.dora``).
- **Forward working set** (:func:`forward_transient`): ``get_lora_weight`` runs the adapters on an identity,
  ``x_eye = torch.eye(in, dtype=lora_A.weight.dtype)`` and ``lora_B(lora_A(x_eye)).T`` (in x out), cast to the
  input's dtype; the base weight (de-quantized for 4-bit) is cast to it too; ``get_weight_norm`` forms ``weight +
  scaling * lora_weight`` (two in x out tensors at the add) for its ``linalg.norm``. ``lora_A``'s matmul keeps
  ``x_eye`` (autocast's 16-bit copy too) while ``lora_weight`` lives, to the end of the layer's forward. Nothing of it is
  saved for backward (the norm is detached and ``lora_weight`` only enters it detached), so it is a transient of each
  adapted linear's forward, and of its recompute under checkpointing.
- **Saved for backward** (:func:`saved`): ``result_dora = (mag_norm_scale - 1) * base_result + mag_norm_scale *
  lora_result * scaling``; ``mag_norm_scale`` needs a gradient (the magnitude), so each ``mul`` keeps its other factor:
  ``base_result`` (T x out) and ``lora_result = lora_B(lora_A(x))`` (T x out), which plain LoRA never keeps (its
  ``result + lora_B(...) * scaling`` saves nothing). From peft v0.14.0 (338aeff38) ``base_result`` is the base layer's
  own output where dropout is 0 (profile ``dora_reuses_base_result``); with dropout, or before, it is ``F.linear(x,
  weight)`` on the cast weight, and that matmul keeps the weight for the input's gradient: a fresh tensor wherever
  the cast or the de-quantization made one (in x out per adapted linear).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from vramfit.errors import ScenarioError
from vramfit.estimate.profile_enums import DoraBase
from vramfit.scenario import Quantize

if TYPE_CHECKING:
    from vramfit.estimate.activations import Block
    from vramfit.estimate.framework import FrameworkProfile
    from vramfit.estimate.params import Adapter
    from vramfit.estimate.saved import Saved
    from vramfit.estimate.step import Step
    from vramfit.models.spec import ModelSpec
    from vramfit.scenario import Scenario

def dora_adapters(adapters: list[Adapter], sc: Scenario) -> list[Adapter]:
    """``adapters`` marked DoRA where the scenario asks for it; the adapters whose DoRA is not modelled are refused
    naming ``dora``: an embedding or output layer (``DoraEmbeddingLayer``, and lm_head's T x vocabulary outputs),
    PEFT's ParamWrapper on fused experts (peft v0.21.2 tuners/lora/layer.py ParamWrapper.update_layer raises "does
    not work with use_dora=True") and a vision tower's linears."""
    if not sc.dora:
        return adapters
    for ad in adapters:
        what = ("the embedding or output layer" if not ad.per_layer else "fused experts (PEFT refuses DoRA there)"
                if ad.param_wrapper else "a vision tower" if ad.vision else None)
        if what is not None:
            raise ScenarioError("dora", f"DoRA on {what} ({ad.target}) is not modelled; adapt the decoder blocks' "
                                "linears only, or set dora false", ["false"])
    return [replace(ad, dora=True) for ad in adapters]


def reuses_base_output(profile: FrameworkProfile, dropout: float) -> bool:
    """Whether the DoRA layer keeps the base layer's own output (profile ``dora_base_output``), else a recomputed one
    and the weight its matmul ran on."""
    return profile.dora_base_output is DoraBase.REUSED or (
        profile.dora_base_output is DoraBase.REUSED_WITHOUT_DROPOUT and dropout == 0)


def _x_bytes(blk: Block, x_bytes: int) -> int:
    """The input's dtype inside DoRA: PEFT casts it to the adapters' (``_cast_input_dtype``), except a 4-bit layer
    under autocast (bnb.py ``requires_conversion = not torch.is_autocast_enabled()``)."""
    if blk.quantized and blk.dt.autocast:
        return x_bytes
    return blk.dt.adapter if blk.profile.lora_casts_input else x_bytes


def _fresh_weight(blk: Block, operand: int) -> bool:
    """Whether the weight the DoRA layer computes with is a new tensor: de-quantized, or cast from the parameter's
    dtype (``weight.to(x.dtype)``, then autocast's 16-bit cast in ``F.linear``)."""
    return blk.quantized or blk.sc.precision.param_bytes != operand


def saved(blk: Block, out: Saved, tag: str, ad: Adapter, x_bytes: int, a_out: int, tokens: int) -> None:
    """What one DoRA layer keeps for backward beyond LoRA's tensors (module docstring), under ``tag``; ``tokens``: the
    rows the linear sees (an expert's routed tokens)."""
    xb = _x_bytes(blk, x_bytes)
    out.add(f"{tag}.dora_lora_result", a_out * tokens * ad.out_features)
    if reuses_base_output(blk.profile, blk.lora_dropout):
        # the base layer's output (bnb.py clones it): 16-bit under autocast, else the layer input's dtype
        base = blk.dt.compute if blk.dt.autocast and not blk.quantized else x_bytes
        out.add(f"{tag}.dora_base_result", base * tokens * ad.out_features)
        return
    operand = blk.dt.compute if blk.dt.autocast else xb  # F.linear's dtype (autocast casts to 16 bits)
    out.add(f"{tag}.dora_base_result", operand * tokens * ad.out_features)
    if _fresh_weight(blk, operand):
        out.add(f"{tag}.dora_weight", operand * ad.in_features * ad.out_features)


def forward_transient(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, adapters: list[Adapter]) -> int:
    """The largest DoRA layer's forward working set (module docstring): ``x_eye`` (and autocast's 16-bit copy of it,
    which ``lora_A``'s matmul keeps), then at ``get_weight_norm``'s add the cast ``lora_weight``, the cast weight where
    it is a new tensor, ``scaling * lora_weight`` and the sum, in x out each in the input's dtype. 0 without DoRA."""
    from vramfit.estimate.activations import _block

    dora = [ad for ad in adapters if ad.dora]
    if not dora:
        return 0
    blk = _block(spec, sc, profile, dora, sc.quantize is not Quantize.NONE)
    best = 0
    for ad in dora:
        # the layer's input: the norm's output for the projections that read the hidden state, 16-bit otherwise
        x_bytes = blk.dt.norm_out if ad.in_features == spec.hidden_size else blk.dt.compute
        xb = _x_bytes(blk, x_bytes)
        eye = ad.in_features ** 2 * (blk.dt.adapter + (blk.dt.compute if blk.dt.autocast else 0))
        weights = 3 + (1 if _fresh_weight(blk, xb) else 0)  # lora_weight, the product and the sum, the cast weight
        best = max(best, eye + weights * xb * ad.in_features * ad.out_features)
    return best


def dora_notes(r: Step) -> list[str]:
    """The assumption line of a DoRA estimate (none without DoRA): what it keeps per block and its largest forward
    transient. ``r``: the estimator's step."""
    sc, profile = r.sc, r.profile
    if not sc.dora:
        return []
    per_block = sum(v for k, v in r.saved.items.items() if ".dora_" in k)
    dropout = sc.lora_dropout if sc.lora_dropout is not None else profile.lora_dropout_default
    reuse = reuses_base_output(profile, dropout)
    return ["DoRA (use_dora): a magnitude vector per adapted linear; each keeps its LoRA output and "
            + ("the base layer's output (reused: torchtune, or PEFT >= 0.14 at dropout 0)" if reuse else
               "a recomputed base output with the weight its matmul ran on (PEFT: dropout > 0 or before 0.14)")
            + f" for backward ({per_block / 2**20:,.1f} MiB per block per micro-batch); forming each weight's norm "
            f"takes up to {r.dora_forward / 2**20:,.0f} MiB in its forward (x_eye, B·A and the weight in the input's "
            "dtype)."]
