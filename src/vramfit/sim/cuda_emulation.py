"""What a CUDA run does differently from the fake CPU run, applied at the Python function level.

These are made to behave as on a CUDA device (sm80+), on fake CPU runs only:

1. :func:`cuda_sdpa_patch` replaces ``torch.nn.functional.scaled_dot_product_attention`` (every
   transformers attention calls it through that attribute) by :func:`cuda_sdpa`, which picks a CUDA backend as ``sdp_utils.cpp`` ``select_sdp_backend``
   does (priority flash > memory-efficient > math) and calls that backend's aten op, whose fake kernel
   gives the CUDA outputs (and so the CUDA saved tensors). The CPU path would instead expand k/v for
   grouped-query attention and build an explicit causal mask. Rules (pytorch ``sdp_utils.cpp``):
   flash needs no ``attn_mask``, fp16/bf16, head dim <= 256, and supports GQA
   (``check_batch_size_and_num_heads_dense<true>``); memory-efficient takes masks and fp32 but not GQA
   (``<false>``); math takes everything and materialises the scores. A boolean mask is first turned
   into an additive mask in the query dtype (``convert_boolean_attn_mask``), which the efficient kernel
   saves for backward. cuDNN attention (preferred on sm90 with new cuDNN) keeps the same output and
   statistics as flash and is not modelled separately.
2. :class:`CudaSemantics`, a ``TorchFunctionMode`` pushed only under autocast (``-mixed``): CUDA's fp32 cast policy (ATen ``autocast_mode.h`` ``AT_FORALL_FP32`` and
   ``AT_FORALL_FP32_SET_OPT_DTYPE``, from the installed torch's header): ``exp``, ``pow``, ``rsqrt``,
   ``layer_norm``, ``softmax``, ``sum`` ... run in fp32 and return fp32 on CUDA, but stay in the
   low-precision dtype under CPU autocast. Ops reached only from C++ (inside ``cross_entropy``) are not
   seen; transformers upcasts logits explicitly before its loss anyway.
3. :func:`cuda_autocast_query`: ``torch.is_autocast_enabled()`` without a device type asks about CUDA
   autocast (torch 2.13 ``torch/__init__.py``: the no-argument form is the deprecated CUDA query), which
   a fake CPU run leaves off while CPU autocast is on. Libraries branch on it: PEFT's bitsandbytes LoRA
   layers cast the input to the adapter dtype and the output back only when it is off (peft v0.21.2
   ``tuners/lora/bnb.py`` ``Linear4bit.forward``: ``requires_conversion = not torch.is_autocast_enabled()``),
   so without the patch a 16-bit input to an fp32 adapter made an fp32 copy and autocast's 16-bit copy of
   that, which lora_A saves, where a CUDA run saves nothing new. Under the patch that query (and the
   ``"cuda"`` one) answers what CPU autocast's state is, as it would on CUDA.

4. :func:`grouped_mm_as_on_cuda`: transformers' MoE grouped matmul for fp32/fp16 expert banks, which the
   op's fake kernel refuses, with the op's own autograd (:class:`_GroupedMMFallback`).

5. :func:`cuda_dropout`: ``F.dropout`` in training runs ATen's fused kernel on CUDA, which returns its output and a
   bool mask that backward keeps (1 B per element); on CPU it draws a noise tensor of the input's dtype and
   multiplies, and the product saves that noise (torch v2.13.0 ``aten/src/ATen/native/Dropout.cpp``: ``dropout``
   takes ``native_dropout`` where ``is_fused_kernel_acceptable``, which asks for a CUDA/XPU/lazy input, else
   ``_dropout_impl``: ``at::empty_like(input).bernoulli_(1 - p)``). PEFT's LoRA dropout on an fp32 input saved
   4 B per element in the fake run where a CUDA run saves 1: 184 MiB more in each recomputed Llama-2-7B block
   (QLoRA r64 on six projections, 2,048 tokens, dropout 0.1).

The flash and efficient backward kernels allocate scratch that their fake kernels do not show; see
:func:`flash_backward_scratch` and :func:`efficient_backward_scratch` (registered as tracker transients).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map

_LOW = (torch.float16, torch.bfloat16)


@contextlib.contextmanager
def patched(patches: list[tuple[Any, str, Any]]) -> Iterator[None]:
    """Each ``(module, name, replacement)`` set for the block, the originals put back after it."""
    saved = [(mod, name, getattr(mod, name)) for mod, name, _ in patches]
    for mod, name, fn in patches:
        setattr(mod, name, fn)
    try:
        yield
    finally:
        for mod, name, fn in saved:
            setattr(mod, name, fn)


def cuda_autocast_query() -> list[tuple[Any, str, Any]]:
    """The :func:`patched` entry that makes ``torch.is_autocast_enabled()`` (no device, or ``"cuda"``)
    report CPU autocast's state, as a CUDA run reports CUDA autocast's (module docstring, item 3)."""
    orig = torch.is_autocast_enabled

    def is_autocast_enabled(device_type: str | None = None) -> bool:
        return orig("cpu") if device_type in (None, "cuda") else orig(device_type)

    return [(torch, "is_autocast_enabled", is_autocast_enabled)]


def cuda_dropout(counts: dict[str, int] | None = None) -> list[tuple[Any, str, Any]]:
    """The :func:`patched` entry that runs an out-of-place training ``F.dropout`` through ``native_dropout``, as CUDA
    does (module docstring, item 5); ``counts["native_dropout"]``: the calls it rerouted. In-place dropout takes the
    noise path on CUDA too (``dropout_`` is ``_dropout<true>``), so it is left as it is."""
    orig = F.dropout
    counts = {} if counts is None else counts

    def dropout(input: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> torch.Tensor:
        if training and 0 < p < 1 and not inplace and input.numel() > 0:
            counts["native_dropout"] = counts.get("native_dropout", 0) + 1
            return torch.native_dropout(input, p, True)[0]
        return orig(input, p, training, inplace)

    return [(F, "dropout", dropout)]


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


@contextlib.contextmanager
def cuda_sdpa_patch(counts: dict[str, int], flash: bool = True) -> Iterator[None]:
    """Route ``F.scaled_dot_product_attention`` through :func:`cuda_sdpa`; count backends in ``counts``. ``flash``: the
    card has the flash backend (sm80+)."""
    orig = F.scaled_dot_product_attention

    def sdpa(*args: Any, **kwargs: Any) -> torch.Tensor:
        out, backend = cuda_sdpa(*args, flash=flash, **kwargs)
        counts[backend] = counts.get(backend, 0) + 1
        return out

    F.scaled_dot_product_attention = sdpa  # type: ignore[assignment]
    try:
        yield
    finally:
        F.scaled_dot_product_attention = orig  # type: ignore[assignment]


class CudaSemantics(TorchFunctionMode):
    """CUDA's autocast fp32 policy while CPU autocast is on.

    Start backward without going through a torch-function handler (:func:`vramfit.sim.run._backward`):
    a handler runs with its mode popped, so a backward entered through it would recompute checkpointed
    layers without this mode (and save different tensors than the forward did).
    """

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
                    and not any(isinstance(a, torch.dtype) for a in args[1:]):
                kwargs = {**kwargs, "dtype": torch.float32}
        return func(*args, **kwargs)


def _up(x: Any) -> Any:
    if isinstance(x, torch.Tensor) and x.dtype in _LOW:
        return x.float()
    return x


def cuda_sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attn_mask: torch.Tensor | None = None,
              dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
              enable_gqa: bool = False, flash: bool = True) -> tuple[torch.Tensor, str]:
    """``F.scaled_dot_product_attention`` through the backend CUDA would pick; returns (output, backend). ``flash``: the
    card has the flash backend (sm80+: pytorch/pytorch aten/src/ATen/native/transformers/cuda/sdp_utils.cpp
    ``use_flash_attention`` checks the compute capability; below it the memory-efficient kernel, whose dense
    constraints take no grouped-query shapes, ``check_batch_size_and_num_heads_dense<false>``, or the math one)."""
    if torch.is_autocast_enabled("cpu"):  # SDPA is on the lower-precision autocast list
        dt = torch.get_autocast_dtype("cpu")
        query, key, value = (t.to(dt) if t.is_floating_point() and t.dtype != dt else t for t in (query, key, value))
    head_dim = query.size(-1)
    gqa = key.size(-3) != query.size(-3)
    low = query.dtype in _LOW
    # flash needs one head dim for q, k and v (PyTorch aten/src/ATen/native/transformers/sdp_utils_cpp.h
    # check_head_dim_size_flash); MLA's v (v_head_dim < qk head dim) goes to the efficient kernel
    same_dims = key.size(-1) == head_dim and value.size(-1) == head_dim
    if flash and attn_mask is None and low and head_dim <= 256 and head_dim % 8 == 0 and same_dims and \
            (enable_gqa or not gqa):
        out = torch.ops.aten._scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal, False,
                                                                 scale=scale)[0]
        return out, "flash"
    if not gqa and head_dim % (8 if low else 4) == 0:
        bias = attn_mask
        if bias is not None and bias.dtype == torch.bool:
            bias = torch.zeros_like(bias, dtype=query.dtype).masked_fill_(bias.logical_not(), float("-inf"))
        out = torch.ops.aten._scaled_dot_product_efficient_attention(
            query, key, value, bias, True, dropout_p, is_causal, scale=scale)[0]
        return out, "efficient"
    # the math kernel runs below SDPA's autocast wrapper, which excludes the autocast key for the whole call (ATen
    # autocast_mode.h WrapFunction_: ExcludeDispatchKeyGuard), so its inner matmuls are not cast down
    with torch.autocast("cpu", enabled=False):
        out = torch.ops.aten._scaled_dot_product_attention_math(
            query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale, enable_gqa=enable_gqa)[0]
    return out, "math"


def _round(x: int, m: int) -> int:
    return -(-x // m) * m


def flash_backward_scratch(args: tuple, kwargs: dict) -> list[tuple[int, str, tuple[int, ...], str]]:
    """Scratch of the CUDA flash-attention backward (FlashAttention-2 ``mha_bwd`` as vendored by PyTorch).

    ``softmax_d`` fp32 ``[B, H, round(S, 128)]``, ``dq_accum`` fp32 ``[B, round(S, 128), H, round(D, 32 if
    D <= 128 else 64)]``, and for grouped-query attention ``dk_expanded`` / ``dv_expanded`` in the input
    dtype ``[B, S_k, H, D]`` before they are summed to the key/value heads.
    """
    q, k = args[1], args[2]
    b, h, s, d = (int(x) for x in q.shape)
    sr, dr = _round(s, 128), _round(d, 32 if d <= 128 else 64)
    out = [(4 * b * h * sr, "softmax_d", (b, h, sr), "float32"),
           (4 * b * sr * h * dr, "dq_accum", (b, sr, h, dr), "float32")]
    if k.size(1) != h:
        n = b * int(k.size(2)) * h * d * q.element_size()
        dt = str(q.dtype).replace("torch.", "")
        out += [(n, "dk_expanded", (b, int(k.size(2)), h, d), dt), (n, "dv_expanded", (b, int(k.size(2)), h, d), dt)]
    return out


def efficient_backward_scratch(args: tuple, kwargs: dict) -> list[tuple[int, str, tuple[int, ...], str]]:
    """Scratch of the CUDA memory-efficient backward: ``delta`` fp32 ``[B, H, S]`` and an fp32 ``grad_q``
    accumulator (the cutlass kernel's workspace when the key blocks are split; assumed always)."""
    q = args[1]
    b, h, s, d = (int(x) for x in q.shape)
    return [(4 * b * h * s, "delta", (b, h, s), "float32"),
            (4 * b * h * s * d, "grad_q accumulator", (b, h, s, d), "float32")]


def scratch_rules() -> dict[Any, Any]:
    aten = torch.ops.aten
    return {
        aten._scaled_dot_product_flash_attention_backward.default: flash_backward_scratch,
        aten._scaled_dot_product_efficient_attention_backward.default: efficient_backward_scratch,
    }


__all__ = ["CudaSemantics", "cuda_dropout", "cuda_sdpa", "cuda_sdpa_patch", "scratch_rules"]


class _GroupedMMFallback(torch.autograd.Function):
    """``aten::_grouped_mm`` for a dtype its meta kernel refuses (fp32, fp16), as CUDA runs it.

    On CUDA (sm80+) transformers v5.24.0 calls ``F.grouped_mm`` for every expert dtype
    (integrations/moe.py ``_can_use_grouped_mm`` returns the compute capability test alone), and torch
    2.13 runs a non-bf16 call through the op's own loop of ``mm_out`` (aten/src/ATen/native/GroupedMMUtils.h
    ``_grouped_mm_fallback``). The autograd formula is the op's, not that of transformers' own
    ``grouped_mm_fallback`` custom op (which saves both operands and always makes a weight-sized
    ``grad_weight``): autograd keeps the input only when the weight needs a gradient, the weight only when
    the input does, and makes only the gradients asked for (checked on the installed torch:
    ``saved_tensors_hooks`` around ``F.grouped_mm`` with a frozen weight see the weight and the offsets
    alone). The forward and input-gradient matmuls call transformers' fallback op only for its fake kernel
    (one new ``[rows, out]`` tensor)."""

    @staticmethod
    def forward(ctx: Any, input: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        needs_input, needs_weight = ctx.needs_input_grad[:2]
        ctx.save_for_backward(input if needs_weight else None, weight if needs_input else None)
        ctx.offs, ctx.weight_shape = offs, weight.shape
        return torch.ops.transformers.grouped_mm_fallback(input, weight, offs)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        input, weight = ctx.saved_tensors
        grad_input = grad_weight = None
        if ctx.needs_input_grad[0]:
            grad_input = torch.ops.transformers.grouped_mm_fallback(grad, weight.transpose(-2, -1), ctx.offs)
        if ctx.needs_input_grad[1]:  # _grouped_mm(input.T, grad, offs): one [experts, in, out] tensor
            grad_weight = grad.new_empty(ctx.weight_shape)
        return grad_input, grad_weight, None


def grouped_mm_as_on_cuda(input: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """Replaces transformers' ``integrations.moe._grouped_mm`` on fake runs: bf16 takes the real op (its
    fake kernel), any other dtype :class:`_GroupedMMFallback`."""
    if weight.dtype == torch.bfloat16:
        return F.grouped_mm(input.to(weight.dtype), weight, offs=offs)
    return _GroupedMMFallback.apply(input.to(weight.dtype), weight, offs)
