"""estimate/reentrant_fsdp1.py: reentrant checkpointing around FSDP1 block units with frozen weights keeps every block
input's gradient to the end of backward (tests/test_reentrant_fsdp1_torch.py runs the torch behaviour)."""

from __future__ import annotations

import json
from pathlib import Path

from vramfit.estimate import estimate
from vramfit.scenario import ScenarioError, parse_scenario

FOUND = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "measured" / "found.jsonl"


def _row(rid: str) -> dict:
    return next(r for r in map(json.loads, FOUND.read_text().splitlines()) if r["id"] == rid)


def _block_phase(sc: dict) -> dict:
    d = estimate(parse_scenario(sc)).to_dict()
    return next(p for p in d["phases"] if p["phase"] == "backward-block")["breakdown"]


def test_70b_qlora_on_two_gpus_keeps_78_block_input_gradients():
    """fms-acceleration's Llama-2-70B QLoRA row (2 x A100, transformers 4.45): 80 layers, 2 x 4,096 tokens per GPU,
    hidden 8,192, bf16 residual: the lowest block's backward holds 78 more gradients than the top block's."""
    row = _row("FMS_ACCEL_2411-19")
    kept = _block_phase(row["scenario"])
    plain = _block_phase({**row["scenario"], "use_reentrant": "no"})
    assert kept["activations"] - plain["activations"] == 78 * 8192 * 8192 * 2 == 10_468_982_784
    assert kept["gradients"] == 65_536_000  # every adapter gradient made by then: 65,536,000 bf16 elements / 2 GPUs
    # nothing below the lowest block to prefetch: one 4-bit block unit (427,851,776 B gathered) in flight, not two; the
    # top block's recompute holds one as well, its prefetch going to its own adapter units first
    # (estimate/fsdp1_moments.py adapter_units_prefetch; the difference was 427,851,776 B before)
    assert plain["comm_buffers"] == kept["comm_buffers"] == 427_851_776 + 1_048_592_384  # the block and the root
    d = estimate(parse_scenario(row["scenario"])).to_dict()
    assert d["peak"]["phase"] == "backward-block"
    # measured 46,685,328,896 B (-0.1 %; -1.2 % while FSDP1's gathered root was counted less its shard)
    assert d["peak"]["allocated_bytes"] == 46_639_718_400
    assert any("Reentrant gradient checkpointing under FSDP1" in a for a in d["assumptions"])


def test_the_peak_moves_from_the_loss_to_the_lowest_block():
    """Mistral-7B LoRA, 2 x 2 x 4,096 tokens: without the kept gradients the loss is the high point (its backward, where
    FSDP1's root pre-backward has gathered the top block again; estimate/fsdp1_moments.py)."""
    row = _row("FMS_ACCEL_2411-6")
    plain = estimate(parse_scenario({**row["scenario"], "use_reentrant": "no"})).to_dict()["peak"]["phase"]
    assert plain == "backward-loss"
    d = estimate(parse_scenario(row["scenario"])).to_dict()
    assert (d["peak"]["phase"], d["peak"]["allocated_bytes"]) == ("backward-block", 15_010_983_936)
    assert row["measured"]["bytes"] == 15_245_549_568  # -1.5 % (-3.3 % with the root counted less its shard)


def test_paths_without_the_mechanism_are_unchanged():
    base = _row("FMS_ACCEL_2411-6")["scenario"]
    for change in ({"method": "full"},  # the FlatParameter requires grad: no reshard-only hook
                   {"fsdp_version": "2"},  # fully_shard registers no multi-grad hook
                   {"framework_version": "transformers-4.53"},  # the checkpoint sits inside the unit
                   {"num_gpus": 1, "parallelism": "none"},
                   {"gradient_checkpointing": "none"}):
        sc = {**base, **change}
        assert _block_phase(sc) == _block_phase({**sc, "use_reentrant": "no"}), change
        assert not any("Reentrant" in a for a in estimate(parse_scenario(sc)).to_dict()["assumptions"])


def test_recipes_with_their_own_non_reentrant_wrapper_keep_nothing():
    for rid in ("LLAMA_REC_PR41_2307-4", "AAI_FSDPQLORA_2403-16"):
        sc = _row(rid)["scenario"]
        assert not any("Reentrant" in a for a in estimate(parse_scenario(sc)).to_dict()["assumptions"]), rid


def test_a_bad_value_names_the_field_and_its_values():
    try:
        parse_scenario({"model": "mistralai/Mistral-7B-v0.1", "use_reentrant": "sometimes"})
    except ScenarioError as e:
        assert str(e) == "use_reentrant: unknown value 'sometimes' (valid values: auto, yes, no)"
    else:
        raise AssertionError("accepted")


def test_changes_to_fit_offer_non_reentrant_checkpointing_first():
    """plan/changes.py: the 70B QLoRA run on two 48 GB cards fits once checkpointing is non-reentrant, the same step
    with no slowdown: the first change offered, taking the kept gradients and the unit off."""
    from vramfit.plan.changes import changes_to_fit

    sc = _row("FMS_ACCEL_2411-19")["scenario"]
    first = changes_to_fit(sc, "l40s")[0]
    assert (first.name, first.changes, first.kind, first.fits) == (
        "non-reentrant-checkpointing", {"use_reentrant": "no"}, "free", True)
    assert round(first.saving_bytes / 2**30, 2) == 9.75
    assert not any(c.name == "non-reentrant-checkpointing"
                   for c in changes_to_fit({**sc, "use_reentrant": "no", "micro_batch_size": 4}, "l40s"))


def test_the_kept_gradients_are_sized_on_the_sequences_the_blocks_run():
    """A paired stage runs chosen and rejected together (stages.policy_scenario): twice the block inputs."""
    from vramfit.estimate.framework import scenario_profile
    from vramfit.estimate.reentrant_fsdp1 import retained_input_grads
    from vramfit.models import resolve_model

    sc = _row("FMS_ACCEL_2411-6")["scenario"]
    spec = resolve_model(sc["model"]).spec
    sft, dpo = (parse_scenario({**sc, "stage": stage}) for stage in ("sft", "dpo"))
    assert retained_input_grads(spec, sft, scenario_profile(sft)) == 30 * 2 * 4096 * 4096 * 2 == 2_013_265_920
    assert retained_input_grads(spec, dpo, scenario_profile(dpo)) == 2 * 2_013_265_920
