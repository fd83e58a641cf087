"""The fit verdict's figure under FSDP1's host wrap: the wrap's wholly free segments are released before an
out-of-memory error (estimate/fsdp_reserved.py ``required``), so what a run needs grows with the tokens it holds.
Before, the residue counted whole in the figure fell as a larger step reused it: a 70B QLoRA on 8 GPUs needed
23.0 GiB at 1,024 tokens and 22.2 GiB at 2,048, and ``vramfit fit`` said no micro-batch fit while its own grid
showed three that did."""

import re
from itertools import pairwise
from pathlib import Path

import pytest

from vramfit import estimate

GiB = 2**30
QLORA_70B = dict(model="meta-llama/Llama-3.1-70B", method="qlora", gradient_checkpointing="full", num_gpus=8,
                 parallelism="fsdp")


@pytest.mark.parametrize("keys", [
    QLORA_70B,
    dict(model="Qwen/Qwen2.5-32B", method="lora", num_gpus=8, parallelism="fsdp"),
    dict(model="meta-llama/Llama-2-7b-hf", method="lora", num_gpus=2, parallelism="fsdp"),
], ids=["70b-qlora-8", "32b-lora-8", "7b-lora-2"])
def test_required_grows_with_the_sequence(keys):
    needs = [estimate(**keys, seq_len=s).peak for s in (512, 1024, 1536, 2048, 3072)]
    assert all(a.required_bytes <= b.required_bytes for a, b in pairwise(needs)), \
        [round(p.required_bytes / GiB, 2) for p in needs]
    assert all(p.allocated_bytes <= p.required_bytes <= p.device_bytes for p in needs)


def test_required_grows_with_the_micro_batch():
    needs = [estimate(**QLORA_70B, seq_len=1024, micro_batch_size=b).peak.required_bytes for b in (1, 2, 3)]
    assert needs == sorted(needs)


def test_the_figures_docs_estimate_quotes():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "estimate.md").read_text(encoding="utf-8")
    quoted = re.search(r"now ([\d.]+) and ([\d.]+)\)", doc)
    assert quoted, "docs/estimate.md lost the FSDP1 wrap example"
    at = [round(estimate(**QLORA_70B, seq_len=s).peak.required_bytes / GiB, 1) for s in (512, 2048)]
    assert at == [float(quoted.group(1)), float(quoted.group(2))]


def test_fit_agrees_with_its_grid_on_a_24_gb_card():
    """A cell that fits means every smaller micro-batch and shorter sequence fits, and fit's answers are the grid's."""
    from vramfit.plan.fit import fit

    report = fit(estimate(**QLORA_70B, seq_len=1024).scenario, "rtx4090")
    cells = [c for row in report.grid for c in row]
    for c in cells:
        if c.fits:
            assert all(d.fits for d in cells if d.micro_batch_size <= c.micro_batch_size and d.seq_len <= c.seq_len)
    assert report.max_micro_batch is not None
    at_1024 = [c for c in cells if c.seq_len == 1024 and c.fits]
    assert max(c.micro_batch_size for c in at_1024) <= report.max_micro_batch


def test_the_unreused_residue_after_an_empty_cache_stays_within_the_residue():
    """unreused_residue read the wrap's pre-empty_cache high point as segments the step opened (torch keeps
    max_memory_reserved across empty_cache): the residue it returned exceeded the residue that was there."""
    import importlib

    from vramfit.estimate.step import compute
    from vramfit.scenario import parse_scenario

    est = importlib.import_module("vramfit.estimate")
    fsdp_reserved = importlib.import_module("vramfit.estimate.fsdp_reserved")
    sc = parse_scenario({**QLORA_70B, "seq_len": 512})
    r = compute(est.resolve_spec(sc)[1], sc, None)
    assert fsdp_reserved.wrap_residue(r, True) <= fsdp_reserved.residue_bound(r, True) + 512 * 2**20
    assert fsdp_reserved.host_wrap_floor(r, True) < fsdp_reserved.host_wrap_floor(r)
