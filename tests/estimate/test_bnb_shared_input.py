"""bitsandbytes <= 0.43.1 MatMul4Bit keeps its input in ``ctx.tensors = (A, B)`` (autograd/_functions.py, removed by
PR #1270 in 0.43.2); A is what Linear4bit.forward passes on after ``x = x.to(self.compute_dtype)`` (nn/modules.py), a
copy only where x has another dtype. PEFT's LoRA wrapper hands x itself to the base layer (peft v0.11.1
tuners/lora/bnb.py Linear4bit.forward ``result = self.base_layer(x, *args, **kwargs)``; its dropout runs on the LoRA
branch only), and transformers' Llama block feeds q/k/v one ``hidden_states`` and gate/up one normed MLP input. So the
projections that read one tensor keep one storage, unless the cast copies it per layer. Replicated here on small CPU
tensors with a Llama block's structure, counted by storage identity, and compared with the estimator's keys."""

from __future__ import annotations

import pytest
import torch
from torch.utils.checkpoint import checkpoint

from vramfit.estimate.step import compute
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario

KEPT: list[torch.Tensor] = []  # every A a MatMul4Bit replica kept, in forward order


class _MatMul4Bit(torch.autograd.Function):
    """bitsandbytes 0.43.1 autograd/_functions.py MatMul4Bit: no custom_fwd, ``ctx.tensors = (A, B)`` when an input
    needs a gradient."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.tensors = (a, b) if any(ctx.needs_input_grad[:2]) else (None, None)
        if ctx.tensors[0] is not None:
            KEPT.append(a)
        return a @ b.to(a.dtype).t()

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.tensors
        return grad @ b.to(grad.dtype), None


class _Linear4bit(torch.nn.Module):
    """bitsandbytes 0.43.1 nn/modules.py Linear4bit.forward: ``x = x.to(self.compute_dtype)``, matmul, ``.to(inp_dtype)``;
    wrapped as PEFT's LoRA Linear4bit does (base layer gets x; dropout only before lora_A)."""

    def __init__(self, d_in: int, d_out: int, dropout: float, lora: bool = True):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(d_out, d_in), requires_grad=False)
        self.lora = lora
        self.a, self.b = torch.nn.Linear(d_in, 4, bias=False), torch.nn.Linear(4, d_out, bias=False)
        self.dropout = torch.nn.Dropout(dropout)

    def forward(self, x):
        inp = x.dtype
        result = _MatMul4Bit.apply(x.to(torch.bfloat16), self.weight).to(inp)  # compute_dtype bf16
        if not self.lora:
            return result
        return result + self.b(self.a(self.dropout(x).to(self.a.weight.dtype))).to(inp)


class _Block(torch.nn.Module):
    """transformers' LlamaDecoderLayer order: norm, q/k/v of one ``hidden_states``, attention, o, norm, gate/up of
    one input, down. ``norm_dtype``: the dtype the norms return (fp32 where prepare_model_for_kbit_training upcast)."""

    def __init__(self, h: int, inter: int, dropout: float, norm_dtype: torch.dtype):
        super().__init__()
        self.norm_dtype = norm_dtype
        self.q, self.k, self.v = (_Linear4bit(h, h, dropout) for _ in range(3))
        self.o = _Linear4bit(h, h, dropout, lora=False)  # no o_proj in Answer.AI's target list
        self.gate, self.up, self.down = _Linear4bit(h, inter, dropout), _Linear4bit(h, inter, dropout), _Linear4bit(
            inter, h, dropout)

    def forward(self, x):
        n = (x * 1.0).to(self.norm_dtype)
        q, k, v = self.q(n), self.k(n), self.v(n)
        attn = torch.softmax(q @ k.t(), dim=-1).to(torch.bfloat16) @ v.to(torch.bfloat16)
        x = x + self.o(attn).to(x.dtype)
        m = (x * 1.0).to(self.norm_dtype)
        return x + self.down(torch.nn.functional.silu(self.gate(m)) * self.up(m)).to(x.dtype)


