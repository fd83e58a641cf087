"""What a norm over the residual stream saves for backward: a decoder block's norms and the final norm alike."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from vramfit.models.spec import ModelSpec, NormType

if TYPE_CHECKING:
    from vramfit.estimate.activations import Saved
    from vramfit.estimate.framework import FrameworkProfile


@dataclass(frozen=True)
class NormSite:
    """What decides a residual-stream norm's saved tensors: the model, the framework, compile, tokens, the
    compute dtype's bytes and whether its weight trains (its gradient needs the normalised tensor)."""

    spec: ModelSpec
    profile: FrameworkProfile
    compiled: bool
    T: int
    compute: int
    weight_trains: bool


def norm_saved(out: Saved, site: NormSite, key: str, src_key: str, src_bytes: int) -> None:
    """The tensors a norm over a (T, h) tensor stored as ``src_key`` saves for backward: a block's two norms and
    the final norm alike (transformers v5.24.0 ``LlamaRMSNorm``: ``pow`` saves the fp32 input, ``rsqrt`` its
    fp32 result, ``weight * hidden.to(dtype)`` the 16-bit normalised tensor when the weight trains; checked
    with autograd's saved-tensor hooks)."""
    T, h, c = site.T, site.spec.hidden_size, site.compute
    layernorm = site.spec.norm_type is NormType.LAYERNORM
    if layernorm or not site.profile.rmsnorm_upcast:
        out.add(src_key, src_bytes * T * h)  # LayerNorm / lit-gpt RMSNorm save the input itself
        out.add(key + ".stats", 2 * 4 * T)  # fp32 mean and rstd per token (native_layer_norm)
        if not layernorm and site.weight_trains:
            out.add(key + ".normed", c * T * h)
        return
    if site.compiled or site.profile.rmsnorm_kernel:
        # a fused kernel (Unsloth's Triton RMSNorm, see FrameworkProfile.rmsnorm_kernel) or inductor fuses the norm into one kernel whose backward recomputes from the input and
        # the fp32 rstd (min-cut partitioner, torch/_functorch/partitioners.py)
        out.add(src_key, src_bytes * T * h)
        out.add(key + ".rstd", 4 * T)
        return
    # upcast RMSNorm: x.to(float32) (an alias when already fp32) is saved by pow and mul
    if src_bytes == 4:
        out.add(src_key, 4 * T * h)
    else:
        out.add(key + ".fp32_in", 4 * T * h)
    out.add(key + ".rstd", 4 * T)
    if site.weight_trains:
        out.add(key + ".normed", (4 if site.spec.norm_one_plus_weight else src_bytes) * T * h)
