"""Calibration: the estimator's error per GPU family and method, implied overheads, fit verdicts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from vramfit.errors import ScenarioError
from vramfit.measure.calibration import calibrate, signed_error

GiB = 2**30
MiB = 2**20


def fixed_estimator(alloc=10 * GiB, reserved=11 * GiB, device=12 * GiB, fail_for=()):
    def est(scenario):
        if scenario.get("model") in fail_for:
            raise ScenarioError("model", "offline")
        return SimpleNamespace(peak=SimpleNamespace(allocated_bytes=alloc, reserved_bytes=reserved, device_bytes=device))

    return est


@pytest.mark.parametrize("metric,measured,expected", [
    ("allocated", 8 * GiB, 0.25),
    ("reserved", 11 * GiB, 0.0),
    ("device", 16 * GiB, -0.25),
    ("unknown", 11 * GiB, 0.0),
    ("unknown", 8 * GiB, 0.25),
    ("unknown", 16 * GiB, -0.25),
], ids=["allocated", "reserved", "device", "unknown-inside", "unknown-below", "unknown-above"])
def test_signed_error(metric, measured, expected):
    est = {"allocated_bytes": 10 * GiB, "reserved_bytes": 11 * GiB, "device_bytes": 12 * GiB}
    assert signed_error(metric, measured, est) == pytest.approx(expected)


def test_errors_are_grouped_by_gpu_family_and_method(make_record):
    recs = [
        make_record(allocated_bytes=8 * GiB),  # h100 lora: +25 %
        make_record(allocated_bytes=10 * GiB),  # h100 lora: 0 %
        make_record(scenario={"model": "meta-llama/Llama-3.2-1B", "method": "full"},
                    environment={"gpu_name": "NVIDIA A100-SXM4-80GB", "gpu_total_bytes": 80 * GiB}),
    ]
    rep = calibrate(recs, fixed_estimator())
    assert rep.runs == rep.scored == 3 and not rep.skipped
    keys = [(g.gpu_family, g.method) for g in rep.groups]
    assert keys == [("a100", "full"), ("h100", "lora")]
    h100 = rep.groups[1].errors["allocated"]
    assert h100.n == 2 and h100.mean_signed == pytest.approx(0.125) and h100.worst == pytest.approx(0.25)
    assert rep.groups[1].errors["device"].mean_abs == pytest.approx(0.0)


def test_overheads_implied_by_single_gpu_runs(make_record):
    recs = [
        make_record(allocated_bytes=10 * GiB, reserved_bytes=10 * GiB + 500 * MiB, device_bytes=11 * GiB),
        make_record(allocated_bytes=10 * GiB, reserved_bytes=10 * GiB + 300 * MiB, device_bytes=10 * GiB + 900 * MiB),
        make_record(scenario={"model": "meta-llama/Llama-3.2-1B", "optimizer": "paged-adamw-8bit"}),  # left out
        make_record(scenario={"model": "meta-llama/Llama-3.2-1B", "num_gpus": 2, "parallelism": "ddp"}),  # NCCL
    ]
    rep = calibrate(recs, fixed_estimator())
    (ov,) = rep.overheads
    assert ov.gpu_family == "h100" and ov.runs == 2
    assert ov.context_median_bytes == 562 * MiB  # median of 524 and 600 MiB
    assert ov.context_min_bytes == 524 * MiB and ov.context_max_bytes == 600 * MiB
    assert ov.allocator_median_bytes == 400 * MiB
    assert ov.allocator_median_fraction == pytest.approx(400 / 10240)
    assert ov.estimator_allocator_median_bytes == 1 * GiB
    from vramfit.estimate.constants import CUDA_CONTEXT

    assert ov.estimator_context_bytes == CUDA_CONTEXT.value  # the scenarios name no card: the general figure


def test_out_of_memory_runs_score_the_fit_verdict(make_record):
    oom = dict(status="oom", allocated_bytes=None, reserved_bytes=None, device_bytes=None)
    recs = [
        make_record(**oom),  # estimate 12 GiB on an 80 GiB card said it fits: missed
        make_record(**oom, environment={"gpu_family": "rtx4090", "gpu_total_bytes": 10 * GiB}),  # correct
        make_record(environment={"gpu_family": "rtx4090", "gpu_total_bytes": 10 * GiB}),  # false alarm
        make_record(),  # correct
    ]
    rep = calibrate(recs, fixed_estimator())
    by = {g.gpu_family: g for g in rep.groups}
    assert (by["h100"].fit_correct, by["h100"].fit_missed_oom, by["h100"].fit_false_alarm) == (1, 1, 0)
    assert (by["rtx4090"].fit_correct, by["rtx4090"].fit_missed_oom, by["rtx4090"].fit_false_alarm) == (1, 0, 1)
    assert by["h100"].oom_runs == 1 and rep.scored == 2


def test_stored_estimate_is_the_fallback(make_record):
    offline = {"model": "someone/private-model", "method": "lora"}
    recs = [make_record(scenario=offline, allocated_bytes=5 * GiB,
                        estimate={"allocated_bytes": 4 * GiB, "reserved_bytes": 5 * GiB, "device_bytes": 6 * GiB}),
            make_record(scenario=offline, estimate=None),
            make_record(status="error", allocated_bytes=None, reserved_bytes=None, device_bytes=None)]
    rep = calibrate(recs, fixed_estimator(fail_for=("someone/private-model",)))
    assert rep.scored == 1 and rep.stored_estimates == 1
    assert rep.groups[0].errors["allocated"].mean_signed == pytest.approx(-0.2)
    reasons = dict(rep.skipped)
    assert "cannot estimate" in reasons[recs[1].id] and reasons[recs[2].id] == "status error"


def test_real_estimator_and_json_report(make_record):
    rep = calibrate([make_record()])
    data = rep.to_dict()
    assert data["scored"] == 1 and data["groups"][0]["gpu_family"] == "h100"
    assert set(data["groups"][0]["errors"]) == {"allocated", "reserved", "device"}


def test_overheads_of_runs_on_hopper_and_on_a_card_this_catalog_lacks(make_record):
    """The estimator's context per run's card: the measured sm90 figure for an H200 run; a run recorded elsewhere on
    a user's GPU row this machine lacks takes the general figure (it was a ScenarioError traceback: unknown GPU)."""
    from vramfit.estimate.constants import CUDA_CONTEXT, CUDA_CONTEXT_HOPPER

    figs = dict(allocated_bytes=10 * GiB, reserved_bytes=10 * GiB + 500 * MiB, device_bytes=11 * GiB + 300 * MiB)
    hopper = calibrate([make_record(scenario={"model": "meta-llama/Llama-3.2-1B", "gpu": "h200"}, **figs)],
                       fixed_estimator())
    assert hopper.overheads[0].estimator_context_bytes == CUDA_CONTEXT_HOPPER.value
    lab = calibrate([make_record(scenario={"model": "meta-llama/Llama-3.2-1B", "gpu": "my-lab-card"}, **figs)],
                    fixed_estimator())
    assert lab.overheads[0].estimator_context_bytes == CUDA_CONTEXT.value
    assert lab.overheads[0].context_median_bytes == 824 * MiB  # 11 GiB + 300 MiB - (10 GiB + 500 MiB)
