"""Issue 11 (trust): each answer is re-estimated where it will run, defaults are said, rankings are believable."""

import pytest

from vramfit.estimate import estimate
from vramfit.gpus import get_gpu
from vramfit.plan import changes_to_fit, plan
from vramfit.plan.evaluate import limit_bytes
from vramfit.scenario import parse_scenario

M7 = "mistralai/Mistral-7B-v0.1"
GiB = 2**30


def test_changes_are_estimated_at_the_accumulation_the_effective_batch_needs():
    # the case: 8-bit AdamW fits at grad_accum 1 (71.8 GiB) but not at the 32 steps that batch 32 needs
    sc = {"model": M7, "method": "full", "precision": "bf16-mixed", "seq_len": 2048}
    rep = plan(sc, effective_batch=32, dataset_tokens="100M", gpu_ids=["h100-sxm"])
    assert rep.scenario["grad_accum"] == 32 and rep.scenario["micro_batch_size"] == 1
    assert rep.scenario_device_bytes == estimate({**sc, "grad_accum": 32}).peak.device_bytes
    eight = next(c for c in rep.changes["h100-sxm"] if c.name == "8bit-optimizer")
    assert not eight.fits and eight.device_bytes > 95 * GiB
    limit = limit_bytes(get_gpu("h100-sxm"), 0.05)
    given = parse_scenario({**rep.scenario, "gpu": "h100-sxm"})  # the scenario the report states
    for c in rep.changes["h100-sxm"]:
        applied = given.replace(**c.changes)
        assert applied.effective_batch >= 32, c.name
        assert estimate(applied).peak.device_bytes == c.device_bytes
        assert (c.device_bytes <= limit) == c.fits, c.name


@pytest.mark.parametrize("eff", [30, 7])
def test_every_change_reaches_an_effective_batch_that_does_not_divide_evenly(eff):
    sc = {"model": M7, "method": "full", "precision": "bf16-mixed", "seq_len": 2048}
    changes = changes_to_fit(sc, "h100-sxm", effective_batch=eff)
    assert any(c.name == "more-gpus" for c in changes)
    given = parse_scenario({**sc, "gpu": "h100-sxm"})
    for c in changes:
        assert given.replace(**c.changes).effective_batch >= eff, c.name


def test_changes_to_fit_without_effective_batch_keep_the_scenarios_accumulation():
    sc = {"model": M7, "method": "full", "precision": "bf16-mixed", "seq_len": 2048}
    eight = next(c for c in changes_to_fit(sc, "h100-sxm") if c.name == "8bit-optimizer")
    assert eight.fits and "grad_accum" not in eight.changes
    at32 = next(c for c in changes_to_fit(sc, "h100-sxm", effective_batch=32) if c.name == "8bit-optimizer")
    assert at32.changes["grad_accum"] == 32 and at32.device_bytes > eight.device_bytes


# ---- item 10: input papercuts
def _cli(*args, columns=200):
    from typer.testing import CliRunner

    from vramfit.cli.main import app

    return CliRunner().invoke(app, list(args), env={"COLUMNS": str(columns)})


def test_seq_len_accepts_a_k_suffix_as_context_lengths_are_named():
    assert parse_scenario({"model": M7, "seq_len": "4k"}).seq_len == 4096
    assert parse_scenario({"model": M7, "seq_len": "32K"}).seq_len == 32768
    r = _cli("estimate", "--model", M7, "--seq-len", "4k", "--json")
    assert r.exit_code == 0, r.output
    assert '"seq_len": 4096' in r.stdout


def test_models_search_is_the_and_of_its_words():
    from vramfit.models import search_models

    both = ["Qwen/Qwen2.5-32B", "Qwen/Qwen2.5-VL-32B-Instruct"]  # every word in each, in catalog order
    assert [e["id"] for e in search_models("qwen2.5 32b")] == both
    assert [e["id"] for e in search_models(["QWEN2.5", "32B"])] == both
    r = _cli("models", "qwen2.5", "32b")
    assert r.exit_code == 0 and "Qwen/Qwen2.5-32B" in r.stdout and "Qwen/Qwen2.5-7B" not in r.stdout


def test_models_ids_stay_readable_in_a_narrow_terminal():
    from vramfit.models import search_models

    r = _cli("models", "llama", columns=60)
    assert r.exit_code == 0
    for e in search_models("llama"):
        assert e["id"] in r.stdout  # whole, not cut with an ellipsis


