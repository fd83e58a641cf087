"""lit-gpt's shifted logits at the loss (estimate/loss.py ``_litgpt_shift_copy``, ``_litgpt_loss``).

The loops shift by slicing (lit-gpt@8641822 / litgpt@5895df10 finetune/lora.py ``logits[-1] = logits[-1][..., :-1, :]``,
litgpt@5895df10 finetune/full.py ``chunked_cross_entropy(logits[..., :-1, :], ...)``): a view. chunked_cross_entropy's
``reshape(-1, V)`` copies it only when more than one sequence makes the slice non-contiguous. ``_chunked_ce`` below is
litgpt@5895df10 litgpt/utils.py chunked_cross_entropy (l. 247-285; identical at lit-gpt@8641822 lit_gpt/utils.py),
run on CPU under the simulator's LiveTracker, so torch's own reshape/split/autograd decide what is allocated.
"""

import importlib

import pytest
import torch

from vramfit.estimate.framework import profile_for
from vramfit.models import resolve_model
from vramfit.scenario import Framework, parse_scenario
from vramfit.sim.trace import LiveTracker

loss_mod = importlib.import_module("vramfit.estimate.loss")
TINY = "TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T"  # V = 32,000


def _chunked_ce(logits, targets, chunk_size=128):
    if isinstance(logits, list):
        logit_chunks = [c.reshape(-1, c.size(-1)) for c in logits]
        target_chunks = [c.reshape(-1) for c in targets.split(logits[0].size(1), dim=1)]
        losses = [torch.nn.functional.cross_entropy(lc, tc, reduction="none")
                  for lc, tc in zip(logit_chunks, target_chunks, strict=True)]
        return torch.cat(losses).sum() / targets.numel()
    logits = logits.reshape(-1, logits.size(-1))
    targets = targets.reshape(-1)
    losses = [torch.nn.functional.cross_entropy(lc, tc, reduction="none")
              for lc, tc in zip(logits.split(chunk_size), targets.split(chunk_size), strict=True)]
    return torch.cat(losses).sum() / targets.numel()


def _trace(B, T, V, chunked):
    """(clone bytes, forward high point, backward high point) of the loss, above the fp32 logits the loop holds."""
    torch.manual_seed(0)
    x = torch.randint(0, V, (B, T))
    tr = LiveTracker()
    with tr:
        tr.phase = "forward"
        if chunked:  # the model's chunk list after Fabric's .to(fp32)
            logits = [torch.randn(B, c.size(1), V, requires_grad=True) for c in x.split(128, dim=1)]
            logits[-1] = logits[-1][..., :-1, :]
            loss = _chunked_ce(logits, x[..., 1:])
        else:
            logits = torch.randn(B, T, V, requires_grad=True)
            loss = _chunked_ce(logits[..., :-1, :], x[..., 1:])
        tr.phase = "backward"
        loss.backward()
    live, peaks, held, phase = 0, {"forward": 0, "backward": 0}, 4 * B * T * V, "forward"
    for e in tr.trace.events:
        sid = e if e >= 0 else ~e
        if tr.trace.shapes[sid][-1:] != (V,):
            continue  # targets, per-token losses and scalars: only the logit-sized tensors
        if e >= 0 and tr.trace.phases[sid] == "backward":
            phase = "backward"  # from the first allocation of the backward on
        live += tr.trace.nbytes[sid] if e >= 0 else -tr.trace.nbytes[sid]
        peaks[phase] = max(peaks[phase], live)
    clones = sum(n for n, op, shape in zip(tr.trace.nbytes, tr.trace.ops, tr.trace.shapes, strict=True)
                 if op.startswith("clone") and shape[-1:] == (V,))  # the targets' int64 copy is not counted
    return clones, peaks["forward"] - held, peaks["backward"] - held


def _scenario(method, B, seq, model=TINY):
    return parse_scenario({"model": model, "method": method, "framework": "litgpt", "framework_version": "litgpt-2024",
                           "precision": "bf16-true", "micro_batch_size": B, "seq_len": seq, "optimizer": "adamw"})


@pytest.mark.parametrize("B", [1, 2])
@pytest.mark.parametrize("method", ["full", "lora"])
def test_reshape_copies_the_shift_only_above_one_sequence(method, B):
    seq, V = 320, 32_000  # 3 head chunks, the last of 64 tokens
    sc = _scenario(method, B, seq)
    spec = resolve_model(TINY).spec
    clones, fwd, _ = _trace(B, seq, V, chunked=method == "lora")
    copy = loss_mod._litgpt_shift_copy(spec, sc, profile_for(Framework.LITGPT, "litgpt-2024"))
    rows = seq - 1 if method == "full" else 64 - 1
    assert clones == copy == (4 * B * rows * V if B > 1 else 0)
    # forward: every chunk's fp32 log_softmax output (saved) plus the copy, held by the function until it returns
    assert fwd == 4 * B * (seq - 1) * V + copy


@pytest.mark.parametrize("B", [1, 2])
def test_full_loss_backward_is_the_whole_gradient_and_the_slice_scatter(B):
    """full.py's split is of 128 flattened rows: the per-chunk gradients never top SplitBackward's cat beside the
    chunk gradients, or SliceBackward's fresh (B, T, V) zeros beside the cat: 4 B (T-1) V + 4 TV above the logits."""
    seq, V = 320, 32_000
    _, _, bwd = _trace(B, seq, V, chunked=False)
    TV = B * seq * V
    assert bwd == 4 * B * (seq - 1) * V + 4 * TV
    m = loss_mod.loss_memory(resolve_model(TINY).spec, _scenario("full", B, seq), profile_for(Framework.LITGPT,
                                                                                                  "litgpt-2024"))
    # the estimate keeps the saved log_softmax as 4 TV (one row per token): backward 4 TV above it, forward + the copy
    assert (m.held, m.saved, m.backward_peak) == (4 * TV, 8 * TV, 12 * TV)
    assert m.forward_peak == 8 * TV + (4 * B * (seq - 1) * V if B > 1 else 0)


def test_tinyllama_full_row_loss_moments():
    """LIT_HUB_2409-15's shape (4 x 512, V 32,000): forward 8 TV + the 4 x 511 x V copy, backward 12 TV."""
    sc = _scenario("full", 4, 512)
    m = loss_mod.loss_memory(resolve_model(TINY).spec, sc, profile_for(Framework.LITGPT, "litgpt-2024"))
    TV = 4 * 512 * 32_000
    assert (m.forward_peak, m.backward_peak) == (8 * TV + 4 * 4 * 511 * 32_000, 12 * TV) == (785_920_000, 786_432_000)


def test_the_chunked_head_loop_never_soft_caps():
    """litgpt@2b195c7f lora.py GPT.forward returns the head chunks (l. 546-548) before the soft-capping (l. 550-551);
    full.py's whole-logits call soft-caps (model.py l. 97-98): Gemma 2's cap tensors only in full fine-tuning."""
    spec = resolve_model("google/gemma-2-2b").spec
    assert spec.final_logit_softcapping
    profile = profile_for(Framework.LITGPT, "litgpt-2024")
    TV = 2 * 512 * 256_000
    lora = loss_mod.loss_memory(spec, _scenario("lora", 2, 512, "google/gemma-2-2b"), profile)
    full = loss_mod.loss_memory(spec, _scenario("full", 2, 512, "google/gemma-2-2b"), profile)
    assert lora.saved == 8 * TV and "soft-capping" not in lora.detail
    assert full.saved == 8 * TV + 2 * TV and "soft-capping" in full.detail
