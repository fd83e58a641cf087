"""The ``vramfit`` command line (Typer + Rich). Parses, calls the library, renders; no arithmetic here."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import wraps
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

from vramfit.cli.options import batch_line, build_scenario, read_batch, with_scenario_options
from vramfit.cli.render import render_estimate
from vramfit.errors import VramfitError
from vramfit.safe_input import one_line, shown


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


@app.command()
@user_errors
@with_scenario_options
def estimate(
    scenario_args: dict,
    scenario_file: Path | None,
    json_out: bool = typer.Option(False, "--json", help="Print the result object as JSON."),
    batch: Path | None = typer.Option(
        None, "--batch", help="JSON Lines of scenarios: one JSON result (or {\"error\": ...}) per line, in order."
    ),
) -> None:
    """Estimate the per-GPU peak memory of a fine-tuning run, with its breakdown."""
    from vramfit.estimate import estimate as run_estimate

    if batch is not None:
        for _, item in read_batch(batch):
            sys.stdout.write(batch_line(item, scenario_args, run_estimate) + "\n")
            sys.stdout.flush()
        return
    sc = build_scenario(scenario_args, scenario_file)
    result = run_estimate(sc)
    if json_out:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")
    else:
        render_estimate(result, console)


@app.command()
@user_errors
def models(
    query: str | None = typer.Argument(None, help="Filter by id, alias, family or name."),
    json_out: bool = typer.Option(False, "--json", help="Print the entries as JSON."),
) -> None:
    """List and search the bundled model catalog."""
    from rich.table import Table

    from vramfit.models import search_models, spec_from_hf_config

    entries = search_models(query or "")
    if json_out:
        out = [
            {"id": e["id"], "family": e.get("family"), "params": e["published_params"], "aliases": e.get("aliases", []), "source": e.get("source")}
            for e in entries
        ]
        sys.stdout.write(json.dumps(out, indent=1) + "\n")
        return
    t = Table(title=escape(f"{len(entries)} catalog models" + (f" matching {shown(query)}" if query else "")), title_justify="left")
    t.add_column("id")
    t.add_column("family", style="dim")
    t.add_column("params", justify="right")
    t.add_column("layers", justify="right")
    t.add_column("hidden", justify="right")
    t.add_column("heads/kv", justify="right")
    t.add_column("vocab", justify="right")
    for e in entries:
        s = spec_from_hf_config(e["config"])
        t.add_row(
            e["id"], e.get("family", ""), f"{e['published_params'] / 1e9:,.2f} B", str(s.num_hidden_layers),
            str(s.hidden_size), f"{s.num_attention_heads}/{s.num_key_value_heads}", f"{s.vocab_size:,}",
        )
    console.print(t)
    if not entries:
        raise typer.Exit(1)


@app.command()
@user_errors
def gpus(
    json_out: bool = typer.Option(False, "--json", help="Print the catalog as JSON."),
) -> None:
    """List the GPU catalog: memory (marketing GB and usable GiB), BF16 TFLOPS, rental prices."""
    from rich.table import Table

    from vramfit.gpus import list_gpus

    rows = list_gpus()
    if json_out:
        sys.stdout.write(json.dumps([g.__dict__ for g in rows], indent=1) + "\n")
        return
    t = Table(title="GPU catalog", title_justify="left")
    for col in ("id", "name", "GB (10^9)", "usable GiB", "BF16 TFLOPS", "$/GPU-h"):
        t.add_column(col)
    for g in rows:
        price = f"{g.price_low:.2f}–{g.price_high:.2f}" if g.price_low is not None and g.price_high is not None else ""
        t.add_row(g.gpu_id, g.name, f"{g.memory_gb:g}", f"{g.usable_bytes / 2**30:.2f}", f"{g.bf16_tflops or '':}", price)
    console.print(t)


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
