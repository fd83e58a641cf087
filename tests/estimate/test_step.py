"""One step model: a frozen Step record, phases as sums of contributions, one StepPhase vocabulary."""

import dataclasses

import pytest

from vramfit import estimate
from vramfit.estimate.contributions import CONTRIBUTORS, PHASE_RULES, phase_breakdowns
from vramfit.estimate.phases import Contribution, StepPhase
from vramfit.estimate.step import Step, compute
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario

LLAMA = resolve_model("meta-llama/Llama-3.1-8B").spec


def _step(**keys) -> Step:
    return compute(LLAMA, parse_scenario({"model": "meta-llama/Llama-3.1-8B", "method": "lora", **keys}))


def test_step_is_a_frozen_record():
    step = _step()
    with pytest.raises(dataclasses.FrozenInstanceError):
        step.dequant = 1
    assert step.per_layer == sum(-(-v // 512) * 512 for v in step.saved.items.values())


def test_each_phase_is_the_sum_of_its_contributions_and_matches_the_result():
    sc = {"model": "meta-llama/Llama-3.1-8B", "method": "lora", "grad_accum": 2}
    step, r = _step(grad_accum=2), estimate(sc)
    by_phase = {p.phase: p.allocated_bytes for p in r.phases}
    assert [b.phase.value for b in step.phases] == list(by_phase) == [
        "forward", "backward-loss", "backward-block", "optimizer-step"]
    for b in step.phases:
        assert b.total == by_phase[b.phase.value] == sum(dict(b.parts).values())
    assert r.peak.allocated_bytes == max(b.total for b in step.phases)


def test_phase_rules_add_the_phases_a_step_has():
    assert StepPhase.OPTIMIZER_STEP not in {b.phase for b in _step(optimizer_in_backward=True).phases}
    tied = compute(resolve_model("google/gemma-2-9b").spec, parse_scenario({"model": "google/gemma-2-9b", "method": "full"}))
    assert StepPhase.BACKWARD_END_TIED in {b.phase for b in tied.phases}
    # stage phases: test_stages; the MXFP4 load: test_mxfp4_load
    core = [p for p in PHASE_RULES if p not in (StepPhase.GENERATE, StepPhase.SCORE, StepPhase.LOAD)]
    assert core[:4] == [StepPhase.FORWARD, StepPhase.FORWARD_ATTENTION, StepPhase.BACKWARD_LOSS,
                        StepPhase.BACKWARD_BLOCK]


def test_a_stage_adds_a_contributor_without_editing_the_core():
    """Template for a training stage (docs/extending.md): DPO's frozen reference model is one more
    copy of the base weights in every phase, the rest of the step unchanged."""
    step = _step()

    def reference_model(s: Step):
        for phase in StepPhase:
            yield Contribution("reference_model", phase, s.parts.weights + s.parts.quantized_base)

    with_ref = phase_breakdowns(step, CONTRIBUTORS + (reference_model,))
    for base, ref in zip(step.phases, with_ref, strict=True):
        assert ref.total - base.total == step.parts.weights == 16_060_522_496
        assert dict(ref.parts)["reference_model"] == step.parts.weights


@pytest.mark.parametrize(("label", "phase"), [
    ("load", StepPhase.LOAD), ("it2.mb1.forward", StepPhase.FORWARD), ("it1.mb2.backward", StepPhase.BACKWARD),
    ("it2.optimizer", StepPhase.OPTIMIZER_STEP), ("it1.zero_grad", StepPhase.ZERO_GRAD), ("end", None),
    ("it1.mb1.forward|b0", None),
])
def test_simulator_trace_labels_map_to_the_shared_phases(label, phase):
    assert StepPhase.of_trace_label(label) is phase


def test_estimator_backward_phases_are_parts_of_the_traced_backward():
    assert StepPhase.BACKWARD_BLOCK.traced_as is StepPhase.BACKWARD
    assert StepPhase.FORWARD.traced_as is StepPhase.FORWARD
    assert StepPhase.FORWARD_ATTENTION.traced_as is StepPhase.FORWARD
    assert StepPhase.OPTIMIZER_STEP.trace_mark == "optimizer"


def test_estimator_functions_stay_small():
    """Issue 10: no function over ~60 lines (the estimator and the model reader)."""
    import ast
    from pathlib import Path

    src = Path(__file__).resolve().parents[2] / "src" / "vramfit"
    files = [*(src / "estimate").glob("*.py"), src / "models" / "hf_config.py", src / "models" / "spec.py"]
    long = [f"{p.name}:{n.name} ({n.end_lineno - n.lineno + 1})" for p in files
            for n in ast.walk(ast.parse(p.read_text()))
            if isinstance(n, ast.FunctionDef) and n.end_lineno - n.lineno + 1 > 60]
    assert long == []
