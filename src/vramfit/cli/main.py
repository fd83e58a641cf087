"""The ``vramfit`` command line (Typer + Rich). Parses, calls the library, renders; no arithmetic here."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import partial, wraps
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

try:  # typer >= 0.22 vendors click as typer._click; older typer raises click's own exceptions
    from typer._click import exceptions as click_exc
except ImportError:  # pragma: no cover
    from click import exceptions as click_exc

from vramfit.cli.dataset_opts import with_dataset_options
from vramfit.cli.options import batch_line, build_scenario, read_batch, with_scenario_options
from vramfit.cli.render import render_estimate
from vramfit.errors import VramfitError
from vramfit.plan.verdict import SAFETY_MARGIN, SAFETY_MARGIN_HELP
from vramfit.safe_input import one_line, shown
from vramfit.units import gib


class _OneLineErrors(TyperGroup):
    """Click usage errors (a bad option value, a missing argument) as one line and exit code 2,
    instead of typer's five-line box; values in the message are cut (vramfit.limits)."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except click_exc.NoArgsIsHelpError:
            return super().main(*args, **kwargs)  # typer prints the help as usual
        except click_exc.ClickException as exc:
            hint = ""
            ctx = getattr(exc, "ctx", None)
            if ctx is not None:
                hint = f" (see {ctx.command_path} --help)"
            err_console.print(f"[red]error:[/red] {escape(one_line(exc.format_message()))}{escape(hint)}",
                              highlight=False, soft_wrap=True)
            sys.exit(exc.exit_code)
        except typer.Abort:
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    cls=_OneLineErrors,
    name="vramfit",
    help="How much GPU memory will this fine-tuning run need, and which GPU should I rent?",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)


