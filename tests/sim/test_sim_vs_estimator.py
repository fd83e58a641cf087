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

# Fixed in the estimator after this grid found them (kept here as the record):
# - under autocast Linear4bit returns its input's dtype, so HF QLoRA's MLP intermediates are fp32;
# - under autocast lora_A saves autocast's 16-bit copy of its input, not PEFT's fp32 cast;
# - a sliding window shorter than the sequence makes SDPA save a [B, 1, S, S] bias per layer;
# - bitsandbytes 0.50 de-quantizes 4-bit weights only above 512 tokens per micro-batch.
# And one semantic choice made on both sides: HF QLoRA runs under autocast (Trainer bf16=True) even
# with a -true precision; literally without autocast, prepare_model_for_kbit_training's fp32 norms
# would make every activation fp32 and send grouped-query SDPA to its math kernel.


def known_disagreement(model: str, method: str, gc: str, seq: int, precision: str) -> str | None:
    """The disagreements that remain, with the per-tensor reason (none at present)."""
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


MORE_FAMILIES = [
    # found by running the whole catalog through both: each fixed in the estimator
    # (Gemma 2: soft-capped logits keep tanh's output and soft-capped attention runs eager;
    #  Falcon: transformers expands the k/v head with a stride-0 view, so SDPA runs its math kernel)
    ({"model": "google/gemma-2-2b", "method": "lora", "seq_len": 1024}, "gemma2-lora"),
    ({"model": "tiiuae/falcon-7b", "method": "lora", "seq_len": 1024}, "falcon-lora"),
    ({"model": "microsoft/phi-2", "method": "lora", "seq_len": 1024}, "phi-lora"),
    ({"model": "allenai/OLMo-2-1124-7B", "method": "lora", "seq_len": 1024}, "olmo2-lora"),
    ({"model": "Qwen/Qwen3-0.6B", "method": "full", "seq_len": 1024}, "qwen3-full"),
    ({"model": "stabilityai/stablelm-base-alpha-3b", "method": "lora", "seq_len": 1024}, "neox-lora"),
    ({"model": "google/gemma-3-1b-it", "method": "full", "seq_len": 1024}, "gemma3-full"),
    # Adafactor's per-parameter fp32 temporaries; GQA in fp32 runs SDPA's math kernel; a sliding
    # window shorter than the sequence makes transformers repeat k/v for every head
    ({"model": "meta-llama/Llama-3.2-1B", "method": "full", "seq_len": 1024, "optimizer": "adafactor"}, "adafactor"),
    ({"model": "meta-llama/Llama-3.2-1B", "method": "full", "seq_len": 1024, "precision": "fp32"}, "fp32-gqa"),
    ({"model": "mistralai/Mistral-7B-v0.1", "method": "lora", "seq_len": 8192}, "sliding-window"),
    # full fine-tuning with checkpointing peaks in the lowest block's backward: every other gradient made,
    # one block input left (estimator was -6.0 % while it held only the top block's position)
    ({"model": "Qwen/Qwen2.5-0.5B", "method": "full", "gradient_checkpointing": "full", "loss": "fused",
      "micro_batch_size": 8, "seq_len": 1024}, "lowest-block"),
    # PEFT casts a 16-bit input up to its fp32 lora_A, so under autocast every lora_A keeps its own bf16 copy,
    # and lora_A's output is bf16 (was -2.1 %; the remaining -1.3 % is allocator slack, not a tensor)
    ({"model": "Qwen/Qwen2.5-0.5B", "method": "lora", "precision": "bf16-mixed", "gradient_checkpointing": "none",
      "seq_len": 2048}, "qwen-lora-mixed"),
    # torchtune's chunked loss: every chunk's cross-entropy backward runs before any output projection's, and
    # the second projection's backward holds two V x H weight gradients (was -3.4 % while the estimate put one
    # weight gradient beside the cross-entropy stage: estimate/loss.py projection_stage)
    ({"model": "meta-llama/Llama-3.2-1B", "method": "full", "seq_len": 512, "loss": "chunked",
      "gradient_checkpointing": "full", "optimizer_in_backward": True}, "chunked-projections"),
    # ... and with gradients held between micro-batches the buffer still makes each backward's sum whole before
    # AccumulateGrad adds it to .grad (was -6.6 % while the held gradient stood for it)
    ({"model": "meta-llama/Llama-3.2-1B", "method": "full", "seq_len": 512, "loss": "chunked",
      "gradient_checkpointing": "full", "grad_accum": 2}, "chunked-projections-accum"),
]


