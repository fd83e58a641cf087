"""``vramfit measure``, ``vramfit runs …`` and ``vramfit calibrate``: parse, call :mod:`vramfit.measure`, render.

Registered by :func:`vramfit.cli.main._register_optional_commands`. Imports neither torch nor
SQLAlchemy at module level; the ``measure`` extra provides them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from vramfit import limits
from vramfit.cli.options import build_scenario, with_scenario_options
from vramfit.errors import ScenarioError, VramfitError
from vramfit.safe_input import one_line, path_kind, shown, user_path, writable_file
from vramfit.scenario import Method

DB_HELP = "Runs database: a SQLAlchemy URL (postgresql+psycopg://…) or a SQLite file path. Default: $VRAMFIT_DB, else a SQLite file in the user data directory."

runs_app = typer.Typer(help="List, show, export and import stored measurement runs.", no_args_is_help=True)


def _store(db: str | None):
    from vramfit.measure.store import RunStore

    return RunStore(_check_db(db))


def _check_db(db: str | None) -> str | None:
    """A --db value checked before the store sees it: length, ``~user`` paths, URL syntax."""
    if db is None:
        return None
    if len(db) > limits.MAX_DB_CHARS or "\x00" in db:
        raise ScenarioError("db", f"must be a database URL or file path of at most {limits.MAX_DB_CHARS:,} "
                            "characters (MAX_DB_CHARS)")
    if "://" not in db:
        user_path("db", db)  # ~nosuchuser, names longer than the file system allows
        return db
    try:
        from sqlalchemy.engine import make_url

        make_url(db)
    except ModuleNotFoundError:
        return db  # the store reports the missing extra
    except Exception as exc:  # noqa: BLE001 - ArgumentError, ValueError (a malformed IPv6 host) ...
        raise ScenarioError("db", f"is not a valid database URL ({one_line(str(exc), 120)})") from None
    return db


def _check_text(key: str, value: str | None) -> str | None:
    """A run id or filter of at most MAX_ID_CHARS characters (the store is never asked for more)."""
    if value is not None and len(value) > limits.MAX_ID_CHARS:
        raise ScenarioError(key, f"{shown(value)} is longer than {limits.MAX_ID_CHARS} characters (MAX_ID_CHARS)")
    return value


def _consoles():
    from vramfit.cli.main import console, err_console

    return console, err_console


def _user_errors(func):
    from vramfit.cli.main import user_errors

    return user_errors(func)


def _report_bad_rows(st) -> None:
    """One line on stderr for stored runs left out because they break the record schema."""
    if not st.bad_rows:
        return
    _, err_console = _consoles()
    first = "; ".join(f"{rid[:40]}: {why[:120]}" for rid, why in st.bad_rows[:3])
    more = f" (and {len(st.bad_rows) - 3} more)" if len(st.bad_rows) > 3 else ""
    err_console.print(f"warning: {len(st.bad_rows)} stored run(s) break the record schema and were left out: "
                      f"{first}{more}", highlight=False, markup=False)


def _missing_extra(exc: ModuleNotFoundError) -> VramfitError:
    return VramfitError(f"{exc.name or 'a package it needs'} is not installed: install the measure extra (pip install 'vramfit[measure]')")


def measure(
    scenario_args: dict,
    scenario_file: Path | None,
    steps: int = typer.Option(10, "--steps", min=1, max=limits.MAX_MEASURE_STEPS,
                              help="Optimizer steps to run (the first is a warm-up for timing)."),
    weights: Path | None = typer.Option(None, "--weights", help="Load weights from this local directory (from_pretrained, local files only) instead of random weights."),
    device: str = typer.Option("cuda", "--device", help="cuda (real figures) or cpu (runs the harness, no memory figures)."),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    store: bool = typer.Option(True, "--store/--no-store", help="Store the run in the database."),
    simulate: bool = typer.Option(True, "--simulate/--no-simulate", help="Also run the simulator (CPU) for comparison."),
    notes: str = typer.Option("", "--notes", help="Free text stored with the run."),
    timeout: float | None = typer.Option(None, "--timeout", help="Stop the measuring process after this many seconds (recorded as an error)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show the measuring process's output."),
    json_out: bool = typer.Option(False, "--json", help="Print the run record as JSON."),
) -> None:
    """Run the scenario's training steps on this machine's GPU(s) and compare with the estimate.

    Builds the model from its config with random weights (nothing downloaded), runs --steps optimizer
    steps on random tokens of exactly seq_len, and reports max_memory_allocated, max_memory_reserved,
    the device-level peak (NVML), step time and tokens/s next to the estimate and the simulation.
    Out of memory is a result: it is stored with the last good step. Multi-GPU scenarios start one
    process per GPU with torchrun (ddp, fsdp, fsdp-grad-op).
    """
    console, err_console = _consoles()
    if timeout is not None:
        from vramfit.scenario import positive_number

        timeout = positive_number("timeout", timeout, what="a positive number of seconds")
    if device not in ("cuda", "cpu"):  # checked before the progress line, so an error is one line
        raise ScenarioError("device", f"unknown value {shown(device)}", ["cuda", "cpu"])
    if weights is not None and path_kind("weights", user_path("weights", weights)) != "dir":
        raise ScenarioError("weights", f"not a directory: {shown(str(weights))}")
    _check_db(db)
    sc = build_scenario(scenario_args, scenario_file)
    try:
        from vramfit.measure.runner import measure as run_measure
        from vramfit.measure.runner import preflight

        preflight(sc, device)  # the scenario, the model and the GPUs: an error is one line, before the progress line
        run_store = _store(db) if store else None
        if run_store is not None:
            run_store.prepare()  # open (and create) the database before spending GPU time
        if not json_out:
            err_console.print(f"measuring {sc.model or sc.params} for {steps} step(s) on {sc.num_gpus} {device} "
                              "device(s) …", highlight=False, markup=False)
        rec = run_measure(sc, steps=steps, device=device, weights=weights, store=run_store, simulate=simulate,
                          notes=notes, timeout_s=timeout, stream=verbose)
    except ModuleNotFoundError as exc:
        raise _missing_extra(exc) from None
    if json_out:
        sys.stdout.write(json.dumps(rec.to_dict(), indent=2) + "\n")
    else:
        from vramfit.measure.report import render_run

        render_run(rec, console, db=run_store.redacted_url if run_store is not None else None)
    if rec.status == "error":
        raise typer.Exit(1)


@runs_app.command("list")
def runs_list(
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    model: str | None = typer.Option(None, "--model", help="Only runs whose model contains this text."),
    status: str | None = typer.Option(None, "--status", help="ok, oom or error."),
    method: str | None = typer.Option(None, "--method", help="full, lora or qlora."),
    gpu: str | None = typer.Option(None, "--gpu", help="GPU family or name (a100, h100, rtx4090 …)."),
    limit: int = typer.Option(50, "--limit", min=1, max=limits.MAX_LIST_LIMIT,
                              help=f"At most this many runs, newest first (at most {limits.MAX_LIST_LIMIT:,})."),
    json_out: bool = typer.Option(False, "--json", help="Print the records as JSON Lines."),
) -> None:
    """List stored runs, newest first."""
    from vramfit.measure.records import STATUSES

    if status is not None and status not in STATUSES:
        raise VramfitError(f"status: unknown value {shown(status)} (valid values: {', '.join(STATUSES)})")
    methods = [m.value for m in Method]
    if method is not None and method not in methods:  # the records store the scenario's method, one of these
        raise VramfitError(f"method: unknown value {shown(method)} (valid values: {', '.join(methods)})")
    _check_text("model", model), _check_text("gpu", gpu)
    st = _store(db)
    recs = st.list(model=model, status=status, method=method, gpu=gpu, limit=limit + 1)  # one more: are there more?
    more, recs = len(recs) > limit, recs[:limit]
    _report_bad_rows(st)
    if json_out:
        sys.stdout.write("".join(json.dumps(r.to_dict()) + "\n" for r in recs))
        return
    from vramfit.measure.report import render_runs

    console, _ = _consoles()
    cut = f" (the newest {limit}; more match: raise --limit)" if more else ""
    render_runs(recs, console, f"{len(recs)} run(s) in {st.redacted_url}{cut}")


@runs_app.command("show")
def runs_show(
    run_id: str = typer.Argument(..., help="Run id, or a unique prefix of it."),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print the record as JSON."),
) -> None:
    """Show one run: figures, estimate, simulation, environment and assumptions."""
    rec = _store(db).get(_check_text("run_id", run_id))
    if json_out:
        sys.stdout.write(json.dumps(rec.to_dict(), indent=2) + "\n")
        return
    from vramfit.measure.report import render_run

    console, _ = _consoles()
    render_run(rec, console, full=True)


@runs_app.command("export")
def runs_export(
    path: str = typer.Argument("-", help="Output JSON Lines file, or - for stdout."),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    metric: str = typer.Option("all", "--metric", help="Counter(s) to write: all, allocated, reserved, device or unknown."),
    model: str | None = typer.Option(None, "--model", help="Only runs whose model contains this text."),
    fmt: str = typer.Option("measured", "--format", help="measured: the benchmarks/data/measured/ format, one line per counter; records: whole run records, one a line (out-of-memory runs included)."),
) -> None:
    """Write runs as JSON Lines in the format of benchmarks/data/measured/ (one line per counter)."""
    from vramfit.measure.records import METRICS, dumps_lines, dumps_records

    if metric != "all" and metric not in METRICS:
        raise VramfitError(f"metric: unknown value {shown(metric)} (valid values: all, {', '.join(METRICS)})")
    if fmt not in ("measured", "records"):
        raise VramfitError(f"format: unknown value {shown(fmt)} (valid values: measured, records)")
    out = None if path == "-" else writable_file("path", path)  # checked before the store is read
    st = _store(db)
    if out is not None:
        _not_the_database(out, st.sqlite_path)
    recs = list(reversed(st.list(model=_check_text("model", model))))  # oldest first: appending exports stays in order
    _report_bad_rows(st)
    if fmt == "records":
        text, n_lines, skipped = dumps_records(recs), len(recs), 0
    else:
        text, n_lines, skipped = dumps_lines(recs, METRICS if metric == "all" else (metric,))
    if out is None:
        sys.stdout.write(text)
    else:
        from vramfit.safe_input import holds_other, write_text_file

        if holds_other(out, text):  # the same export written again is no loss; anything else is the user's
            raise ScenarioError("path", f"{shown(str(out))} already exists with other content; vramfit never writes "
                                "over a file: give another file name or move it")
        write_text_file("path", out, text)
    _, err_console = _consoles()
    err_console.print(f"{n_lines} line(s) from {len(recs) - skipped} run(s)"
                      + (f"; {skipped} run(s) without figures (out of memory, errors, cpu) not exported: "
                         "--format records keeps them" if skipped else "")
                      + ("" if path == "-" else f" → {path}"), highlight=False)


def _not_the_database(out: Path, db_file: Path | None) -> None:
    """Refuse an export path that is the runs database's own SQLite file (the export would replace it)."""
    if db_file is None:
        return
    try:
        same = out.resolve() == db_file.resolve() or (out.exists() and db_file.exists() and out.samefile(db_file))
    except (OSError, RuntimeError, ValueError):
        same = False
    if same:
        raise ScenarioError("path", f"{shown(str(out))} is the runs database itself ({shown(str(db_file))}); "
                            "give another file for the export")


