"""The measuring process(es): one fresh worker per run, torchrun for several ranks (CPU, gloo, fake probe)."""

from __future__ import annotations

import sys

import pytest

from vramfit.measure.launch import merge_ranks, run_worker, worker_command

GiB = 2**30


def _request(scenario: dict, **extra) -> dict:
    return {"scenario": scenario, "steps": 2, "device": "cpu", "probe": "fake",
            "probe_spec": {"allocated": GiB, "reserved": 2 * GiB, "device": 3 * GiB}, **extra}


def test_worker_command():
    one = worker_command(1, "req.json", "out.json", python="py")
    assert one == ["py", "-m", "vramfit.measure.worker", "--request", "req.json", "--output", "out.json"]
    two = worker_command(4, "req.json", "out.json", python="py")
    assert two[:5] == ["py", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=4"]
    assert two[5:7] == ["-m", "vramfit.measure.worker"]


def test_merge_takes_the_highest_figure_and_the_worst_status():
    ranks = [
        {"rank": 1, "status": "oom", "failed_at": "step2.mb1.backward", "error": "OOM", "steps_done": 1,
         "allocated_bytes": 7, "reserved_bytes": 9, "device_bytes": None},
        {"rank": 0, "status": "ok", "steps_done": 3, "allocated_bytes": 5, "reserved_bytes": 10, "device_bytes": 12,
         "environment": {"device": "cuda"}},
    ]
    out = merge_ranks(ranks, 2)
    assert out["status"] == "oom" and out["failed_at"] == "step2.mb1.backward" and out["steps_done"] == 1
    assert (out["allocated_bytes"], out["reserved_bytes"], out["device_bytes"]) == (7, 10, 12)
    assert [r["rank"] for r in out["per_rank"]] == [0, 1] and out["environment"] == {"device": "cuda"}
    lone = merge_ranks([ranks[1] | {"status": "ok"}], 2)
    assert lone["status"] == "error" and lone["ranks_without_result"] == [1]
    assert merge_ranks([], 1)["status"] == "error"


@pytest.mark.slow
def test_single_process_run(tiny):
    out = run_worker(_request(tiny(method="qlora")), timeout_s=300)
    assert out["status"] == "ok", out
    assert out["steps_done"] == 2 and out["allocated_bytes"] == GiB and out["device_bytes"] == 3 * GiB
    assert out["environment"]["memory_probe"] == "fake" and out["num_trainable_params"] > 0


def test_invalid_request_is_a_setup_error():
    out = run_worker({"scenario": "not a mapping"}, timeout_s=120)
    assert out["status"] == "setup-error" and "scenario" in out["error"]


def test_timeout_is_an_error(tiny, monkeypatch):
    import vramfit.measure.launch as launch

    monkeypatch.setattr(launch, "worker_command",
                        lambda n, req, out, python=None: [sys.executable, "-c", "import time; time.sleep(30)"])
    out = run_worker(_request(tiny()), timeout_s=1)
    assert out["status"] == "error" and "timed out after 1 s" in out["error"]


def test_crash_without_result(tiny, monkeypatch):
    import vramfit.measure.launch as launch

    monkeypatch.setattr(launch, "worker_command",
                        lambda n, req, out, python=None: [sys.executable, "-c", "print('segfault-ish'); raise SystemExit(139)"])
    out = run_worker(_request(tiny()), timeout_s=60)
    assert out["status"] == "error" and "code 139" in out["error"] and "segfault-ish" in out["log_tail"]


@pytest.mark.slow
def test_ddp_out_of_memory_on_one_rank_stops_the_run(tiny):
    sc = tiny(method="lora", num_gpus=2, parallelism="ddp", grad_accum=2)
    req = _request(sc, steps=3)
    req["probe_spec"] = {**req["probe_spec"], "oom_at": "step2.mb1.backward", "oom_rank": 1}
    out = run_worker(req, num_gpus=2, timeout_s=300)
    assert out["status"] == "oom" and out["failed_at"] == "step2.mb1.backward" and out["steps_done"] == 1
    assert any(r["rank"] == 1 and r["status"] == "oom" for r in out["per_rank"])


@pytest.mark.slow
def test_fsdp_run_on_two_processes(tiny):
    out = run_worker(_request(tiny(method="full", num_gpus=2, parallelism="fsdp")), num_gpus=2, timeout_s=300)
    assert out["status"] == "ok", out.get("log_tail") or out
    assert [r["rank"] for r in out["per_rank"]] == [0, 1] and out["steps_done"] == 2
    assert any("FSDP2 fully_shard on 2 decoder layers" in a for a in out["assumptions"])
    assert out["environment"]["world_size"] == 2


def test_the_worker_collects_the_wrapped_model_before_destroying_the_process_group(tmp_path, monkeypatch):
    """A wrapped model in a reference cycle (as DDP's is: it outlives its frame until a collection) is gone when the
    worker destroys the process group, so no reducer is released after its group at interpreter exit (the Gloo abort
    of worker.main's comment); the order is checked with a weakref at the moment ``dist.finish`` runs."""
    import gc
    import json
    import weakref

    from vramfit.measure import dist, worker

    class Wrapped:  # stands for DDP: a module that refers to itself through its hooks
        def __init__(self):
            self.hooks = [self]

    seen: dict[str, bool] = {}
    refs: list[weakref.ref] = []

    def execute(request):
        model = Wrapped()
        refs.append(weakref.ref(model))
        return {"status": "ok", "rank": 0}

    monkeypatch.setattr(worker, "execute", execute)
    monkeypatch.setattr(dist, "finish", lambda: seen.setdefault("alive_at_finish", refs[0]() is not None))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    request = tmp_path / "req.json"
    request.write_text(json.dumps({}), encoding="utf-8")
    gc.disable()  # only the worker's own collection may free it
    try:
        assert worker.main(["--request", str(request), "--output", str(tmp_path / "out.json")]) == 0
    finally:
        gc.enable()
    assert seen == {"alive_at_finish": False}
    assert json.loads((tmp_path / "out.json.rank0").read_text(encoding="utf-8"))["status"] == "ok"
