"""FSDP2 LoRA: where a block's backward peaks (estimate/moe_lora.py ``fsdp2_lora_middle_block``, contributions.py
``_block_position``), the Liger refusal under fsdp-grad-op (estimate/fsdp2_fused_head.py) and the simulator's
loss swap leaving the model as it found it (sim/losses.py)."""

from __future__ import annotations

import importlib
from types import SimpleNamespace

import pytest
from simconfigs import tiny
from test_sim_moe_lora import MIXTRAL

from vramfit.errors import ScenarioError
from vramfit.estimate import estimate
from vramfit.sim import simulate

FSDP2 = {"num_gpus": 4, "parallelism": "fsdp", "fsdp_version": 2, "precision": "bf16-true", "seq_len": 512,
         "method": "lora"}
QWEN3_30B = {"model": "Qwen/Qwen3-30B-A3B", "method": "lora", "seq_len": 2048, "micro_batch_size": 1,
             "parallelism": "fsdp", "num_gpus": 8, "fsdp_version": 2, "precision": "bf16-mixed"}


def _middle(sc: dict) -> tuple[int, int, int, int]:
    from vramfit.estimate.step import compute
    from vramfit.models.catalog import resolve_model
    from vramfit.scenario import parse_scenario

    parsed = parse_scenario(sc)
    step = compute(resolve_model(parsed.model).spec, parsed)
    return importlib.import_module("vramfit.estimate.moe_lora").fsdp2_lora_middle_block(step)


def test_the_middle_block_just_under_the_top_holds_every_kept_tensor_but_the_tops():
    """Without checkpointing a block keeps 1,570,258,944 B: the block under the top holds 47 blocks' (the old
    formula counted two), one 10,380,288 B adapter-gradient shard. Under the policy's bf16 cast A and B are
    gathered in the banks' dtype, so the fold keeps no copies of them (40,042,496 B a block before)."""
    grads, kept, _, _ = _middle({**QWEN3_30B, "gradient_checkpointing": "none"})
    assert (grads, kept) == (10_380_288, 73_802_170_368)


def test_the_second_lowest_block_holds_the_shards_of_every_block_above():
    """With checkpointing a block keeps 8,388,608 B, less than its 10,380,288 B adapter-gradient shard, so the
    second-lowest block is the high point, with the 46 shards above it (the old formula counted one)."""
    grads, kept, _, _ = _middle({**QWEN3_30B, "gradient_checkpointing": "full"})
    assert grads == 46 * 10_380_288 == 477_493_248
    assert kept == 1_587_036_160


def test_six_layer_qwen3_moe_peaks_at_the_second_lowest_block(config_file):
    """The simulator peaks in block 1's backward with blocks 2-5's 8,456,192 B shards made; the estimator counted
    the lowest block's six (50,737,152 B, the estimate -5.4 %; -4.5 % before the folded down bank's gradient,
    moe_lora.folded_bank_backward, was counted; now -0.4 %)."""
    sc = {**FSDP2, "model": config_file(tiny("Qwen/Qwen3-30B-A3B", layers=6, hidden=512, vocab=4096)),
          "gradient_checkpointing": "full"}
    sim = simulate(sc, layers=6).result.peak
    est = estimate(sc).peak
    assert dict(sim.breakdown)["gradients"] == dict(est.breakdown)["gradients"] == 4 * 8_456_192
    assert est.allocated_bytes == 1_341_086_720
    assert est.allocated_bytes == pytest.approx(sim.allocated_bytes, rel=0.01)


@pytest.mark.parametrize("vocab", [4096, 32768])
def test_the_top_block_holds_no_embedding_gather_under_accelerates_units(config_file, vocab):
    """Only the lowest block prefetches the embedding unit: the simulator's top-block peak of this model holds
    549,746,176 B of temporaries at vocab 4096 and 32768 alike, and the estimator's communication buffers there no
    longer grow with the vocabulary (477,910,016 / 507,270,144 B before: the gathered embedding counted)."""
    sc = {**FSDP2, "model": config_file(tiny("Qwen/Qwen3-30B-A3B", layers=4, hidden=512, vocab=vocab)),
          "gradient_checkpointing": "none"}
    block = next(p for p in estimate(sc).phases if p.phase == "backward-block")
    assert dict(block.breakdown)["comm_buffers"] == 473_715_712


def test_liger_on_an_untied_peft_model_under_fsdp2_grad_op_is_refused(config_file):
    """reshard_after_forward=False keeps a unit unsharded only once its pre-forward ran, and lm_head's never runs:
    the simulator, its refusal bypassed, fails as under fsdp (aten.mm.default got mixed torch.Tensor and
    DTensor)."""
    sc = {**FSDP2, "model": config_file(MIXTRAL), "parallelism": "fsdp-grad-op", "loss": "fused"}
    with pytest.raises(ScenarioError) as err:
        estimate(sc)
    assert err.value.key == "loss" and "sharded DTensor" in str(err.value)
    estimate({**sc, "num_gpus": 1})  # one GPU shards nothing


@pytest.mark.parametrize("own", [None, "patched"])
def test_the_loss_swap_restores_the_models_forward(own):
    """An instance-level forward set before (a hook, a patch) is back afterwards; none set, none is left."""
    losses = importlib.import_module("vramfit.sim.losses")
    lm = SimpleNamespace() if own is None else SimpleNamespace(forward=own)
    built = SimpleNamespace(causal_lm=lm, model=lambda input_ids: input_ids)
    assert losses.chunked_or_fused_loss(built, None, "ids", None) == "ids"
    assert lm.__dict__.get("forward") == own
