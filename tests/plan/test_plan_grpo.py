"""GRPO plans (issue 15): the user's scenario is plannable, a vLLM server takes cards of the node and is
paid for, colocation is ranked against that split, and the bad combinations answer one line naming the
keys (library, CLI exit 2, HTTP 422)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from vramfit.cli.main import app
from vramfit.errors import ScenarioError
from vramfit.gpus import get_gpu
from vramfit.plan import plan
from vramfit.plan.vllm_split import VLLM_SERVE_UTILIZATION, server_gpus


@pytest.fixture(scope="module")
def client():
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from vramfit.web import create_app

    with TestClient(create_app(), base_url="http://localhost") as c:
        yield c


GRPO = {"model": "Qwen/Qwen2.5-7B", "method": "lora", "stage": "grpo", "seq_len": 2048}
CARDS = ["rtx4090", "h100-sxm"]


def test_the_default_grpo_scenario_is_planned_at_the_effective_batch():
    """No micro_batch_size or grad_accum given: TRL's num_generations 8 divides the planned batch of 16."""
    r = plan(GRPO, gpu_ids=CARDS, effective_batch=16)
    assert r.plans and all(p.effective_batch == 16 for p in r.plans)
    assert all(p.scenario["num_generations"] == 8 and p.scenario["stage"] == "grpo" for p in r.plans)


def test_server_cards_are_on_the_node_and_paid_for():
    r = plan({**GRPO, "generation": "vllm-server"}, gpu_ids=CARDS, effective_batch=16, dataset_tokens="10M")
    assert r.plans
    for p in r.plans:
        # 7.6B parameters in bf16 = 15.2 GB: one card of either kind holds them in 0.9 of its memory
        assert p.billed_gpus == p.num_gpus + 1 and p.num_gpus + 1 <= 8
        assert any("vLLM server" in n for n in p.notes)
        assert p.usd_per_million_tokens == pytest.approx(
            p.usd_per_gpu_hour_low * (p.num_gpus + 1) / (p.speed.tokens_per_s * 3600) * 1e6)
    assert max(p.num_gpus for p in r.plans) == 4  # 8 training cards would leave none for the server


def test_server_size_is_the_fewest_cards_holding_the_weights():
    """16-bit weights within trl vllm-serve's 0.9 share (trl/scripts/vllm_serve.py): 70B (140 GB) takes
    2 H100s (2 x 0.9 x 79.6 GiB) and no number up to 4 of 24 GB cards."""
    h100, rtx = get_gpu("h100-sxm"), get_gpu("rtx4090")
    assert server_gpus(7_000_000_000, h100) == 1
    assert 140e9 / 2 < VLLM_SERVE_UTILIZATION * h100.usable_bytes < 140e9
    assert server_gpus(70_000_000_000, h100) == 2
    assert server_gpus(70_000_000_000, rtx) is None


def test_colocated_vllm_is_ranked_against_the_server_split():
    r = plan({**GRPO, "generation": "vllm-colocate", "vllm_sleep": True}, gpu_ids=CARDS, effective_batch=16,
             dataset_tokens="10M")
    kinds = {p.scenario["generation"] for p in r.plans}
    assert kinds == {"vllm-colocate", "vllm-server"}
    costs = [p.usd_per_million_tokens for p in r.plans]
    assert costs == sorted(costs)
    colocated = next(p for p in r.plans if p.scenario["generation"] == "vllm-colocate")
    # the share of each card is the card's own: 0.3 x its usable memory
    assert colocated.scenario["vllm_gpu_memory_utilization"] == 0.3


BAD = [
    ({**GRPO, "generation": "vllm-server"}, {"max_gpus": 1}, "generation", "vllm-server runs vLLM on GPUs of its own"),
    (GRPO, {"effective_batch": 12}, "effective_batch", "multiple of num_generations (8)"),
    ({**GRPO, "stage": "orpo", "reference": "copy"}, {}, "reference", "reference-free"),
]


@pytest.mark.parametrize("scenario,options,key,fragment", BAD, ids=["server-one-gpu", "batch-vs-generations",
                                                                    "reference-free"])
def test_bad_combinations_name_their_keys(scenario, options, key, fragment, client):
    with pytest.raises(ScenarioError) as err:
        plan(scenario, gpu_ids=CARDS, **{"effective_batch": 16, **options})
    assert err.value.key == key and fragment in str(err.value)
    r = client.post("/api/plan", json={"scenario": scenario, "gpu_ids": CARDS, **{"effective_batch": 16, **options}})
    assert r.status_code == 422 and r.json()["key"] == key
    args = ["plan", "--model", scenario["model"], "--method", "lora", "--stage", scenario["stage"], "--cards",
            ",".join(CARDS), "--effective-batch", str(options.get("effective_batch", 16))]
    args += ["--generation", scenario["generation"]] if "generation" in scenario else []
    args += ["--reference", scenario["reference"]] if "reference" in scenario else []
    args += ["--max-gpus", str(options["max_gpus"])] if "max_gpus" in options else []
    out = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert out.exit_code == 2, out.output
    assert f"{key}:" in out.output and "Traceback" not in out.output


def test_fit_micro_batch_is_what_estimate_takes_with_the_micro_batch_alone():
    """Given a micro-batch and no accumulation, GRPO takes the least accumulation that holds whole groups of
    num_generations completions (stage_keys.check_stage_keys): `estimate --micro-batch-size N` then takes the N `fit`
    answers, at the accumulation fit kept (it says so), and the default micro-batch written out is the default."""
    from vramfit.plan import fit as fit_card
    from vramfit.scenario import parse_scenario

    runner = CliRunner()
    base = {"model": "meta-llama/Llama-3.1-8B", "method": "lora", "stage": "grpo", "gradient_checkpointing": "full"}
    assert parse_scenario(base).grad_accum == 8
    assert parse_scenario({**base, "micro_batch_size": 1}) == parse_scenario(base)
    assert [parse_scenario({**base, "micro_batch_size": m}).grad_accum for m in (2, 4, 7, 8, 12)] == [4, 2, 8, 1, 2]
    with pytest.raises(ScenarioError, match="num_generations: must divide"):
        parse_scenario({**base, "micro_batch_size": 7, "grad_accum": 1})  # both given: checked as written
    r = fit_card({**base, "gpu": "a100-80gb-sxm"}, "a100-80gb-sxm")
    mb, accum = r.max_micro_batch, r.max_micro_batch_grad_accum
    assert mb and mb % 8 and accum == parse_scenario({**base, "micro_batch_size": mb}).grad_accum == 8  # kept at 8
    args = ["--model", base["model"], "--method", "lora", "--stage", "grpo", "--gradient-checkpointing", "full",
            "--gpu", "a100-80gb-sxm"]
    out = runner.invoke(app, ["fit", *args], env={"COLUMNS": "200"}).stdout
    assert f"largest micro-batch at seq 2048: {mb} × 8 accumulation (--grad-accum 8) (needs" in out
    e = runner.invoke(app, ["estimate", *args, "--micro-batch-size", str(mb), "--json"])
    assert e.exit_code == 0, e.output
    assert next(f["verdict"] for f in json.loads(e.stdout)["fits"] if f["gpu_id"] == "a100-80gb-sxm") == "fits"
