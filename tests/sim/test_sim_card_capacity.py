"""A named card stops the simulated reserved figure where its allocator's OOM retry would (sim/engine.py
``card_capacity``): the replay's card is unbounded, a real one releases its free cached segments and retries first."""

from __future__ import annotations

import pytest

from vramfit.scenario import parse_scenario
from vramfit.sim import engine, simulate


def test_the_capacity_is_the_usable_memory_less_the_context():
    # H100 SXM: 85,020,639,232 B usable (its published CUDA total), the sm90 context 794,820,608 B beside the allocator
    assert engine.card_capacity(parse_scenario({"model": "meta-llama/Llama-3.1-8B", "gpu": "h100-sxm"})) == 84_225_818_624
    assert engine.card_capacity(parse_scenario({"model": "meta-llama/Llama-3.1-8B"})) is None


def test_reserved_stops_at_the_card(config_file, tiny, monkeypatch):
    sc = {"model": config_file(tiny("meta-llama/Llama-3.2-1B", vocab=32000)), "method": "full", "precision": "bf16-true",
          "micro_batch_size": 2, "seq_len": 256, "gpu": "h100-sxm"}
    free = simulate(parse_scenario(sc), layers=4).result.peak
    assert free.reserved_bytes > free.allocated_bytes  # nothing stops it on an 80 GB card
    between = (free.allocated_bytes + free.reserved_bytes) // 2
    monkeypatch.setattr(engine, "card_capacity", lambda s: between)
    capped = simulate(parse_scenario(sc), layers=4).result
    assert capped.peak.allocated_bytes == free.allocated_bytes
    assert capped.peak.reserved_bytes == between
    assert capped.peak.device_bytes == free.device_bytes - (free.reserved_bytes - between)
    assert any(a.startswith("Reserved stops at") for a in capped.assumptions)
    monkeypatch.setattr(engine, "card_capacity", lambda s: free.allocated_bytes - 1)  # no fit: nothing to release into
    assert simulate(parse_scenario(sc), layers=4).result.peak.reserved_bytes == free.reserved_bytes


@pytest.fixture
def tiny():
    from simconfigs import tiny as make

    return make
