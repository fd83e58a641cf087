"""accelerate's mixed-precision wrapper returns the model's outputs in fp32 (convert_outputs_to_fp32; FrameworkProfile.
amp_outputs_fp32): a TRL trainer that reads full logits reads fp32 ones where the HF Trainer runs mixed precision
outside DeepSpeed (estimate/stages/preference.py amp_casts_logits)."""

import importlib

from vramfit import estimate
from vramfit.scenario import parse_scenario
from vramfit.web.translate import to_pt

NOTE = "returns the model's logits in fp32 (convert_outputs_to_fp32)"
BASE = {"model": "meta-llama/Llama-3.1-8B", "stage": "orpo", "seq_len": 1024, "micro_batch_size": 1}


def _bytes_per_logit(keys: dict) -> int:
    est, step_mod = importlib.import_module("vramfit.estimate"), importlib.import_module("vramfit.estimate.step")
    pref = importlib.import_module("vramfit.estimate.stages.preference")
    sc = parse_scenario({**BASE, **keys})
    return pref.stage_logits_bytes(step_mod.compute(est.resolve_spec(sc)[1], sc))


def test_the_qlora_recipe_and_mixed_precision_read_fp32_logits_true_bf16_and_deepspeed_do_not():
    assert _bytes_per_logit({"method": "qlora"}) == 4  # the Trainer's bf16 over fp32 norms: autocast, accelerate AMP
    assert _bytes_per_logit({"method": "full", "precision": "bf16-mixed"}) == 4
    assert _bytes_per_logit({"method": "lora", "precision": "bf16-true"}) == 2  # no mixed precision
    assert _bytes_per_logit({"method": "qlora", "num_gpus": 2, "parallelism": "zero2"}) == 2  # DeepSpeed: no native AMP


def test_the_cast_costs_what_the_fp32_logits_weigh_and_the_estimate_says_so():
    """ORPO over 2 x 1,024 tokens (chosen and rejected) of a 128,256-entry vocabulary: the loss's tensors hold the
    fp32 logits where the 16-bit ones stood; the cast's own moment holds both (6 bytes a logit)."""
    qlora = estimate({**BASE, "method": "qlora"})
    assert any(NOTE in a for a in qlora.assumptions)
    assert any("convert_outputs_to_fp32" in to_pt(a) and "logits do modelo em fp32" in to_pt(a)
               for a in qlora.assumptions)
    forward = dict(next(p for p in qlora.phases if p.phase == "forward").breakdown)["logits_loss"]
    assert forward >= 6 * 2 * 1024 * 128256
    lora = estimate({**BASE, "method": "lora"})
    assert not any(NOTE in a for a in lora.assumptions)


def test_fused_head_stages_and_sft_are_not_moved():
    """DPO's default path scores through TRL 1.16's fused LM head (no logits returned); SFT's loss upcasts its logits
    in transformers' ForCausalLMLoss before accelerate's wrapper sees the output (10 bytes a logit either way)."""
    for keys in ({"stage": "dpo", "method": "qlora"}, {"stage": "sft", "method": "qlora"}):
        assert not any(NOTE in a for a in estimate({**BASE, **keys}).assumptions)
