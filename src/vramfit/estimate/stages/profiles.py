"""How each stage's TRL trainer gets its log-probs, as data: the working set the estimator builds for it.

TRL 1.16.0 (file:line in the installed package; PPO, removed after v1.9.0, read at v1.9.0):

* DPO, KTO, GRPO score with the fused LM head (``add_fused_lm_head``, trainer/utils.py:1548,
  ``ChunkedLogProbFunction``, kernels/chunked_logprob.py): no logits are built;
* ORPO and CPO/SimPO build the full logits of chosen + rejected (``concatenated_forward``,
  experimental/orpo/orpo_trainer.py:745, experimental/cpo/cpo_trainer.py:792) and take
  ``selective_log_softmax`` (trainer/utils.py:538), which on CUDA with Triton (a dependency of the CUDA
  torch wheels) runs ``_LogProbEntropyFunction`` (utils.py:572-574, kernels/logprob_entropy.py:146-240);
  both add a cross-entropy over the chosen half's logits: ORPO always (orpo_trainer.py:800), CPO/SimPO
  when ``cpo_alpha != 0`` (cpo_trainer.py:842-845, scenario key ``cpo_alpha``), whose default is 1.0
  (cpo_config.py:132-134; only ``loss_type="alphapo"`` sets it to 0, :176-179; ms-swift's ``--rlhf_type simpo``
  keeps 1.0: swift/arguments/rlhf_args.py:250 ``cpo_alpha: float = 1.`` at 3602360a5);
* DPO's RPO term (scenario key ``rpo_alpha``): TRL 1.16.0 has no ``rpo_alpha``; its ``loss_type="sft"``
  reads the fused head's per-token log-probs of the chosen half (dpo_trainer.py:1495-1502), no tensor of
  the vocabulary's size;
* PPO takes ``selective_log_softmax`` of v1.9.0, a per-row loop (ppo_trainer.py:703, 823).

Older TRL releases (``framework_version`` trl-0.29, trl-0.14; FrameworkProfile.trl_logits_logprobs) take
the full-logits stages' log-probs with other code: v0.15.0-v0.29.1 ``selective_log_softmax`` without the
Triton branch (trl/trainer/utils.py at v0.29.1), the row loop; v0.11.4-v0.14.0 ``get_batch_logps``
``torch.gather(logits.log_softmax(-1), dim=2, ...)`` (trl/trainer/cpo_trainer.py:672 at v0.11.4, :714 at
v0.14.0; orpo_trainer.py:684 at v0.11.4), the whole log_softmax at once. DPO had no fused head before 1.0:
``concatenated_forward`` takes ``outputs.logits`` and their log-probs by the same code (v0.14.0
trl/trainer/dpo_trainer.py:1214 the gather; v0.28.0 :1686 and v0.29.1 :1151 ``selective_log_softmax``), and
with ``rpo_alpha`` set (any value, 0 included: ``if self.args.rpo_alpha is not None``) adds
``F.cross_entropy(torch.flatten(logits[:num_examples, :-1], end_dim=1), ...)`` over the chosen half
(v0.14.0 :1242-1250, v0.28.0 :1706-1714), the same tensors as CPO's; v0.29.1 dropped ``rpo_alpha``.
KTO before 1.0 took them from ``outputs.logits`` too (v0.14.0 trl/trainer/kto_trainer.py:1035 the gather of
``log_softmax``; v0.29.1 trl/experimental/kto/kto_trainer.py:929 ``selective_log_softmax``) and returns
copies of the chosen and rejected rows' logits for its metrics (v0.14.0 :1112-1113 ``completion_logits[chosen_idx,
...]``, v0.29.1 :974-975 ``index_select``; ``StageProfile.copies_logits``). GRPO before 1.0 asks the model for the
completion's logits only (``num_logits_to_keep``/``logits_to_keep`` + 1) and loops over the rows: v0.14.0
trl/trainer/grpo_trainer.py:430-441 ``logits_row.log_softmax`` per row; v0.15.0-v0.29.1 ``selective_log_softmax``
after ``logits = logits / self.temperature``, a copy alive with the logits it divides (v0.29.1 :1062-1071).
LLaMA-Factory runs its own trainers (``framework_version`` llamafactory-0.9, FrameworkProfile.stage_logits_fp32,
chosen_nll_in_logps): fp32 logits, the whole ``log_softmax``, no chosen-half cross-entropy.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from vramfit.choices import Stage

if TYPE_CHECKING:
    from vramfit.estimate.framework import FrameworkProfile
    from vramfit.scenario import Scenario


class LogProbs(str, Enum):
    """Which code computes the policy's log-probs (each member's tensors: estimate/stages/preference.py)."""

    FUSED_HEAD = "fused-head"  # ChunkedLogProbFunction: [4096 x 32768] tiles of hidden @ W, no logits
    LOGITS_KERNEL = "logits-kernel"  # full logits, then the Triton log-prob/entropy kernel over them
    ROW_LOOP = "row-loop"  # full logits, then log_softmax (16-bit) or logsumexp (fp32) one sequence at a time
    FULL_LOG_SOFTMAX = "full-log-softmax"  # full logits, torch.gather(logits.log_softmax(-1), ...) at once


class ChosenNLL(str, Enum):
    """When a cross-entropy over the chosen half's full logits runs next to the log-probs."""

    NEVER = "never"
    ALWAYS = "always"  # ORPO
    CPO_ALPHA = "cpo-alpha"  # CPO/SimPO: when cpo_alpha != 0 (None: TRL's 1.0)
    RPO_ALPHA = "rpo-alpha"  # DPO before TRL 1.0: when rpo_alpha is given; never on the fused head


