"""The scenario's optimizer, as HF Trainer builds it, runnable on fake tensors.

| scenario | what runs | HF Trainer ``optim`` |
|---|---|---|
| ``adamw`` | ``torch.optim.AdamW(fused=True)`` | ``adamw_torch_fused`` (default for torch >= 2.8, transformers PR #37358) |
| ``sgd`` / ``sgd-momentum`` | ``torch.optim.SGD(momentum=0 / 0.9, foreach=True)`` | ``sgd`` |
| ``adafactor`` | ``transformers.optimization.Adafactor(scale_parameter=False, relative_step=False)`` | ``adafactor`` |
| ``adamw-8bit`` | ``bitsandbytes.optim.AdamW8bit`` | ``adamw_bnb_8bit`` |
| ``paged-adamw`` / ``paged-adamw-8bit`` | ``bitsandbytes.optim.PagedAdamW`` / ``PagedAdamW8bit`` | ``paged_adamw_32bit`` / ``_8bit`` |
| ``lion`` / ``lion-8bit`` | ``bitsandbytes.optim.Lion`` / ``Lion8bit`` | ``lion_32bit`` / ``lion_8bit`` |
| ``adamw-4bit`` | :class:`AdamW4bitLayout` (torchao ``AdamW4bit``'s state layout) | ``adamw_torch_4bit`` |
| ``adamw-8bit-torchao`` | :class:`AdamW8bitLayout` (torchao ``AdamW8bit``'s state layout) | ``adamw_torch_8bit`` |

Workarounds for fake tensors, each with the same tensors as the library:
bitsandbytes builds its quantile maps from data at construction, so the optimizer is constructed with
fake mode suspended; paged state (``cudaMallocManaged``, invisible to ``torch.cuda`` statistics) is
allocated as ordinary tensors that the tracker books as host memory, for the tensors bitsandbytes pages
(``numel >= 1e5``, bitsandbytes optim/optimizer.py ``get_state_buffer``); torchao is not a dependency.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch

from vramfit.errors import ScenarioError
from vramfit.scenario import Optimizer, Scenario

LR = 1e-4

BNB_PAGED_MIN_NUMEL = 100_000  # bitsandbytes optim/optimizer.py: 'if not self.is_paged or A.numel() < 1e5'
TORCHAO_4BIT_BLOCK = 128  # torchao optim AdamW4bit(block_size=128)
TORCHAO_8BIT_BLOCK = 256  # torchao optim AdamW8bit(block_size=256)
TORCHAO_MIN_QUANT_SIZE = 4096  # torchao optim _new_buffer: quantized only if p.numel() >= 4096


def make_optimizer(scenario: Scenario, params: list[torch.nn.Parameter], tracker: Any = None) -> tuple[
    torch.optim.Optimizer, str
]:
    """The optimizer over ``params`` and a sentence saying which implementation runs."""
    opt = scenario.optimizer
    if opt is Optimizer.ADAMW and _foreach(scenario):
        # the profile's torch_optimizer_impl (torchtitan-2024: 9dec370 optimizer.py --optimizer.fused off by default)
        return torch.optim.AdamW(params, lr=LR, weight_decay=0.0, foreach=True), (
            "Optimizer: torch.optim.AdamW(foreach=True), the framework's default (torch._foreach_* temporaries)."
        )
    if opt is Optimizer.ADAMW:
        return torch.optim.AdamW(params, lr=LR, weight_decay=0.0, fused=True), (
            "Optimizer: torch.optim.AdamW(fused=True), HF Trainer's default adamw_torch_fused (torch >= 2.8); "
            "states in the parameter dtype, no parameter-sized temporaries."
        )
    if opt in (Optimizer.SGD, Optimizer.SGD_MOMENTUM):
        momentum = 0.9 if opt is Optimizer.SGD_MOMENTUM else 0.0
        return torch.optim.SGD(params, lr=LR, momentum=momentum, foreach=True), (
            f"Optimizer: torch.optim.SGD(momentum={momentum}, foreach=True)."
        )
    if opt is Optimizer.ADAFACTOR:
        from transformers.optimization import Adafactor

        return Adafactor(params, lr=LR, scale_parameter=False, relative_step=False, warmup_init=False), (
            "Optimizer: transformers Adafactor(scale_parameter=False, relative_step=False) as HF Trainer "
            "optim='adafactor': factored fp32 second moments, no first moment."
        )
    if opt in (Optimizer.ADAMW_4BIT, Optimizer.ADAMW_8BIT_TORCHAO):
        layout = AdamW4bitLayout if opt is Optimizer.ADAMW_4BIT else AdamW8bitLayout
        return layout(params, lr=LR), (
            f"Optimizer: torchao AdamW{layout.BITS}bit state layout ({layout.BITS}-bit codes, fp32 scale per "
            f"{layout.BLOCK}-element block, tensors under 4096 elements keep plain states; the compiled step is "
            "assumed to need no parameter-sized temporaries); torchao itself is not run."
        )
    return _bnb_optimizer(opt, params, tracker)


def _foreach(scenario: Scenario) -> bool:
    from vramfit.estimate.framework import OptimizerImpl, scenario_profile

    return scenario_profile(scenario).torch_optimizer_impl is OptimizerImpl.FOREACH


def _bnb_optimizer(opt: Optimizer, params: list[torch.nn.Parameter], tracker: Any) -> tuple[Any, str]:
    import bitsandbytes as bnb
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    classes: dict[Optimizer, Callable[..., Any]] = {
        Optimizer.ADAMW_8BIT: bnb.optim.AdamW8bit,
        Optimizer.PAGED_ADAMW: bnb.optim.PagedAdamW,
        Optimizer.PAGED_ADAMW_8BIT: bnb.optim.PagedAdamW8bit,
        Optimizer.LION: bnb.optim.Lion,
        Optimizer.LION_8BIT: bnb.optim.Lion8bit,
    }
    if opt not in classes:  # pragma: no cover - every enum member is handled
        raise ScenarioError("optimizer", f"{opt.value} cannot be simulated", [o.value for o in classes])
    cls = classes[opt]
    with unset_fake_temporarily():  # quantile maps are computed from data at construction
        optimizer = cls(params, lr=LR)
    text = f"Optimizer: bitsandbytes.optim.{cls.__name__} (blockwise 8-bit states for tensors >= 4096 elements)."
    if optimizer.is_paged:
        def get_state_buffer(p: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
            host = p.numel() >= BNB_PAGED_MIN_NUMEL
            if tracker is not None and host:
                tracker.host_mode = True
            try:
                return torch.zeros_like(p, dtype=dtype, device=p.device)
            finally:
                if tracker is not None:
                    tracker.host_mode = False

        if next(iter(params)).device.type != "cuda":
            optimizer.get_state_buffer = get_state_buffer
        text += (" Paged: states of tensors >= 1e5 elements live in CUDA managed memory, outside the "
                 "allocator's statistics (counted as host memory here).")
    return optimizer, text


class AdamW4bitLayout(torch.optim.Optimizer):
    """AdamW with torchao ``AdamW4bit``'s state tensors and per-parameter fp32 working copies.

    State per parameter with ``numel >= 4096`` and divisible by 128 (torchao optim/adam.py ``_new_buffer``,
    subclass_4bit.py ``OptimState4bit.zeros``): ``codes`` uint8 ``[numel // 2]``, ``scale`` fp32
    ``[numel // 128]``, ``qmap`` fp32 ``[16]``, for each of ``exp_avg`` and ``exp_avg_sq``; smaller
    tensors keep plain ``zeros_like`` states. torchao's step (``single_param_adam``) is ``torch.compile``d:
    dequantize, update and requantize fuse, so no parameter-sized temporaries are modelled.
    """

    BITS, BLOCK = 4, TORCHAO_4BIT_BLOCK

    def __init__(self, params: Iterable[torch.nn.Parameter], lr: float = LR) -> None:
        super().__init__(params, {"lr": lr, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0})

    @classmethod
    def _buffer(cls, p: torch.Tensor) -> dict[str, torch.Tensor] | torch.Tensor:
        n = p.numel()
        if n >= TORCHAO_MIN_QUANT_SIZE and n % cls.BLOCK == 0:
            return {
                "codes": torch.zeros(math.ceil(n * cls.BITS / 8), dtype=torch.uint8, device=p.device),
                "scale": torch.zeros(n // cls.BLOCK, dtype=torch.float32, device=p.device),
                "qmap": torch.zeros(2 ** cls.BITS, dtype=torch.float32, device=p.device),
            }
        return torch.zeros_like(p)

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                    state["exp_avg"] = self._buffer(p)
                    state["exp_avg_sq"] = self._buffer(p)
                state["step"].add_(1)
                # torchao's single_param_adam is torch.compile'd: dequantize, update and requantize fuse
                # into kernels that write the states and the parameter in place
                p.add_(p.grad, alpha=-group["lr"])

    def state_tensors(self) -> list[torch.Tensor]:
        out = []
        for st in self.state.values():
            for v in st.values():
                out.extend(v.values() if isinstance(v, dict) else [v])
        return out


class AdamW8bitLayout(AdamW4bitLayout):
    """torchao ``AdamW8bit``'s state tensors (pytorch/ao v0.6.1 prototype/low_bit_optim/subclass_8bit.py
    ``OptimState8bit.zeros``): ``codes`` uint8 ``[numel]``, ``scale`` fp32 ``[numel // 256]``, ``qmap`` fp32
    ``[256]``; the same rule for small tensors and the same step as :class:`AdamW4bitLayout`."""

    BITS, BLOCK = 8, TORCHAO_8BIT_BLOCK


def optimizer_state_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """Every tensor held in the optimizer's state."""
    if isinstance(optimizer, AdamW4bitLayout):
        return optimizer.state_tensors()
    out = []
    for st in optimizer.state.values():
        out.extend(v for v in st.values() if isinstance(v, torch.Tensor))
    return out


def in_backward_optimizers(scenario: Scenario, params: list[torch.nn.Parameter], tracker: Any = None) -> tuple[
    dict[torch.nn.Parameter, torch.optim.Optimizer], str
]:
    """One optimizer per parameter, stepped from a post-accumulate-grad hook (the gradient is freed at once).

    The pattern of PyTorch's tutorial "How to save memory by fusing the optimizer step into the backward
    pass" and torchtune's ``optimizer_in_bwd``.
    """
    opts: dict[torch.nn.Parameter, torch.optim.Optimizer] = {}
    text = ""
    for p in params:
        opts[p], text = make_optimizer(scenario, [p], tracker)

    def hook(p: torch.nn.Parameter) -> None:
        opts[p].step()
        opts[p].zero_grad(set_to_none=True)

    for p in params:
        p.register_post_accumulate_grad_hook(hook)
    return opts, text + " Stepped inside backward, one parameter at a time (optimizer_in_backward)."
