"""LoopCarry.OUTPUTS keeps the previous micro-batch's graph into the next forward, and with it bitsandbytes <= 0.43.1
MatMul4Bit's ``ctx.tensors`` (retained_graph.previous_step_inputs): meta-llama/llama-recipes@1e0f8a1f
utils/train_utils.py l. 88-105 binds ``outputs = model(**batch)``, ``loss = outputs.loss / gradient_accumulation_steps``
and calls ``loss.backward()`` with no ``del``, so both names hold tensors with a ``grad_fn`` until the next call has
returned. Backward frees what ``save_for_backward`` saved, not a Python attribute of ``ctx``; the node holding it lives
as long as the graph is referenced. Traced here on small CPU tensors with MatMul4Bit's pattern."""

from __future__ import annotations

import weakref

import torch

from vramfit.estimate.retained_graph import previous_step_inputs
from vramfit.estimate.step import compute
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario


class _KeepsInput(torch.autograd.Function):
    """bitsandbytes 0.42.0 autograd/_functions.py MatMul4Bit.forward l. 522-523: ``ctx.tensors = (A, B)``."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.tensors = (a, b)
        return a @ b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.tensors
        return grad @ b.t(), None


class _SavesInput(_KeepsInput):
    """The same matmul with its input in ``save_for_backward`` (bitsandbytes >= 0.43.2, PR #1270)."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return grad @ b.t(), None


def _previous_input_alive_in_next_forward(fn, drop: bool) -> bool:
    """Two micro-batches of llama-recipes' loop (``drop``: ``del outputs, loss`` after backward, as loops that carry
    nothing do); whether the first one's matmul input is alive while the second one's forward runs."""
    weight, refs, seen = torch.randn(8, 8), [], []

    def model(x):
        a = x * 2  # the matmul's input, referenced by nothing but the graph
        refs.append(weakref.ref(a))
        if len(refs) == 2:
            seen.append(refs[0]() is not None)
        return {"loss": fn.apply(a, weight).sum()}

    outputs = loss = None
    for _ in range(2):
        outputs = model(torch.randn(4, 8, requires_grad=True))
        loss = outputs["loss"] / 2
        loss.backward()
        if drop:
            del outputs, loss
    return seen[0]


def test_the_kept_outputs_and_loss_keep_ctx_tensors_alive_through_the_next_forward():
    assert _previous_input_alive_in_next_forward(_KeepsInput, drop=False)
    assert not _previous_input_alive_in_next_forward(_KeepsInput, drop=True)  # LoopCarry.NOTHING
    assert not _previous_input_alive_in_next_forward(_SavesInput, drop=False)  # backward freed the saved input


def test_llama_recipes_2023_with_bitsandbytes_043_carries_the_previous_inputs():
    keys = {"model": "meta-llama/Llama-2-7b-hf", "method": "qlora", "quantize": "nf4", "framework": "hf",
            "precision": "bf16-true", "lora_targets": ["q_proj", "v_proj"], "lora_rank": 8, "micro_batch_size": 1,
            "seq_len": 512}

    def inputs(version: str) -> int:
        sc = parse_scenario({**keys, "framework_version": version})
        return previous_step_inputs(compute(resolve_model(sc.model).spec, sc))

    # the seven 4-bit linears' bf16 inputs as the step saves them (activations q_inputs: q, k, v, o, gate and up h
    # each, down the intermediate size): (6 x 4096 + 11008) x 512 tokens x 2 B x 32 layers
    assert inputs("bitsandbytes-0.43+llama-recipes-2023") == (6 * 4096 + 11008) * 512 * 2 * 32 == 1_166_016_512
    assert inputs("bitsandbytes-0.43") == 0  # transformers' Trainer returns loss.detach(): nothing carried
    assert inputs("llama-recipes-2023") == 0  # bitsandbytes >= 0.43.2 saves the input for backward only
