"""Layer extrapolation against full-depth traces, per architecture family."""

from __future__ import annotations

import json

import pytest
from simconfigs import catalog_config, tiny

from vramfit.sim import simulate
from vramfit.sim.extrapolate import trace_depths

FAMILIES = [
    ("meta-llama/Llama-3.2-1B", "lora", 6),
    ("Qwen/Qwen2.5-0.5B", "full", 6),
    ("google/gemma-2-2b", "qlora", 8),  # period 2: traced at 2 and 4
    ("microsoft/phi-1_5", "lora", 6),
    ("tiiuae/falcon-7b", "full", 6),
    ("mistralai/Mixtral-8x7B-v0.1", "lora", 6),
]
SLOW_FAMILIES = [
    ("google/gemma-3-1b-pt", "lora", 26),  # period 6, 26 layers: a fractional number of periods
    ("bigscience/bloomz-7b1", "full", 8),
    ("stabilityai/stablelm-base-alpha-3b", "lora", 8),
    ("allenai/OLMo-2-1124-7B", "lora", 8),
    ("Qwen/Qwen3-30B-A3B", "qlora", 6),
]


def _compare(tmp_path, model_id: str, method: str, layers: int, **keys) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(tiny(model_id, layers=layers)))
    sc = {"model": str(path), "method": method, "seq_len": 128, **keys}
    # the two small depths asked for: full fine-tuning traces its whole depth by default (sim/engine.py default_depths)
    ext = simulate(sc, layers=trace_depths(json.loads(path.read_text())))
    full = simulate(sc, layers=layers)
    assert ext.extrapolated and not full.extrapolated
    # every allocated figure is affine in depth: the extrapolation is exact
    assert ext.result.peak.allocated_bytes == pytest.approx(full.result.peak.allocated_bytes, rel=1e-3)
    assert dict(ext.timeline) == pytest.approx(dict(full.timeline), rel=1e-3)
    assert ext.peak_label == full.peak_label
    ext_c = {c.name: c.bytes for c in ext.result.components if c.counted_in == "allocated"}
    full_c = {c.name: c.bytes for c in full.result.components if c.counted_in == "allocated"}
    for name in set(ext_c) | set(full_c):
        assert ext_c.get(name, 0) == pytest.approx(full_c.get(name, 0), rel=1e-3, abs=4096), name
    # reserved (allocator fragmentation) is not affine; kept within 10 %
    assert ext.result.peak.reserved_bytes == pytest.approx(full.result.peak.reserved_bytes, rel=0.10)


@pytest.mark.parametrize("model_id,method,layers", FAMILIES, ids=[f[0].split("/")[1] for f in FAMILIES])
def test_extrapolation_matches_full_depth(tmp_path, model_id, method, layers):
    _compare(tmp_path, model_id, method, layers)


def test_extrapolation_with_checkpointing_and_accumulation(tmp_path):
    _compare(tmp_path, "meta-llama/Llama-3.2-1B", "full", 6, gradient_checkpointing="full", grad_accum=2)


@pytest.mark.slow
@pytest.mark.parametrize("model_id,method,layers", SLOW_FAMILIES, ids=[f[0].split("/")[1] for f in SLOW_FAMILIES])
def test_extrapolation_matches_full_depth_more_families(tmp_path, model_id, method, layers):
    _compare(tmp_path, model_id, method, layers)


@pytest.mark.slow
def test_extrapolation_matches_a_real_size_full_depth_trace():
    """Llama-3.2-1B at its real shapes, all 16 layers traced."""
    sc = {"model": "meta-llama/Llama-3.2-1B", "method": "lora", "seq_len": 2048}
    ext = simulate(sc)
    full = simulate(sc, layers=catalog_config("meta-llama/Llama-3.2-1B")["num_hidden_layers"])
    assert ext.result.peak.allocated_bytes == pytest.approx(full.result.peak.allocated_bytes, rel=1e-3)