def user_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn user-caused errors into one clear line on stderr and exit code 2 (no traceback)."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except VramfitError as exc:
            err_console.print(f"[red]error:[/red] {escape(one_line(str(exc)))}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None

    return wrapper


GPUS_HELP = "Your GPU CSV: adds cards or overrides cells of the catalog's (as the config directory's gpus.csv)."


def _user_gpus(path: Path | None) -> None:
    """``--gpus FILE``: its cards join the catalog for this command (errors keyed ``gpus``, naming file and line)."""
    if path is not None:
        from vramfit.gpus import load_user_gpus

        load_user_gpus(path)


@app.command()
@user_errors
@with_scenario_options
@partial(with_dataset_options, per_row_bound=False)
def estimate(
    scenario_args: dict,
    scenario_file: Path | None,
    json_out: bool = typer.Option(False, "--json", help="Print the result object as JSON."),
    batch: Path | None = typer.Option(
        None, "--batch", help="JSON Lines of scenarios: one JSON result (or {\"error\": ...}) per line, in order."
    ),
    safety_margin: float = typer.Option(
        SAFETY_MARGIN, help=SAFETY_MARGIN_HELP
    ),
    gpus_file: Path | None = typer.Option(None, "--gpus", help=GPUS_HELP),
    dataset_report=None,
    dataset_options=None,
) -> None:
    """Estimate the per-GPU peak memory of a fine-tuning run, with its breakdown and the cards it fits."""
    from vramfit.calibration import load_active
    from vramfit.plan.verdict import estimate_fits
    from vramfit.scenario import fraction

    _user_gpus(gpus_file)
    safety_margin = fraction("safety_margin", safety_margin, lo_open=False)
    cal = load_active()  # the user's `vramfit calibrate` file, if any: applied to its GPU family only

    def run_estimate(item):  # the estimator's figure, with the planner's card verdicts (one definition of fits)
        return estimate_fits(item, safety_margin=safety_margin, calibration=cal)

    if batch is not None:  # a line that names a dataset (or --dataset) is estimated as `estimate --dataset` does
        from vramfit.cli.batch_dataset import BatchDatasets

        run_line = BatchDatasets(run_estimate, dataset_options)
        for _, item in read_batch(batch):
            sys.stdout.write(batch_line(item, scenario_args, run_line) + "\n")
            sys.stdout.flush()
        return
    sc = build_scenario(scenario_args, scenario_file)
    if dataset_report is not None:  # at the peak micro-batch, with the reserved spread over the lengths' random orders
        from vramfit.cli.batch_dataset import dataset_estimate

        result = dataset_estimate(sc, dataset_report, run_estimate)
    else:
        result = run_estimate(sc)
    if json_out:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")
    else:
        render_estimate(result, console)
        if result.reserved_spread is not None:
            from vramfit.dataset.spread import spread_line

            console.print(spread_line(result.reserved_spread), highlight=False, soft_wrap=True)


@app.command()
@user_errors
def models(
    query: list[str] | None = typer.Argument(None, help="Words that must all appear in the id, an alias, family or name (e.g. qwen2.5 32b)."),
    json_out: bool = typer.Option(False, "--json", help="Print the entries as JSON."),
) -> None:
    """List and search the bundled model catalog."""
    from rich.table import Table

    from vramfit.models import catalog_spec, search_models

    query = " ".join(query or [])
    entries = search_models(query)
    if json_out:
        out = [
            {"id": e["id"], "family": e.get("family"), "params": e["published_params"], "aliases": e.get("aliases", []), "source": e.get("source")}
            for e in entries
        ]
        sys.stdout.write(json.dumps(out, indent=1) + "\n")
        if not entries:
            raise typer.Exit(1)  # nothing matches: exit 1, as the table does
        return
    t = Table(title=escape(f"{len(entries)} catalog models" + (f" matching {shown(query)}" if query else "")), title_justify="left")
    # ids stay whole: the id column never shrinks; the shape columns are dropped when the terminal is narrow
    width = max((len(e["id"]) for e in entries), default=2)
    wide = console.width >= width + 62
    t.add_column("id", no_wrap=True, min_width=width)
    t.add_column("params", justify="right", no_wrap=True)
    for col in ("family", "layers", "hidden", "heads/kv", "vocab") if wide else ():
        t.add_column(col, justify="left" if col == "family" else "right", style="dim" if col == "family" else None)
    for e in entries:
        s = catalog_spec(e["id"])
        shape = [e.get("family", ""), str(s.num_hidden_layers), str(s.hidden_size),
                 f"{s.num_attention_heads}/{s.num_key_value_heads}", f"{s.vocab_size:,}"]
        t.add_row(e["id"], f"{e['published_params'] / 1e9:,.2f} B", *(shape if wide else []))
    console.print(t)
    if not entries:
        raise typer.Exit(1)


@app.command()
@user_errors
def gpus(
    json_out: bool = typer.Option(False, "--json", help="Print the catalog as JSON."),
    gpus_file: Path | None = typer.Option(None, "--gpus", help=GPUS_HELP),
) -> None:
    """List the GPU catalog: memory (marketing GB and usable GiB), BF16 TFLOPS, rental prices."""

    from vramfit.gpus import list_gpus

    _user_gpus(gpus_file)

    rows = list_gpus()
    if json_out:
        sys.stdout.write(json.dumps([g.__dict__ for g in rows], indent=1) + "\n")
        return
    from vramfit.plan.rental import price_basis

    wide = console.width >= 150  # the price basis (provider, date) where it fits; `plan` always shows it
    cols = ("id", "name", "marketing GB", "usable GiB", "BF16 TFLOPS", "$/GPU-h") + (("low price basis",) if wide else ())
    cells = [[g.gpu_id, g.name, f"{g.memory_gb:g}", gib(g.usable_bytes), tflops_cell(g),
              f"{g.price_low:.2f}–{g.price_high:.2f}" if g.price_low is not None and g.price_high is not None else "",
              *((price_basis(g),) if wide else ())] for g in rows]
    t, dropped = _catalog_table(cols, cells)
    console.print(t)
    if dropped:
        console.print(f"[dim]left out at {console.width} columns: {', '.join(dropped)} (a wider terminal or --json "
                      "shows them)[/dim]")


#: the GPU table's columns, in the order they go when the terminal is too narrow (ids are never dropped)
_CATALOG_DROP = ("name", "marketing GB", "$/GPU-h", "BF16 TFLOPS")


def _catalog_table(cols: tuple[str, ...], cells: list[list[str]]):
    """The GPU table at the console's width (cli/render.py fitting_table): ids (what --gpu takes) and figures are never
    cut; columns go in :data:`_CATALOG_DROP` order where the table does not fit."""
    from rich.table import Table

    from vramfit.cli.render import fitting_table

    def build(dropped: list[str]) -> Table:
        keep = [i for i, c in enumerate(cols) if c not in dropped]
        t = Table(title="GPU catalog", title_justify="left", pad_edge=not dropped)
        for i in keep:
            text = cols[i] in ("name", "low price basis")  # folds onto a second line; ids and figures never do
            t.add_column(cols[i], no_wrap=not text, **({"max_width": 40, "overflow": "fold"} if text else {}))
        for r in cells:
            t.add_row(*(r[i] for i in keep))
        return t

    return fitting_table(console, build, _CATALOG_DROP)


def tflops_cell(g) -> str:
    """The catalog's dense 16-bit tensor peak (gpus.csv bf16_fp16_dense_tflops) under the "BF16 TFLOPS" heading: on a
    card without BF16 (supports_bf16 "no": Turing, Volta) that figure is its FP16 peak, and says so."""
    if not g.bf16_tflops:
        return ""
    return f"{g.bf16_tflops} (FP16)" if g.supports_bf16 is False else f"{g.bf16_tflops}"


def _register_optional_commands() -> None:
    """Commands of other parts (simulate, plan, measure, serve) register themselves if present."""
    import importlib

    for mod in ("simulate_cmd", "plan_cmd", "measure_cmd", "serve_cmd"):
        try:
            m = importlib.import_module(f"vramfit.cli.{mod}")
        except ModuleNotFoundError as exc:
            if exc.name == f"vramfit.cli.{mod}":
                continue
            raise
        m.register(app)


_register_optional_commands()


def run() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":  # pragma: no cover
    run()
