"""ORPO and CPO/SimPO: full logits, TRL's Triton log-prob kernel and the chosen half's cross-entropy.

The estimator's working set (estimate/stages/preference.py ``logits_kernel_logps``) is checked in bytes,
and against TRL 1.16.0's own ``concatenated_forward`` traced on small CPU tensors."""

import types

import pytest
import torch

from vramfit.choices import Stage
from vramfit.estimate.stages.preference import logits_kernel_logps, row_loop_logps
from vramfit.estimate.stages.profiles import FUSED_HEAD, PAIRED, STAGE_PROFILES, ChosenNLL, LogProbs
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
    assert {s: p.chosen_nll for s, p in STAGE_PROFILES.items() if p.chosen_nll is not ChosenNLL.NEVER} == {
        Stage.DPO: ChosenNLL.RPO_ALPHA, Stage.ORPO: ChosenNLL.ALWAYS, Stage.SIMPO: ChosenNLL.CPO_ALPHA}
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


def test_older_trl_releases_take_other_log_prob_code():
    """framework_version trl-0.29: the row loop (each sequence's 16-bit log_softmax saved, the rows' gradients
    held until stacked: 2F) plus the chosen half's h; trl-0.14: log_softmax of the whole shifted view (its
    contiguous copy and output next to the logits: 3F) plus h. Same SimPO row as above: F = 1,244,659,712."""
    F, h = 1_244_659_712, 622_329_856
    keys = {"stage": "simpo", "method": "full", "precision": "bf16-true", "num_gpus": 2, "parallelism": "zero2"}
    loop = step("Qwen/Qwen2.5-3B", framework_version="trl-0.29", **keys).loss
    assert (loop.saved, loop.forward_peak, loop.backward_peak) == (F + h, 2 * F + h, 2 * F + h)
    full = step("Qwen/Qwen2.5-3B", framework_version="transformers-4.47+trl-0.14", **keys).loss
    assert (full.saved, full.forward_peak, full.backward_peak) == (F + h, 3 * F + h, 3 * F + h) == (
        1_866_989_568, 4_356_308_992, 4_356_308_992)
    assert "log_softmax of all of them and the chosen half's cross-entropy" in full.detail
    # transformers 4.44's model returns fp32 logits (`logits.float()`), which TRL takes as they are: F doubles
    old = step("Qwen/Qwen2.5-3B", framework_version="transformers-4.44+trl-0.14", **keys).loss
    assert (old.saved, old.forward_peak) == (2 * (F + h), 2 * (3 * F + h))
    # KTO and GRPO before 1.0 build the logits too (tests/estimate/test_stage_fidelity.py; DPO's older path:
    # tests/estimate/test_stage_nll_keys.py)
    kto = {"stage": "kto", "method": "lora"}
    assert step("Qwen/Qwen2.5-3B", framework_version="trl-0.14", **kto).loss != step("Qwen/Qwen2.5-3B", **kto).loss


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


def _trace(trainer_cls, pairs: int, S: int, V: int, monkeypatch, kernel: bool = True) -> tuple[int, int, int]:
    """(saved, forward peak, backward peak) bytes of the loss, traced (the two inputs excluded); without
    ``kernel``, selective_log_softmax's row loop as on CPU (the code of trl v0.15-v0.29)."""
    import trl.trainer.utils as U

    from vramfit.sim.trace import LiveTracker

    monkeypatch.setattr(U, "is_triton_available", lambda: kernel)  # as on CUDA (utils.py:572)
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
    from tests.estimate.trace_phases import saved_and_peaks

    return saved_and_peaks(tr.trace, (W.numel() + hidden.numel()) * 2, merge_inplace_add=True)


@pytest.mark.parametrize("stage,pairs", [("simpo", 1), ("simpo", 2), ("orpo", 1)])
def test_working_set_matches_trls_concatenated_forward(stage, pairs, monkeypatch):
    """TRL 1.16.0's CPOTrainer / ORPOTrainer ``concatenated_forward`` on CPU (the kernel's allocations in
    place of the Triton kernel); bound in :func:`_check`."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from trl.experimental.cpo.cpo_trainer import CPOTrainer
        from trl.experimental.orpo.orpo_trainer import ORPOTrainer
    S, V = 64, 4096
    traced = _trace(CPOTrainer if stage == "simpo" else ORPOTrainer, pairs, S, V, monkeypatch)
    est = logits_kernel_logps(2 * pairs * S, V, 2, True, pairs > 1, "")
    _check(traced, est, 2 * V * 2 * pairs, (stage, pairs))


def test_row_loop_matches_the_traced_loop(monkeypatch):
    """trl-0.29's path: the same ``concatenated_forward`` with the 16-bit per-row loop (what TRL 1.16.0 runs
    without Triton, line for line the v0.15-v0.29 loop), one pair of 64 tokens."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from trl.experimental.cpo.cpo_trainer import CPOTrainer
    S, V = 64, 4096
    traced = _trace(CPOTrainer, 1, S, V, monkeypatch, kernel=False)
    est = row_loop_logps(2 * S, S, V, 2, 2 * S * V, "")  # h: the chosen half's bf16 log_softmax
    _check(traced, est, 2 * V * 2, "loop")


def _check(traced, est, row: int, label) -> None:
    """The estimate counts S rows per sequence where TRL's shifted tensors hold S - 1 (at most two such
    tensors are alive at once: the saved full and half log_softmax, or a gradient and its slice), and leaves
    out per-token labels, masks and scalars (bytes): within two vocabulary rows per sequence either way."""
    for got, want in zip(traced, (est.saved, est.forward_peak, est.backward_peak), strict=True):
        assert abs(want - got) <= 2 * row, (label, traced, est)
