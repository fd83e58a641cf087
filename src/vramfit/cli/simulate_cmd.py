"""``vramfit simulate``: parse, call :func:`vramfit.sim.simulate`, render next to the estimate.

Registered by :func:`vramfit.cli.main._register_optional_commands`. Imports no torch at module level;
the ``sim`` extra provides it.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import typer

from vramfit.cli.options import build_scenario, with_scenario_options
from vramfit.errors import VramfitError


def simulate(
    scenario_args: dict,
    scenario_file: Path | None,
    json_out: bool = typer.Option(False, "--json", help="Print the result object (with a 'simulation' section) as JSON."),
    full_depth: bool = typer.Option(False, "--full-depth", help="Trace every decoder layer instead of extrapolating from two small depths (full fine-tuning does by default, up to 96 layers)."),
    compare: bool = typer.Option(True, "--compare/--no-compare", help="Show the estimator's figures alongside."),
) -> None:
    """Run one real training step of the real model on fake tensors (CPU, nothing downloaded) and report its memory.

    Same scenario keys and files as `vramfit estimate`; prints the same result plus a phase timeline, the
    largest tensors at the peak, and the estimator's figures with the difference.
    """
    from vramfit.cli.main import console, err_console

    sc = build_scenario(scenario_args, scenario_file)
    try:
        from vramfit.sim import simulate as run_simulate
        from vramfit.sim.engine import resolve_config

        layers = None
        if full_depth:
            from vramfit.sim.build import num_layers_of

            layers = num_layers_of(resolve_config(sc)[1])
        # under --json stdout carries the one JSON document: what the libraries print while they load and run (TRL's
        # DPO trainer imports DeepSpeed, whose logger writes to stdout) goes to stderr
        with contextlib.redirect_stdout(sys.stderr) if json_out else contextlib.nullcontext():
            result = _with_progress(lambda cb: run_simulate(sc, layers=layers, progress=cb), err_console, json_out)
    except ModuleNotFoundError as exc:
        raise VramfitError(f"{exc.name or 'a package it needs'} is not installed: install the sim extra (pip install 'vramfit[sim]')") from None
    estimate = None
    if compare:
        from vramfit.estimate import estimate as run_estimate

        try:
            estimate = run_estimate(result.result.scenario)  # the scenario traced (sim/engine.py as_fsdp2)
        except VramfitError:
            estimate = None
    if json_out:
        data = result.to_dict()
        if estimate is not None:
            data["simulation"]["estimate_peak"] = estimate.peak.to_dict()
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return
    from vramfit.sim.render import render_simulation

    render_simulation(result, estimate, console)


def _with_progress(run, err_console, quiet: bool):  # noqa: ANN001, ANN202
    if quiet or not err_console.is_terminal:
        return run(None)
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=err_console,
                  transient=True) as bar:
        task = bar.add_task("simulating", total=1.0)

        def cb(text: str, fraction: float) -> None:
            bar.update(task, completed=fraction, description=f"simulating: {text}")

        return run(cb)


def register(app: typer.Typer) -> None:
    """Add ``simulate`` to the ``vramfit`` app."""
    from vramfit.cli.main import user_errors

    app.command("simulate")(user_errors(with_scenario_options(simulate)))
