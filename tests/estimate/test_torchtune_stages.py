"""torchtune's preference stages: its own log-prob code (pytorch/torchtune v0.4.0, 03a4b1e41), not TRL's fused head.

recipes/lora_dpo_single_device.py l. 454-461 ``concatenated_forward``: ``all_logits = model(...)`` are fp32
(modules/transformer.py l. 652 ``self.output(h).float()``), and rlhf/sequence_processing.py l. 133-139 / 97-101
take ``torch.gather(F.log_softmax(logits[:, :-1, :] / 1.0, dim=-1), 2, ...)``: the division's contiguous copy (F,
saved by nothing), log_softmax's output (F, saved) and the logits together, 3F; the logits are deleted before the
reference pass (l. 512), which runs the same code under no_grad with the adapters disabled (l. 521-527). DPOLoss and
SimPOLoss (rlhf/loss/dpo.py) add no cross-entropy over the chosen half."""

import dataclasses

import pytest
import torch
import torch.nn.functional as F_

from vramfit.estimate.framework import PROFILES
from vramfit.estimate.phases import StepPhase
from vramfit.estimate.stages.preference import full_log_softmax
from vramfit.estimate.step import compute
from vramfit.models import resolve_model
from vramfit.scenario import Framework, parse_scenario

M = "meta-llama/Llama-3.2-1B"  # vocab 128,256, hidden 2048, intermediate 8192
SPEC = resolve_model(M).spec
V, H = 128_256, 2048
T = 2 * 1 * 512  # one pair (chosen + rejected) of 512 tokens
F = T * V * 4  # the fp32 logits of the concatenated forward
SMALL = {"model": M, "method": "lora", "micro_batch_size": 1, "seq_len": 512}


def step(**keys):
    return compute(SPEC, parse_scenario({**SMALL, **keys}), None)


def phases(st) -> dict:
    return {b.phase: dict(b.parts) for b in st.phases}


def test_dpo_loss_is_fp32_logits_their_copy_and_log_softmax():
    """F = 1,024 tokens x 128,256 x 4 B. Forward: the logits, ``logits / temperature`` and log_softmax's output
    (3F); saved: the output (F); backward: gather's zero-filled gradient and log_softmax's next to the saved output
    (3F)."""
    assert F == 525_336_576
    loss = step(framework="torchtune", stage="dpo").loss
    assert (loss.saved, loss.forward_peak, loss.backward_peak) == (F, 3 * F, 3 * F) == (
        525_336_576, 1_576_009_728, 1_576_009_728)
    assert "log_softmax of all of them over 1,024 tokens" in loss.detail  # no chosen-half cross-entropy


def test_reference_pass_holds_the_saved_output_and_its_own_3f():
    """At the reference pass the policy's loss is down to its saved F (the logits were deleted, l. 512); the
    no_grad pass builds its own fp32 logits, their divided copy and log_softmax's output (3F), above one no_grad
    block (2 x 1024 x (3 x 8192 + 2 x 2048) = 58,720,256 B)."""
    p = phases(step(framework="torchtune", stage="dpo"))[StepPhase.SCORE]
    assert p["logits_loss"] == F
    assert p["score_logits"] == 3 * F == 1_576_009_728


def test_simpo_has_no_chosen_cross_entropy_and_no_reference_pass():
    """SimPOLoss (rlhf/loss/dpo.py l. 199-233) reads the averaged log-probs only: no h = F / 2 for the chosen
    half whatever cpo_alpha says (TRL's CPOTrainer adds it), and no reference pass."""
    for keys in ({}, {"cpo_alpha": 1.0}):
        st = step(framework="torchtune", stage="simpo", **keys)
        assert (st.loss.saved, st.loss.forward_peak, st.loss.backward_peak) == (F, 3 * F, 3 * F)
        assert StepPhase.SCORE not in phases(st)


def test_torchtune_0_1_keeps_the_policys_logits_through_the_reference_pass():
    """@c69fba18b recipes/lora_dpo_single_device.py: ``logits.log_softmax(-1)`` (the same 3F) and no ``del``:
    the policy's fp32 logits stay beside its saved output while the reference pass runs."""
    st = step(framework="torchtune", framework_version="torchtune-0.1", stage="dpo")
    assert (st.loss.saved, st.loss.forward_peak) == (F, 3 * F)
    assert phases(st)[StepPhase.SCORE]["logits_loss"] == 2 * F