def _kept_storages(norm_dtype: torch.dtype, dropout: float, ckpt: bool) -> list[tuple[int, torch.dtype]]:
    """(elements, dtype) of each distinct storage the block's 4-bit matmuls keep, at the moment the last one ran
    (in the recompute, under reentrant checkpointing)."""
    torch.manual_seed(0)
    block = _Block(16, 40, dropout, norm_dtype)
    x = torch.randn(8, 16, dtype=torch.bfloat16, requires_grad=True)
    KEPT.clear()
    out = checkpoint(block, x, use_reentrant=True) if ckpt else block(x)
    if ckpt:
        assert not KEPT  # the reentrant forward runs without grad: nothing kept
        out.sum().backward()  # recomputes the block, which keeps its inputs again
    seen = {t.untyped_storage().data_ptr(): (t.numel(), t.dtype) for t in KEPT}
    assert len(KEPT) == 7
    return sorted(seen.values(), key=str)


@pytest.mark.parametrize("dropout", [0.0, 0.1])
@pytest.mark.parametrize("ckpt", [False, True])
def test_16_bit_inputs_share_one_storage_per_input(dropout, ckpt):
    # bf16 norms (Answer.AI's fsdp_qlora: no prepare_model_for_kbit_training): q/k/v keep one tensor, gate/up one,
    # o and down their own inputs: 4 storages for 7 matmuls, dropout or not, checkpointed or not
    kept = _kept_storages(torch.bfloat16, dropout, ckpt)
    assert sorted(kept, key=str) == sorted([(8 * 16, torch.bfloat16)] * 3 + [(8 * 40, torch.bfloat16)], key=str)


def test_fp32_inputs_are_copied_once_per_linear():
    # fp32 norms and outputs (`.to(inp_dtype)`): each linear's `x.to(compute_dtype)` is its own bf16 copy; o_proj's
    # input is the bf16 attention output itself
    assert _kept_storages(torch.float32, 0.1, ckpt=False) == sorted(
        [(8 * 16, torch.bfloat16)] * 6 + [(8 * 40, torch.bfloat16)], key=str)


def _q_inputs(version: str, precision: str, **more) -> dict[str, int]:
    keys = {"model": "meta-llama/Llama-2-7b-hf", "method": "qlora", "quantize": "nf4", "framework": "hf",
            "precision": precision, "lora_targets": ["q_proj", "k_proj", "v_proj", "gate_proj", "up_proj",
                                                     "down_proj"], "lora_rank": 8, "micro_batch_size": 1,
            "seq_len": 512, "lora_dropout": 0.1, "framework_version": version, **more}
    sc = parse_scenario(keys)
    saved = compute(resolve_model(sc.model).spec, sc).acts.saved
    return {k: saved.items[k] for k in saved.q_inputs}


def test_estimator_counts_one_key_per_kept_storage():
    h, inter, T = 4096, 11008, 512
    # bf16-true, norms not upcast (Answer.AI's fsdp_qlora rows): the four storages of the replica above
    assert _q_inputs("bitsandbytes-0.43", "bf16-true", kbit_prepare="no") == {
        "attn_in": 2 * T * h, "attn.out": 2 * T * h, "mlp_in": 2 * T * h, "mlp_mid": 2 * T * inter}
    # fp32 norm outputs under autocast (llama-recipes 2023): a bf16 copy per linear that reads them, o_proj's input
    # shared with the attention output
    kept = _q_inputs("bitsandbytes-0.43+llama-recipes-2023", "bf16-mixed")
    assert kept["attn.out"] == 2 * T * h
    assert sum(kept.values()) == (6 * h + inter) * T * 2  # q, k, v, o, gate, up h wide, down inter wide
    assert len(kept) == 7


def test_non_reentrant_checkpointing_keeps_the_inputs_through_forward():
    # torch's non-reentrant checkpoint packs what save_for_backward saves, not a ctx attribute: the forward keeps
    # every A (the bug fsdp_qlora's README avoids with --reentrant_checkpointing True), here 4 storages for 7 matmuls
    torch.manual_seed(0)
    block = _Block(16, 40, 0.1, torch.bfloat16)
    KEPT.clear()
    out = checkpoint(block, torch.randn(8, 16, dtype=torch.bfloat16, requires_grad=True), use_reentrant=False)
    assert len({t.untyped_storage().data_ptr() for t in KEPT}) == 4
    del out
