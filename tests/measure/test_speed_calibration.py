"""Speed calibration: ``vramfit calibrate`` fits measured / predicted step time per GPU family, the planner applies it."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from vramfit.calibration import Calibration, FamilyCalibration, load, save
from vramfit.cli.main import app
from vramfit.plan import plan
from vramfit.plan.timing import scenario_speed

GiB, MiB = 2**30, 2**20
SC = {"model": "meta-llama/Llama-3.2-1B", "method": "lora", "seq_len": 512}
A100_ENV = {"device": "cuda", "gpu_name": "NVIDIA A100-SXM4-80GB", "gpu_family": "a100", "gpu_total_bytes": 80 * GiB}
runner = CliRunner()


def _runs_db(tmp_path, make_record) -> str:
    """h100 runs at 1.1, 1.2 and 1.5 x the predicted step time (median 1.2), a100 runs at 0.9 x."""
    pytest.importorskip("sqlalchemy")
    from vramfit.measure.store import RunStore

    url = f"sqlite:///{tmp_path / 'runs.sqlite'}"
    st = RunStore(url)
    for ratio, seq in ((1.1, 256), (1.2, 512), (1.5, 1024)):
        sc = {**SC, "seq_len": seq}
        st.add(make_record(scenario=sc, step_time_s=ratio * scenario_speed(sc, "h100-sxm").step_s))
    for seq in (256, 512):
        sc = {**SC, "seq_len": seq}
        st.add(make_record(scenario=sc, environment=A100_ENV,
                           step_time_s=0.9 * scenario_speed(sc, "a100-80gb-sxm").step_s))
    st.close()
    return url


def test_calibrate_fits_the_step_time_factor_per_family(tmp_path, make_record):
    url = _runs_db(tmp_path, make_record)
    path = tmp_path / "cal.json"
    res = runner.invoke(app, ["calibrate", "--db", url, "--calibration", str(path), "--json"])
    assert res.exit_code == 0, res.output
    speeds = {s["gpu_family"]: s for s in json.loads(res.output)["speeds"]}
    assert speeds["h100"]["runs"] == 3 and speeds["h100"]["factor"] == pytest.approx(1.2, rel=1e-12)
    assert speeds["h100"]["factor_min"] == pytest.approx(1.1, rel=1e-12)
    assert speeds["h100"]["factor_max"] == pytest.approx(1.5, rel=1e-12)
    assert speeds["a100"]["runs"] == 2 and speeds["a100"]["factor"] == pytest.approx(0.9, rel=1e-12)
    assert speeds["h100"]["gpus"] == ["h100-sxm"] and speeds["a100"]["gpus"] == ["a100-80gb-sxm"]
    cal = load(path)
    h100 = cal.families["h100"]
    assert h100.speed_factor == pytest.approx(1.2, rel=1e-12) and h100.speed_runs == 3
    assert cal.families["a100"].speed_factor == pytest.approx(0.9, rel=1e-12)
    table = runner.invoke(app, ["calibrate", "--db", url, "--no-write"], env={"COLUMNS": "200"})
    said = " ".join(table.output.split())
    assert table.exit_code == 0 and "Step time, measured / predicted" in said
    assert "x1.200" in said and "x1.10–x1.50" in said and "x0.900" in said


def test_plan_scales_only_the_calibrated_family():
    cal = Calibration({"h100": FamilyCalibration("h100", 3, GiB, 0.1, ("h100-sxm",), 1.2, 3)})
    args = dict(gpu_ids=["h100-sxm", "a100-80gb-sxm"], max_gpus=1, with_changes=False, dataset_tokens=10**8)
    base = {(p.gpu_id, p.micro_batch_size, p.optimizer): p for p in plan(SC, **args).plans}
    calib = plan(SC, calibration=cal, **args)
    pairs = [(base[(p.gpu_id, p.micro_batch_size, p.optimizer)], p) for p in calib.plans
             if (p.gpu_id, p.micro_batch_size, p.optimizer) in base]
    h100 = [(b, p) for b, p in pairs if p.gpu_id == "h100-sxm"]
    a100 = [(b, p) for b, p in pairs if p.gpu_id == "a100-80gb-sxm"]
    assert h100 and a100
    for b, p in h100:
        assert p.speed.step_s == pytest.approx(1.2 * b.speed.step_s, rel=1e-12)
        assert p.speed.tokens_per_s == pytest.approx(b.speed.tokens_per_s / 1.2, rel=1e-12)
        assert p.hours == pytest.approx(1.2 * b.hours, rel=1e-12)
        assert p.cost_usd_low == pytest.approx(1.2 * b.cost_usd_low, rel=1e-12)
        assert "times calibrated from 3 runs on h100-sxm (vramfit calibrate): x1.20" in p.notes
    for b, p in a100:
        assert p.speed == b.speed and p.hours == b.hours and not any("times calibrated" in n for n in p.notes)
    assert any(a.startswith("Times calibrated from 3 runs on h100-sxm") for a in calib.assumptions)
    user = plan(SC, calibration=cal, mfu=0.4, **args)  # a user utilisation times it: the factor is not applied
    plain = plan(SC, mfu=0.4, **args)
    assert [p.speed for p in user.plans if p.gpu_id == "h100-sxm"] == [p.speed for p in plain.plans if p.gpu_id == "h100-sxm"]


def test_old_file_without_the_fields_loads(tmp_path):
    p = tmp_path / "old.json"
    p.write_text(json.dumps({"version": 1, "families": {"h100": {
        "runs": 7, "cuda_context_bytes": 900 * MiB, "allocator_fraction": 0.1, "gpus": ["h100-sxm"]}}}))
    fc = load(p).families["h100"]
    assert (fc.runs, fc.speed_factor, fc.speed_runs) == (7, None, 0)
    assert "speed_factor" not in json.loads(save(load(p), tmp_path / "again.json").read_text())["families"]["h100"]
    args = dict(gpu_ids=["h100-sxm"], max_gpus=1, with_changes=False)
    assert [x.speed for x in plan(SC, calibration=load(p), **args).plans] == [x.speed for x in plan(SC, **args).plans]


@pytest.mark.parametrize("factor,runs", [(-1.2, 3), (math.nan, 3), ("fast", 3), (0, 3), (1.2, 0)],
                         ids=["negative", "nan", "string", "zero", "no-runs"])
def test_corrupt_speed_factor_is_one_clear_error(tmp_path, factor, runs):
    p = tmp_path / "bad.json"
    p.write_text(json.dumps({"version": 1, "families": {"h100": {
        "runs": 7, "cuda_context_bytes": 900 * MiB, "allocator_fraction": 0.1, "speed_factor": factor,
        "speed_runs": runs}}}))
    res = runner.invoke(app, ["plan", "--model", SC["model"], "--method", "lora", "--gpu", "h100-sxm"],
                        env={"VRAMFIT_CALIBRATION": str(p), "COLUMNS": "300"})
    assert res.exit_code == 2 and "Traceback" not in res.output
    field = "speed_runs" if runs == 0 else "speed_factor"
    assert f"family 'h100': {field} must be" in " ".join(res.output.split())
