"""Every figure of the guide (src/vramfit/data/guide-claims.json) is reproduced or shown wrong, with the reason."""

from __future__ import annotations

import pytest

from vramfit.estimate import estimate, resolve_spec
from vramfit.plan import guide_table
from vramfit.plan.changes import at_effective_batch
from vramfit.plan.guide import guide_claims
from vramfit.units import GB

L7 = "meta-llama/Llama-2-7b-hf"
CLAIMS = {c["id"]: c for c in guide_claims()["claims"]}


def comps(r) -> dict[str, int]:
    return {c.name: c.bytes for c in r.components}


@pytest.fixture(scope="module")
def full7():
    from vramfit.estimate.phases import largest_per_component

    r = estimate(model=L7, method="full", precision="bf16-mixed", seq_len=2048, gradient_checkpointing="full")
    return r, largest_per_component(r.phases)


def test_every_claim_has_a_section_our_words_and_a_check():
    assert {c["section"] for c in CLAIMS.values()} == {"01", "02", "03", "04", "05"}
    for c in CLAIMS.values():
        assert c["says"] and c["verdict"]
        assert c.get("checks") or c["verdict"] in ("reproduced", "wrong", "partly") and c["why"]
    checked_here = {"adam-twice-weights", "7b-full-arithmetic", "lora-trainable-fraction", "qlora-nf4",
                    "seq-2048-to-8192", "effective-batch"}
    assert {i for i, c in CLAIMS.items() if not c.get("checks")} == checked_here


def test_card_claims_are_verdicts_of_guide_table_with_reasons():
    table = guide_table()
    seen = {}
    for row in table.rows:
        for c in row.claims:
            seen[(c["claim_id"], row.size, row.method, c["class_gb"], c["count"])] = (c["verdict"], row.why)
    for cid, claim in CLAIMS.items():
        for ck in claim.get("checks", ()):
            verdict, why = seen[(cid, ck["size"], ck["method"], ck["class_gb"], ck["count"])]
            assert verdict in ("agrees", "does not fit", "more than needed")
            if verdict != "agrees":  # shown wrong: the row says which section and why
                assert any(f"Section {claim['section']}" in w and f"{ck['count']} x {ck['class_gb']} GB" in w for w in why)
    assert seen[("70b-qlora-one-80", "70B", "qlora", 80, 1)][0] == "agrees"
    assert seen[("13b-full-cards", "13B", "full", 80, 2)][0] == "does not fit"


def test_adam_state_is_twice_the_fp32_weights(full7):
    _, sizes = full7
    assert CLAIMS["adam-twice-weights"]["verdict"] == "reproduced"
    assert sizes["optimizer_state"] == 2 * sizes["master_weights"]


def test_7b_full_arithmetic(full7):
    r, sizes = full7
    g = CLAIMS["7b-full-arithmetic"]["figures_gb"]
    assert CLAIMS["7b-full-arithmetic"]["verdict"] == "reproduced"
    n = r.model.num_params
    assert sizes["optimizer_state"] == 8 * n and abs(sizes["optimizer_state"] / GB - g["optimizer_state"]) / g["optimizer_state"] < 0.04
    assert abs(2 * n / GB - g["weights"]) / g["weights"] < 0.04  # the bf16 copy: 13.5 GB
    assert sizes["gradients"] == 4 * n and sizes["gradients"] / GB > 1.9 * g["gradients"]  # fp32 gradients: 27 GB
    assert sizes["master_weights"] == 4 * n  # the fp32 master copy the guide leaves out
    true = comps(estimate(model=L7, method="full", precision="bf16-true"))  # bf16 gradients, but bf16 moments too
    assert true["optimizer_state"] == 4 * n and true["optimizer_state"] / GB < g["optimizer_state"] / 2
    # the guide's 2 + 8 + 2 bytes: bitsandbytes' 32-bit AdamW keeps fp32 states on bf16 weights, and 1 x 80 GB is tight
    bnb = estimate(model=L7, method="full", precision="bf16-true", optimizer="paged-adamw", seq_len=2048,
                   gradient_checkpointing="full", gpu="h100-sxm")
    held = comps(bnb)
    assert (held["weights"], held["gradients"]) == (2 * n, 2 * n)
    assert abs(held["paged_optimizer_state"] - 8 * n) < 0.001 * n  # bitsandbytes keeps small tensors' states unpaged
    for part, key in (("weights", "weights"), ("gradients", "gradients"), ("paged_optimizer_state", "optimizer_state")):
        assert abs(held[part] / GB - g[key]) / g[key] < 0.04
    usable = 85_020_639_232  # an H100 80GB
    assert 0.95 * usable < bnb.peak.device_bytes < 1.0 * usable


