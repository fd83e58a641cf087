"""The same scenario through every face (Python API, CLI text and --json, --batch, fit, plan, the web API) states the
same figures and verdicts wherever they state the same quantity; one test per contradiction the audit found."""

import json

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from vramfit import estimate
from vramfit.cli.main import app
from vramfit.gpus import get_gpu
from vramfit.plan import fit, plan
from vramfit.plan.verdict import estimate_fits, limit_bytes, with_fits
from vramfit.units import GiB
from vramfit.web.app import create_app

runner = CliRunner()
LORA_4090 = {"model": "Qwen/Qwen2.5-7B", "method": "lora", "seq_len": 2048, "micro_batch_size": 2, "gpu": "rtx4090",
             "gradient_checkpointing": "full"}
GRPO = {"model": "Qwen/Qwen2.5-1.5B", "method": "full", "stage": "grpo", "num_generations": 4, "seq_len": 1024,
        "micro_batch_size": 4, "gpu": "a100-80gb-sxm"}


def _flags(sc: dict) -> list[str]:
    return [a for k, v in sc.items() for a in ("--" + k.replace("_", "-"), str(v))]


def _card_fits(sc: dict) -> bool:
    g = get_gpu(sc["gpu"])
    return with_fits(estimate(sc), [g]).fits[0].fits


#: The audit's scenarios: one card each, across sharding, offload, quantization, stages, frameworks and modalities.
AUDIT = {
    "lora-1gpu": LORA_4090,
    "fsdp-8": {"model": "meta-llama/Llama-3.1-8B", "method": "full", "seq_len": 4096, "micro_batch_size": 1, "num_gpus": 8,
               "parallelism": "fsdp", "gpu": "h100-sxm", "gradient_checkpointing": "full"},
    "zero3-offload": {"model": "meta-llama/Llama-3.1-70B", "method": "qlora", "seq_len": 2048, "micro_batch_size": 1,
                      "num_gpus": 4, "parallelism": "zero3", "offload": "optimizer+params", "gpu": "a100-80gb-sxm",
                      "gradient_checkpointing": "full"},
    "qlora-32k": {"model": "meta-llama/Llama-3.1-8B", "method": "qlora", "seq_len": 32768, "micro_batch_size": 1,
                  "gpu": "rtx4090", "gradient_checkpointing": "full"},
    "dpo": {**LORA_4090, "stage": "dpo", "seq_len": 1024, "micro_batch_size": 1, "gpu": "a100-80gb-sxm"},
    "vlm": {"model": "Qwen/Qwen2.5-VL-7B-Instruct", "method": "lora", "seq_len": 2048, "micro_batch_size": 1,
            "images_per_sample": 1, "gpu": "l40s", "gradient_checkpointing": "full"},
    "ddp": {"model": "Qwen/Qwen2.5-0.5B", "method": "full", "seq_len": 1024, "micro_batch_size": 4, "num_gpus": 2,
            "parallelism": "ddp", "gpu": "rtx4090"},
    "zero2": {"model": "meta-llama/Llama-3.1-8B", "method": "full", "seq_len": 2048, "micro_batch_size": 2, "num_gpus": 4,
              "parallelism": "zero2", "gpu": "a100-80gb-sxm", "gradient_checkpointing": "full"},
    "paged-8bit": {"model": "meta-llama/Llama-3.1-8B", "method": "qlora", "optimizer": "paged-adamw-8bit", "seq_len": 2048,
                   "micro_batch_size": 4, "gpu": "rtx3090"},
    "torchtune": {"model": "meta-llama/Llama-3.1-8B", "method": "lora", "framework": "torchtune", "seq_len": 2048,
                  "micro_batch_size": 2, "gpu": "a100-40gb-sxm", "gradient_checkpointing": "full"},
    "litgpt": {"model": "meta-llama/Llama-3.1-8B", "method": "lora", "framework": "litgpt", "seq_len": 2048,
               "micro_batch_size": 2, "gpu": "a100-40gb-sxm"},
    "unsloth": {"model": "meta-llama/Llama-3.1-8B", "method": "qlora", "framework": "unsloth", "seq_len": 8192,
                "micro_batch_size": 2, "gpu": "l4", "gradient_checkpointing": "full"},
    "fused-loss": {"model": "Qwen/Qwen2.5-14B", "method": "lora", "loss": "fused", "seq_len": 4096, "micro_batch_size": 2,
                   "gpu": "h100-sxm"},
    "moe-qlora": {"model": "mistralai/Mixtral-8x7B-v0.1", "method": "qlora", "seq_len": 2048, "micro_batch_size": 1,
                  "gpu": "h100-sxm", "gradient_checkpointing": "full"},
    "grpo": GRPO,
}


