"""ORPO and CPO/SimPO: full logits, TRL's Triton log-prob kernel and the chosen half's cross-entropy.

The estimator's working set (estimate/stages/preference.py ``logits_kernel_logps``) is checked in bytes,
and against TRL 1.16.0's own ``concatenated_forward`` traced on small CPU tensors."""

import types

import pytest
import torch

from vramfit.choices import Stage
from vramfit.estimate.stages.preference import logits_kernel_logps
from vramfit.estimate.stages.profiles import FUSED_HEAD, PAIRED, STAGE_PROFILES, LogProbs
from vramfit.estimate.step import compute
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario


def step(model: str, **keys):
    sc = parse_scenario({"model": model, **keys})
    return compute(resolve_model(model).spec, sc, None)


def test_every_stage_has_a_profile_and_the_lists_follow_it():
    assert set(STAGE_PROFILES) == set(Stage) - {Stage.SFT}
    assert PAIRED == (Stage.DPO, Stage.ORPO, Stage.SIMPO)
    assert FUSED_HEAD == (Stage.DPO, Stage.KTO, Stage.GRPO)
    assert {s for s, p in STAGE_PROFILES.items() if p.chosen_nll} == {Stage.ORPO, Stage.SIMPO}
    assert STAGE_PROFILES[Stage.PPO].logprobs is LogProbs.ROW_LOOP


def test_orpo_bytes_two_pairs():
    """Llama-3.2-1B, 2 pairs of 2048: T = 8192 tokens, V = 128,256, bf16 logits F = 2,101,346,304 B, the
    chosen half's log_softmax h = F / 2, the kernel's fp32 vectors 8 B (saved) / 16 B (made) a token; two
    chosen sequences: the shifted slice is copied (h) while log_softmax writes its h."""
    loss = step("meta-llama/Llama-3.2-1B", stage="orpo", method="lora", micro_batch_size=2).loss
    F, h, T = 2 * 8192 * 128_256, 2 * 4096 * 128_256, 8192
    assert F == 2_101_346_304
    assert loss.saved == F + h + 8 * T == 3_152_084_992
    assert loss.forward_peak == F + 2 * h == 4_202_692_608
    assert loss.backward_peak == 2 * F + h + 8 * T == 5_253_431_296


def test_simpo_bytes_of_the_swift_row():
    """SWIFT_EX_2601-10's scenario: Qwen2.5-3B, 1 pair of 2048, bf16 under ZeRO-2: T = 4096, V = 151,936.
    One chosen sequence: no copy, the kernel's 16 B a token on top of logits and h."""
    st = step("Qwen/Qwen2.5-3B", stage="simpo", method="full", precision="bf16-true", num_gpus=2,
              parallelism="zero2")
    F, T = 2 * 4096 * 151_936, 4096
    assert F == 1_244_659_712
    assert st.loss.saved == F + F // 2 + 8 * T == 1_867_022_336
    assert st.loss.forward_peak == F + F // 2 + 16 * T == 1_867_055_104
    assert st.loss.backward_peak == 2 * F + F // 2 + 8 * T == 3_111_682_048
    assert "Triton log-prob kernel and the chosen half's cross-entropy" in st.loss.detail


def test_no_cross_entropy_no_half():
    assert logits_kernel_logps(10, 100, 2, False, True, "") == logits_kernel_logps(10, 100, 2, False, False, "")
    m = logits_kernel_logps(10, 100, 2, False, False, "")
    assert (m.saved, m.forward_peak, m.backward_peak) == (2000 + 80, 2000 + 160, 4000 + 80)


class _KernelAllocations(torch.autograd.Function):
    """What ``_LogProbEntropyFunction`` allocates and saves (trl 1.16.0 kernels/logprob_entropy.py:165-208);
    its Triton kernels only write into these, so they are not run."""

    @staticmethod
    def forward(ctx, logits, index, temperature, row_mask):  # noqa: ANN001, ANN205
        logprobs = torch.empty(logits.shape[:-1], dtype=torch.float32)
        entropy, log_z, expected = torch.empty_like(logprobs), torch.empty_like(logprobs), torch.empty_like(logprobs)
        ctx.save_for_backward(logits, index, log_z, expected)
        return logprobs, entropy

    @staticmethod
    def backward(ctx, grad_logprobs, grad_entropy):  # noqa: ANN001, ANN205
        logits = ctx.saved_tensors[0]
        return torch.empty_like(logits, memory_format=torch.contiguous_format), None, None, None