@pytest.mark.parametrize("name, gid", [("4090", "rtx4090"), ("h200", "h200-sxm"), ("H100", "h100-sxm"),
                                       ("RTX 4090", "rtx4090"), ("a100", "a100-80gb-sxm")])
def test_gpu_aliases(name, gid):
    assert get_gpu(name).gpu_id == gid
    # validation reads no GPU catalog (issue 10 item 5): the alias becomes the id where the card is used
    assert parse_scenario({"model": M7, "gpu": name}).gpu == name.strip().lower()
    assert estimate({"model": M7, "gpu": name}).scenario.gpu == gid


def test_lora_keys_with_full_fine_tuning_get_a_note():
    r = _cli("estimate", "--model", M7, "--method", "full", "--lora-rank", "8", "--json")
    assert r.exit_code == 0
    assert "note: --lora-rank ignored: --method full trains every weight" in r.stderr
    quiet = _cli("estimate", "--model", M7, "--method", "lora", "--lora-rank", "8", "--json")
    assert "note:" not in quiet.stderr


def test_fit_grid_marks_fitting_cells_in_text_not_only_colour():
    from vramfit.plan import fit

    r = _cli("fit", "--model", "meta-llama/Llama-3.1-8B", "--method", "lora", "--gpu", "l40s")
    assert r.exit_code == 0 and "green" not in r.stdout
    f = fit({"model": "meta-llama/Llama-3.1-8B", "method": "lora"}, "l40s")
    fits = sum(c.fits for row in f.grid for c in row if c.device_bytes is not None)
    assert 0 < fits < sum(len(row) for row in f.grid)
    assert r.stdout.count("✓") == fits + 1  # each fitting cell, and the legend in the title


def test_unknown_model_suggests_at_most_five_distinct_ids():
    r = _cli("estimate", "--model", "qwen2.5")
    assert r.exit_code == 2
    ids = r.stderr.split("did you mean: ", 1)[1].split("?", 1)[0].split(", ")
    assert 1 <= len(ids) <= 5 and len(set(ids)) == len(ids) and all(i.startswith("Qwen/Qwen2.5") for i in ids)


# ---- item 7: the default precision is the framework's, and it is said
@pytest.mark.parametrize("framework, method, expected", [
    ("hf", "full", "bf16-true"), ("hf", "lora", "bf16-true"), ("torchtune", "full", "bf16-true"),
    ("litgpt", "full", "bf16-mixed"), ("litgpt", "lora", "bf16-mixed"), ("litgpt", "qlora", "bf16-true"),
])
def test_default_precision_follows_the_framework_profile(framework, method, expected):
    from vramfit.estimate.framework import PROFILES
    from vramfit.scenario import Framework, Method

    sc = parse_scenario({"model": M7, "method": method, "framework": framework})
    assert sc.precision.value == expected == dict(PROFILES[Framework(framework)].default_precision)[Method(method)].value
    given = parse_scenario({"model": M7, "method": method, "framework": framework, "precision": "fp32"})
    assert given.precision.value == "fp32"  # a given precision always wins


def test_litgpt_default_full_is_twice_the_state_of_hf_default_and_the_assumptions_say_why():
    hf = estimate({"model": M7, "method": "full"})
    lit = estimate({"model": M7, "method": "full", "framework": "litgpt"})
    n = hf.model.num_params
    hf_state = sum(c.bytes for c in hf.components if c.name in ("weights", "master_weights", "gradients", "optimizer_state"))
    lit_state = sum(c.bytes for c in lit.components if c.name in ("weights", "master_weights", "gradients", "optimizer_state"))
    assert abs(hf_state / n - 8) < 0.1 and abs(lit_state / n - 16) < 0.1  # 8 vs 16 bytes per parameter
    assert any(a.startswith("Precision bf16-true: bf16 weights") and "default for full" in a for a in hf.assumptions)
    assert any(a.startswith("Precision bf16-mixed: fp32 weights") and "litgpt's default" in a for a in lit.assumptions)
    set_ = estimate({"model": M7, "method": "full", "precision": "bf16-mixed"})
    assert any("(set; transformers + PEFT's default for full is bf16-true)" in a for a in set_.assumptions)


def test_help_says_what_each_precision_means_and_the_defaults():
    r = _cli("estimate", "--help", columns=400)
    text = " ".join(r.stdout.replace("│", " ").split())
    assert "8 B per parameter" in text and "16 B per parameter" in text
    assert "hf bf16-true" in text and "litgpt bf16-mixed (qlora bf16-true)" in text