@pytest.mark.parametrize("sc", list(AUDIT.values()), ids=list(AUDIT))
def test_every_face_states_the_same_estimate(sc, tmp_path):
    """Python API, CLI --json, --batch and POST /api/estimate: the same peak, card verdicts, accuracy band, scenario."""
    py = estimate_fits(sc).to_dict()
    cli = json.loads(runner.invoke(app, ["estimate", *_flags(sc), "--json"]).stdout)
    batch_file = tmp_path / "b.jsonl"
    batch_file.write_text(json.dumps(sc) + "\n")
    batch = json.loads(runner.invoke(app, ["estimate", "--batch", str(batch_file)]).stdout)
    with TestClient(create_app(), base_url="http://localhost") as client:
        web = client.post("/api/estimate", json=sc).json()
    for face in (cli, batch, web):
        assert {k: face[k] for k in ("peak", "fits", "accuracy", "scenario")} == \
               {k: py[k] for k in ("peak", "fits", "accuracy", "scenario")}
    assert py["peak"]["device_bytes"] > 0 and py["accuracy"]["note"]


def test_fit_states_the_figure_its_verdict_holds_to_the_limit():
    """Contradiction: `fit` printed the device peak next to "fits" (longest sequence 1,816 tokens at 24.2 GiB on a card
    of 24.0 GiB usable, limit 22.8), while the verdict holds the figure after the OOM cache release (required_bytes)
    to the limit. Now fit reports and prints that figure, equal to estimate's at the same setting and within the limit."""
    r = fit(LORA_4090, "rtx4090")
    limit = limit_bytes(get_gpu("rtx4090"))
    at_seq = estimate({**LORA_4090, "seq_len": r.max_seq_len}).peak
    at_mb = estimate({**LORA_4090, "micro_batch_size": r.max_micro_batch}).peak
    # 1,816 while the CUDA context was 400 MiB; the 122 MiB more since (522 MiB, estimate/constants.py) cost 31 tokens
    assert (r.max_micro_batch, r.max_seq_len) == (1, 1785)
    assert r.max_seq_len_required_bytes == at_seq.required_bytes <= limit < at_seq.device_bytes  # device over the limit
    assert r.max_micro_batch_required_bytes == at_mb.required_bytes <= limit
    assert r.required_bytes == estimate(LORA_4090).peak.required_bytes > limit and not r.fits
    for row in r.grid:
        for c in row:
            assert c.required_bytes == estimate({**LORA_4090, "micro_batch_size": c.micro_batch_size,
                                                 "seq_len": c.seq_len}).peak.required_bytes
            assert c.fits == (c.required_bytes <= limit)
    out = runner.invoke(app, ["fit", *_flags(LORA_4090)]).stdout
    assert f"1,785 tokens (needs {at_seq.required_bytes / GiB:,.1f} GiB)" in out
    assert f"needs {r.required_bytes / GiB:,.1f} GiB (device peak {r.device_bytes / GiB:,.1f})" in out


def test_fit_offers_only_micro_batches_and_sequences_the_stage_accepts():
    """Contradiction: for GRPO (num_generations must divide micro_batch x GPUs x accumulation) fit said micro-batch 23
    fits, which estimate (and TRL) refuse, and found no sequence length at all (its search began at 1 token, shorter
    than the completion) although the scenario fits. Both now search the values the stage accepts."""
    r = fit(GRPO, GRPO["gpu"])
    assert r.fits and r.max_micro_batch % 4 == 0 and r.max_seq_len > 512  # TRL's completion_len default, 512
    assert _card_fits({**GRPO, "micro_batch_size": r.max_micro_batch})
    assert not _card_fits({**GRPO, "micro_batch_size": r.max_micro_batch + 4})
    assert _card_fits({**GRPO, "seq_len": r.max_seq_len}) and not _card_fits({**GRPO, "seq_len": r.max_seq_len + 1})
    assert r.max_micro_batch_required_bytes == estimate({**GRPO, "micro_batch_size": r.max_micro_batch}).peak.required_bytes


