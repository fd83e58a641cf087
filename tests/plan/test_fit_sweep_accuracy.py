"""fit and sweep state how far to trust their figures, as estimate does (issue: an error bar on every answer): the
fit report carries its scenario's ``accuracy``, each sweep point its own (a sweep over num_gpus crosses paths)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from vramfit import estimate
from vramfit.cli.main import app
from vramfit.plan import fit, sweep

LORA = {"model": "meta-llama/Llama-3.1-8B", "method": "lora"}


def test_fit_report_carries_the_scenario_accuracy():
    r = fit({**LORA, "gpu": "rtx4090"}, "rtx4090")
    assert r.to_dict()["accuracy"] == estimate({**LORA, "gpu": "rtx4090"}).accuracy
    out = CliRunner().invoke(app, ["fit", "--model", LORA["model"], "--method", "lora", "--gpu", "rtx4090"])
    assert out.exit_code == 0 and "accuracy: 54 published measurement(s) on this path (hf · lora · none" in " ".join(out.output.split())


def test_each_sweep_point_carries_its_own_path():
    r = sweep(LORA, "num_gpus", [1, 2])
    paths = [p.to_dict()["accuracy"]["path"]["sharding"] for p in r.points]
    assert paths == ["none", "ddp"]
    out = CliRunner().invoke(app, ["sweep", "--model", LORA["model"], "--method", "lora", "--vary", "num_gpus=1,2", "--json"])
    assert [p["accuracy"]["measured_path"] for p in json.loads(out.stdout)["points"]] == [True, True]
    text = " ".join(CliRunner().invoke(app, ["sweep", "--model", LORA["model"], "--method", "lora",
                                             "--vary", "num_gpus=1,2"]).output.split())
    assert "accuracy (num_gpus 1): 54 published" in text and "accuracy (num_gpus 2): 1 published measurement(s) on this path (hf · lora · ddp · none · none), each at an upper-bound" in text
