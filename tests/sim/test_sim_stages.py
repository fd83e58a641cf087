"""DPO and GRPO: the simulator runs TRL 1.16's own loss step on fake tensors; the estimator agrees within 3 %.

The simulated step is ``DPOTrainer._compute_loss`` (policy + reference through TRL's fused LM head,
sigmoid loss) and GRPO's no_grad scoring pass plus ``GRPOTrainer._compute_loss``, with the vLLM engine
on other GPUs (``generation: vllm-server``, so nothing of it is on the traced GPU). A small model
(Qwen2.5-0.5B) and a 7B-class one (Mistral-7B), built on ``meta`` (no weights), two depths traced
and extrapolated. The estimator's figure compared is its largest phase other than ``generate``
(rollouts are not traced; with vllm-server that phase holds only the model state).
"""

from __future__ import annotations

import pytest

from vramfit.errors import ScenarioError
from vramfit.estimate import estimate
from vramfit.sim import simulate

TOLERANCE = 0.03
SMALL, SEVEN_B = "Qwen/Qwen2.5-0.5B", "mistralai/Mistral-7B-v0.1"
GRPO = {"stage": "grpo", "generation": "vllm-server", "micro_batch_size": 4, "num_generations": 4,
        "completion_len": 256}

CASES = [
    pytest.param(SMALL, {"stage": "dpo", "method": "lora"}, id="small-dpo-lora"),
    pytest.param(SMALL, {"stage": "dpo", "method": "full"}, id="small-dpo-full-copy"),
    pytest.param(SMALL, {"stage": "dpo", "method": "qlora", "gradient_checkpointing": "full"}, id="small-dpo-qlora"),
    pytest.param(SMALL, {"stage": "dpo", "method": "lora", "reference": "precomputed"}, id="small-dpo-precomputed"),
    pytest.param(SMALL, {**GRPO, "method": "lora", "reference": "adapters-off"}, id="small-grpo-lora-beta"),
    pytest.param(SMALL, {**GRPO, "method": "full", "reference": "copy"}, id="small-grpo-full-copy"),
    pytest.param(SEVEN_B, {"stage": "dpo", "method": "lora"}, id="7b-dpo-lora"),
    pytest.param(SEVEN_B, {"stage": "dpo", "method": "full"}, id="7b-dpo-full-copy"),
    pytest.param(SEVEN_B, {**GRPO, "method": "lora", "reference": "adapters-off"}, id="7b-grpo-lora-beta"),
    pytest.param(SEVEN_B, {**GRPO, "method": "full", "reference": "copy"}, id="7b-grpo-full-copy"),
]


def _estimated(sc: dict) -> int:
    return max(p.allocated_bytes for p in estimate(sc).phases if p.phase != "generate")


@pytest.mark.parametrize("model,stage", CASES)
def test_estimator_agrees_with_trl_step_on_fake_tensors(model, stage):
    sc = {"model": model, "seq_len": 1024, **stage}
    sim = simulate(sc).result.peak
    est = _estimated(sc)
    assert est == pytest.approx(sim.allocated_bytes, rel=TOLERANCE), (est, sim.allocated_bytes, dict(sim.breakdown))


def test_dpo_runs_the_fused_head_over_the_concatenated_batch():
    """One forward of 2 x micro_batch_size sequences through TRL's fused head: its [2046, 32768]
    tile (tokens 2 x 1023 of Qwen's 151,936-row vocabulary) appears, never a [rows, seq, vocab]
    logits tensor; the full-fine-tuning reference copy doubles the resident weights."""
    lora = simulate({"model": SMALL, "seq_len": 1024, "stage": "dpo", "method": "lora"})
    shapes = {t.shape for t in lora.top_tensors}
    assert (2046, 32768) in shapes
    assert not any(len(s) == 3 and s[-1] == 151936 for s in shapes)
    full = simulate({"model": SMALL, "seq_len": 1024, "stage": "dpo", "method": "full"}).result.peak
    sft = simulate({"model": SMALL, "seq_len": 1024, "method": "full"}).result.peak
    assert dict(full.breakdown)["weights"] == 2 * dict(sft.breakdown)["weights"]  # the frozen copy


def test_grpo_scores_before_it_trains():
    """The scoring pass (old-policy log-probs for vLLM's importance sampling, the reference with beta > 0)
    is its own traced phase, below the training peak."""
    r = simulate({"model": SMALL, "seq_len": 1024, **GRPO, "method": "lora", "reference": "adapters-off"}).result
    phases = {p.phase: p.allocated_bytes for p in r.phases}
    assert set(phases) == {"score", "forward", "backward", "optimizer-step"}
    assert phases["score"] < phases["forward"]


@pytest.mark.parametrize("stage,key", [
    ({"stage": "kto"}, "stage"),
    ({"stage": "grpo", "num_generations": 2, "micro_batch_size": 2}, "generation"),
    ({"stage": "dpo", "reference": "copy"}, "reference"),
])
def test_stages_the_simulator_does_not_run_name_their_key(stage, key):
    with pytest.raises(ScenarioError) as err:
        simulate({"model": SMALL, "seq_len": 1024, "method": "lora", **stage})
    assert err.value.key == key
