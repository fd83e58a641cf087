"""torchao's low-bit AdamW (``adamw-4bit``, ``adamw-8bit-torchao``): the temporaries of its per-parameter step,
after the optimizer step or inside backward (torchtune ``optimizer_in_bwd``)."""

from __future__ import annotations

from vramfit.models.spec import ModelSpec
from vramfit.scenario import Method, Optimizer, Scenario

#: torchao's low-bit AdamW (one per-parameter step, :func:`torchao_step_bytes`).
TORCHAO_OPTIMIZERS = (Optimizer.ADAMW_4BIT, Optimizer.ADAMW_8BIT_TORCHAO)


def torchao_step_bytes(numel: int) -> int:
    """One parameter's torchao step: ``single_param_adam`` keeps fp32 copies of both updated states
    (``new_exp_avg = exp_avg.lerp(grad, 1 - beta1)``, ``new_exp_avg_sq = ...``: the quantized states
    dequantize to fp32, "keep high precision copy for param update") alive until the parameter's update
    (pytorch/ao v0.6.1 torchao/prototype/low_bit_optim/adam.py; v0.11.0 torchao/optim/adam.py)."""
    return 2 * 4 * numel


def in_backward_steps(spec: ModelSpec, sc: Scenario) -> tuple[int, int]:
    """The optimizer's temporaries when its step runs in backward (torchtune ``optimizer_in_bwd``: each
    parameter's step in its ``register_post_accumulate_grad_hook``, torchtune v0.4.0 training/memory.py:219-242,
    recipes/full_finetune_single_device.py:464): (a block's largest linear, stepped inside that block's backward; the input embedding, stepped last,
    at the end of backward, beside its gradient). torchao's optimizers only (:func:`torchao_step_bytes`; fused
    torch AdamW and bitsandbytes' kernels make none); full fine-tuning (the adapters' are a few MiB)."""
    if not sc.optimizer_in_backward or sc.optimizer not in TORCHAO_OPTIMIZERS or sc.method is not Method.FULL:
        return 0, 0
    block = max(lin.in_features * lin.out_features for lin in spec.block_linears)
    return torchao_step_bytes(block), torchao_step_bytes(spec.embedding_params)