def test_plan_recommendations_are_what_estimate_says():
    """Each plan's figures and accuracy note are estimate's of the plan's own scenario, which differs from the user's
    only in the keys the plan row shows; web and CLI give the same plans."""
    sc = {"model": "meta-llama/Llama-3.1-8B", "method": "full", "seq_len": 2048, "micro_batch_size": 2, "num_gpus": 4,
          "parallelism": "zero2", "gpu": "a100-80gb-sxm", "gradient_checkpointing": "full"}
    r = plan(sc, gpu_ids=sc["gpu"])
    shown = {"num_gpus", "micro_batch_size", "grad_accum", "gradient_checkpointing", "parallelism", "offload",
             "optimizer", "loss", "gpu"}
    assert r.plans and r.scenario_device_bytes == estimate(sc).peak.device_bytes
    for p in r.plans:
        e = with_fits(estimate(p.scenario), [get_gpu(sc["gpu"])])
        assert (p.device_bytes, p.required_bytes) == (e.peak.device_bytes, e.peak.required_bytes) and e.fits[0].fits
        assert (p.measured_path, p.accuracy_note) == (e.accuracy["measured_path"], e.accuracy["note"])
        assert {k for k in set(p.scenario) | set(r.scenario) if p.scenario.get(k) != r.scenario.get(k)} <= shown
        assert p.scenario["num_gpus"] == p.num_gpus and p.scenario["micro_batch_size"] == p.micro_batch_size
    cli = json.loads(runner.invoke(app, ["plan", *_flags(sc), "--cards", sc["gpu"], "--json"]).stdout)
    with TestClient(create_app(), base_url="http://localhost") as client:
        web = client.post("/api/plan", json={"scenario": sc, "gpu_ids": sc["gpu"]}).json()
    for face in (cli, web):
        assert [(q["num_gpus"], q["micro_batch_size"], q["device_bytes"]) for q in face["plans"]] == \
               [(p.num_gpus, p.micro_batch_size, p.device_bytes) for p in r.plans]


FIX = __import__("pathlib").Path(__file__).resolve().parents[1] / "dataset" / "fixtures"
DS = ["--dataset", str(FIX / "chat.jsonl"), "--tokenizer", str(FIX / "tok")]
QLORA_A100 = {"model": "Qwen/Qwen2.5-7B", "method": "qlora", "gradient_checkpointing": "full", "gpu": "a100-80gb-sxm",
              "micro_batch_size": 4, "seq_len": 2048}


def _cli_json(*args):
    r = runner.invoke(app, list(args))
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _dataset_estimate(mb: int, *policy):
    return _cli_json("estimate", *_flags({**QLORA_A100, "micro_batch_size": mb}), *DS, *policy, "--json")


@pytest.mark.parametrize("policy", [{}, {"padding_free": True}, {"packing": "bfd"}, {"padding": "max_length"}],
                         ids=["longest", "padding-free", "bfd", "max_length"])
def test_report_seq_len_at_its_own_size_is_its_peak(policy):
    """DatasetReport.seq_len_at (what fit and plan take for other micro-batch sizes) at the report's own size is the
    peak micro-batch's seq_len that estimate --dataset uses; only flattened rows vary with the size."""
    from vramfit.cli.dataset_opts import option_defaults, run_dataset
    from vramfit.scenario import parse_scenario

    opts = {**option_defaults(), "dataset": FIX / "chat.jsonl", "tokenizer": FIX / "tok", **policy}
    seqs = []
    for mb in (1, 2, 4, 8):
        r = run_dataset(opts, parse_scenario({**QLORA_A100, "micro_batch_size": mb}))
        assert r.seq_len_at(mb) == r.peak_seq_len
        seqs.append(r.peak_seq_len)
    flattened = bool(policy.get("padding_free") or policy.get("packing"))
    assert r.varies_with_micro_batch == flattened and (len(set(seqs)) > 1) == policy.get("padding_free", False)


