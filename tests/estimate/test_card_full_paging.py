"""A run that fits a named card only by paging its paged optimizer state out: the card is full at its usable bytes, and
reserved stops where the least paging the verdict needs leaves it (estimate.on_card), in estimate and plan alike."""

from vramfit.estimate import estimate, on_card
from vramfit.gpus import get_gpu
from vramfit.plan import plan
from vramfit.scenario import parse_scenario
from vramfit.web.translate import untranslated

KEYS = {"model": "meta-llama/Llama-3.1-8B", "method": "full", "num_gpus": 2, "parallelism": "zero3",
        "micro_batch_size": 8, "grad_accum": 4, "gradient_checkpointing": "full", "optimizer": "paged-adamw-8bit",
        "loss": "fused"}


def test_a_run_that_fits_by_paging_fills_the_card_and_no_more():
    free = estimate(parse_scenario(KEYS))  # no card named: the whole figure
    a40 = get_gpu("a40")
    r = estimate(parse_scenario({**KEYS, "gpu": "a40"}))
    paged = r.component("paged_optimizer_state")
    assert paged > 0 and free.peak.required_bytes - paged <= a40.usable_bytes < free.peak.required_bytes
    assert r.peak.device_bytes == a40.usable_bytes < free.peak.device_bytes  # was 78.8 GiB on a 45 GiB card
    paged_out = free.peak.required_bytes - a40.usable_bytes
    assert r.peak.reserved_bytes == free.peak.reserved_bytes - (free.peak.device_bytes - a40.usable_bytes - paged_out)
    assert r.peak.allocated_bytes <= r.peak.reserved_bytes < a40.usable_bytes
    note = next(a for a in r.assumptions if a.startswith("On the A40"))
    assert f"at least {paged_out / 2**30:,.2f} GiB of the paged optimizer state in host memory" in note
    assert untranslated([note]) == []


def test_without_paging_the_rule_is_unchanged_and_a_run_that_cannot_fit_keeps_its_figure():
    card = get_gpu("rtx4090")
    gib = 2**30
    # fits only by releasing cached segments, nothing paged: reserved less what the card lacks
    assert on_card(card, 30 * gib, 30 * gib, 20 * gib)[:2] == (30 * gib - (30 * gib - card.usable_bytes),
                                                              card.usable_bytes)
    # even with all of the paged state in host memory it does not fit: unchanged
    assert on_card(card, 40 * gib, 45 * gib, 30 * gib, 2 * gib) == (40 * gib, 45 * gib, [])


def test_the_plan_states_the_estimate_figures_on_that_card():
    p = plan(KEYS, with_changes=False, effective_batch=64, dataset_tokens="5M", gpu_ids=["a40"])
    paging = [row for row in p.plans if row.optimizer == "paged-adamw-8bit" and row.device_bytes == row.usable_bytes]
    assert paging  # the reviewer's 2 x A40 ZeRO-3 plan: 78.8 GiB stated on a 45 GiB card before
    for row in p.plans:
        r = estimate(parse_scenario(row.scenario))
        assert (row.reserved_bytes, row.device_bytes) == (r.peak.reserved_bytes, r.peak.device_bytes)
        assert row.device_bytes <= get_gpu("a40").usable_bytes
