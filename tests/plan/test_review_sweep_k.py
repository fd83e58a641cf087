"""`--vary`'s k: 1,024 for a length in tokens (as --seq-len 4k), 1,000 for a count (as plan's --effective-batch 1k)."""

import json

import pytest
from typer.testing import CliRunner

from vramfit.cli.main import app
from vramfit.plan import parse_vary
from vramfit.plan.inputs import parse_count


@pytest.mark.parametrize(("text", "values"), [
    ("seq_len=1k..4k", [1024, 2048, 4096]),
    ("seq_len=32K", [32768]),
    ("completion_len=1k,2k", [1024, 2048]),
    ("grad_accum=1k", [1000]),
    ("micro_batch_size=1k..2k:500", [1000, 1500, 2000]),
    ("num_gpus=2K", [2000]),
    ("grad_accum=1.5k", [1500]),
])
def test_k_by_key(text, values):
    assert parse_vary(text)[1] == values


def test_counts_read_k_as_plan_does():
    assert parse_vary("grad_accum=1k")[1] == [parse_count("effective_batch", "1k")]


def test_sweep_cli_grad_accum_1k_is_1000():
    r = CliRunner().invoke(app, ["sweep", "--params", "1B", "--vary", "grad_accum=1k", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["values"] == [1000] and d["points"][0]["value"] == 1000
