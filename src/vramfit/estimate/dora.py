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
- **Forward working set** (:func:`forward_transients`): ``get_lora_weight`` runs the adapters on an identity,
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
  own output where dropout is 0 (profile ``dora_base_output``, FrameworkProfile.reuses_dora_base_output); with dropout,
  or before, it is ``F.linear(x,
  weight)`` on the cast weight, and that matmul keeps the weight for the input's gradient: a fresh tensor wherever
  the cast or the de-quantization made one (in x out per adapted linear).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from vramfit.errors import ScenarioError
from vramfit.estimate.framework import casts_params
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
        if ad.param_wrapper:
            raise ScenarioError("dora", f"PEFT refuses DoRA on fused experts ({ad.target}, which all-linear adapts): "
                                "name the attention projections in lora_targets, or set dora false", ["false"])
        if ad.vision:
            raise ScenarioError("dora", f"DoRA on a vision tower ({ad.target}) is not modelled: set freeze_vision yes "
                                "(the tower frozen), or dora false", ["false"])
        if not ad.per_layer:
            raise ScenarioError("dora", f"DoRA on the embedding or output layer ({ad.target}) is not modelled; adapt "
                                "the decoder blocks' linears only, or set dora false", ["false"])
    return [replace(ad, dora=True) for ad in adapters]


def _x_bytes(blk: Block, x_bytes: int) -> int:
    """The input's dtype inside DoRA: PEFT casts it to the adapters' (``_cast_input_dtype``), except a 4-bit layer
    under autocast (bnb.py ``requires_conversion = not torch.is_autocast_enabled()``)."""
    if blk.quantized and blk.dt.autocast:
        return x_bytes
    return blk.dt.adapter if blk.profile.lora_casts_input else x_bytes


def _fresh_weight(blk: Block, operand: int) -> bool:
    """Whether the weight the DoRA layer computes with is a new tensor: de-quantized, or cast from the dtype the
    parameter has in the step (``weight.to(x.dtype)``, then autocast's 16-bit cast in ``F.linear``): 16-bit where FSDP's
    mixed precision or the DeepSpeed engine cast the parameters (framework.casts_params; no copy then at 16 bits)."""
    param = blk.dt.compute if casts_params(blk.sc, blk.profile) else blk.sc.precision.param_bytes
    return blk.quantized or param != operand


def saved(blk: Block, out: Saved, tag: str, ad: Adapter, x_bytes: int, a_out: int, tokens: int) -> None:
    """What one DoRA layer keeps for backward beyond LoRA's tensors (module docstring), under ``tag``; ``tokens``: the
    rows the linear sees (an expert's routed tokens)."""
    xb = _x_bytes(blk, x_bytes)
    out.add(f"{tag}.dora_lora_result", a_out * tokens * ad.out_features)
    if blk.profile.reuses_dora_base_output(blk.lora_dropout):
        # the base layer's output (bnb.py clones it): 16-bit under autocast, else the layer input's dtype
        base = blk.dt.compute if blk.dt.autocast and not blk.quantized else x_bytes
        out.add(f"{tag}.dora_base_result", base * tokens * ad.out_features)
        return
    operand = blk.dt.compute if blk.dt.autocast else xb  # F.linear's dtype (autocast casts to 16 bits)
    out.add(f"{tag}.dora_base_result", operand * tokens * ad.out_features)
    if _fresh_weight(blk, operand):
        out.add(f"{tag}.dora_weight", operand * ad.in_features * ad.out_features)


def _dora_block(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, adapters: list[Adapter]):
    """(the block record, the DoRA adapters) where any adapter is DoRA's, else None."""
    from vramfit.estimate.activations import _block

    dora = [ad for ad in adapters if ad.dora]
    return (_block(spec, sc, profile, dora, sc.quantize is not Quantize.NONE), dora) if dora else None


def _product_bytes(blk: Block) -> int:
    """The dtype of ``mag_norm_scale * ...``: the magnitude's (the adapters') promoted with the 16-bit outputs."""
    return max(blk.dt.adapter, blk.dt.compute)