@runs_app.command("import")
def runs_import(
    path: Path = typer.Argument(..., help="JSON Lines file in the measured/ format (from `runs export` or benchmarks/data/measured/)."),
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
) -> None:
    """Import runs from JSON Lines: every line is checked; all are stored, or none."""
    from vramfit.measure.records import iter_runs, read_lines

    if path.is_dir():
        raise VramfitError(f"path: {shown(str(path))} is a directory; give one JSON Lines file (from `runs export` "
                           "or benchmarks/data/measured/)")
    if not path.is_file():
        raise VramfitError(f"file not found: {shown(str(path))}")
    st = _store(db)  # the URL checked; nothing opened or created yet
    try:  # read line by line, twice: the whole file checked before the database is created or opened for writing,
        for _ in iter_runs(read_lines(path)):  # then stored in one transaction; memory stays bounded either way
            pass
        added, skipped = st.add_many(iter_runs(read_lines(path)), checked=True)
    except OSError as exc:
        raise VramfitError(f"cannot read {str(path)[:200]}: {exc.strerror or exc}") from None
    console, _ = _consoles()
    console.print(f"imported {added} run(s) into {st.redacted_url}"
                  + (f"; {skipped} already present" if skipped else ""), highlight=False)


def calibrate(
    db: str | None = typer.Option(None, "--db", help=DB_HELP),
    model: str | None = typer.Option(None, "--model", help="Only runs whose model contains this text."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    calibration: Path | None = typer.Option(
        None, "--calibration", help="Write the calibration file here (default: $VRAMFIT_CALIBRATION, else "
        "calibration.json in your config directory, where estimate, plan, fit, sweep and serve read it)."),
    write: bool = typer.Option(True, "--write/--no-write", help="Write the calibration file (per GPU family: "
                               "measured CUDA context and allocator slack)."),
) -> None:
    """Report the estimator's error on the stored runs (per GPU family and method) and the overheads they imply;
    write them as the calibration that later estimates apply to the same GPU family."""
    from vramfit.calibration import is_off
    from vramfit.measure.calibration import calibrate as run_calibrate
    from vramfit.measure.calibration import to_calibration

    st = _store(db)
    recs = st.list(model=_check_text("model", model))
    _report_bad_rows(st)
    rep = run_calibrate(recs)
    cal = to_calibration(rep)
    off = bool(write and cal.families and calibration is None and is_off())  # VRAMFIT_CALIBRATION=off: nothing written
    written, kept = _save_calibration(cal, calibration, model is not None) if write and cal.families and not off \
        else (None, {})
    if json_out:
        sys.stdout.write(json.dumps({**rep.to_dict(), "calibration_file": str(written) if written else None}, indent=2) + "\n")
        return
    from vramfit.measure.report import render_calibration

    console, _ = _consoles()
    if not recs and model:
        console.print("no stored run matches --model", highlight=False)
        return
    if not recs:
        console.print("no runs stored yet: `vramfit measure …` on a GPU, or `vramfit runs import FILE`")
        return
    render_calibration(rep, console)
    if off:
        console.print("VRAMFIT_CALIBRATION=off: no calibration file written (--calibration PATH writes one)",
                      highlight=False)
    if written:
        _say_written(console, cal, written, kept, model is not None)


def _runs(n: int) -> str:
    return f"{n} run{'s' if n != 1 else ''}"


def _save_calibration(cal, path: Path | None, merge: bool):
    """Write ``cal`` to ``path`` (default: the active calibration file); with ``merge``, the file's families that
    ``cal`` does not cover are kept. Returns (the path written, the families kept). A file there that is not a
    calibration vramfit can read is never written over."""
    from vramfit.calibration import Calibration, default_path, load, save

    p = user_path("calibration", path) if path is not None else default_path()
    old = None
    if path_kind("calibration", p) == "file":
        try:
            old = load(p)
        except VramfitError as exc:
            raise ScenarioError("calibration", f"{shown(str(p))} is not a calibration file vramfit can read "
                                f"({one_line(str(exc).split(': ', 1)[-1], 120)}); vramfit never writes over it: "
                                "move it or give another --calibration") from None
    kept = {f: c for f, c in old.families.items() if f not in cal.families} if merge and old else {}
    return save(Calibration({**kept, **cal.families}), p), kept


def _say_written(console, cal, written: Path, kept: dict, filtered: bool) -> None:
    fams = ", ".join(f"{f} ({_runs(c.runs)})" for f, c in sorted(cal.families.items()))
    console.print(f"calibration for {fams} written to {written}: estimate, plan, fit, sweep and serve apply it "
                  "to cards of the same family only", highlight=False, markup=False)  # family names are the file's
    if filtered:
        others = ", ".join(f"{f} ({_runs(c.runs)})" for f, c in sorted(kept.items())) or "none"
        console.print(f"--model: only the families of the matching runs were replaced; kept as they were: {others}",
                      highlight=False, markup=False)
    for f, c in sorted(cal.families.items()):
        if c.speed_factor is not None:
            console.print(f"plan times steps on {f} cards x{c.speed_factor:.3f} (measured / predicted, "
                          f"{_runs(c.speed_runs)})", highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``measure``, ``runs`` and ``calibrate`` to the ``vramfit`` app."""
    app.command("measure")(_user_errors(with_scenario_options(measure)))
    _wrap_runs_commands()
    app.add_typer(runs_app, name="runs")
    app.command("calibrate")(_user_errors(calibrate))


def _wrap_runs_commands() -> None:
    """Give the runs sub-commands the same one-line error handling as the rest of the CLI."""
    for info in runs_app.registered_commands:
        if not getattr(info.callback, "_vramfit_wrapped", False):
            wrapped = _user_errors(info.callback)
            wrapped._vramfit_wrapped = True  # type: ignore[attr-defined]
            info.callback = wrapped