def test_padding_free_plan_and_fit_take_each_micro_batch_s_own_peak_row():
    """Contradiction: with a padding-free dataset, `plan` put the longest sample alone in every row (micro-batch 4 x
    1,320 tokens: 25,771,491,968 B for "your scenario") while `estimate --dataset` takes the peak micro-batch, the four
    longest samples in one row (4 x 1,148: 23,781,226,432 B); `fit` searched micro-batches at that fixed length. Both
    now take each size's own peak (DatasetReport.seq_len_at), and each figure is estimate --dataset's at that size."""
    pf = ("--padding-free",)
    own = _dataset_estimate(4, *pf)
    assert own["scenario"]["seq_len"] == 1148 and own["peak"]["device_bytes"] == 23_909_152_704
    plan_r = _cli_json("plan", *_flags(QLORA_A100), *DS, *pf, "--cards", QLORA_A100["gpu"], "--json")
    assert plan_r["scenario_device_bytes"] == own["peak"]["device_bytes"]
    for p in plan_r["plans"]:  # each plan's own settings, at its micro-batch's peak row
        assert p["scenario"]["seq_len"] == _dataset_estimate(p["micro_batch_size"], *pf)["scenario"]["seq_len"]
        assert p["device_bytes"] == estimate(p["scenario"]).peak.device_bytes
    f = _cli_json("fit", *_flags(QLORA_A100), *DS, *pf, "--json")
    at_max = _dataset_estimate(f["max_micro_batch"], *pf)
    assert f["max_micro_batch_seq_len"] == at_max["scenario"]["seq_len"] < 1148
    assert f["max_micro_batch_required_bytes"] == at_max["peak"]["required_bytes"] <= f["limit_bytes"]
    assert _dataset_estimate(f["max_micro_batch"] + 1, *pf)["peak"]["required_bytes"] > f["limit_bytes"]


def test_a_calibration_moves_every_face_s_dataset_figures_alike(tmp_path, monkeypatch):
    """Contradiction: with the user's calibration active, `estimate --dataset` applied it to its result but its stderr
    line "per GPU at micro-batch N: peak X GiB" did not, and the web upload's reserved spread and card line ignored the
    server's calibration that /api/estimate applies. All now state the calibrated figures."""
    from vramfit.calibration import Calibration, FamilyCalibration, save
    from vramfit.web import service

    cal = Calibration({"a100": FamilyCalibration("a100", 7, 2 * GiB, 0.30, ("a100-80gb-sxm",))})
    save(cal, tmp_path / "cal.json")
    monkeypatch.setenv("VRAMFIT_CALIBRATION", str(tmp_path / "cal.json"))
    r = runner.invoke(app, ["estimate", *_flags(QLORA_A100), *DS, "--json"])
    out = json.loads(r.stdout)
    plain = estimate({**QLORA_A100, "seq_len": out["scenario"]["seq_len"]})
    assert out["peak"]["device_bytes"] != plain.peak.device_bytes  # the calibration moved it
    assert f"peak {out['peak']['device_bytes'] / GiB:,.1f} GiB (seq_len {out['scenario']['seq_len']:,})" in r.stderr
    text = (FIX / "chat.jsonl").read_bytes()
    with TestClient(create_app(calibration=cal), base_url="http://localhost") as client:
        up = client.post("/api/dataset", files={"file": ("chat.jsonl", text)},
                         data={"scenario": json.dumps(QLORA_A100)}).json()
    monkeypatch.setattr(service, "CALIBRATION", None)  # create_app set it; the next app sets its own
    from vramfit.dataset import Policy, analyze_dataset

    rep = analyze_dataset(FIX / "chat.jsonl", policy=Policy(micro_batch_size=4, max_length=2048))  # the upload's pass
    at_peak = {**QLORA_A100, "seq_len": rep.peak_seq_len}
    assert up["reserved_spread"]["fixed_reserved_bytes"] == estimate(at_peak, calibration=cal).peak.reserved_bytes \
        != estimate(at_peak).peak.reserved_bytes
    assert up["card"]["max_seq_len"] == fit(QLORA_A100, QLORA_A100["gpu"], calibration=cal).max_seq_len \
        != fit(QLORA_A100, QLORA_A100["gpu"]).max_seq_len


