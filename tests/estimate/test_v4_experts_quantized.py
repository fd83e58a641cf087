"""QLoRA of a mixture-of-experts model under a transformers 4 release: its bitsandbytes quantizer converted every
nn.Linear, each expert's projections and the router included (framework_profiles.py _V4_BNB_LINEARS), so
quantize_experts=auto quantizes them there, as the assumption line says (review of 2026-12-05: 265 GiB against 113)."""

from vramfit.estimate import estimate
from vramfit.scenario import parse_scenario

MOE = {"model": "Qwen/Qwen3-30B-A3B", "method": "qlora"}


def _run(**keys):
    return estimate(parse_scenario({**MOE, **keys}))


def test_auto_under_transformers_4_is_the_quantized_experts_figure():
    for version in ("transformers-4.53", "transformers-4.47", "transformers-4.44"):
        auto, yes = _run(framework_version=version), _run(framework_version=version, quantize_experts="yes")
        assert auto.peak.required_bytes == yes.peak.required_bytes < 120 * 2**30, version
        note = next(a for a in auto.assumptions if a.startswith("Mixture-of-experts weights"))
        assert note.startswith("Mixture-of-experts weights quantized like the other block linears")
    # transformers 5 (today's default) stores them as 3-D banks, which bitsandbytes leaves alone: fp32 after the upcast
    assert _run().peak.required_bytes > 250 * 2**30
    assert _run(quantize_experts="no", framework_version="transformers-4.53").peak.required_bytes > 250 * 2**30
