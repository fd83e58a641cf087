"""A stage's loss is the one its trainer runs: under TRL 1.16.0 no preference or RL trainer takes a fused or chunked
loss (DPO, KTO, GRPO keep their fused LM head and turn Liger's fused linear cross-entropy off; ORPO and CPO/SimPO call
the model without labels, so Liger's patched forward builds the whole logits), so ``loss: fused`` changes nothing and
says so, and the changes offered to fit a card leave it out; TRL 0.29's DPO, KTO and GRPO ran Liger's fused losses."""

import pytest

from vramfit import estimate
from vramfit.choices import Loss
from vramfit.estimate.stages import stage_loss_choice
from vramfit.plan import changes_to_fit
from vramfit.scenario import parse_scenario
from vramfit.web.translate import untranslated

MODEL = "meta-llama/Llama-3.1-8B"
BASE = {"model": MODEL, "method": "lora", "seq_len": 2048}
MIB = 2**20


def _names(keys: dict) -> list[str]:
    return [c.name for c in changes_to_fit({**BASE, **keys}, "rtx4090")]


@pytest.mark.parametrize("stage", ["dpo", "kto", "grpo", "orpo", "simpo"])
def test_trl_1_16_stages_run_their_own_log_prob_code(stage):
    sc = parse_scenario({**BASE, "stage": stage})
    fused = sc.replace(loss="fused")
    assert stage_loss_choice(fused) is Loss.STANDARD
    a, b = estimate(sc), estimate(fused)
    assert a.peak.required_bytes == b.peak.required_bytes and a.peak.device_bytes == b.peak.device_bytes
    line = next(x for x in b.assumptions if x.startswith("loss fused: the " + stage + " trainer of this release has no"))
    assert untranslated([line]) == [] and not any(x.startswith("loss ") for x in a.assumptions)
    names = _names({"stage": stage})
    assert names and "fused-loss" not in names and "chunked-loss" not in names and "checkpointing-full" in names


def test_trl_0_29_dpo_runs_ligers_fused_loss():
    """DPO under TRL 0.29 (full logits and the per-row log-prob loop; LigerFusedLinearDPOLoss with use_liger_kernel):
    the fused loss saves GiBs and is offered; ORPO under it still has none."""
    sc = parse_scenario({**BASE, "stage": "dpo", "framework_version": "trl-0.29"})
    assert stage_loss_choice(sc.replace(loss="fused")) is Loss.FUSED
    fused = next(c for c in changes_to_fit(sc, "rtx4090") if c.name == "fused-loss")
    assert fused.changes == {"loss": "fused"} and fused.saving_bytes > 900 * MIB
    orpo = parse_scenario({**BASE, "stage": "orpo", "framework_version": "trl-0.29", "loss": "fused"})
    assert stage_loss_choice(orpo) is Loss.STANDARD


def test_sft_keeps_the_offer():
    fused = next(c for c in changes_to_fit(parse_scenario(BASE), "rtx4090") if c.name == "fused-loss")
    assert fused.saving_bytes > 900 * MIB


def test_torchtune_recipes_run_their_own_loss():
    """torchtune's DPO recipes take log-probs with their own code (rlhf get_batch_log_probs): a fused loss changes
    nothing there either, and the line names no TRL switch."""
    sc = parse_scenario({**BASE, "stage": "dpo", "framework": "torchtune", "loss": "chunked"})
    line = next(x for x in estimate(sc).assumptions if x.startswith("loss chunked:"))
    assert line == ("loss chunked: the dpo trainer of this release has no fused or chunked loss, so its own log-prob "
                    "code is counted.") and untranslated([line]) == []
    assert estimate(sc).peak.required_bytes == estimate(sc.replace(loss="standard")).peak.required_bytes


def test_torchtune_refuses_a_precomputed_reference():
    from vramfit.errors import ScenarioError

    with pytest.raises(ScenarioError) as e:
        parse_scenario({**BASE, "stage": "dpo", "framework": "torchtune", "reference": "precomputed"})
    assert e.value.key == "reference" and e.value.valid == ["auto", "adapters-off"]
    assert "run the reference forward every step" in str(e.value)
    assert untranslated([str(e.value).split(" (valid values")[0]]) == []
