"""Each card's verdict is judged on the run's estimate on that card (vramfit.estimate.card_facts): an estimate
depends on the card (Hopper's 32 MiB cuBLAS workspaces and sm90 CUDA context, NVLS buffers, a colocated vLLM's
share), so the verdicts of one estimate were the named card's figure applied to every card. Found by a review:
Llama-3.1-8B full at 3,920 tokens, estimated without a card, said the H100 fits (+0.09 GiB); with
``--gpu h100-sxm`` it said no (-0.19 GiB), and ``fit --gpu h100-sxm`` gave 3,894 tokens as the longest."""

import pytest

from vramfit import estimate
from vramfit.estimate.card_facts import card_facts
from vramfit.gpus import get_gpu, list_gpus
from vramfit.plan import fit, sweep
from vramfit.plan.verdict import estimate_fits, with_fits

FULL_8B = {"model": "meta-llama/Llama-3.1-8B", "method": "full", "seq_len": 3920}


@pytest.mark.parametrize("keys", [
    FULL_8B,
    {"model": "meta-llama/Llama-3.1-70B", "method": "qlora", "num_gpus": 8, "parallelism": "fsdp"},
    {"model": "Qwen/Qwen2.5-7B", "method": "lora", "stage": "grpo", "generation": "vllm-colocate",
     "gpu": "h100-sxm", "completion_len": 256, "num_generations": 4},
])
def test_cards_with_equal_facts_get_equal_estimates(keys):
    """card_facts names everything the estimate reads of a card: equal facts, byte-equal figures, over the catalog."""
    seen = {}
    for card in [None, *list_gpus()]:
        if card is None and "gpu" in keys:
            continue
        r = estimate({**keys, "gpu": card.gpu_id if card else None})
        figures = (r.peak.allocated_bytes, r.peak.required_bytes)
        assert seen.setdefault(card_facts(r.scenario, card), figures) == figures, card
    assert len(seen) >= 2  # the catalog has cards the estimate tells apart


def test_every_card_of_the_table_is_judged_on_its_own_estimate():
    r = estimate_fits(FULL_8B)
    for f in r.fits:
        own = estimate({**FULL_8B, "gpu": f.gpu_id})
        assert f.fits == with_fits(own, [get_gpu(f.gpu_id)]).fits[0].fits
        assert f.headroom_bytes == int(get_gpu(f.gpu_id).usable_bytes * 0.95) - own.peak.required_bytes
    verdicts = {f.gpu_id: f.fits for f in r.fits}
    assert verdicts["a100-80gb-sxm"] and not verdicts["h100-sxm"]  # 75.13 vs 75.41 GiB needed; limits 75.35 / 75.22
    # the Hopper card needs more than the run without a card: its workspaces and context, nothing else
    assert estimate({**FULL_8B, "gpu": "h100-sxm"}).peak.required_bytes > estimate(FULL_8B).peak.required_bytes
    # without on_card, every card gets the one figure (the old behaviour): the H100 would read "fits"
    assert {f.gpu_id: f.fits for f in with_fits(estimate(FULL_8B)).fits}["h100-sxm"]


def test_fit_estimate_and_sweep_agree_on_each_card():
    for gpu in ("h100-sxm", "a100-80gb-sxm"):
        longest = fit({k: v for k, v in FULL_8B.items() if k != "seq_len"}, gpu).max_seq_len
        at = {f.gpu_id: f.fits for f in estimate_fits({**FULL_8B, "seq_len": longest}).fits}
        past = {f.gpu_id: f.fits for f in estimate_fits({**FULL_8B, "seq_len": longest + 64}).fits}
        assert at[gpu] and not past[gpu], gpu
    s = sweep(FULL_8B, "gpu", ["a100-80gb-sxm", "h100-sxm"])
    rows = [p.fits for p in s.points]
    assert rows[0] == rows[1] and rows[0]["a100-80gb-sxm"] and not rows[0]["h100-sxm"]
