"""The ranked changes of a multi-node scenario that does not fit its card: their step time spans the nodes' network
(plan/changes.py passed none, and the planner divided by a 0 B/s link: a traceback, HTTP 500 on /api/plan)."""

from vramfit.plan import plan

SCENARIO = {"model": "meta-llama/Llama-3.1-8B", "method": "full", "num_gpus": 16, "num_nodes": 2,
            "parallelism": "zero3", "gpu": "rtx4090"}


def test_changes_of_a_multi_node_scenario_that_does_not_fit_are_timed():
    r = plan(SCENARIO, gpu_ids="rtx4090", max_gpus=16)
    changes = [c for cs in r.changes.values() for c in cs]
    assert changes and any(c.error is None for c in changes)
    timed = [c for c in changes if c.error is None and c.slowdown is not None]
    assert timed and all(0 < c.slowdown < 100 for c in timed)


def test_the_api_plans_it_too():
    from fastapi.testclient import TestClient

    from vramfit.web import create_app

    client = TestClient(create_app(), base_url="http://localhost")
    res = client.post("/api/plan", json={"scenario": SCENARIO, "gpu_ids": ["rtx4090"], "max_gpus": 16})
    assert res.status_code == 200, res.text
    assert res.json()["changes"]