@pytest.mark.parametrize("scenario", [p for p, _ in MORE_FAMILIES], ids=[i for _, i in MORE_FAMILIES])
def test_more_catalog_families_agree_at_full_depth(scenario):
    """The catalog model itself (the simulator extrapolates from two depths, the estimator counts
    every layer): peak allocated within the same 3 %."""
    sim = simulate(scenario).result.peak.allocated_bytes
    est = estimate(scenario).peak.allocated_bytes
    assert abs(est - sim) / sim <= TOLERANCE, (est, sim)


# Eager attention with the fp32 softmax (transformers' eager_attention_forward): the backward's working set is the
# fp32 gradient and softmax_backward's fp32 result beside the kept fp32 output, after the 16-bit probabilities and
# their 16-bit gradient are freed (block_extras._fp32_softmax_backward). A tiny Llama at 1024 tokens makes the
# (B, H, S, S) tensors the peak; the estimator was +24.6 % (LoRA, checkpointed) and +15.5 % (LoRA) while it kept
# those 16-bit tensors alive, and +11.9 % on the Llama 2 7B case below.
EAGER = [
    ("lora", "full", "bf16-true", 1), ("lora", "none", "bf16-true", 1), ("full", "full", "bf16-true", 2),
    ("full", "none", "fp32", 1), ("lora", "full", "bf16-mixed", 1), ("qlora", "full", "bf16-true", 1),
]


@pytest.mark.parametrize("method,gc,precision,batch", EAGER, ids=["-".join(map(str, c)) for c in EAGER])
def test_eager_attention_agrees_with_simulator(config_file, method, gc, precision, batch):
    from simconfigs import tiny

    sc = {"model": config_file(tiny("meta-llama/Llama-3.2-1B", layers=LAYERS)), "method": method, "seq_len": 1024,
          "gradient_checkpointing": gc, "precision": precision, "micro_batch_size": batch, "attention": "eager"}
    sim = simulate(sc, layers=LAYERS).result.peak
    est = estimate(sc).peak
    assert sim.phase == "backward", sim.phase  # the softmax backward's working set is the peak
    assert est.allocated_bytes == pytest.approx(sim.allocated_bytes, rel=TOLERANCE), (est.breakdown, sim.breakdown)


def test_eager_attention_llama2_7b_batch4():
    """The case the estimator was +2.53 GiB (+11.9 %) on: Llama 2 7B, LoRA on q/v, 4 x 2048, checkpointed, one GPU
    (the simulator extrapolates from two depths); with SDPA both were already 17.67 GiB."""
    sc = {"model": "meta-llama/Llama-2-7b-hf", "method": "lora", "lora_targets": ["q_proj", "v_proj"],
          "micro_batch_size": 4, "seq_len": 2048, "gradient_checkpointing": "full", "attention": "eager"}
    sim = simulate(sc).result.peak.allocated_bytes
    est = estimate(sc).peak.allocated_bytes
    assert abs(est - sim) / sim <= TOLERANCE, (est, sim)


# The eager forward's softmax (block_extras.eager_forward_softmax): BLOOM binds its baddbmm scores beside the masked
# ones and, checkpointed, its model loop still binds the block below's returned probabilities, so a tiny BLOOM peaks
# in forward, at the top block's softmax (the estimator was -8.4 % with LoRA and checkpointing while it had no such
# moment). Gemma 2's soft-capping rebinds attn_weights at each step (one bound score tensor, like Llama): its
# forward moment stays below the softmax backward's, where both peak.
EAGER_FORWARD = [
    ("bigscience/bloomz-7b1", "full", "bf16-true", "forward"), ("bigscience/bloomz-7b1", "none", "bf16-true", "forward"),
    ("bigscience/bloomz-7b1", "full", "bf16-mixed", "forward"),
    ("google/gemma-2-2b", "full", "bf16-true", "backward"), ("google/gemma-2-2b", "none", "bf16-true", "backward"),
]


@pytest.mark.parametrize("model,gc,precision,phase", EAGER_FORWARD,
                         ids=[f"{m.split('/')[1]}-gc_{g}-{p}" for m, g, p, _ in EAGER_FORWARD])
def test_eager_forward_softmax_agrees_with_simulator(config_file, model, gc, precision, phase):
    from simconfigs import tiny

    sc = {"model": config_file(tiny(model, layers=LAYERS)), "method": "lora", "seq_len": 1024,
          "gradient_checkpointing": gc, "precision": precision, "attention": "eager"}
    sim = simulate(sc, layers=LAYERS).result.peak
    est = estimate(sc).peak
    assert sim.phase == phase, sim.phase
    assert est.phase == ("forward-attention" if phase == "forward" else "backward-block"), est.phase
    assert est.allocated_bytes == pytest.approx(sim.allocated_bytes, rel=TOLERANCE), (est.breakdown, sim.breakdown)
