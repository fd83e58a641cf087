"""The chunked loss's backward order: every chunk's cross-entropy before any output projection.

torchtune's CEWithChunkedOutputLoss takes the logit chunks the model's forward made, so autograd (which
runs the ready node with the highest sequence number first) finishes every cross-entropy backward before
the first projection's MmBackward; the output weight's chunk gradients then meet in its input buffer.
estimate/loss.py ``projection_stage`` models the two moments; these tests run the real engine on the CPU.
"""

from __future__ import annotations

import importlib

import torch
import torch.nn.functional as F

from vramfit import estimate

round_allocation = importlib.import_module("vramfit.estimate.allocator").round_allocation

CHUNKS = 8


def _backward_order() -> list[str]:
    """Names of the backward nodes as the engine runs them, for torchtune's layout (tied weight)."""
    torch.manual_seed(0)
    emb = torch.nn.Embedding(64, 16)
    tokens = torch.randint(0, 64, (2, 32))
    labels = torch.randint(0, 64, (2, 32))
    h = emb(tokens)
    logits = [F.linear(c, emb.weight) for c in h.chunk(CHUNKS, dim=1)]  # the model's chunked_output
    order: list[str] = []
    for i, lg in enumerate(logits):
        lg.grad_fn.register_prehook(lambda g, i=i: order.append(f"projection{i}"))
    total = 0.0
    for i, (lg, lb) in enumerate(zip(logits, labels.chunk(CHUNKS, dim=1), strict=True)):
        x = lg.reshape(-1, 64)
        ce = F.cross_entropy(x.float(), lb.reshape(-1), reduction="sum")  # compute_cross_entropy
        ce.grad_fn.register_prehook(lambda g, i=i: order.append(f"ce{i}"))
        total = total + ce
    del logits
    total.backward()
    return order


def test_every_cross_entropy_backward_runs_before_any_projection_backward():
    order = _backward_order()
    assert order[:CHUNKS] == [f"ce{i}" for i in reversed(range(CHUNKS))]
    assert order[CHUNKS:] == [f"projection{i}" for i in reversed(range(CHUNKS))]


def _row(**extra) -> dict:
    # torchtune README @1814feb17 'Optimization flags' row '+ Activation Offloading' (TT_README_OPT-15)
    return {"model": "meta-llama/Llama-3.2-3B-Instruct", "framework": "torchtune", "method": "full",
            "precision": "bf16-true", "optimizer_in_backward": True, "micro_batch_size": 2, "seq_len": 4096,
            "gradient_checkpointing": "offload", "loss": "chunked", "compile": True, **extra}


def test_projection_stage_holds_two_weight_gradients_and_seven_chunk_gradients():
    """Full fine-tuning (tied 128256 x 3072 embedding, bf16): the second projection's backward is the high point,
    7 chunks' bf16 logit gradients and two of the weight's gradients (the buffered sum and the new one)."""
    loss_phase = next(p for p in estimate(_row()).phases if p.phase == "backward-loss")
    chunk_grad = 2 * (2 * 4096 * 128256 // CHUNKS)
    assert chunk_grad == 262_668_288
    assert dict(loss_phase.breakdown)["logits_loss"] == 7 * chunk_grad == 1_838_678_016
    assert dict(loss_phase.breakdown)["gradients"] == 2 * round_allocation(128256 * 3072 * 2) == 1_576_009_728


def test_frozen_output_layer_keeps_the_cross_entropy_stage():
    """LoRA: the projections make no weight gradient, so the loss backward's high point is the cross-entropy
    stage: the 8 saved 16-bit logit chunks and one chunk's gradient, no gradients."""
    r = estimate(_row(method="lora", lora_rank=64, lora_alpha=128, optimizer_in_backward=False))
    loss_phase = next(p for p in r.phases if p.phase == "backward-loss")
    # the saved bf16 logits, one chunk's gradient and the per-token fp32 logsumexp
    assert dict(loss_phase.breakdown)["logits_loss"] == 2 * 2 * 4096 * 128256 + 262_668_288 + 4 * 2 * 4096 == 2_364_047_360
    assert "gradients" not in dict(loss_phase.breakdown)
