"""Estimator vs simulator: peak allocated memory within 3 % over a grid of real architectures.

Families at their real shapes (hidden size, heads, vocabulary), cut to 3 decoder layers and traced at
full depth (extrapolation has its own tests); the estimator reads the same config.json. A case that
disagrees is marked ``xfail(strict=False)`` with the per-tensor reason found by comparing the two
breakdowns (``Peak.breakdown`` / ``PhasePeak.breakdown``), never by widening the tolerance. A reason
names the side at fault; estimator-side ones are reported to the estimator's owner to fix there.
"""

from __future__ import annotations

import itertools
import json

import pytest
from simconfigs import catalog_config

from vramfit.estimate import estimate
from vramfit.sim import simulate

LAYERS = 3
TOLERANCE = 0.03
FAMILIES = ("meta-llama/Llama-3.2-1B", "Qwen/Qwen2.5-0.5B", "microsoft/Phi-3-mini-4k-instruct")

QLORA_NO_AUTOCAST = (
    "semantics: with -true precision (no autocast) peft.prepare_model_for_kbit_training upcasts embeddings, "
    "norms and lm_head to fp32, so the residual stream and every Linear4bit output (.to(input dtype)) are "
    "fp32; SDPA cannot use flash for fp32 and, with grouped-query attention, runs the math kernel that saves "
    "[B, H, S, S] fp32 probabilities per layer. The estimator assumes 16-bit activations"
)
QLORA_AUTOCAST_FP32_MLP = (
    "estimator: under autocast, Linear4bit returns its output in its input's dtype - fp32, because "
    "prepare_model_for_kbit_training left fp32 norm weights and so an fp32 residual stream - and PEFT's bnb "
    "LoRA layer adds the 16-bit LoRA output to it: gate/up outputs, the SiLU output and their product are "
    "fp32 ([B, S, I] x 4 B each), not 16-bit; while each lora_A input saved is autocast's 16-bit copy"
)
LORA_AUTOCAST_INPUTS = (
    "estimator: under autocast the input each lora_A saves is autocast's 16-bit copy of the (fp32) layer "
    "input, not a 4-byte PEFT cast ('o_proj/down_proj.lora0.cast_in' counted at 4 B instead of 2 B); "
    "the simulator in turn keeps, per layer, the 16-bit additive mask [B, 1, S, S] that the memory-efficient "
    "SDPA kernel saves when Phi-3's sliding window (2047) is shorter than the sequence"
)
DEQUANT_FUSED = (
    "estimator: it adds the de-quantized weight (compute dtype) to the forward peak at any batch size; "
    "bitsandbytes 0.50's CUDA gemm_4bit runs its fused kernel, with no weight-sized scratch, for up to 512 "
    "tokens per micro-batch (backends/cuda/ops.py _gemm_4bit_use_custom_cuda) and de-quantizes only above"
)


def known_disagreement(model: str, method: str, gc: str, seq: int, precision: str) -> str | None:
    """The disagreements found so far, with the per-tensor reason (see the module docstring)."""
    phi3 = model.endswith("Phi-3-mini-4k-instruct")
    if method == "qlora" and gc == "none" and precision.endswith("-true"):
        return QLORA_NO_AUTOCAST
    if precision.endswith("-mixed"):
        if method == "qlora" and gc == "none" and not phi3 and seq > 512:
            return QLORA_AUTOCAST_FP32_MLP
        if method == "lora" and gc == "none" and phi3:
            return LORA_AUTOCAST_INPUTS
        if method == "qlora" and phi3 and seq <= 512:
            return DEQUANT_FUSED
    return None


CASES = [
    pytest.param(m, method, gc, seq, "bf16-true", id=f"{m.split('/')[1]}-{method}-gc_{gc}-{seq}")
    for m, method, gc, seq in itertools.product(FAMILIES, ("full", "lora", "qlora"), ("none", "full"), (512, 2048))
] + [
    pytest.param(m, method, gc, seq, "bf16-mixed", id=f"{m.split('/')[1]}-{method}-gc_{gc}-{seq}-mixed")
    for m, method, gc, seq in itertools.product(FAMILIES[::2], ("lora", "qlora"), ("none", "full"), (512, 2048))
    if method == "qlora" or seq == 2048
]


@pytest.fixture(scope="module")
def configs(tmp_path_factory) -> dict[str, str]:
    out = {}
    for model in FAMILIES:
        cfg = catalog_config(model)
        cfg["num_hidden_layers"] = LAYERS
        path = tmp_path_factory.mktemp(model.split("/")[1]) / "config.json"
        path.write_text(json.dumps(cfg))
        out[model] = str(path)
    return out


@pytest.mark.parametrize("model,method,gc,seq,precision", CASES)
def test_estimator_agrees_with_simulator(request, configs, model, method, gc, seq, precision):
    reason = known_disagreement(model, method, gc, seq, precision)
    if reason:
        request.applymarker(pytest.mark.xfail(strict=False, reason=reason))
    sc = {"model": configs[model], "method": method, "gradient_checkpointing": gc, "seq_len": seq,
          "precision": precision}
    sim = simulate(sc, layers=LAYERS).result.peak
    est = estimate(sc).peak
    detail = (f"simulated {sim.allocated_bytes:,} B in {sim.phase} {dict(sim.breakdown)}; "
              f"estimated {est.allocated_bytes:,} B in {est.phase} {dict(est.breakdown)}")
    assert est.allocated_bytes == pytest.approx(sim.allocated_bytes, rel=TOLERANCE), detail
