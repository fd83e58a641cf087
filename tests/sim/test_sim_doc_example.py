"""docs/simulate.md's example is this command's real output (all but the run time, which varies)."""

import re
from pathlib import Path

from typer.testing import CliRunner

from vramfit.cli.main import app

DOC = Path(__file__).resolve().parents[2] / "docs" / "simulate.md"
ARGS = ["simulate", "--model", "meta-llama/Llama-3.2-1B", "--method", "lora", "--seq-len", "1024"]


def _lines(text: str) -> list[str]:
    return [re.sub(r" · [\d.]+ s · ", " · N s · ", line.rstrip()) for line in text.splitlines()]


def test_the_documented_simulation_is_the_commands_output():
    doc = DOC.read_text(encoding="utf-8")
    start = doc.index("```\nmeta-llama/Llama-3.2-1B · lora") + 4
    shown = _lines(doc[start:doc.index("```", start)])
    res = CliRunner().invoke(app, ARGS, env={"COLUMNS": "100"}, terminal_width=100)
    assert res.exit_code == 0, res.output
    assert _lines(res.stdout)[:len(shown)] == shown
    # and the paragraph's figures are the table's
    assert "is 0.35 GiB above the simulation's" in " ".join(doc.split()) and "+0.35 (+5.2 %)" in res.stdout


def test_the_recorded_cpu_measurement_shows_todays_estimate_and_simulation():
    """docs/measure.md's `measure --device cpu` example is recorded once (run id, date and times differ on every run);
    its estimate and simulation columns are today's figures for the same scenario."""
    import json

    from vramfit import estimate

    doc = (DOC.parent / "measure.md").read_text(encoding="utf-8")
    rows = {m[0]: (float(m[1]), float(m[2])) for m in re.findall(
        r"│ (allocated|reserved|device)\s+│\s+—\s+│\s+([\d.]+)\s+│\s+—\s+│\s+([\d.]+)\s+│", doc)}
    sc = {"model": "meta-llama/Llama-3.2-1B", "method": "lora", "seq_len": 128}
    est = estimate(sc).peak
    res = CliRunner().invoke(app, ["simulate", "--model", sc["model"], "--method", "lora", "--seq-len", "128", "--json"])
    sim = json.loads(res.stdout)["peak"]
    for counter in ("allocated", "reserved", "device"):
        shown_est, shown_sim = rows[counter]
        assert shown_est == round(getattr(est, f"{counter}_bytes") / 2**30, 2), counter
        assert shown_sim == round(sim[f"{counter}_bytes"] / 2**30, 2), counter