def forward_transients(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile,
                       adapters: list[Adapter]) -> tuple[int, int]:
    """(forward, recompute): the largest DoRA layer's forward working set (module docstring), the larger of two
    moments, and its weight-norm part alone:

    - ``get_weight_norm``'s add: what ``lora_A``'s matmul keeps of ``x_eye`` while ``lora_weight`` lives (the identity
      itself, or under autocast only its 16-bit copy: the fp32 ``x_eye`` dies when ``get_lora_weight`` returns; before
      that both exist), with the cast ``lora_weight``, the cast weight where it is a new tensor, ``scaling *
      lora_weight`` and the sum, in x out each in the input's dtype. peft before 0.12 multiplies ``lora_B.weight @
      lora_A.weight`` instead (profile ``dora_eye`` False: no identity).
    - ``result_dora``'s arithmetic, ``lora_weight`` and the cast weight still alive: ``(mag_norm_scale - 1) *
      base_result``, ``mag_norm_scale * lora_result`` times ``scaling`` and their sum, three T x out tensors in the
      magnitude's promoted dtype at once.

    The weight norm's moments alone are what a checkpointed block's recompute adds on top of its whole recomputed block
    (its output arithmetic runs before the block's later tensors exist: with it the estimate was 15 % above the
    simulator's DoRA increment at 8 x 2,048 tokens, without it equal). (0, 0) without DoRA."""
    found = _dora_block(spec, sc, profile, adapters)
    if found is None:
        return 0, 0
    blk, dora = found
    c, ab, eye_on = blk.dt.compute, blk.dt.adapter, blk.profile.dora_eye
    forward = recompute = 0
    for ad in dora:
        n_in, n_out = ad.in_features, ad.out_features
        # the layer's input: the norm's output for the projections that read the hidden state, 16-bit otherwise
        xb = _x_bytes(blk, blk.dt.norm_out if n_in == spec.hidden_size else c)
        at_lora_a = n_in ** 2 * (ab + (c if blk.dt.autocast else 0)) if eye_on else 0
        kept_eye = n_in ** 2 * (c if blk.dt.autocast else ab) if eye_on else 0
        fresh = 1 if _fresh_weight(blk, xb) else 0
        at_norm = kept_eye + (3 + fresh) * xb * n_in * n_out  # lora_weight, product, sum, the cast weight
        at_output = kept_eye + (1 + fresh) * xb * n_in * n_out + 3 * _product_bytes(blk) * blk.T * n_out
        recompute = max(recompute, at_lora_a, at_norm)
        forward = max(forward, recompute, at_output)
    return forward, recompute


def backward_transient(spec: ModelSpec, sc: Scenario, profile: FrameworkProfile, adapters: list[Adapter]) -> int:
    """What a DoRA layer's backward adds to its block's working set: the gradient of ``result_dora`` in the
    magnitude's promoted dtype (T x out, the widest DoRA layer's), from which the base and LoRA outputs' gradients are
    formed (the simulator's block backward holds one fp32 T x out tensor more than plain LoRA's: 256, 512 and 1,024 MiB
    at 8,192, 16,384 and 32,768 tokens of Llama-3.2-1B's 8,192-wide MLP). 0 without DoRA."""
    found = _dora_block(spec, sc, profile, adapters)
    if found is None:
        return 0
    blk, dora = found
    return _product_bytes(blk) * blk.T * max(ad.out_features for ad in dora)


def dora_notes(r: Step) -> list[str]:
    """The assumption line of a DoRA estimate (none without DoRA): what it keeps per block and its largest forward
    transient. ``r``: the estimator's step."""
    sc, profile = r.sc, r.profile
    if not sc.dora:
        return []
    per_block = sum(v for k, v in r.saved.items.items() if ".dora_" in k)
    reuse = profile.reuses_dora_base_output(sc.lora_dropout)
    return ["DoRA (use_dora): a magnitude vector per adapted linear; each keeps its LoRA output and "
            + ("the base layer's output (reused: torchtune, or PEFT >= 0.14 at dropout 0)" if reuse else
               "a recomputed base output with the weight its matmul ran on (PEFT: dropout > 0 or before 0.14)")
            + f" for backward ({per_block / 2**20:,.1f} MiB per block per micro-batch); its forward takes up to "
            f"{r.dora_forward / 2**20:,.0f} MiB more (B·A and the weight for its norm, the output's products)."]
