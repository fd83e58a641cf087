"""A card the run cannot start on (a bf16 run on a card without BF16) gets the same answer from estimate, fit, sweep
and plan: it is not a fit, and the reason is said (plan/verdict.py card_refusal; the review of 2026-12-05 found
estimate, fit and sweep saying "fits" on a T4 where plan left it out)."""

from vramfit.gpus import get_gpu
from vramfit.plan import plan
from vramfit.plan.fit import fit
from vramfit.plan.sweep import sweep
from vramfit.plan.verdict import card_refusal, estimate_fits
from vramfit.scenario import parse_scenario

# bf16-true by default; 1,024 tokens: at the default 2,048 a T4 is also too small, since grouped-query SDPA runs
# PyTorch's math kernel on a card without the flash backend (estimate/attention.py gqa_math_on_card: 16.5 GiB)
RUN = {"model": "Qwen/Qwen2.5-0.5B", "method": "lora", "seq_len": 1024}


def test_the_refusal_is_the_cards_bf16_fact():
    assert card_refusal(get_gpu("t4"), parse_scenario(RUN)) == ("no BF16 on Tesla T4", "--precision fp16-mixed")
    assert card_refusal(get_gpu("v100-sxm2-16gb"), parse_scenario(RUN))[0].startswith("no BF16")
    assert card_refusal(get_gpu("t4"), parse_scenario({**RUN, "precision": "fp16-mixed"})) is None
    assert card_refusal(get_gpu("rtx4090"), parse_scenario(RUN)) is None


def test_estimate_fit_sweep_and_plan_agree_on_a_t4():
    r = estimate_fits(RUN, [get_gpu("t4"), get_gpu("rtx4090")])
    t4, ada = r.fits
    assert not t4.fits and t4.verdict == "cannot run: no BF16 on Tesla T4 (--precision fp16-mixed runs)"
    assert t4.headroom_bytes > 4 * 2**30  # memory is not the reason: 0.5B LoRA needs about 9 GiB
    assert ada.fits and ada.verdict == "fits"
    f = fit(RUN, "t4")
    assert not f.fits and f.verdict == t4.verdict
    s = sweep(RUN, "seq_len", [1024, 2048], cards=["t4", "rtx4090"])
    assert all(p.fits == {"t4": False, "rtx4090": True} for p in s.points)
    p = plan(RUN, with_changes=False, gpu_ids=["t4"], dataset_tokens="1M")
    assert not p.plans and p.excluded[0].reason.startswith("no BF16 on Tesla T4")
    fp16 = {**RUN, "precision": "fp16-mixed"}
    assert estimate_fits(fp16, [get_gpu("t4")]).fits[0].fits and fit(fp16, "t4").fits


def test_flash_attention_2_where_it_does_not_run_is_refused_where_the_framework_runs_fa2():
    """transformers' flash_attention_2 needs an Ampere or newer card (the catalog's supports_flash_attn2); Unsloth falls
    back to xformers there, so its 'flash' runs (the T4 notebook rows of found.jsonl, UNSLOTH_NB_2407)."""
    fa2 = {**RUN, "precision": "fp16-mixed", "attention": "flash"}
    t4 = get_gpu("t4")
    assert card_refusal(t4, parse_scenario(fa2)) == ("no FlashAttention-2 on Tesla T4", "--attention sdpa")
    assert card_refusal(get_gpu("a100-80gb-sxm"), parse_scenario(fa2)) is None
    assert card_refusal(t4, parse_scenario({**fa2, "attention": "sdpa"})) is None
    unsloth = {**fa2, "framework": "unsloth", "method": "qlora", "quantize": "nf4"}
    assert card_refusal(t4, parse_scenario(unsloth)) is None
    r = estimate_fits(fa2, [t4])
    assert r.fits[0].verdict == "cannot run: no FlashAttention-2 on Tesla T4 (--attention sdpa runs)"
    p = plan(fa2, with_changes=False, gpu_ids=["t4", "v100-sxm2-16gb"], dataset_tokens="1M")
    assert not p.plans and {e.reason.split(":")[0] for e in p.excluded} == {"no FlashAttention-2 on Tesla T4",
                                                                           "no FlashAttention-2 on Tesla V100 SXM2 16GB"}
    from vramfit.web.translate import untranslated

    assert untranslated([r.fits[0].verdict, p.excluded[0].reason]) == []


def test_fit_on_a_card_the_run_cannot_start_on_offers_nothing():
    f = fit({**RUN, "precision": "bf16-mixed", "seq_len": 512}, "t4")
    assert f.verdict.startswith("cannot run") and f.max_micro_batch is None and f.max_seq_len is None
    assert not any(cell.fits for row in f.grid for cell in row)
    ok = fit({**RUN, "precision": "fp16-mixed", "seq_len": 512}, "t4")
    assert ok.max_micro_batch and any(cell.fits for row in ok.grid for cell in row)
