"""Persistent disk a run needs: base model download, dataset (raw and tokenized), checkpoints.

Integer bytes, decimal sources:

- base model: the 16-bit safetensors on the Hub, 2 bytes per parameter (QLoRA quantizes on load);
- raw text: about 4 bytes per token ("1 token ~= 4 chars in English", OpenAI Help Center, "What
  are tokens and how to count them?");
- tokenized: 5 bytes per token, ``input_ids`` as int32 and ``attention_mask`` as int8 (Hugging Face
  datasets ``arrow_writer.OptimizedTypedSequence`` picks these types for the columns);
- a resumable checkpoint: the trainable weights in their training dtype (fp32 under ``-mixed``; LoRA's
  adapters in the framework's adapter dtype; DeepSpeed's 16-bit module plus its fp32 master partition) and
  the optimizer state at the estimator's own per-element rate (:func:`checkpoint_bytes`);
- the final model: 16-bit weights for full fine-tuning, the adapters for LoRA (a merged 16-bit
  copy, if wanted, is another ``2 x params``);
- one checkpoint more than are kept, while a save is under way: transformers' ``Trainer._save_checkpoint``
  (trainer.py, v4.57.1 l. 3312-3370, the same order in 5.x) writes ``checkpoint-N`` whole (model, ``optimizer.pt``,
  scheduler, RNG) and only then calls ``_rotate_checkpoints``, which deletes the oldest beyond
  ``save_total_limit``; at the end the final model is written beside the kept checkpoints.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from vramfit.estimate.core import _ds_fp32_master, _ds_mixed, state_param_bytes
from vramfit.estimate.framework import adapter_bytes, scenario_profile
from vramfit.estimate.state import state_bytes_per_element
from vramfit.scenario import Method, Scenario

RAW_BYTES_PER_TOKEN = 4
TOKENIZED_BYTES_PER_TOKEN = 5


@dataclass(frozen=True)
class DiskEstimate:
    base_model_bytes: int
    dataset_raw_bytes: int
    dataset_tokenized_bytes: int
    checkpoint_bytes: int  # one resumable checkpoint
    checkpoints_kept: int
    final_model_bytes: int
    total_bytes: int  # the peak: the kept checkpoints plus the one being written (or the final model)
    checkpoints_on_disk: int = 0  # at that peak: kept + 1 while a save rotates (0 when none are kept)

    def to_dict(self) -> dict:
        return asdict(self)


def trainable_bytes(sc: Scenario) -> tuple[int, int]:
    """(trainable copy, fp32 master) bytes per trainable element, by the estimator's rules (estimate/core.py
    ``_base_state`` and ``model_state``): DeepSpeed ZeRO trains a 16-bit module on an fp32 master partition (and
    clones the partition under fp32 too); otherwise full fine-tuning's weights are in ``precision.param_bytes``
    (fp32 under ``-mixed``) and LoRA's adapters in the framework's adapter dtype (fp32, PEFT's default)."""
    copy = sc.precision.param_bytes if sc.method is Method.FULL else adapter_bytes(scenario_profile(sc), sc.precision)
    if _ds_mixed(sc):
        return 2, 4
    return copy, (4 if _ds_fp32_master(sc) else 0)


def checkpoint_bytes(sc: Scenario, num_params: int, trainable: int) -> int:
    """One resumable checkpoint of ``sc``: the trainable weights (+ DeepSpeed's fp32 master partition) and the
    optimizer state, per element as the estimator counts it (estimate/state.py ``state_bytes_per_element``, built on
    the dtype of ``estimate/core.py state_param_bytes``): e.g. bitsandbytes' 32-bit Lion keeps fp32 state whatever
    the parameter's dtype. A checkpoint holds every trainable tensor whole, so no sharding divides it."""
    count = num_params if sc.method is Method.FULL else trainable
    copy, master = trainable_bytes(sc)
    state = state_bytes_per_element(sc.optimizer, state_param_bytes(sc, copy))
    return int(count * (copy + master) + round(count * state))


def disk_needed(
    sc: Scenario, num_params: int, trainable: int, dataset_tokens: int | None, checkpoints_kept: int = 1,
    raw_bytes: int | None = None,
) -> DiskEstimate:
    """Peak disk for the base model, the dataset, ``checkpoints_kept`` checkpoints (``save_total_limit``) and the
    final model: the new checkpoint is written before the oldest is deleted, so ``kept + 1`` are on disk during a
    save, and the final model beside the ``kept`` at the end, whichever is larger. ``raw_bytes``: the dataset's own
    size on disk where a file was read (``DatasetReport.file_bytes``: truncation does not shrink it), else
    :data:`RAW_BYTES_PER_TOKEN` per token."""
    base = 2 * num_params
    raw = raw_bytes if raw_bytes is not None else RAW_BYTES_PER_TOKEN * (dataset_tokens or 0)
    tok = TOKENIZED_BYTES_PER_TOKEN * (dataset_tokens or 0)
    ckpt = checkpoint_bytes(sc, num_params, trainable)
    final = 2 * num_params if sc.method is Method.FULL else trainable_bytes(sc)[0] * trainable
    rotating = ckpt if checkpoints_kept else 0  # the save under way before _rotate_checkpoints
    total = base + raw + tok + checkpoints_kept * ckpt + max(rotating, final)
    on_disk = checkpoints_kept + 1 if checkpoints_kept and rotating >= final else checkpoints_kept
    return DiskEstimate(base, raw, tok, ckpt, checkpoints_kept, final, total, on_disk)
