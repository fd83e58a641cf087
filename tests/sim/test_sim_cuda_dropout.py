"""Dropout in the fake run as CUDA runs it (sim/cuda_emulation.py ``cuda_dropout``): ATen's fused kernel keeps a bool
mask for backward, where the CPU path keeps a noise tensor of the input's dtype (torch v2.13.0
aten/src/ATen/native/Dropout.cpp ``is_fused_kernel_acceptable``)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from simconfigs import catalog_config
from torch._subclasses.fake_tensor import FakeTensorMode

from vramfit.estimate import estimate
from vramfit.sim import simulate
from vramfit.sim.cuda_emulation import cuda_dropout, patched


def _saved_by_dropout(x: torch.Tensor, **kw) -> list[torch.dtype]:
    """The dtypes of what autograd keeps from one dropout of ``x`` (the mask or noise the product needs)."""
    out = F.dropout(x, **kw)
    node = out.grad_fn
    return sorted({str(getattr(node, a).dtype) for a in dir(node)
                   if a.startswith("_saved_") and isinstance(getattr(node, a), torch.Tensor)})


def test_training_dropout_keeps_a_bool_mask_as_the_fused_cuda_kernel_does():
    with FakeTensorMode():
        x = torch.empty(8, 16, dtype=torch.float32, requires_grad=True)
        assert _saved_by_dropout(x, p=0.1, training=True) == ["torch.float32"]  # the CPU path: fp32 noise
        with patched(cuda_dropout()):
            assert type(F.dropout(x, p=0.1, training=True).grad_fn).__name__ == "NativeDropoutBackward0"
            assert _saved_by_dropout(x, p=0.1, training=True) == ["torch.bool"]
            # eval mode, p = 0 and in-place dropout (``dropout_`` takes the noise path on CUDA too) are left alone
            assert F.dropout(x, p=0.1, training=False).grad_fn is None
            assert F.dropout(x, p=0.0, training=True).grad_fn is None
            y = torch.empty(8, 16, dtype=torch.float32)
            assert F.dropout(y, p=0.1, training=True, inplace=True) is y
    assert F.dropout.__module__ == "torch.nn.functional"  # put back after the block


def test_lora_dropout_on_fp32_inputs_meets_the_estimate(config_file):
    """QLoRA without prepare_model_for_kbit_training in bf16-true (no autocast) with dropout 0.1: PEFT casts every
    adapted input to the fp32 adapters' dtype and drops it out. With the CPU path's fp32 noise tensors (4 B per element)
    this 3-layer trace read 9.9 % above the estimate (3.6 % at the full 32 layers); with the fused kernel's bool mask
    (1 B) -0.2 % (-1.3 % at 32 layers)."""
    llama2 = config_file({**catalog_config("meta-llama/Llama-2-7b-hf"), "num_hidden_layers": 3}, "llama2")
    sc = {"model": llama2, "method": "qlora", "precision": "bf16-true", "quantize": "nf4-dq", "lora_rank": 64,
          "lora_alpha": 16, "lora_dropout": 0.1, "kbit_prepare": "no", "seq_len": 2048, "attention": "sdpa",
          "lora_targets": ["k_proj", "q_proj", "v_proj", "up_proj", "down_proj", "gate_proj"],
          "gradient_checkpointing": "full"}
    sim = simulate(sc, layers=3)
    # the noise tensors were among the largest live at the peak (32 and 86 MiB each)
    assert not [t for t in sim.top_tensors if t.op == "empty_like.default" and "dropout" in t.where]
    est = estimate(sc)
    assert est.peak.allocated_bytes == pytest.approx(sim.result.peak.allocated_bytes, rel=0.01)


def test_the_trace_states_the_rerouted_dropout(config_file):
    """The assumptions name the dropout kernel once, with its calls, and only where a dropout ran."""
    model = config_file({**catalog_config("meta-llama/Llama-3.2-1B"), "num_hidden_layers": 2}, "llama")
    sc = {"model": model, "method": "lora", "seq_len": 128, "lora_targets": ["q_proj", "v_proj"]}
    stated = [a for a in simulate({**sc, "lora_dropout": 0.1}, layers=2).result.assumptions
              if a.startswith("Training dropout as CUDA runs it")]
    # q and v in 2 layers, each dropout once per forward: 2 micro-batch forwards traced (two iterations)
    assert len(stated) == 1 and stated[0].endswith("(8 calls).")
    assert not [a for a in simulate(sc, layers=2).result.assumptions if a.startswith("Training dropout")]