def test_lora_trainable_fraction():
    lo, hi = CLAIMS["lora-trainable-fraction"]["range"]
    wide = estimate(model=L7, method="lora", lora_rank=16).model
    narrow = estimate(model=L7, method="lora", lora_rank=8, lora_targets=["q_proj", "v_proj"]).model
    assert lo <= wide.num_trainable_params / wide.num_params <= hi
    assert round(100 * wide.num_trainable_params / wide.num_params, 2) == 0.59
    assert narrow.num_trainable_params / narrow.num_params < lo


def test_qlora_stores_4_bits_per_weight():
    r = estimate(model=L7, method="qlora")
    _, spec, _, _ = resolve_spec(r.scenario)
    quantized = spec.num_hidden_layers * sum(lin.weight_params for lin in spec.block_linears)
    bits = comps(r)["quantized_base"] * 8 / quantized
    assert CLAIMS["qlora-nf4"]["bits"] == 4 and round(bits, 3) == 4.127


def test_sequence_length_growth():
    s0, s1 = CLAIMS["seq-2048-to-8192"]["seq_lens"]
    for attention, linear in (("sdpa", True), ("eager", False)):
        a, b = (comps(estimate(model=L7, method="lora", seq_len=s, attention=attention)) for s in (s0, s1))
        assert a["weights"] == b["weights"]
        ratio = b["activations"] / a["activations"]
        assert ratio == pytest.approx(s1 / s0) if linear else ratio > 2 * s1 / s0  # eager keeps S x S scores


def test_effective_batch_identity():
    sc = at_effective_batch(estimate(model=L7, method="lora", micro_batch_size=2, num_gpus=2).scenario, 16)
    assert sc.micro_batch_size * sc.grad_accum * sc.num_gpus == 16 and sc.micro_batch_size == 2


def test_full_fine_tuning_counts_are_also_checked_in_pure_bf16():
    """The guide says "treino em bf16": read literally (bf16-true, FSDP beyond one card), 5 of its 7 full fine-tuning
    counts hold; in mixed precision (the table's reading, 16 B per parameter) only 7B on 2 x 80 GB does. The
    guide's 12 B per parameter is neither: it is bitsandbytes' 32-bit AdamW on bf16 weights (PRECISION_NOTE; the
    review found the note calling bf16-mixed the guide's own arithmetic, then the note saying no recipe holds 12 B)."""
    from vramfit.plan.guide import PRECISION_NOTE

    full = [(row.size, c) for row in guide_table().rows if row.method == "full" for c in row.claims]
    assert len(full) == 7 and all(c["pure_bf16_fits"] is not None for _, c in full)
    holds = {(size, c["count"], c["class_gb"]) for size, c in full if c["pure_bf16_fits"]}
    assert holds == {("7B", 1, 80), ("7B", 2, 80), ("13B", 2, 80), ("34B", 4, 80), ("70B", 8, 80)}
    assert [(s, c["count"]) for s, c in full if c["verdict"] == "agrees"] == [("7B", 2)]
    # pure bf16 keeps 8 B per parameter of model state on one card: 7B's weights, gradients and AdamW states
    seven = next(c for s, c in full if s == "7B" and c["count"] == 1 and c["class_gb"] == 80)
    n = estimate(model=L7, method="full").model.num_params
    assert 8 * n < seven["pure_bf16_device_bytes"] < seven["device_bytes"] / 1.9
    assert "is 12 B per parameter, fp32 Adam moments on bf16 weights: what bitsandbytes' 32-bit AdamW" in PRECISION_NOTE
    for row in guide_table().rows:  # each full row says so in its own lines
        if row.method == "full":
            assert any(w.startswith("In pure bf16 (bf16-true, 8 B per parameter") for w in row.why)
    assert all(c["pure_bf16_fits"] is None for row in guide_table().rows if row.method != "full" for c in row.claims)