def test_differs_from_trl_by_the_logits_it_builds(monkeypatch):
    """TRL 1.16.0 (hf) scores DPO with its fused LM head: the bf16 masked hidden states and int64/fp32 per-token
    vectors saved, one [1024, 32768] bf16 tile and six fp32 vectors in forward, never the logits. The torchtune
    profile without its stage fields gets exactly hf's loss; with them, only the loss and the reference pass's
    head change, by the fp32 logits and their two copies."""
    hf = step(stage="dpo").loss
    fused_saved = 2 * T * H + 12 * T
    assert (hf.saved, hf.forward_peak) == (fused_saved, fused_saved + 2 * T * 32768 + 24 * T)
    tune = step(framework="torchtune", stage="dpo")
    assert tune.loss.forward_peak - hf.forward_peak == 3 * F - (fused_saved + 2 * T * 32768 + 24 * T)
    assert tune.loss.saved - hf.saved == F - fused_saved

    as_trl = dataclasses.replace(PROFILES[Framework.TORCHTUNE], trl_logits_logprobs=None, stage_logits_fp32=False,
                                 chosen_nll_in_logps=False)
    monkeypatch.setitem(PROFILES, Framework.TORCHTUNE, as_trl)
    trl = step(framework="torchtune", stage="dpo")
    assert trl.loss == dataclasses.replace(hf, detail=trl.loss.detail)
    now, before = phases(tune), phases(trl)
    assert now.keys() == before.keys()
    for ph in now:
        changed = {k for k in now[ph].keys() | before[ph].keys() if now[ph].get(k) != before[ph].get(k)}
        assert changed <= {"logits_loss", "score_logits"}, (ph, changed)
    assert now[StepPhase.FORWARD]["logits_loss"] == 3 * F
    assert now[StepPhase.SCORE]["logits_loss"] - before[StepPhase.SCORE]["logits_loss"] == F - fused_saved


def _logits_to_logprobs(logits, sequences, temperature=1.0):  # noqa: ANN001, ANN202
    # torchtune v0.4.0 torchtune/rlhf/sequence_processing.py l. 97-101
    return torch.gather(F_.log_softmax(logits / temperature, dim=-1), 2, sequences.unsqueeze(-1)).squeeze(-1)


def _get_batch_log_probs(logits, labels, label_pad_token_id=-100):  # noqa: ANN001, ANN202
    # torchtune v0.4.0 torchtune/rlhf/sequence_processing.py l. 133-144 (return_average_logprobs False)
    labels = labels[:, 1:].clone()
    logits = logits[:, :-1, :]
    loss_mask = labels != label_pad_token_id
    labels[labels == label_pad_token_id] = 0
    per_token_log_probs = _logits_to_logprobs(logits, labels, temperature=1.0)
    return (per_token_log_probs * loss_mask).sum(-1)


@pytest.mark.parametrize("pairs", [1, 2])
def test_working_set_matches_torchtunes_code_traced(pairs):
    """The recipe's policy half on CPU: bf16 head output ``.float()`` (transformer.py l. 652), get_batch_log_probs,
    the logits' views deleted (lora_dpo_single_device.py l. 512), DPOLoss's logsigmoid, backward. The estimate
    counts S rows where the shifted tensors hold S - 1 (up to three alive at once: the saved output and the two
    gradients in backward): within three fp32 vocabulary rows a sequence, never below the trace."""
    from vramfit.sim.trace import LiveTracker

    S, Vs, Hs = 64, 4096, 16
    W = torch.randn(Vs, Hs, dtype=torch.bfloat16, requires_grad=True)
    hidden = torch.randn(2 * pairs, S, Hs, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(1, Vs, (2 * pairs, S))
    tr = LiveTracker()
    with tr:
        all_logits = (hidden @ W.t()).float()
        all_log_probs = _get_batch_log_probs(all_logits, labels)
        chosen_logits, rejected_logits = all_logits[:pairs], all_logits[pairs:]
        del all_logits, chosen_logits, rejected_logits
        loss = -F_.logsigmoid(0.1 * (all_log_probs[:pairs] - all_log_probs[pairs:])).mean()
        tr.phase = "backward"
        loss.backward()
    from tests.estimate.trace_phases import saved_and_peaks

    traced = saved_and_peaks(tr.trace, (W.numel() + hidden.numel()) * 2)
    est = full_log_softmax(2 * pairs * S, Vs, 4, 0, "")
    for got, want in zip(traced, (est.saved, est.forward_peak, est.backward_peak), strict=True):
        assert 0 <= want - got <= 3 * 4 * Vs * 2 * pairs, (pairs, traced, est)


def test_the_loss_line_names_the_recipe_framework():
    from vramfit import estimate

    keys = {"model": "meta-llama/Llama-3.1-8B", "method": "lora", "stage": "dpo"}
    tune = [a for a in estimate({**keys, "framework": "torchtune"}).assumptions if a.startswith("Loss: dpo log-probs")]
    trl = [a for a in estimate({**keys, "framework_version": "trl-0.14"}).assumptions if a.startswith("Loss: dpo")]
    assert tune == ["Loss: dpo log-probs: full logits, log_softmax of all of them over 4,096 tokens (torchtune)."]
    assert trl == ["Loss: dpo log-probs: full logits, log_softmax of all of them over 4,096 tokens (TRL)."]
