"""The fsdp_version scenario key (issue 13): hf runs FSDP1 by default and accelerate 1.15's FSDP2 when asked
(estimate/framework.py HF fsdp2_variant); torchtune and torchtitan run FSDP2 only."""

from __future__ import annotations

import pytest

from vramfit.errors import ScenarioError
from vramfit.estimate import estimate
from vramfit.estimate.framework import scenario_profile
from vramfit.estimate.fsdp2 import allgather_pool_idle
from vramfit.estimate.step import compute
from vramfit.models import resolve_model
from vramfit.scenario import FsdpVersion, parse_scenario

BASE = {"model": "meta-llama/Llama-3.1-8B", "method": "full", "precision": "bf16-mixed", "seq_len": 2048,
        "num_gpus": 8, "parallelism": "fsdp", "attention": "flash", "gradient_checkpointing": "full"}


@pytest.mark.parametrize("value", [2, "2", " 2 "])
def test_the_version_reads_as_a_number_or_text(value):
    assert parse_scenario({**BASE, "fsdp_version": value}).fsdp_version is FsdpVersion.V2


@pytest.mark.parametrize(("extra", "words"), [
    ({"fsdp_version": 3}, "fsdp_version: unknown value '3' (valid values: auto, 1, 2)"),
    ({"fsdp_version": True}, "fsdp_version: unknown value"),
    ({"fsdp_version": 2, "parallelism": "fsdp-no-shard"}, "fsdp_version: FSDP2 has no NO_SHARD"),
    ({"fsdp_version": 1, "framework": "torchtitan"}, "fsdp_version: torchtitan runs FSDP2 only (valid values: auto, 2)"),
])
def test_a_bad_version_is_one_line_naming_the_field(extra, words):
    with pytest.raises(ScenarioError) as ei:
        parse_scenario({**BASE, **extra})
    assert str(ei.value).startswith(words) and "\n" not in str(ei.value)


def test_version_2_swaps_hf_onto_the_fsdp2_profile():
    fsdp1 = scenario_profile(parse_scenario({**BASE, "method": "lora"}))
    fsdp2 = scenario_profile(parse_scenario({**BASE, "method": "lora", "fsdp_version": 2}))
    assert (fsdp1.fsdp2, fsdp1.fsdp1_host_wrap, fsdp1.fsdp_lora_units_nested) == (False, True, True)
    assert (fsdp2.fsdp2, fsdp2.fsdp1_host_wrap, fsdp2.fsdp_lora_units_nested, fsdp2.fsdp2_tail_unit) == \
        (True, False, False, True)
    # outside FSDP the key changes nothing
    assert scenario_profile(parse_scenario({**BASE, "parallelism": "zero3", "fsdp_version": 2})).fsdp2 is False


def test_fsdp2_leaves_no_host_wrap_residue_and_reduces_the_tail_first():
    """FSDP1 wraps the host-loaded model unit by unit and keeps the transients reserved (estimate/fsdp_reserved.py);
    accelerate's FSDP2 shards per parameter, so only the step's own segments stay. Its norm + lm_head unit
    reduce-scatters right after the output layer's backward (estimate/fsdp2.py, 4), so the end of backward no longer
    holds the output layer's whole bf16 gradient (128256 x 4096 x 2 B) beside the root waiting for the embedding's."""
    def phases(v):
        r = estimate({**BASE, "fsdp_version": v})
        return r.peak, {p.phase: dict(p.breakdown) for p in r.phases}

    (p1, b1), (p2, b2) = phases(1), phases(2)
    assert b1["backward-end"]["gradients"] - b2["backward-end"]["gradients"] == 128256 * 4096 * 2
    # FSDP2: the second-lowest block prefetches the lowest, not the embedding unit (fsdp2.second_lowest_block), so
    # its moment no longer tops the end of backward, where the lowest block has prefetched the embedding. FSDP1: the
    # end of backward follows the lowest block's backward, and the second-lowest block's end (its weight gradients and
    # their cat beside every shard above it and two gathered blocks) is the high point (estimate/fsdp1_moments.py)
    assert (p1.phase, p2.phase) == ("backward-block", "backward-end")
    # 30.5 vs 23.5 GiB (Llama-3.1-8B, 8 GPUs), of which FSDP2's all-gather copy-in stream keeps 1.96 GiB: the
    # embedding unit's output (128256 x 4096 bf16: 501 segments of 2 MiB) beside the lowest block's (436,224,000 B:
    # 209), and the tail's (+ the norm: 502) in a segment of its own, less the one block output the step counts
    ag = allgather_pool_idle(compute(resolve_model(BASE["model"]).spec, parse_scenario({**BASE, "fsdp_version": 2})))
    assert ag == (501 + 209 + 502) * 2**21 - 436_224_000 == 2_105_524_224
    assert p1.reserved_bytes - (p2.reserved_bytes - ag) > 8 * 2**30
    assert p2.reserved_bytes >= p2.allocated_bytes


def test_axolotls_fsdp2_has_no_tail_unit():
    """axolotl@ba3dba3e4 monkeypatch/accelerate/fsdp2.py wraps the decoder layers and the root only."""
    prof = scenario_profile(parse_scenario({**BASE, "fsdp_version": 2, "framework_version": "axolotl-0.12"}))
    assert (prof.fsdp2, prof.fsdp1_host_wrap, prof.fsdp2_tail_unit, prof.fsdp_root_gathered) == (True, False, False, True)
    # without fsdp_version 2 the release changes nothing under FSDP1
    assert scenario_profile(parse_scenario({**BASE, "framework_version": "axolotl-0.12"})).fsdp2 is False


def test_fsdp2_is_a_path_of_its_own_and_says_what_it_leaves_out():
    """No published measurement ran accelerate's FSDP2, so the accuracy band says so; the assumptions name the code."""
    r = estimate({**BASE, "method": "lora", "fsdp_version": 2})
    acc = r.to_dict()["accuracy"]
    assert (acc["path"]["sharding"], acc["measured_path"]) == ("fsdp+fsdp2", False)
    assert any(a.startswith("FSDP2 (fsdp_version 2) as accelerate 1.15's fsdp2_prepare_model") for a in r.assumptions)
    assert estimate({**BASE, "method": "lora"}).to_dict()["accuracy"]["path"]["sharding"] == "fsdp"


def test_gradient_accumulation_under_each_accelerate():
    """accelerate >= 1.11 turns FSDP2's gradient sync off for every micro-batch but the last (no_sync ->
    set_requires_gradient_sync(False)): the whole gradients accumulate on every GPU. axolotl 0.12's accelerate
    (@9359a0194) had no FSDP2 no_sync: each micro-batch reduce-scatters into the shards (estimate/fsdp2.py, 6)."""
    spec = resolve_model(BASE["model"]).spec
    keys = {**BASE, "fsdp_version": 2, "grad_accum": 2, "num_gpus": 8}
    acc = compute(spec, parse_scenario(keys))
    axo = compute(spec, parse_scenario({**keys, "framework_version": "axolotl-0.12"}))
    assert acc.held_grads == 8 * acc.parts.gradients and acc.head_grad == 0
    assert axo.held_grads == axo.parts.gradients and axo.head_grad == 128256 * 4096 * 2