@dataclass(frozen=True)
class StageProfile:
    """One stage's policy step as TRL runs it."""

    paired: bool  # chosen and rejected run as one concatenated forward: the micro-batch counts pairs
    logprobs: LogProbs
    chosen_nll: ChosenNLL  # nn.CrossEntropyLoss over the chosen half's full logits, next to the log-probs
    source: str
    implementation: str = "TRL 1.16.0"  # the trainer this profile reads, as the stage's assumption line names it
    logits_before_1_0: bool = False  # a fused-head stage that built the full logits in TRL < 1.0 (DPO, KTO)
    rows_before_1_0: bool = False  # ... one row at a time whatever the release before 1.0 (GRPO)
    copies_logits: bool = False  # before 1.0: the chosen and rejected rows' logits copied for metrics (KTO)


STAGE_PROFILES: dict[Stage, StageProfile] = {
    Stage.DPO: StageProfile(True, LogProbs.FUSED_HEAD, ChosenNLL.RPO_ALPHA,
                            "trl 1.16.0 trainer/dpo_trainer.py:351 (chosen then rejected), :1285 _compute_loss",
                            logits_before_1_0=True),
    Stage.KTO: StageProfile(False, LogProbs.FUSED_HEAD, ChosenNLL.NEVER,
                            "trl 1.16.0 trainer/kto_trainer.py: one completion", logits_before_1_0=True,
                            copies_logits=True),
    Stage.ORPO: StageProfile(True, LogProbs.LOGITS_KERNEL, ChosenNLL.ALWAYS,
                             "trl 1.16.0 experimental/orpo/orpo_trainer.py:745-825 concatenated_forward"),
    Stage.SIMPO: StageProfile(True, LogProbs.LOGITS_KERNEL, ChosenNLL.CPO_ALPHA,
                              "trl 1.16.0 experimental/cpo/cpo_trainer.py:792-862 concatenated_forward, "
                              "loss_type simpo"),
    Stage.GRPO: StageProfile(False, LogProbs.FUSED_HEAD, ChosenNLL.NEVER, "trl 1.16.0 trainer/grpo_trainer.py:2505",
                             rows_before_1_0=True),
    Stage.PPO: StageProfile(False, LogProbs.ROW_LOOP, ChosenNLL.NEVER,
                            "trl v1.9.0 experimental/ppo/ppo_trainer.py:703, 823", implementation="TRL v1.9.0"),
}

#: Stages whose chosen and rejected completions run as one concatenated batch.
PAIRED = tuple(s for s, p in STAGE_PROFILES.items() if p.paired)
#: Stages whose log-probs come from TRL 1.16's fused LM head (the rest build the full logits).
FUSED_HEAD = tuple(s for s, p in STAGE_PROFILES.items() if p.logprobs is LogProbs.FUSED_HEAD)


def logprobs_path(stage: Stage, framework: FrameworkProfile) -> LogProbs:
    """The log-prob code of ``stage`` under the framework's release: an older TRL's for the stages that
    build the full logits and for DPO and KTO, which built them before 1.0; GRPO's row loop before 1.0."""
    prof = STAGE_PROFILES[stage]
    older = framework.trl_logits_logprobs
    if older is not None and prof.rows_before_1_0:
        return LogProbs.ROW_LOOP
    if older is not None and (prof.logprobs is LogProbs.LOGITS_KERNEL or prof.logits_before_1_0):
        return older
    return prof.logprobs


def chosen_nll(sc: Scenario, path: LogProbs, framework: FrameworkProfile) -> bool:
    """Whether the policy's loss adds the cross-entropy over the chosen half's full logits (never where the
    trainer takes its SFT term from the per-token log-probs: FrameworkProfile.chosen_nll_in_logps)."""
    if framework.chosen_nll_in_logps:
        return False
    rule = STAGE_PROFILES[sc.stage].chosen_nll
    if rule is ChosenNLL.CPO_ALPHA:
        return sc.cpo_alpha != 0  # None: CPOConfig's 1.0 (cpo_trainer.py:842 `if self.cpo_alpha == 0`)
    if rule is ChosenNLL.RPO_ALPHA:
        return sc.rpo_alpha is not None and path is not LogProbs.FUSED_HEAD
    return rule is ChosenNLL.ALWAYS
