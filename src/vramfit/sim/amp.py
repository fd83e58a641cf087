"""CUDA autocast's fp32 policy, for autocast running on (fake) CPU tensors.

``torch.autocast("cpu")`` casts matmuls to the low-precision dtype like CUDA autocast, but its fp32
list is much shorter: on CUDA ``exp``, ``pow``, ``rsqrt``, ``layer_norm``, ``softmax``, ``sum`` ... run in
fp32 and return fp32 tensors (ATen ``autocast_mode.h`` ``AT_FORALL_FP32`` / ``AT_FORALL_FP32_SET_OPT_DTYPE``,
as shipped in the installed torch's ``include/ATen/autocast_mode.h``), on CPU they stay bf16/fp16.
:class:`CudaAutocastPolicy` applies the CUDA policy to the Python entry points of those ops, so the
dtypes (and bytes) of their outputs are the ones a CUDA run produces. Ops reached only from C++ (inside
``cross_entropy``) are not seen; transformers upcasts logits explicitly before its loss anyway.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map

_LOW = (torch.float16, torch.bfloat16)


def _fp32_funcs() -> set[Any]:
    T = torch.Tensor
    return {
        torch.exp, T.exp, torch.expm1, T.expm1, torch.log, T.log, torch.log1p, T.log1p, torch.log2, T.log2,
        torch.log10, T.log10, torch.reciprocal, T.reciprocal, torch.rsqrt, T.rsqrt, torch.pow, T.pow,
        T.__pow__, torch.sinh, torch.cosh, torch.tan, torch.acos, torch.asin, torch.erfinv,
        F.softplus, F.layer_norm, F.rms_norm, F.group_norm, F.nll_loss, F.mse_loss, F.l1_loss,
        F.smooth_l1_loss, F.kl_div, F.binary_cross_entropy_with_logits, F.cosine_similarity,
        torch.logsumexp, T.logsumexp, torch.dist, torch.cdist,
    }


def _set_dtype_funcs() -> set[Any]:
    T = torch.Tensor
    return {
        torch.softmax, T.softmax, F.softmax, torch.log_softmax, T.log_softmax, F.log_softmax,
        torch.sum, T.sum, torch.cumsum, T.cumsum, torch.cumprod, T.cumprod, torch.prod, T.prod,
    }


class CudaAutocastPolicy(TorchFunctionMode):
    """While CPU autocast is on, run CUDA autocast's fp32-policy ops in fp32 (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self._fp32 = _fp32_funcs()
        self._set_dtype = _set_dtype_funcs()

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if torch.is_autocast_enabled("cpu"):
            if func in self._fp32:
                args, kwargs = tree_map(_up, (args, kwargs))
            elif func in self._set_dtype and args and isinstance(args[0], torch.Tensor) \
                    and args[0].is_floating_point() and kwargs.get("dtype") is None \
                    and not _positional_dtype(func, args):
                kwargs = {**kwargs, "dtype": torch.float32}
        return func(*args, **kwargs)


def _up(x: Any) -> Any:
    if isinstance(x, torch.Tensor) and x.dtype in _LOW:
        return x.float()
    return x


def _positional_dtype(func: Any, args: tuple) -> bool:
    return any(isinstance(a, torch.dtype) for a in args[1:])
