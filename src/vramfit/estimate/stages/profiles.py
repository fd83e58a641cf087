"""How each stage's TRL trainer gets its log-probs, as data: the working set the estimator builds for it.

TRL 1.16.0 (file:line in the installed package; PPO, removed after v1.9.0, read at v1.9.0):

* DPO, KTO, GRPO score with the fused LM head (``add_fused_lm_head``, trainer/utils.py:1548,
  ``ChunkedLogProbFunction``, kernels/chunked_logprob.py): no logits are built;
* ORPO and CPO/SimPO build the full logits of chosen + rejected (``concatenated_forward``,
  experimental/orpo/orpo_trainer.py:745, experimental/cpo/cpo_trainer.py:792) and take
  ``selective_log_softmax`` (trainer/utils.py:538), which on CUDA with Triton (a dependency of the CUDA
  torch wheels) runs ``_LogProbEntropyFunction`` (utils.py:572-574, kernels/logprob_entropy.py:146-240);
  both add a cross-entropy over the chosen half's logits: ORPO always (orpo_trainer.py:800), CPO/SimPO
  when ``cpo_alpha != 0`` (cpo_trainer.py:842-845), whose default is 1.0 (cpo_config.py:132-134; ms-swift's
  ``--rlhf_type simpo`` keeps it: swift/llm/argument/rlhf_args.py ``cpo_alpha: float = 1.``);
* PPO takes ``selective_log_softmax`` of v1.9.0, a per-row loop (ppo_trainer.py:703, 823).

Older TRL releases (``framework_version`` trl-0.29, trl-0.14; FrameworkProfile.trl_logits_logprobs) take
the full-logits stages' log-probs with other code: v0.15.0-v0.29.1 ``selective_log_softmax`` without the
Triton branch (trl/trainer/utils.py at v0.29.1), the row loop; v0.11.4-v0.14.0 ``get_batch_logps``
``torch.gather(logits.log_softmax(-1), dim=2, ...)`` (trl/trainer/cpo_trainer.py:672 at v0.11.4, :714 at
v0.14.0; orpo_trainer.py:684 at v0.11.4), the whole log_softmax at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from vramfit.choices import Stage

if TYPE_CHECKING:
    from vramfit.estimate.framework import FrameworkProfile


class LogProbs(str, Enum):
    """Which code computes the policy's log-probs (each member's tensors: estimate/stages/preference.py)."""

    FUSED_HEAD = "fused-head"  # ChunkedLogProbFunction: [4096 x 32768] tiles of hidden @ W, no logits
    LOGITS_KERNEL = "logits-kernel"  # full logits, then the Triton log-prob/entropy kernel over them
    ROW_LOOP = "row-loop"  # full logits, then log_softmax (16-bit) or logsumexp (fp32) one sequence at a time
    FULL_LOG_SOFTMAX = "full-log-softmax"  # full logits, torch.gather(logits.log_softmax(-1), ...) at once


@dataclass(frozen=True)
class StageProfile:
    """One stage's policy step as TRL runs it."""

    paired: bool  # chosen and rejected run as one concatenated forward: the micro-batch counts pairs
    logprobs: LogProbs
    chosen_nll: bool  # nn.CrossEntropyLoss over the chosen half's full logits, next to the log-probs
    source: str


STAGE_PROFILES: dict[Stage, StageProfile] = {
    Stage.DPO: StageProfile(True, LogProbs.FUSED_HEAD, False,
                            "trl 1.16.0 trainer/dpo_trainer.py:351 (chosen then rejected), :1285 _compute_loss"),
    Stage.KTO: StageProfile(False, LogProbs.FUSED_HEAD, False, "trl 1.16.0 trainer/kto_trainer.py: one completion"),
    Stage.ORPO: StageProfile(True, LogProbs.LOGITS_KERNEL, True,
                             "trl 1.16.0 experimental/orpo/orpo_trainer.py:745-825 concatenated_forward"),
    Stage.SIMPO: StageProfile(True, LogProbs.LOGITS_KERNEL, True,
                              "trl 1.16.0 experimental/cpo/cpo_trainer.py:792-862 concatenated_forward, "
                              "loss_type simpo, cpo_alpha 1.0"),
    Stage.GRPO: StageProfile(False, LogProbs.FUSED_HEAD, False, "trl 1.16.0 trainer/grpo_trainer.py:2505"),
    Stage.PPO: StageProfile(False, LogProbs.ROW_LOOP, False, "trl v1.9.0 experimental/ppo/ppo_trainer.py:703, 823"),
}

#: Stages whose chosen and rejected completions run as one concatenated batch.
PAIRED = tuple(s for s, p in STAGE_PROFILES.items() if p.paired)
#: Stages whose log-probs come from TRL's fused LM head (the rest build the full logits).
FUSED_HEAD = tuple(s for s, p in STAGE_PROFILES.items() if p.logprobs is LogProbs.FUSED_HEAD)


def logprobs_path(stage: Stage, framework: FrameworkProfile) -> LogProbs:
    """The log-prob code of ``stage`` under the framework's release: an older TRL's, for the stages that
    build the full logits (the fused head's stages changed more than their log-prob call: not modelled)."""
    own = STAGE_PROFILES[stage].logprobs
    older = framework.trl_logits_logprobs
    return older if older is not None and own is LogProbs.LOGITS_KERNEL else own