def _trace(trainer_cls, pairs: int, S: int, V: int, monkeypatch) -> tuple[int, int, int]:
    """(saved, forward peak, backward peak) bytes of the loss, traced (the two inputs excluded)."""
    import trl.trainer.utils as U

    from vramfit.sim.trace import LiveTracker

    monkeypatch.setattr(U, "is_triton_available", lambda: True)  # as on CUDA (utils.py:572)
    monkeypatch.setattr(U, "_supports_trl_loss_kernel", lambda *a, **k: True)
    monkeypatch.setattr(U, "_fused_logprob_entropy", lambda lg, ix, temperature=1.0, row_mask=None:
                        _KernelAllocations.apply(lg, ix, temperature, row_mask), raising=False)  # no triton here
    H = 16
    W = torch.randn(V, H, dtype=torch.bfloat16, requires_grad=True)
    hidden = torch.randn(2 * pairs, S, H, dtype=torch.bfloat16, requires_grad=True)
    ids = torch.randint(1, V, (pairs, S))
    ones = torch.ones_like(ids)
    batch = {"chosen_input_ids": ids, "chosen_attention_mask": ones, "chosen_labels": ids.clone(),
             "rejected_input_ids": ids.clone(), "rejected_attention_mask": ones, "rejected_labels": ids.clone()}
    stub = types.SimpleNamespace(is_encoder_decoder=False, pad_token_id=0, padding_value=0, label_pad_token_id=-100,
                                 accelerator=types.SimpleNamespace(device="cpu"), aux_loss_enabled=False,
                                 cpo_alpha=1.0, loss_type="simpo", concatenated_inputs=trainer_cls.concatenated_inputs,
                                 get_batch_logps=trainer_cls.get_batch_logps)

    def model(*args, **kwargs):
        return types.SimpleNamespace(logits=hidden @ W.t())

    tr = LiveTracker()
    with tr:
        chosen, rejected, c_logits, r_logits, nll = trainer_cls.concatenated_forward(stub, model, batch)
        del c_logits, r_logits  # get_batch_loss_metrics only logs their means; dropped before backward
        loss = nll - torch.nn.functional.logsigmoid(chosen - rejected).mean()
        tr.phase = "backward"
        loss.backward()
    live, peaks, saved = 0, {"forward": 0, "backward": 0}, None
    for e in tr.trace.events:
        sid = e if e >= 0 else ~e
        size = tr.trace.nbytes[sid]
        if e >= 0 and tr.trace.ops[sid].startswith("add.Tensor"):
            size = 0  # the two logits gradients merge in place on CUDA (vramfit/sim/inplace.py)
        if e >= 0 and tr.trace.phases[sid] == "backward" and saved is None:
            saved = live
        live += size if e >= 0 else -size
        phase = "backward" if saved is not None else "forward"
        peaks[phase] = max(peaks[phase], live)
    inputs = (W.numel() + hidden.numel()) * 2
    return saved - inputs, peaks["forward"] - inputs, peaks["backward"] - inputs


@pytest.mark.parametrize("stage,pairs", [("simpo", 1), ("simpo", 2), ("orpo", 1)])
def test_working_set_matches_trls_concatenated_forward(stage, pairs, monkeypatch):
    """TRL 1.16.0's CPOTrainer / ORPOTrainer ``concatenated_forward`` on CPU (the kernel's allocations in
    place of the Triton kernel). The estimate counts every sequence's S rows where TRL's shifted tensors
    (``logits[:, :-1, :]``) hold S - 1, less the int64 labels and masks it leaves out: it is never under
    the trace and over it by less than one vocabulary row per sequence."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from trl.experimental.cpo.cpo_trainer import CPOTrainer
        from trl.experimental.orpo.orpo_trainer import ORPOTrainer
    S, V = 64, 4096
    traced = _trace(CPOTrainer if stage == "simpo" else ORPOTrainer, pairs, S, V, monkeypatch)
    est = logits_kernel_logps(2 * pairs * S, V, 2, True, pairs > 1, "")
    row = 2 * V * 2 * pairs  # one bf16 vocabulary row per sequence
    for got, want in zip(traced, (est.saved, est.forward_peak, est.backward_peak), strict=True):
        assert 0 <= want - got <= row, (stage, pairs, traced, est)
