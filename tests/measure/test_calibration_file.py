"""A user's calibration file: written by ``vramfit calibrate``, applied on its GPU family only."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from vramfit.calibration import Calibration, FamilyCalibration, load, save
from vramfit.cli.main import app
from vramfit.estimate import estimate
from vramfit.plan import fit, plan

GiB, MiB = 2**30, 2**20
SC = {"model": "meta-llama/Llama-3.2-1B", "method": "lora", "seq_len": 512}
H100 = FamilyCalibration("h100", 7, 900 * MiB, 0.10, ("h100-sxm",))
CAL = Calibration({"h100": H100})
runner = CliRunner()


def test_applies_on_its_family_only():
    plain = estimate(SC, gpu="h100-sxm")
    cal = estimate(SC, gpu="h100-sxm", calibration=CAL)
    alloc = plain.peak.allocated_bytes
    assert cal.peak.allocated_bytes == alloc  # what PyTorch allocates is not calibrated
    assert cal.peak.reserved_bytes == alloc + round(alloc * 0.10)
    assert cal.peak.device_bytes == cal.peak.reserved_bytes + 900 * MiB
    assert cal.peak.device_bytes != plain.peak.device_bytes
    ctx = {c.name: c.bytes for c in cal.components}["cuda_context"]
    assert ctx == 900 * MiB
    assert any("Calibrated from 7 runs on h100-sxm" in a for a in cal.assumptions)
    assert estimate(SC, gpu="h100-pcie", calibration=CAL).peak.device_bytes != estimate(SC, gpu="h100-pcie").peak.device_bytes
    for other in ({"gpu": "a100-80gb-sxm"}, {"gpu": "rtx4090"}, {}):  # another family, or no card: untouched
        a, b = estimate(SC, **other), estimate(SC, calibration=CAL, **other)
        assert a.to_dict() == b.to_dict()


def test_planner_and_fit_apply_it_per_card():
    base = plan(SC, gpu_ids=["h100-sxm", "a100-80gb-sxm"], max_gpus=1, with_changes=False)
    cal = plan(SC, gpu_ids=["h100-sxm", "a100-80gb-sxm"], max_gpus=1, with_changes=False, calibration=CAL)
    dev = {(p.gpu_id, p.micro_batch_size): p.device_bytes for p in base.plans}
    dev_cal = {(p.gpu_id, p.micro_batch_size): p.device_bytes for p in cal.plans}
    h100 = [k for k in dev if k[0] == "h100-sxm" and k in dev_cal]
    a100 = [k for k in dev if k[0] == "a100-80gb-sxm" and k in dev_cal]
    assert h100 and a100
    assert all(dev[k] != dev_cal[k] for k in h100) and all(dev[k] == dev_cal[k] for k in a100)
    assert any("Calibrated from 7 runs" in a for a in cal.assumptions)
    f0, f1 = fit(SC, "h100-sxm"), fit(SC, "h100-sxm", calibration=CAL)
    assert f1.device_bytes == estimate(SC, gpu="h100-sxm", calibration=CAL).peak.device_bytes != f0.device_bytes


def test_file_round_trip_and_bad_files(tmp_path):
    p = save(CAL, tmp_path / "c.json")
    assert load(p).families == CAL.families
    p.write_text(json.dumps({"version": 1, "families": {"h100": {"runs": 3}}}))
    res = runner.invoke(app, ["estimate", "--params", "1e9"], env={"VRAMFIT_CALIBRATION": str(p)})
    assert res.exit_code == 2 and "family 'h100' needs runs, cuda_context_bytes" in res.output
    assert "Traceback" not in res.output


def test_calibrate_writes_what_estimate_applies(tmp_path, make_record):
    pytest.importorskip("sqlalchemy")
    from vramfit.measure.store import RunStore

    url = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    st = RunStore(url)
    for _ in range(3):  # measured: 10 GiB allocated, 11 GiB reserved, 12 GiB on the device
        st.add(make_record())
    st.close()
    path = tmp_path / "cal.json"
    res = runner.invoke(app, ["calibrate", "--db", url, "--calibration", str(path)], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert f"calibration for h100 (3 runs) written to {path}" in " ".join(res.output.split())
    fc = load(path).families["h100"]
    assert (fc.runs, fc.cuda_context_bytes, fc.allocator_fraction, fc.gpus) == (3, GiB, 0.1, ("h100-sxm",))
    args = ["estimate", "--model", SC["model"], "--method", "lora", "--seq-len", "512", "--json"]
    env = {"VRAMFIT_CALIBRATION": str(path)}
    on = json.loads(runner.invoke(app, [*args, "--gpu", "h100-sxm"], env=env).output)
    off = json.loads(runner.invoke(app, [*args, "--gpu", "h100-sxm"]).output)
    other = json.loads(runner.invoke(app, [*args, "--gpu", "a100-80gb-sxm"], env=env).output)
    other_off = json.loads(runner.invoke(app, [*args, "--gpu", "a100-80gb-sxm"]).output)
    assert on["peak"]["device_bytes"] == on["peak"]["reserved_bytes"] + GiB != off["peak"]["device_bytes"]
    assert any(a.startswith("Calibrated from 3 runs on h100-sxm") for a in on["assumptions"])
    # a table's other cards are judged on their own estimates (vramfit.estimate.card_facts): the H100 row of the A100
    # run's table applies the H100 family's calibration, as the H100 run itself does; the rest is untouched
    h100 = lambda r: next(f for f in r["fits"] if f["gpu_id"] == "h100-sxm")  # noqa: E731
    assert h100(other) == h100(on) != h100(other_off)
    assert {**other, "fits": None} == {**other_off, "fits": None}
    assert [f for f in other["fits"] if f["gpu_id"] != "h100-sxm"] == [f for f in other_off["fits"] if f["gpu_id"] != "h100-sxm"]
    fit_args = ["fit", "--model", SC["model"], "--method", "lora", "--seq-len", "512"]
    said = " ".join(runner.invoke(app, [*fit_args, "--gpu", "h100-sxm"], env={**env, "COLUMNS": "200"}).output.split())
    assert "Calibrated from 3 runs on h100-sxm" in said
    said = runner.invoke(app, [*fit_args, "--gpu", "a100-80gb-sxm"], env={**env, "COLUMNS": "200"}).output
    assert "Calibrated" not in said


def test_web_serves_with_the_calibration_it_was_given():
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from vramfit.web import create_app

    body = {**SC, "gpu": "h100-sxm"}
    calibrated = TestClient(create_app(calibration=CAL), base_url="http://127.0.0.1").post("/api/estimate", json=body).json()
    plain = TestClient(create_app(), base_url="http://127.0.0.1").post("/api/estimate", json=body).json()
    assert calibrated["peak"]["device_bytes"] == estimate(SC, gpu="h100-sxm", calibration=CAL).peak.device_bytes
    assert plain["peak"]["device_bytes"] == estimate(SC, gpu="h100-sxm").peak.device_bytes != calibrated["peak"]["device_bytes"]
    assert any(a.startswith("Calibrated from 7 runs on h100-sxm") for a in calibrated["assumptions"])
