"""Answers that physics orders: less checkpointing never needs less memory (found by a random cross-check of the
estimator's answers, 2026-12-05)."""

from __future__ import annotations

from vramfit.estimate import estimate


def test_the_lowest_block_keeps_its_own_tensors_without_checkpointing():
    """FSDP full fine-tuning: without checkpointing the lowest block's tensors are the ones its forward saved, which
    had been left out (34,312,915,456 B checkpointed against 34,244,753,920 without, 2026-12-05). Under FSDP1 the end
    of backward is the lowest block's post-backward hook, after its backward (estimate/fsdp1_moments.py, 4): it holds
    no block tensor either way, and the block phase, which does, never needs less without checkpointing."""
    keys = {"model": "Qwen/Qwen2.5-7B", "method": "full", "precision": "bf16-true", "seq_len": 256, "optimizer": "lion",
            "num_gpus": 2, "parallelism": "fsdp", "framework": "litgpt", "attention": "eager"}
    full, none = (estimate({**keys, "gradient_checkpointing": c}) for c in ("full", "none"))
    assert none.peak.allocated_bytes >= full.peak.allocated_bytes
    phases = [{p.phase: dict(p.breakdown) for p in r.phases} for r in (full, none)]
    assert all("activations" not in ph["backward-end"] for ph in phases)
    blocks = [next(p.allocated_bytes for p in r.phases if p.phase == "backward-block") for r in (full, none)]
    assert blocks[1] >= blocks[0] and phases[1]["backward-block"]["activations"] > phases[0]["backward-block"]["activations"]


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
