"""Answers that physics orders: less checkpointing never needs less memory (found by a random cross-check of the
estimator's answers, 2026-12-05)."""

from __future__ import annotations

from vramfit.estimate import estimate


def test_the_lowest_block_keeps_its_own_tensors_at_the_end_of_backward_without_checkpointing():
    """FSDP full fine-tuning peaks at the end of backward (the lowest block's whole gradients beside every shard):
    checkpointed, the lowest block's tensors are its recompute; without checkpointing they are still the ones its
    forward saved, which had been left out (34,312,915,456 B checkpointed against 34,244,753,920 without)."""
    keys = {"model": "Qwen/Qwen2.5-7B", "method": "full", "precision": "bf16-true", "seq_len": 256, "optimizer": "lion",
            "num_gpus": 2, "parallelism": "fsdp", "framework": "litgpt", "attention": "eager"}
    full, none = (estimate({**keys, "gradient_checkpointing": c}) for c in ("full", "none"))
    assert none.peak.phase == "backward-end" and none.peak.allocated_bytes >= full.peak.allocated_bytes
    end = {p.phase: dict(p.breakdown) for p in none.phases}["backward-end"]
    assert end["activations"] == dict(next(p for p in full.phases if p.phase == "backward-end").breakdown)["activations"]


def test_litgpt_refuses_mixed_precision_with_a_bitsandbytes_base():
    """lit-gpt's finetune/lora.py raises ValueError("Quantization and mixed precision is not supported.") for --quantize
    bnb.* with a "mixed" precision (a cross-check found a plan's QLoRA change re-estimated at bf16-mixed)."""
    import pytest

    from vramfit.errors import ScenarioError
    from vramfit.web.translate import untranslated

    keys = {"model": "meta-llama/Llama-3.1-8B", "framework": "litgpt", "method": "qlora"}
    with pytest.raises(ScenarioError) as err:
        estimate({**keys, "precision": "bf16-mixed"})
    assert err.value.key == "precision" and "bf16-true" in str(err.value) and untranslated([str(err.value)]) == []
    assert estimate(keys).scenario.precision.value == "bf16-true"  # its default
    assert estimate({**keys, "framework": "hf", "precision": "bf16-mixed"}).peak.allocated_bytes > 0
