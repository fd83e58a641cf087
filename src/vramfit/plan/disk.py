"""Persistent disk a run needs: base model download, dataset (raw and tokenized), checkpoints.

Integer bytes, decimal sources:

- base model: the 16-bit safetensors on the Hub, 2 bytes per parameter (QLoRA quantizes on load);
- raw text: about 4 bytes per token ("1 token ~= 4 chars in English", OpenAI Help Center, "What
  are tokens and how to count them?");
- tokenized: 5 bytes per token, ``input_ids`` as int32 and ``attention_mask`` as int8 (Hugging Face
  datasets ``arrow_writer.OptimizedTypedSequence`` picks these types for the columns);
- a resumable checkpoint: full fine-tuning writes the trainable weights in their training dtype
  (fp32 under ``-mixed``) plus the optimizer state (and DeepSpeed adds a 16-bit copy); LoRA writes
  the adapters (fp32, PEFT's default adapter dtype) plus their optimizer state;
- the final model: 16-bit weights for full fine-tuning, the adapters for LoRA (a merged 16-bit
  copy, if wanted, is another ``2 x params``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from vramfit.scenario import Method, Optimizer, Parallelism, Precision, Scenario

RAW_BYTES_PER_TOKEN = 4
TOKENIZED_BYTES_PER_TOKEN = 5

#: Optimizer state per trainable parameter, in units of the state dtype (``s``) or in bytes (``b``):
#: AdamW keeps m and v; Lion and SGD-momentum one buffer; 8-bit states 1 byte each; Adafactor's
#: factored second moment is about (rows + cols) per matrix, counted as 0 here.
_STATE: dict[Optimizer, tuple[float, str]] = {
    Optimizer.ADAMW: (2, "s"),
    Optimizer.PAGED_ADAMW: (2, "s"),
    Optimizer.ADAMW_8BIT: (2, "b"),
    Optimizer.PAGED_ADAMW_8BIT: (2, "b"),
    Optimizer.ADAMW_4BIT: (1, "b"),
    Optimizer.ADAMW_8BIT_TORCHAO: (2, "b"),
    Optimizer.ADAFACTOR: (0, "s"),
    Optimizer.SGD: (0, "s"),
    Optimizer.SGD_MOMENTUM: (1, "s"),
    Optimizer.LION: (1, "s"),
    Optimizer.LION_8BIT: (1, "b"),
}


@dataclass(frozen=True)
class DiskEstimate:
    base_model_bytes: int
    dataset_raw_bytes: int
    dataset_tokenized_bytes: int
    checkpoint_bytes: int  # one resumable checkpoint
    checkpoints_kept: int
    final_model_bytes: int
    total_bytes: int

    def to_dict(self) -> dict:
        return asdict(self)


def optimizer_state_bytes_per_param(optimizer: Optimizer, precision: Precision) -> float:
    """Bytes of optimizer state per trainable parameter as saved in a checkpoint."""
    units, kind = _STATE[optimizer]
    dtype = 4 if precision.mixed or precision is Precision.FP32 else 2
    return units * (dtype if kind == "s" else 1)


def checkpoint_bytes(sc: Scenario, num_params: int, trainable: int) -> int:
    """One resumable checkpoint of ``sc``: trainable weights + optimizer state (+ DeepSpeed's 16-bit copy)."""
    opt = optimizer_state_bytes_per_param(sc.optimizer, sc.precision)
    if sc.method is Method.FULL:
        weights = num_params * (4 if sc.precision.mixed or sc.precision is Precision.FP32 else 2)
        if sc.parallelism in (Parallelism.ZERO1, Parallelism.ZERO2, Parallelism.ZERO3) and sc.precision.mixed:
            weights += 2 * num_params  # DeepSpeed saves the 16-bit module and the fp32 partitions
        return int(weights + opt * num_params)
    return int(4 * trainable + opt * trainable)


def disk_needed(
    sc: Scenario, num_params: int, trainable: int, dataset_tokens: int | None, checkpoints_kept: int = 1
) -> DiskEstimate:
    """Disk for the base model, the dataset, ``checkpoints_kept`` checkpoints and the final model."""
    base = 2 * num_params
    raw = RAW_BYTES_PER_TOKEN * (dataset_tokens or 0)
    tok = TOKENIZED_BYTES_PER_TOKEN * (dataset_tokens or 0)
    ckpt = checkpoint_bytes(sc, num_params, trainable)
    final = 2 * num_params if sc.method is Method.FULL else 4 * trainable
    total = base + raw + tok + checkpoints_kept * ckpt + final
    return DiskEstimate(base, raw, tok, ckpt, checkpoints_kept, final, total)