def test_guide_table_and_calculator_differ_only_by_the_stated_precision():
    from vramfit.plan import guide_table
    from vramfit.plan.guide import SETTINGS

    g = guide_table()
    row = next(r for r in g.rows if r.size == "7B" and r.method == "full")
    base = {"model": row.model, "method": "full", **SETTINGS}
    assert row.device_bytes == estimate({**base, "precision": "bf16-mixed"}).peak.device_bytes
    assert row.device_bytes > estimate(base).peak.device_bytes  # the hf default (bf16-true) is smaller
    assert "bf16-true for transformers 5" in g.settings["precision_note"]
    r = _cli("guide-table")
    assert "Precision: Full fine-tuning here is bf16-mixed" in " ".join(r.stdout.split())


# ---- item 8: mixture-of-experts QLoRA, experts quantized or not is a stated choice
MIX = "mistralai/Mixtral-8x7B-v0.1"


def test_moe_qlora_expert_quantization_is_an_explicit_printed_choice():
    auto = estimate({"model": MIX, "method": "qlora"})
    no = estimate({"model": MIX, "method": "qlora", "quantize_experts": "no"})
    yes = estimate({"model": MIX, "method": "qlora", "quantize_experts": "yes"})
    tt = estimate({"model": MIX, "method": "qlora", "framework": "torchtune"})
    comp = {r: {c.name: c.bytes for c in e.components} for r, e in (("auto", auto), ("yes", yes), ("tt", tt))}
    assert auto.scenario.quantize_experts.value == "auto" and auto.peak.device_bytes == no.peak.device_bytes
    # transformers 5: 45 B expert parameters stay fp32 (prepare_model_for_kbit_training): ~169 GiB of weights
    experts = sum(lin.weight_params for lin in yes_spec().block_linears if lin.group == "expert") * yes_spec().num_hidden_layers
    assert comp["auto"]["weights"] > 4 * experts and comp["auto"].get("quantized_base", 0) < comp["yes"]["quantized_base"]
    assert yes.peak.device_bytes < auto.peak.device_bytes - 100 * GiB
    assert comp["tt"]["quantized_base"] > 0.5 * experts  # torchtune quantizes experts by default (4-bit)
    note = next(a for a in auto.assumptions if a.startswith("Mixture-of-experts weights"))
    assert "NOT quantized" in note and "quantize_experts=auto" in note and "transformers 5" in note
    assert any("quantized like the other block linears (quantize_experts=yes)" in a for a in yes.assumptions)
    assert not any(a.startswith("Mixture-of-experts") for a in estimate({"model": M7, "method": "qlora"}).assumptions)


def yes_spec():
    from vramfit.models import resolve_model

    return resolve_model(MIX).spec


def test_planner_offers_quantizing_the_experts_for_moe_qlora():
    changes = changes_to_fit({"model": MIX, "method": "qlora"}, "h100-sxm", effective_batch=8)
    q = next(c for c in changes if c.name == "quantize-experts")
    assert q.changes == {"grad_accum": 8, "quantize_experts": "yes"} and q.saving_bytes > 100 * GiB and "transformers 4" in q.tradeoff
    assert changes[0].fits and changes[0].changes.get("quantize_experts") == "yes"
    assert all(c.name != "quantize-experts" for c in changes_to_fit({"model": MIX, "method": "qlora", "framework": "torchtune",
                                                                     "seq_len": 65536}, "rtx4090"))


# ---- item 9: rankings a renter believes
L8 = "meta-llama/Llama-3.1-8B"


@pytest.fixture(scope="module")
def catalog_plan():
    return plan({"model": L8, "method": "lora", "seq_len": 4096}, effective_batch=32, dataset_tokens="100M")


def test_gb200_is_planned_in_its_rental_unit_not_as_an_8_gpu_node(catalog_plan):
    g = get_gpu("gb200")
    assert g.rental_gpus == (4,) and "4-GPU" in g.rental_source
    gb = [p for p in catalog_plan.plans if p.gpu_id == "gb200"]
    assert gb and max(p.num_gpus for p in gb) == 4
    for p in gb:
        assert p.billed_gpus == 4
        assert p.cost_usd_low == pytest.approx(p.hours * 4 * g.price_low)
        if p.num_gpus < 4:
            assert any("rented in units of 4 GPUs" in n for n in p.notes)
    assert catalog_plan.fastest.gpu_id != "gb200" or catalog_plan.fastest.num_gpus <= 4
    per_gpu = [p for p in catalog_plan.plans if p.gpu_id == "h100-sxm"]
    assert all(p.billed_gpus == p.num_gpus for p in per_gpu) and {1, 8} <= {p.num_gpus for p in per_gpu}