def test_sweep_states_the_figure_its_fits_columns_hold_to_the_limit():
    """Contradiction: `sweep` marks a card "fits" from the figure after the OOM cache release but showed and wrote only
    the device peak, so a length whose device peak is over the rtx4090's limit read "fits" with no figure under the
    limit anywhere; its JSON, CSV and table now carry required_bytes, estimate's own."""
    sc = {"model": "meta-llama/Llama-3.1-8B", "method": "lora", "gradient_checkpointing": "full", "gpu": "rtx4090"}
    out = _cli_json("sweep", *_flags(sc), "--vary", "seq_len=2048..4096:512", "--cards", "rtx4090", "--json")
    limit = limit_bytes(get_gpu("rtx4090"))
    over = 0
    for p in out["points"]:
        e = estimate({**sc, "seq_len": p["value"]}).peak
        assert (p["peak"]["device_bytes"], p["peak"]["required_bytes"]) == (e.device_bytes, e.required_bytes)
        assert p["fits"]["rtx4090"] == (e.required_bytes <= limit)
        over += p["fits"]["rtx4090"] and e.device_bytes > limit
    assert over >= 1  # a setting whose device peak is over the limit and fits: the case the column explains
    csv_text = runner.invoke(app, ["sweep", *_flags(sc), "--vary", "seq_len=2048,4096", "--csv", "-"]).stdout
    head, first = csv_text.splitlines()[:2]
    assert head.startswith("seq_len,allocated_bytes,reserved_bytes,device_bytes,required_bytes,")
    assert int(first.split(",")[4]) == estimate({**sc, "seq_len": 2048}).peak.required_bytes


def test_plan_changes_state_estimate_s_verdict_of_the_changed_scenario():
    """Contradiction: a suggested change's headroom was the limit less the device peak while its "fits" (and estimate's
    headroom for the same changed scenario) count the figure after the OOM cache release: a change could fit with a
    negative headroom. Each change now carries estimate's card verdict (card_fit) and required_bytes."""
    from vramfit.plan.verdict import card_fit

    g = get_gpu("rtx4090")
    changes = plan(LORA_4090, gpu_ids="rtx4090").changes["rtx4090"]
    measured = [c for c in changes if c.error is None]
    assert len(measured) >= 3 and any(c.fits and c.device_bytes > limit_bytes(g) for c in measured)  # shorter-sequence
    for c in measured:
        e = estimate({**LORA_4090, **c.changes, "gpu": "rtx4090"})
        v = card_fit(e, g)
        assert (c.fits, c.headroom_bytes, c.required_bytes, c.device_bytes) == \
               (v.fits, v.headroom_bytes, e.peak.required_bytes, e.peak.device_bytes)
        assert c.fits == (c.headroom_bytes >= 0)


def test_plan_s_cheapest_line_states_the_figure_held_to_the_limit():
    """The Cheapest/Fastest lines said the device peak "per GPU" beside a plan that fits by the figure after the OOM
    cache release (the table's "GiB used/usable" column already shows that one); they now state the same figure."""
    r = plan(LORA_4090, gpu_ids="rtx4090")
    out = runner.invoke(app, ["plan", *_flags(LORA_4090), "--cards", "rtx4090"]).stdout
    for p in (r.cheapest, r.fastest):
        assert p.required_bytes <= p.limit_bytes
        assert f"{p.required_bytes / GiB:,.1f} GiB needed per GPU" in " ".join(out.split())


@pytest.mark.parametrize("sc", list(AUDIT.values()), ids=list(AUDIT))
def test_fit_s_largest_settings_are_estimate_s(sc):
    """fit's verdict and largest micro-batch / sequence agree with estimate's verdict at those settings, one step more
    does not fit, and the figures fit states are estimate's."""
    from vramfit.limits import MAX_BATCH
    from vramfit.scenario import parse_scenario
    from vramfit.stage_keys import micro_batch_step

    r = fit(sc, sc["gpu"])
    own = estimate(sc)
    assert (r.device_bytes, r.required_bytes, r.fits) == (own.peak.device_bytes, own.peak.required_bytes, _card_fits(sc))
    step = micro_batch_step(parse_scenario(sc))
    if r.max_micro_batch:
        at = {**sc, "micro_batch_size": r.max_micro_batch}
        assert _card_fits(at) and r.max_micro_batch_required_bytes == estimate(at).peak.required_bytes
        assert r.max_micro_batch + step > MAX_BATCH or not _card_fits({**sc, "micro_batch_size": r.max_micro_batch + step})
    if r.max_seq_len:
        at = {**sc, "seq_len": r.max_seq_len}
        assert _card_fits(at) and r.max_seq_len_required_bytes == estimate(at).peak.required_bytes


