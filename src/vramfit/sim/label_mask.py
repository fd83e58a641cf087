"""Logits at the label positions only (scenario ``logits_to_keep`` labels): the inputs ms-swift hands the model.

Each row's last ``ceil(label_share x seq_len)`` tokens carry labels (a prompt, then its answer). ms-swift @3debbef8e
swift/trainers/mixin.py ``get_logits_to_keep``: ``loss_mask = (labels != -100)[0]``, the labels cut to those
positions and padded with one -100 in front, and ``logits_to_keep = pad(loss_mask[1:], (0, 1), value=True)``, a
boolean mask the model's forward applies to its hidden states before the head (transformers v5.24.0
``*ForCausalLM.forward``: ``hidden_states[:, slice_indices, :]``; Liger's ``lce_forward`` the same). The simulator
hands the library's forward (or its own fused loss) the same positions as an integer index: indexing with a boolean
mask runs ``nonzero``, whose output shape depends on the data, which fake tensors cannot run; the kept rows are the
same tensors (only the mask's own ``nonzero`` output, 8 bytes a kept row, is not made).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from vramfit.scenario import LogitsToKeep, Scenario, Stage

IGNORE_INDEX = -100


def keep_labels(scenario: Scenario, labels: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
    """(the labels the model gets, the extra forward keyword: ``logits_to_keep``), or ``labels`` and ``{}``."""
    if scenario.logits_to_keep is not LogitsToKeep.LABELS or scenario.stage is not Stage.SFT:
        return labels, {}
    seq = labels.shape[-1]
    # the row's last tokens are its labels; its first token never is one (a prompt comes first)
    answer = min(seq - 1, math.ceil(scenario.label_share * seq))
    kept = F.pad(labels[:, seq - answer:], (1, 0), value=IGNORE_INDEX)
    # pad(loss_mask[1:], (0, 1), value=True): the positions before each label, and the row's last
    return kept, {"logits_to_keep": torch.arange(seq - answer - 1, seq, device=labels.device)}