def test_every_cost_names_its_price_basis_with_a_date(catalog_plan):
    import re

    for p in catalog_plan.plans:
        if p.usd_per_gpu_hour_low is not None:
            assert re.search(r"20\d\d", p.price_basis), (p.gpu_id, p.price_basis)
    by = {p.gpu_id: p.price_basis for p in catalog_plan.plans}
    assert by["h100-sxm"] == "RunPod Community, 2026-09-25"
    assert by["mi300x"] == "TensorWave, research note 2026-05-18"  # the one secondhand source is said so
    assert catalog_plan.to_dict()["plans"][0]["price_basis"]


def test_sort_by_time_and_a_deadline(catalog_plan):
    fast = plan({"model": L8, "method": "lora", "seq_len": 4096}, effective_batch=32, dataset_tokens="100M", sort="time")
    speeds = [p.tokens_per_s for p in fast.plans if p.tokens_per_s]
    assert speeds == sorted(speeds, reverse=True) and fast.plans[0].tokens_per_s == fast.fastest.tokens_per_s
    dl = plan({"model": L8, "method": "lora", "seq_len": 4096}, effective_batch=32, dataset_tokens="100M", deadline_hours=0.2)
    flags = [p.meets_deadline for p in dl.plans]
    assert True in flags and False in flags and flags == sorted(flags, key=lambda f: f is False)
    assert dl.cheapest.meets_deadline and dl.cheapest.hours <= 0.2
    assert catalog_plan.cheapest.hours > 0.2  # without the deadline the cheapest is slower


def test_stack_filter_and_what_works_on_amd():
    rep = plan({"model": L8, "method": "qlora"}, effective_batch=8, stacks="cuda")
    assert rep.plans and all(p.stack == "cuda" for p in rep.plans)
    assert any(e.gpu_id == "mi300x" and "ROCm card; --stack cuda" in e.reason for e in rep.excluded)
    amd = plan({"model": L8, "method": "qlora"}, effective_batch=8, gpu_ids=["mi300x"])
    assert amd.plans and any("bitsandbytes (>= 0.50: 4-bit QLoRA" in n for n in amd.plans[0].notes)


def test_a_stack_that_lacks_a_feature_the_scenario_needs_is_excluded_with_the_reason():
    from vramfit.plan.rental import cannot_run

    why = cannot_run(get_gpu("gaudi3"), parse_scenario({"model": L8, "attention": "flash"}), ())
    assert why and "flash-attention" in why and "no FlashAttention 2" in why
    assert cannot_run(get_gpu("h100-sxm"), parse_scenario({"model": L8, "attention": "flash"}), ()) is None


@pytest.mark.parametrize("args, fragment", [
    (["--sort", "price"], "sort: unknown value 'price'"),
    (["--stack", "metal"], "stack: unknown software stack 'metal'"),
    (["--deadline", "-2"], "deadline: must be a positive number of hours"),
])
def test_bad_ranking_input_exits_2(args, fragment):
    r = _cli("plan", "--model", L8, *args)
    assert r.exit_code == 2 and fragment in " ".join(r.output.split())


def test_gpu_list_shows_the_basis_of_each_low_price():
    r = _cli("gpus", columns=220)
    assert r.exit_code == 0
    line = next(x for x in r.stdout.splitlines() if "│ mi300x" in x)
    assert "1.50–6.00" in line and "TensorWave, research note 2026-05-18" in line


def test_web_plan_takes_the_same_ranking_inputs():
    from vramfit.web.planning import plan as web_plan

    d = web_plan({"scenario": {"model": L8, "method": "qlora"}, "effective_batch": 8, "dataset_tokens": "10M",
                  "sort": "time", "stacks": "cuda", "deadline_hours": 2})
    assert d["inputs"]["sort"] == "time" and d["inputs"]["stacks"] == ["cuda"] and d["inputs"]["deadline_hours"] == 2
    assert all(p["stack"] == "cuda" and p["price_basis"] for p in d["plans"] if p["usd_per_gpu_hour_low"])
