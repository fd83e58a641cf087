"""``cpo_alpha`` (simpo) and ``rpo_alpha`` (dpo): the chosen half's cross-entropy as TRL runs it, and DPO's
full logits before TRL 1.0 (estimate/stages/profiles.py has the sources).

Llama-3.2-1B (V = 128,256), LoRA bf16, one pair of 2048: T = 4096 tokens, bf16 logits F = 2·T·V bytes, the
chosen half's log_softmax h = F / 2."""

import subprocess
import sys

import pytest

from vramfit import from_config
from vramfit.errors import ScenarioError
from vramfit.estimate import estimate
from vramfit.estimate.step import compute
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario

MODEL = "meta-llama/Llama-3.2-1B"
T = 4096
F = 2 * T * 128_256
H = F // 2


def loss(**keys):
    sc = parse_scenario({"model": MODEL, "method": "lora", **keys})
    return compute(resolve_model(MODEL).spec, sc, None).loss


def test_the_numbers():
    assert (F, H) == (1_050_673_152, 525_336_576)


def test_cpo_alpha_defaults_to_trl_and_zero_drops_the_chosen_half():
    assert parse_scenario({"model": MODEL, "stage": "simpo"}).cpo_alpha == 1.0  # CPOConfig default
    on, off = loss(stage="simpo"), loss(stage="simpo", cpo_alpha=0)
    # logits kernel: saved F + h + 8T, backward 2F + h + 8T; without the cross-entropy no h
    assert (on.saved, on.backward_peak) == (F + H + 8 * T, 2 * F + H + 8 * T)
    assert (off.saved, off.forward_peak, off.backward_peak) == (F + 8 * T, F + 16 * T, 2 * F + 8 * T)
    assert loss(stage="simpo", cpo_alpha=0.5) == on  # any non-zero weight runs it
    assert "cross-entropy" in on.detail and "cross-entropy" not in off.detail


def test_cpo_alpha_moves_the_estimate_by_the_chosen_half():
    base = {"model": MODEL, "method": "lora", "stage": "simpo", "gradient_checkpointing": "full"}
    on, off = estimate(base), estimate({**base, "cpo_alpha": 0})
    assert on.peak.phase == off.peak.phase == "backward-loss"
    assert on.peak.allocated_bytes - off.peak.allocated_bytes == H


def test_rpo_alpha_costs_nothing_on_trl_1_16s_fused_head():
    assert loss(stage="dpo", rpo_alpha=0.1) == loss(stage="dpo")


def test_dpo_before_trl_1_0_builds_the_full_logits():
    # trl-0.14: gather(log_softmax) of the whole shifted view: 3F; trl-0.29: selective_log_softmax's row loop: 2F
    full, loop = loss(stage="dpo", framework_version="trl-0.14"), loss(stage="dpo", framework_version="trl-0.29")
    assert (full.saved, full.forward_peak, full.backward_peak) == (F, 3 * F, 3 * F)
    assert (loop.saved, loop.forward_peak, loop.backward_peak) == (F, 2 * F, 2 * F)
    # rpo_alpha given (0 too: `if self.args.rpo_alpha is not None`) adds the chosen half's cross-entropy, after
    # the log-probs: its h is saved, the forward's high point stays the gather's 3F
    for alpha in (0.1, 0):
        rpo = loss(stage="dpo", framework_version="trl-0.14", rpo_alpha=alpha)
        assert (rpo.saved, rpo.forward_peak, rpo.backward_peak) == (F + H, 3 * F, 3 * F + H)
    rpo = loss(stage="dpo", framework_version="trl-0.29", rpo_alpha=1)
    assert (rpo.saved, rpo.forward_peak) == (F + H, 2 * F + H) == (1_576_009_728, 2_626_682_880)
    assert "selective_log_softmax and the chosen half's cross-entropy" in rpo.detail


def test_dpo_before_trl_1_0_keeps_the_autocast_copy_of_the_head():
    """Only the fused head skips the output layer's call, and with it autocast's bf16 copy of its weight."""
    keys = {"model": MODEL, "method": "lora", "precision": "bf16-mixed", "stage": "dpo"}
    new = compute(resolve_model(MODEL).spec, parse_scenario(keys), None).parts.autocast_copies
    old = compute(resolve_model(MODEL).spec, parse_scenario({**keys, "framework_version": "trl-0.14"}),
                  None).parts.autocast_copies
    assert old - new == 2 * 128_256 * 2048  # the tied embedding as the head, 2 bytes per parameter


@pytest.mark.parametrize(("keys", "message"), [
    ({"stage": "dpo", "cpo_alpha": 1}, "cpo_alpha: is a key of stage simpo, not dpo"),
    ({"stage": "simpo", "rpo_alpha": 1}, "rpo_alpha: is a key of stage dpo, not simpo"),
    ({"stage": "simpo", "cpo_alpha": -1}, "cpo_alpha: must be a number ≥ 0, got -1"),
    ({"stage": "dpo", "rpo_alpha": "a lot"}, "rpo_alpha: must be a number ≥ 0, got 'a lot'"),
])
def test_bad_values_name_the_field(keys, message):
    with pytest.raises(ScenarioError, match=message):
        parse_scenario({"model": MODEL, **keys})


def test_cli_bad_value_exit_2_one_line():
    out = subprocess.run([sys.executable, "-m", "vramfit.cli.main", "estimate", "--model", MODEL, "--stage", "dpo",
                          "--rpo-alpha", "-0.5"], capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.strip() == "error: rpo_alpha: must be a number ≥ 0, got '-0.5'"


def test_importers_map_the_weights(tmp_path):
    ax = tmp_path / "ax.yaml"
    ax.write_text(f"base_model: {MODEL}\nrl: simpo\ncpo_alpha: 0\nadapter: lora\nlora_r: 8\nlora_target_linear: true\n"
                  "sequence_len: 1024\nmicro_batch_size: 1\nbf16: true\n")
    assert from_config(ax).scenario.cpo_alpha == 0.0
    lf = tmp_path / "lf.yaml"
    lf.write_text(f"model_name_or_path: {MODEL}\nstage: dpo\npref_loss: simpo\npref_ftx: 0.5\nfinetuning_type: lora\n"
                  "bf16: true\ncutoff_len: 1024\n")
    imp = from_config(lf)
    # LLaMA-Factory's own SimPO loss has no chosen-half cross-entropy; pref_ftx reads the per-token log-probs
    assert (imp.scenario.stage.value, imp.scenario.cpo_alpha, imp.scenario.rpo_alpha) == ("simpo", 0.0, None)
    assert any(line.strip().startswith("ignored  pref_ftx") for line in imp.lines())


def test_the_reference_pass_takes_the_log_probs_the_same_way():
    """adapters-off reference pass (no_grad): trl-0.14 holds the logits, host_softmax's contiguous copy of the
    shifted view and the log_softmax output together (3F); trl-0.29's row loop one sequence's at a time (F + F/2)."""
    def score(version):
        r = estimate({"model": MODEL, "method": "lora", "stage": "dpo", "framework_version": version}).to_dict()
        return next(p["breakdown"]["score_logits"] for p in r["phases"] if p["phase"] == "score")
    assert score("trl-0.14") == 3 * F == 3_152_019_456
    assert score("trl-0.29") == F + F // 2
