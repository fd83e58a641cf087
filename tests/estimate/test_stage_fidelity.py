"""KTO and GRPO before TRL 1.0, and LLaMA-Factory's own preference trainers (framework_version llamafactory-0.9).

Qwen2.5-0.5B: V = 151,936; two examples of 2048 tokens (KTO: the least TRL runs, kto_trainer.py l. 844-847), one pair
(4096 tokens: DPO, ORPO), GRPO's default 512-token completion. F is the logits' bytes in the dtype each path reads them."""

from pathlib import Path

import pytest

from vramfit import from_config
from vramfit.estimate import estimate
from vramfit.estimate.step import compute
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario

MODEL = "Qwen/Qwen2.5-0.5B"
V = 151_936
FIX = Path(__file__).parents[1] / "config_import" / "fixtures"


def loss(**keys):
    sc = parse_scenario({"model": MODEL, "method": "lora", **keys})
    return compute(resolve_model(MODEL).spec, sc, None).loss


def triple(m):
    return m.saved, m.forward_peak, m.backward_peak


def test_kto_before_1_0_builds_the_logits_and_copies_them_for_its_metrics():
    """trl-0.29: the row loop (saved F of log_softmax rows, logits F) plus the chosen/rejected index copies (F):
    3F in the forward; trl-0.14: the whole log_softmax (3F) and then the copies next to logits + output (3F)."""
    F = 2 * 2 * 2048 * V
    assert F == 1_244_659_712
    assert triple(loss(stage="kto", framework_version="trl-0.29")) == (F, 3 * F, 2 * F)
    assert triple(loss(stage="kto", framework_version="trl-0.14")) == (F, 3 * F, 3 * F)
    # fp32 logits (transformers 4.44): the logsumexp loop saves the logits themselves, the copies add one F
    F32 = 2 * F
    assert triple(loss(stage="kto", framework_version="transformers-4.44+trl-0.29")) == (F32, 2 * F32, 3 * F32)
    # TRL 1.16.0's fused head: no vocabulary-sized tensor at all
    assert loss(stage="kto").forward_peak < F // 4


def test_grpo_before_1_0_loops_over_the_completion_logits():
    """Completion logits only (logits_to_keep): T = 512, F = 155,582,464. v0.29.1's ``logits / temperature``
    copy next to the logits: 2F, which the bf16 row loop reaches anyway; with fp32 logits the copy (2F) is above
    the logsumexp loop's F + one row; v0.14.0's own log_softmax loop keeps the 16-bit formula at fp32 sizes."""
    F = 2 * 512 * V
    assert F == 155_582_464
    assert triple(loss(stage="grpo", framework_version="trl-0.29")) == (F, 2 * F, 2 * F)
    assert triple(loss(stage="grpo", framework_version="trl-0.14")) == (F, 2 * F, 2 * F)
    F32 = 2 * F
    assert triple(loss(stage="grpo", framework_version="transformers-4.44+trl-0.29")) == (F32, 2 * F32, 3 * F32)
    assert triple(loss(stage="grpo", framework_version="transformers-4.44+trl-0.14")) == (F32, 2 * F32, 2 * F32)


@pytest.mark.parametrize("stage", ["orpo", "simpo", "dpo"])
def test_llamafactory_takes_fp32_log_probs_and_no_chosen_cross_entropy(stage):
    """One pair, fp32 logits (``.to(torch.float32)``): F = 4·4096·V; gather(log_softmax) of all of them: saved F,
    3F forward and backward; ORPO's SFT term and SimPO's loss read those log-probs (no h = F/2, whatever
    cpo_alpha says: TRL's CPO with cpo_alpha 1 would add it)."""
    F = 4 * 4096 * V
    assert F == 2_489_319_424
    lf = loss(stage=stage, framework_version="llamafactory-0.9", cpo_alpha=1.0 if stage == "simpo" else None)
    assert triple(lf) == (F, 3 * F, 3 * F)
    assert "cast to fp32" in " ".join(estimate({"model": MODEL, "method": "lora", "stage": stage,
                                                "framework_version": "llamafactory-0.9"}).assumptions)
    # the same code reading bf16 logits, with TRL's chosen-half cross-entropy (h = F16 / 2) for ORPO/CPO
    F16, h = F // 2, F // 4 if stage != "dpo" else 0
    assert triple(loss(stage=stage, framework_version="trl-0.14")) == (F16 + h, 3 * F16 + h, 3 * F16 + h)


