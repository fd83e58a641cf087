"""Training stages beyond SFT: what a preference or RL stage adds to the SFT step of its policy.

A stage (scenario key ``stage``) is modelled as the SFT step of the policy's own forward and backward
(:func:`policy_scenario`: DPO, ORPO and SimPO run chosen and rejected in one concatenated forward, so
the micro-batch holds twice the pairs) plus contributors of its own (:mod:`.preference`, :mod:`.rl`):
the reference model, the no_grad scoring passes (``StepPhase.SCORE``), the rollouts
(``StepPhase.GENERATE``) and the models PPO adds. The core contributors stay as they are
(docs/extending.md). TRL 1.16.0 is the reference implementation (PPO, removed
after v1.9.0, is read at v1.9.0); each fact cites its file and line.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from vramfit.choices import Loss, Method, Reference, Stage
from vramfit.estimate.phases import StepPhase
from vramfit.estimate.stages.profiles import PAIRED, LogProbs, logprobs_path
from vramfit.stage_keys import GENERATES, PREFERENCE, REFERENCE_FREE

if TYPE_CHECKING:
    from vramfit.estimate.contributions import Contributor
    from vramfit.estimate.step import Step
    from vramfit.scenario import Scenario


#: The components a stage adds: (when live, what it is), as the result's component table shows them.
COMPONENTS: dict[str, tuple[str, str]] = {
    "reference_model": ("persistent", "frozen reference copy of the model"),
    "score_logits": ("transient", "no_grad reference / old-policy pass: its logits or one block's working set"),
    "kv_cache": ("transient", "generate(): the KV cache of the rollouts"),
    "generation_transient": ("transient", "generate(): last-token logits and probabilities, cache growth"),
    "gathered_weights": ("transient", "ZeRO-3 parameters gathered for generation"),
    "vllm": ("persistent", "colocated vLLM: gpu_memory_utilization of the card"),
    "value_model": ("persistent", "PPO value model: weights and optimizer state (trained in full)"),
    "value_gradients": ("backward", "PPO value model gradients"),
    "value_activations": ("forward-backward", "PPO value model saved activations"),
    "reward_model": ("persistent", "PPO frozen reward model"),
    "rollout_scores": ("persistent", "PPO: the rollouts' fp32 generation scores, kept to the next rollout"),
}


def reference(sc: Scenario) -> Reference:
    """The reference as TRL resolves it when the scenario says ``auto``.

    DPO/KTO/PPO: no ``ref_model`` given -> none kept for a PEFT model (the adapters are disabled for
    the reference pass), else a frozen copy created from the same path and init kwargs
    (dpo_trainer.py:909-927, kto_trainer.py:920; v1.9.0 experimental/ppo/ppo_trainer.py:439-444).
    GRPO: the reference is loaded only when ``beta != 0`` (grpo_trainer.py:984-990), and ``beta``
    defaults to 0.0 (grpo_config.py:681).
    """
    if sc.reference is not Reference.AUTO:
        return sc.reference
    if sc.stage in REFERENCE_FREE or sc.stage is Stage.GRPO:
        return Reference.NONE
    return Reference.COPY if sc.method is Method.FULL else Reference.ADAPTERS_OFF


def has_reference_pass(sc: Scenario) -> bool:
    return reference(sc) in (Reference.COPY, Reference.ADAPTERS_OFF)


def has_phase(step: Step, phase: StepPhase) -> bool:
    """The rule of the stage phases in ``PHASE_RULES`` (contributions.py)."""
    sc = step.sc
    if phase is StepPhase.GENERATE:
        return sc.stage in GENERATES
    if phase is StepPhase.SCORE:
        from vramfit.estimate.stages.rl import scores_rollouts

        return has_reference_pass(sc) or sc.stage is Stage.KTO or scores_rollouts(sc)
    return False


def stage_loss_choice(sc: Scenario) -> Loss:
    """The loss the stage's trainer runs: the scenario's fused or chunked loss only for the stages whose trainer
    has one under the framework (``FrameworkProfile.fused_stage_losses``); else its own log-prob code stands."""
    if sc.stage is Stage.SFT or sc.loss is Loss.STANDARD:
        return sc.loss
    from vramfit.estimate.framework import scenario_profile

    return sc.loss if sc.stage in scenario_profile(sc).fused_stage_losses else Loss.STANDARD


def stage_loss_scenario(sc: Scenario) -> Scenario:
    """The scenario with the loss the stage's trainer runs (:func:`stage_loss_choice`): what every figure of the step
    reads, so a chunked or fused loss the trainer has not is counted nowhere (drive 2026-12-07: the output
    projections' chunked-loss gradients had still been added to DPO, KTO and GRPO, +0.7 to 1.6 GiB)."""
    loss = stage_loss_choice(sc)
    return sc if loss is sc.loss else replace(sc, loss=loss)


def policy_scenario(sc: Scenario) -> Scenario:
    """The SFT scenario of the policy's forward and backward: paired stages double the micro-batch; the loss is the
    one the stage's trainer runs (:func:`stage_loss_scenario`)."""
    sc = stage_loss_scenario(sc)
    return replace(sc, micro_batch_size=2 * sc.micro_batch_size) if sc.stage in PAIRED else sc


def contributors(step: Step) -> tuple[Contributor, ...]:
    """The stage's contributors, added to the core's by :func:`vramfit.estimate.step.compute`."""
    if step.sc.stage in PREFERENCE:
        from vramfit.estimate.stages.preference import CONTRIBUTORS

        return CONTRIBUTORS
    if step.sc.stage in GENERATES:
        from vramfit.estimate.stages.rl import CONTRIBUTORS as RL

        return RL
    return ()


def finish(step: Step) -> Step:
    """The stage's changes to the policy's SFT step before its phases are summed (its loss tensors)."""
    if step.sc.stage is Stage.SFT:
        return step
    from vramfit.estimate.stages.preference import stage_loss

    loss = stage_loss(step)
    parts = replace(step.parts, logits_loss=loss.forward_peak)
    fused = logprobs_path(step.sc.stage, step.profile) is LogProbs.FUSED_HEAD
    if fused and stage_loss_choice(step.sc) is Loss.STANDARD and step.head_autocast:
        # TRL's fused head never calls the output layer, so autocast makes no copy of its weight: neither the copy
        # kept into backward (forward_extras.head_autocast_copy, 2 bytes per head parameter, in parts.autocast_copies)
        # nor the one the top block's backward frees (step.head_autocast); the slices are in the loss
        parts = replace(parts, autocast_copies=max(0, parts.autocast_copies - step.head_autocast))
        return replace(step, loss=loss, parts=parts, head_autocast=0)
    return replace(step, loss=loss, parts=parts)


def assumptions(step: Step) -> list[str]:
    """What the estimate assumed about the stage, in words."""
    if step.sc.stage is Stage.SFT:
        return []
    from vramfit.estimate.stages.preference import describe

    return describe(step)


__all__ = ["PAIRED", "reference", "has_phase", "policy_scenario", "stage_loss_choice", "stage_loss_scenario", "contributors", "finish", "assumptions"]
