"""``measure()`` end to end in this process (tiny model, CPU, fake probe), the record and the store."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from vramfit.errors import ScenarioError  # noqa: E402
from vramfit.measure.probe import FakeProbe  # noqa: E402
from vramfit.measure.records import SOURCE_ID, validate  # noqa: E402
from vramfit.measure.runner import MeasureError, differences, measure, simulation_figures  # noqa: E402
from vramfit.measure.worker import execute  # noqa: E402
from vramfit.scenario import parse_scenario  # noqa: E402

GiB = 2**30


def test_record_holds_figures_estimate_and_environment(tiny, store):
    rec = measure(tiny(method="lora", micro_batch_size=2), steps=3, device="cpu", in_process=True,
                  probe=FakeProbe(allocated=GiB, reserved=2 * GiB, device=3 * GiB), store=store, simulate=False,
                  notes="unit test")
    assert validate(rec) is rec
    assert rec.status == "ok" and rec.steps_done == 3
    assert (rec.allocated_bytes, rec.reserved_bytes, rec.device_bytes) == (GiB, 2 * GiB, 3 * GiB)
    assert rec.step_time_s > 0 and rec.tokens_per_s == pytest.approx(2 * 32 / rec.step_time_s)
    assert rec.estimate["allocated_bytes"] > 0 and rec.estimate["num_trainable_params"] > 0
    assert rec.simulation is None
    env = rec.environment
    assert env["device"] == "cpu" and env["memory_probe"] == "fake"
    assert {"torch", "transformers", "peft", "bitsandbytes"} <= {k for k, v in env["packages"].items() if v}
    assert rec.source_id == SOURCE_ID and "3 steps" in rec.source and rec.notes == "unit test"
    assert len(rec.details["step_times_s"]) == 3 and rec.details["assumptions"]
    assert store.get(rec.id).to_dict() == rec.to_dict()
    d = differences(rec)
    assert d["allocated"]["estimate"] == pytest.approx((rec.estimate["allocated_bytes"] - GiB) / GiB)
    assert d["allocated"]["simulation"] is None


def test_out_of_memory_is_stored_with_the_last_good_step(tiny, store):
    rec = measure(tiny(method="full"), steps=4, device="cpu", in_process=True,
                  probe=FakeProbe(oom_at="step3.mb1.backward"), store=store, simulate=False)
    assert rec.status == "oom" and rec.steps_done == 2
    assert rec.details["failed_at"] == "step3.mb1.backward"
    assert rec.notes.startswith("Out of memory at step3.mb1.backward after 2 complete step(s)")
    assert store.list(status="oom")[0].id == rec.id


def test_simulation_is_reported_next_to_the_measurement(tiny):
    rec = measure(tiny(method="lora"), steps=1, device="cpu", in_process=True, probe=FakeProbe(), simulate=True)
    sim = rec.simulation
    if sim is None:  # the simulator is another part of the project; its absence must not lose the run
        assert any("simulation" in r for r in rec.details["remarks"])
    else:
        assert sim["allocated_bytes"] > 0 and sim["reserved_bytes"] >= sim["allocated_bytes"]


def test_an_fsdp1_qlora_run_says_its_simulation_traced_fsdp2(tiny):
    """The simulator traces FSDP1 itself for an unquantized model (sim/fsdp.py traces_fsdp1), QLoRA under FSDP1 as
    accelerate's FSDP2 (sim/engine.py as_fsdp2): the record of such a run keeps the simulated figures and says which
    FSDP they are of; a full fine-tuning or LoRA FSDP1 run's needs no remark."""
    figures, why = simulation_figures(parse_scenario(tiny(method="qlora", num_gpus=2, parallelism="fsdp")))
    if figures is None:  # the simulator is another part of the project
        pytest.skip(why)
    assert figures["allocated_bytes"] > 0
    assert why.startswith("simulation: Traced with FSDP2 as accelerate prepares it (fsdp_version 2)")
    for keys in ({"method": "full", "fsdp_version": "2"}, {"method": "full"}, {"method": "lora"}):
        same = parse_scenario(tiny(num_gpus=2, parallelism="fsdp", **keys))
        assert simulation_figures(same)[1] == ""


def test_simulation_failure_is_a_remark_not_a_crash(monkeypatch):
    import vramfit.sim as sim

    def boom(_):
        raise RuntimeError("fake tensors exploded")

    monkeypatch.setattr(sim, "simulate", boom, raising=False)
    figures, why = simulation_figures(parse_scenario({"model": "meta-llama/Llama-3.2-1B"}))
    assert figures is None and "fake tensors exploded" in why


@pytest.mark.parametrize("keys,kwargs,error,match", [
    ({"parallelism": "zero2", "num_gpus": 2}, {}, ScenarioError, "DeepSpeed"),
    ({}, {"steps": 0}, MeasureError, "steps"),
    ({}, {"device": "tpu"}, MeasureError, "device"),
    ({"num_gpus": 2}, {"in_process": True}, MeasureError, "one process per GPU"),
], ids=["zero", "steps", "device", "multi-gpu-in-process"])
def test_requests_that_cannot_run_raise_before_running(tiny, keys, kwargs, error, match):
    with pytest.raises(error, match=match):
        measure(tiny(**keys), **{"device": "cpu", "in_process": True, "simulate": False, **kwargs})


def test_setup_errors_store_nothing(tiny, store, tmp_path):
    store.prepare()
    with pytest.raises(MeasureError, match="weights"):
        measure(tiny(), steps=1, device="cpu", in_process=True, weights=tmp_path / "missing", store=store,
                simulate=False)
    assert store.count() == 0


def test_worker_refuses_cuda_without_a_gpu(tiny):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present")
    out = execute({"scenario": tiny(), "steps": 1, "device": "cuda"})
    assert out["status"] == "setup-error" and "no CUDA GPU" in out["error"]


def test_worker_checks_the_process_count(tiny):
    out = execute({"scenario": tiny(num_gpus=2), "steps": 1, "device": "cpu"})
    assert out["status"] == "setup-error" and "2 but 1 processes" in out["error"]


def test_out_of_memory_while_building_is_a_result(tiny, monkeypatch):
    import torch

    import vramfit.measure.build as build

    def oom(*a, **k):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 16.00 GiB")

    monkeypatch.setattr(build, "build_run", oom)
    rec = measure(tiny(), steps=2, device="cpu", in_process=True, probe=FakeProbe(), simulate=False)
    assert rec.status == "oom" and rec.steps_done == 0 and rec.details["failed_at"] == "build"
