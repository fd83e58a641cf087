"""A sweep point that fits a card only by paging its paged optimizer state out says so (JSON ``paging``, the table's
"paging"), as estimate, fit and plan do (review of 2026-12-05: a bare "fits" at 131.8 GiB on an H100)."""

from typer.testing import CliRunner

from vramfit.cli.main import app
from vramfit.gpus import get_gpu
from vramfit.plan.sweep import sweep
from vramfit.plan.verdict import estimate_fits

RUN = {"model": "meta-llama/Llama-3.1-8B", "method": "full", "optimizer": "paged-adamw", "gradient_checkpointing": "full"}


def test_the_point_states_the_paging_estimate_states():
    s = sweep(RUN, "micro_batch_size", [1, 16], cards=["h100-sxm", "h200-sxm"])
    p16 = next(p for p in s.points if p.value == 16)
    card = estimate_fits({**RUN, "micro_batch_size": 16}, [get_gpu("h100-sxm")]).fits[0]
    assert card.fits and card.paging_bytes > 50 * 2**30
    assert p16.fits["h100-sxm"] and p16.paging == {"h100-sxm": card.paging_bytes}
    assert p16.to_dict()["paging"] == {"h100-sxm": card.paging_bytes}
    out = CliRunner().invoke(app, ["sweep", "--model", RUN["model"], "--method", "full", "--optimizer", "paged-adamw",
                                   "--gradient-checkpointing", "full", "--vary", "micro_batch_size=1,16",
                                   "--cards", "h100-sxm,h200-sxm"], env={"COLUMNS": "250"})
    assert out.exit_code == 0, out.output
    assert "paging = fits only with paged optimizer state in host RAM" in out.stdout
    assert "paging" in next(line for line in out.stdout.splitlines() if line.startswith("│") and " 16 " in line)