@pytest.mark.parametrize("sc", list(AUDIT.values()), ids=list(AUDIT))
def test_every_plan_on_the_card_is_estimate_s_figure_and_fits(sc):
    """Each plan on the scenario's card: its figures, fit and accuracy note are estimate's of the plan's own scenario."""
    g = get_gpu(sc["gpu"])
    r = plan(sc, gpu_ids=sc["gpu"])
    assert r.plans and r.scenario_device_bytes == estimate(sc).peak.device_bytes
    for p in r.plans:
        e = with_fits(estimate(p.scenario), [g])
        assert (p.num_gpus, p.micro_batch_size, p.device_bytes, p.required_bytes) == \
               (e.scenario.num_gpus, e.scenario.micro_batch_size, e.peak.device_bytes, e.peak.required_bytes)
        assert e.fits[0].fits and (p.measured_path, p.accuracy_note) == (e.accuracy["measured_path"], e.accuracy["note"])


def test_web_sweep_has_one_shape_for_catalog_and_pasted_scenarios():
    """POST /api/sweep answered a pasted config.json with card verdicts as a list of objects and no components or
    cards, a catalog scenario with the planner's shape ({card: bool}); both now have the planner's shape and values."""
    from vramfit.models import load_catalog

    entry = next(e for e in load_catalog() if e["id"] == "Qwen/Qwen2.5-0.5B")
    body = {"key": "seq_len", "values": [1024, 2048]}
    with TestClient(create_app(), base_url="http://localhost") as client:
        cat = client.post("/api/sweep", json={**body, "scenario": {"model": "Qwen/Qwen2.5-0.5B"}}).json()
        pasted = client.post("/api/sweep", json={**body, "scenario": {"config_json": entry["config"]}}).json()
    assert set(cat) == set(pasted) and cat["cards"] == pasted["cards"]
    for a, b in zip(cat["points"], pasted["points"], strict=True):
        assert set(a) == set(b) and set(a["peak"]) == set(b["peak"]) and a["fits"].keys() == b["fits"].keys()
        assert a["accuracy"]["path"] == b["accuracy"]["path"] and b["accuracy"]["measured_path"]  # each point's band
        assert b["peak"]["required_bytes"] == estimate(model="Qwen/Qwen2.5-0.5B", seq_len=b["value"]).peak.required_bytes


def test_padding_free_changes_carry_each_micro_batch_s_row():
    """plan's suggested changes under a padding-free dataset: a smaller micro-batch holds fewer samples, so its peak
    row per sample is longer (DatasetReport.seq_len_at); the change sets that seq_len too, and each change's figure is
    estimate's of the scenario with the change's keys."""
    from vramfit.cli.dataset_opts import option_defaults, run_dataset
    from vramfit.scenario import parse_scenario

    sc = {"model": "Qwen/Qwen2.5-7B", "method": "lora", "gpu": "rtx4090", "micro_batch_size": 8, "seq_len": 2048}
    opts = {**option_defaults(), "dataset": FIX / "chat.jsonl", "tokenizer": FIX / "tok", "padding_free": True}
    rep = run_dataset(opts, parse_scenario(sc))
    r = plan({**sc, "seq_len": rep.peak_seq_len}, gpu_ids="rtx4090", dataset=rep)
    smaller = next(c for c in r.changes["rtx4090"] if c.name == "smaller-micro-batch")
    mb = smaller.changes["micro_batch_size"]
    assert smaller.changes["seq_len"] == rep.seq_len_at(mb) > rep.peak_seq_len
    for c in r.changes["rtx4090"]:
        e = estimate(parse_scenario(r.scenario).replace(**c.changes))  # the user's scenario with the change's keys
        assert (c.device_bytes, c.required_bytes) == (e.peak.device_bytes, e.peak.required_bytes)
