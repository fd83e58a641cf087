"""The chunked loss's backward order: every chunk's cross-entropy before any output projection.

torchtune's CEWithChunkedOutputLoss takes the logit chunks the model's forward made, so autograd (which
runs the ready node with the highest sequence number first) finishes every cross-entropy backward before
the first projection's MmBackward; the output weight's chunk gradients then meet in its input buffer, the first
merge out of place.
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


def _weight_merges(chunks: int, tied: bool) -> list[str]:
    """The ops that sum the output weight's gradients, as the real engine runs them (no dispatch mode: one would make
    every tensor subclass-like and force the out-of-place path)."""
    from torch.profiler import ProfilerActivity, profile

    emb = torch.nn.Embedding(64, 16)
    weight = emb.weight if tied else torch.nn.Parameter(torch.randn(64, 16))
    h = emb(torch.randint(0, 64, (2, 32))) * 2
    loss = sum(F.linear(c, weight).float().logsumexp(-1).sum() for c in h.chunk(chunks, dim=1))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        loss.backward()
    return [e.name for e in prof.events()
            if e.name in ("aten::add", "aten::add_") and e.input_shapes and list(e.input_shapes[0]) == [64, 16]]


def test_the_first_merge_of_linear_weight_gradients_is_out_of_place():
    """F.linear's weight gradient is a view (TBackward of mm_mat2_backward's transposed product), so autograd's input
    buffer adds the second one out of place (``can_accumulate_inplace`` wants one user of the storage) and into that
    sum in place after; with a tied embedding and one head call, the embedding's gradient is that second one
    (estimate/loss.py head_grad_is_view)."""
    assert _weight_merges(CHUNKS, tied=False) == ["aten::add"] + ["aten::add_"] * (CHUNKS - 2)
    assert _weight_merges(CHUNKS, tied=True) == ["aten::add"] + ["aten::add_"] * (CHUNKS - 1)
    assert _weight_merges(1, tied=True) == ["aten::add"]


def test_projection_stage_holds_three_weight_gradients_and_six_chunk_gradients():
    """Full fine-tuning (tied 128256 x 3072 embedding, bf16): the high point is the first out-of-place merge, after
    the second projection's backward has freed its logit gradient: 6 chunks' bf16 logit gradients and three of the
    weight's gradients (the buffered one, the new one and their sum)."""
    loss_phase = next(p for p in estimate(_row()).phases if p.phase == "backward-loss")
    chunk_grad = 2 * (2 * 4096 * 128256 // CHUNKS)
    assert chunk_grad == 262_668_288
    assert dict(loss_phase.breakdown)["logits_loss"] == 6 * chunk_grad == 1_576_009_728
    assert dict(loss_phase.breakdown)["gradients"] == 3 * round_allocation(128256 * 3072 * 2) == 2_364_014_592


def test_frozen_output_layer_keeps_the_cross_entropy_stage():
    """LoRA: the projections make no weight gradient, so the loss backward's high point is the cross-entropy
    stage: the 8 saved 16-bit logit chunks and one chunk's gradient, no gradients."""
    r = estimate(_row(method="lora", lora_rank=64, lora_alpha=128, optimizer_in_backward=False))
    loss_phase = next(p for p in r.phases if p.phase == "backward-loss")
    # the saved bf16 logits, one chunk's gradient and the per-token fp32 logsumexp
    assert dict(loss_phase.breakdown)["logits_loss"] == 2 * 2 * 4096 * 128256 + 262_668_288 + 4 * 2 * 4096 == 2_364_047_360
    assert "gradients" not in dict(loss_phase.breakdown)