def test_llamafactory_reference_copy_stays_in_the_compute_dtype():
    """Full DPO in bf16-mixed: TRL's reference copy is loaded like the policy (fp32 master, 4 B a parameter);
    LLaMA-Factory loads it untrainable, never upcast: 2 B a parameter (each tensor rounded to 512 B), about half."""
    def ref(version=None):
        keys = {"model": MODEL, "method": "full", "precision": "bf16-mixed", "stage": "dpo"}
        r = estimate({**keys, **({"framework_version": version} if version else {})}).to_dict()
        return next(p["breakdown"]["reference_model"] for p in r["phases"] if p["phase"] == "forward")
    assert ref("trl-0.14") == ref() == 1_976_131_072  # 494,032,768 parameters x 4 B, rounded per tensor
    assert ref("llamafactory-0.9") == 988_096_512  # x 2 B, rounded per tensor


def test_llamafactory_import_runs_its_trainers(tmp_path):
    """The importer names LLaMA-Factory's trainers for dpo (any pref_loss) and kto; sft and ppo stay as they are."""
    base = (FIX / "llamafactory_qlora.yaml").read_text()
    for stage, extra, want in (("dpo", "pref_loss: orpo\n", "llamafactory-0.9"), ("kto", "", "llamafactory-0.9"),
                               ("sft", "", None), ("ppo", "", None)):
        cfg = tmp_path / f"{stage}.yaml"
        cfg.write_text(base.replace("stage: sft", f"stage: {stage}\n{extra}")  # KTO: at least 2 a batch (TRL)
                       .replace("per_device_train_batch_size: 1", "per_device_train_batch_size: 2"))
        assert from_config(cfg).scenario.framework_version == want, stage
    orpo = from_config(tmp_path / "dpo.yaml").scenario
    T = 2 * orpo.micro_batch_size * orpo.seq_len
    spec = resolve_model(orpo.model).spec
    step = compute(spec, orpo, None)
    assert step.loss.saved == 4 * T * spec.vocab_size and "chosen half" not in step.loss.detail


def score_phase(**keys):
    r = estimate({"model": MODEL, "method": "lora", **keys}).to_dict()
    b = next(p["breakdown"] for p in r["phases"] if p["phase"] == "score")
    return b.get("logits_loss"), b["score_logits"]


def test_the_reference_pass_runs_next_to_the_policys_held_logits():
    """KTO before 1.0 holds the policy's chosen/rejected copies (F) through the reference pass, whose own no_grad
    forward makes logits and copies too (2F; trl-0.14's whole log_softmax 3F). LLaMA-Factory's DPO holds its
    fp32 logits (split views) there: saved F + held F, and the reference pass's 3F. TRL's DPO holds nothing."""
    F = 2 * 2 * 2048 * V  # KTO: two examples
    assert score_phase(stage="kto", framework_version="trl-0.29") == (2 * F, 2 * F)
    assert score_phase(stage="kto", framework_version="trl-0.14") == (2 * F, 3 * F)
    F32 = 4 * 4096 * V
    assert score_phase(stage="dpo", framework_version="llamafactory-0.9") == (2 * F32, 3 * F32) == (
        4_978_638_848, 7_467_958_272)
    assert score_phase(stage="dpo", framework_version="trl-0.14") == (F32 // 2, 3 * F32 // 2)


def test_grpo_scoring_pass_before_1_0():
    """The no_grad old-policy/reference pass over 4 completions of 512 tokens (F = 4·512·V in bf16): v0.29.1's
    ``logits / temperature`` copy next to the logits (2F); v0.14.0 one row's log_softmax next to them (F + F/4)."""
    F = 2 * 4 * 512 * V
    keys = {"stage": "grpo", "reference": "adapters-off", "micro_batch_size": 4, "num_generations": 4}
    assert score_phase(framework_version="trl-0.29", **keys)[1] == 2 * F == 1_244_659_712
    assert score_phase(framework_version="trl-0.14", **keys)[1] == F + F // 4
