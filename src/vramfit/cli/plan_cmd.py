"""``vramfit plan | fit | sweep | guide-table``: the planner's commands. Parse, call, render."""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from vramfit.calibration import load_active
from vramfit.cli.dataset_opts import with_dataset_options
from vramfit.cli.from_config import check_write_to, eval_follows_micro, write_fit, write_plan
from vramfit.cli.options import build_scenario, with_scenario_options
from vramfit.cli.plan_outputs import check_outputs, disk_line, pick_plan, render_changes, write_export
from vramfit.cli.plan_outputs import gib1 as _gib
from vramfit.cli.render import accuracy_line, fitting_table, render_fit
from vramfit.errors import ScenarioError, VramfitError
from vramfit.gpus import GPUS_PER_NODE
from vramfit.plan.kernels import SPEED_ERROR_P90
from vramfit.plan.verdict import SAFETY_MARGIN, SAFETY_MARGIN_HELP
from vramfit.safe_input import shown, user_path, writable_file, write_text_file
from vramfit.scenario import parse_scenario
from vramfit.units import GB

console = Console()
err_console = Console(stderr=True)
_P = "Planner"
_MARGIN_HELP = SAFETY_MARGIN_HELP


def _hours(h: float | None) -> str:
    if h is None:
        return ""
    return f"{h * 60:,.0f} min" if h < 1 else f"{h:,.1f} h" if h < 72 else f"{h / 24:,.1f} d"


def _usd(x: float | None) -> str:
    return "" if x is None else f"${x:,.0f}" if x >= 10 else f"${x:,.2f}"


def _load_gpus(path: Path | None) -> None:
    if path is not None:
        from vramfit.plan.planner import check_gpu_file

        check_gpu_file(str(path))


def _out(obj: Any) -> None:
    try:
        text = json.dumps(obj, indent=1, allow_nan=False)  # Infinity/NaN are not JSON
    except ValueError:
        raise VramfitError("the result holds an infinite or undefined number, which JSON cannot write; "
                           "check the planner's inputs (mfu, dataset_tokens, epochs)") from None
    sys.stdout.write(text + "\n")


def _output(key: str, path: Path | None) -> Path | None:
    """An output path checked before any work: its folder exists and it is not a folder."""
    return None if path is None or str(path) == "-" else writable_file(key, path)


def _plan_row(i: int, p) -> list[str]:
    setting = p.parallelism + ("" if p.offload == "none" else f"+{p.offload} offload")
    extras = ", ".join(x for x in (p.optimizer if "8bit" in p.optimizer else "", "fused loss" if p.loss == "fused" else "") if x)
    cost = "" if p.cost_usd_low is None else (_usd(p.cost_usd_low) + ("" if p.cost_usd_high == p.cost_usd_low else f"–{_usd(p.cost_usd_high)}"))
    return [
        str(i) + ("" if p.measured_path else "†"), escape(f"{p.num_gpus} × {p.gpu_id}") + (f" (pay {p.billed_gpus})" if p.billed_gpus > p.num_gpus else ""),
        f"{p.micro_batch_size} × {p.grad_accum}", p.gradient_checkpointing,
        setting + (f", {extras}" if extras else ""), f"{_gib(p.required_bytes or p.device_bytes)} / {_gib(p.usable_bytes)}"
        + (" (paging)" if p.paging else ""),
        f"{p.tokens_per_s:,.0f}" if p.tokens_per_s else "", _hours(p.hours), cost,
        "" if p.usd_per_million_tokens is None else f"{p.usd_per_million_tokens:,.2f}", p.price_basis,
        f"{p.disk.total_bytes / GB:,.0f}",
    ]


PLAN_COLUMNS = ("#", "GPUs", "mb × accum", "ckpt", "sharding", "GiB used/usable", "tokens/s", "time", "cost", "$/M tok", "price basis", "disk GB")
# left out first when the terminal is too narrow for every column (least needed to choose a plan first)
_DROP_ORDER = ("price basis", "disk GB", "$/M tok", "mb × accum", "ckpt", "tokens/s")


def _fitting_table(title: str, rows: list[tuple[list[str], str | None]],
                   headers: dict[str, str]) -> tuple[Table, list[str]]:
    """The plan table with as many columns as fit the console's width, and the names of those left out;
    ``headers`` replaces the heading of a column (the time column carries its error band)."""
    def build(dropped: list[str]) -> Table:
        keep = [i for i, col in enumerate(PLAN_COLUMNS) if col not in dropped]
        t = Table(title=title, title_justify="left")
        for i in keep:
            col = PLAN_COLUMNS[i]
            t.add_column(headers.get(col, col), justify="left" if col in ("GPUs", "ckpt", "sharding", "price basis") else "right",
                         no_wrap=col in ("price basis", "GPUs"))
        for cells, style in rows:
            t.add_row(*(cells[i] for i in keep), style=style)
        return t

    return fitting_table(console, build, _DROP_ORDER)


def render_plan(r, top: int, show_all: bool) -> None:
    sc = r.scenario
    data = f"{r.dataset_tokens:,} tokens × {r.epochs:g} epochs" if r.dataset_tokens else "no dataset size (cost per 1M tokens only)"
    console.print(f"[bold]{escape(r.model_id)}[/bold] · {sc['method']} · {sc['precision']} · seq {sc['seq_len']} · "
                  f"effective batch {r.effective_batch} · {data} · "
                  + (f"MFU {r.mfu:.0%}" if r.mfu_source == "user" else "speed by mechanism"))
    own = parse_scenario(sc).effective_batch  # above the one asked where its GPUs already take more
    over = "" if own == r.effective_batch else f", not the {r.effective_batch} asked: its GPUs take more at this micro-batch"
    console.print(f"your scenario at micro-batch {sc['micro_batch_size']} × {sc['grad_accum']} accumulation × "
                  f"{sc['num_gpus']} GPU (effective batch {own}{over}): needs {_gib(r.scenario_required_bytes)} GiB per GPU "
                  f"(device peak {_gib(r.scenario_device_bytes)})")
    by = "cost per token" if r.sort == "cost" else "speed"
    dl = f"; deadline {r.deadline_hours:g} h" if r.deadline_hours else ""
    band = f"time\n±{SPEED_ERROR_P90:.0%}" if r.mfu is None else "time"  # the speed model's p90 error band
    shown = r.plans if show_all else r.plans[:top]
    rows = [(_plan_row(i, p), "dim" if p.within_budget is False or p.meets_deadline is False else None)
            for i, p in enumerate(shown, 1)]
    t, dropped = _fitting_table(f"Plans that fit ({len(r.plans)}; safety margin {r.safety_margin:.0%}; "
                                f"ranked by {by}{dl})", rows, {"time": band})
    console.print(t)
    if dropped:
        console.print(f"[dim]left out at {console.width} columns: {', '.join(dropped)} (a wider terminal or "
                      "--json shows them)[/dim]")
    unmeasured = [i for i, p in enumerate(shown, 1) if not p.measured_path]
    if unmeasured:
        console.print(f"[yellow]† no published measurement behind the path of plan(s) "
                      f"{', '.join(map(str, unmeasured))}: their memory figure is not validated (JSON: accuracy_note)[/yellow]")
    if len(r.plans) > len(shown):
        console.print(f"[dim]{len(r.plans) - len(shown)} more: --top N or --all[/dim]")
    # cheapest is taken among plans meeting the deadline, fastest among plans within budget (plan/report.py)
    for label, p in ((f"Cheapest{' meeting the deadline' if r.deadline_hours is not None else ''}", r.cheapest),
                     (f"Fastest{' within budget' if r.budget_usd is not None else ''}", r.fastest)):
        if p is None:
            continue
        within = "" if p.within_budget is None else (" (within budget)" if p.within_budget else " [red](over budget)[/red]")
        within += "" if p.meets_deadline is None else (" (meets the deadline)" if p.meets_deadline else " [red](past the deadline)[/red]")
        within += f" at ${p.usd_per_gpu_hour_low:.2f}/GPU-h ({p.price_basis})" if p.price_basis else ""
        within += "" if p.measured_path else " [yellow]† no published measurement behind its path[/yellow]"
        console.print(f"[bold]{label}:[/bold] {p.num_gpus} × {escape(p.gpu_name)}, micro-batch {p.micro_batch_size} × "
                      f"{p.grad_accum} accumulation, checkpointing {p.gradient_checkpointing}, {p.parallelism}"
                      f"{'' if p.offload == 'none' else ' + ' + p.offload + ' offload'}: {_gib(p.required_bytes or p.device_bytes)} GiB needed per GPU"
                      f"{' (fits with paging)' if p.paging else ''}, "
                      f"{p.tokens_per_s:,.0f} tokens/s, {_hours(p.hours) or '—'}, {_usd(p.cost_usd_low) or '—'}{within}")
        for n in p.notes:
            console.print(f"   • {n}")
    if r.plans:
        console.print(disk_line(r.plans[0].disk))
    for gid, changes in r.changes.items():
        render_changes(console, gid, changes)
    if r.excluded:
        console.print("[bold]Not planned:[/bold] " + escape("; ".join(f"{e.gpu_id} ({e.reason})" for e in r.excluded[:8]))
                      + (f"; and {len(r.excluded) - 8} more" if len(r.excluded) > 8 else ""))
    console.print("[bold]Assumptions[/bold]")
    for a in r.assumptions:
        console.print(f" • {a}", highlight=False, markup=False)


def plan_cmd(
    scenario_args: dict,
    scenario_file: Path | None,
    effective_batch: str | None = typer.Option(None, help="Sequences per optimizer step (default: the scenario's).", rich_help_panel=_P),
    dataset_tokens: str | None = typer.Option(None, help="Tokens in the training set, e.g. 50M.", rich_help_panel=_P),
    epochs: float = typer.Option(1.0, help="Passes over the dataset.", rich_help_panel=_P),
    budget: float | None = typer.Option(None, help="Budget in USD; plans above it are marked.", rich_help_panel=_P),
    cards: str | None = typer.Option(None, help="Only these GPU ids (comma-separated); default: the catalog, or --gpu.", rich_help_panel=_P),
    sort: str = typer.Option("cost", help="Rank by cost (per token, low price) or time (fastest first).", rich_help_panel=_P),
    deadline: float | None = typer.Option(None, help="Hours the run must finish in; slower plans are ranked last.", rich_help_panel=_P),
    stack: str | None = typer.Option(None, help="Only these software stacks: cuda, rocm, habana (comma-separated).", rich_help_panel=_P),
    max_gpus: int = typer.Option(GPUS_PER_NODE, help=f"Most GPUs; above {GPUS_PER_NODE}, whole nodes of {GPUS_PER_NODE} (16, 32, 64 ...).",
                                 rich_help_panel=_P),
    safety_margin: float = typer.Option(SAFETY_MARGIN, help=_MARGIN_HELP, rich_help_panel=_P),
    mfu: float | None = typer.Option(None, help="Time every FLOP at this fraction of the BF16 peak instead of the mechanism speed model.", rich_help_panel=_P),
    gpus: Path | None = typer.Option(None, "--gpus", help="Your GPU CSV: adds cards or overrides prices.", rich_help_panel=_P),
    checkpoints_kept: int = typer.Option(1, help="Checkpoints kept on disk (save_total_limit; 0 saves none): the disk figure and a TRL export.",
                                         rich_help_panel=_P),
    top: int = typer.Option(15, help="Rows to show.", rich_help_panel=_P),
    show_all: bool = typer.Option(False, "--all", help="Show every plan.", rich_help_panel=_P),
    export: str | None = typer.Option(None, help="Write the plan as engine config: accelerate, deepspeed, fsdp, trl (also writes train.py), or torchtitan (TOML with tensor/pipeline degrees).", rich_help_panel=_P),
    pick: str = typer.Option("1", help="Plan to export: a row number, cheapest or fastest.", rich_help_panel=_P),
    export_dir: Path = typer.Option(Path("."), help="Folder for --export files.", rich_help_panel=_P),
    write_to: Path | None = typer.Option(None, "--write-to", help="Save the --from config with the picked plan's changes.", rich_help_panel=_P),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    dataset_report=None,
) -> None:
    """Which GPU, how many, how long, how much: ranked plans that fit, and changes for cards that do not."""
    from vramfit.plan import plan

    export_dir = user_path("export_dir", export_dir)
    check_outputs(top, export, pick, export_dir, write_to)
    _load_gpus(gpus)
    sc = build_scenario(scenario_args, scenario_file)
    r = plan(sc, effective_batch=effective_batch, dataset_tokens=dataset_tokens, epochs=epochs, budget_usd=budget,
             gpu_ids=cards, max_gpus=max_gpus, safety_margin=safety_margin, mfu=mfu, sort=sort,
             deadline_hours=deadline, stacks=stack, dataset=dataset_report, calibration=load_active(),
             eval_follows_micro=eval_follows_micro(), checkpoints_kept=checkpoints_kept)
    picked = pick_plan(r, pick) if r.plans else None  # a row number past the plans: refused before the output
    if json_out:
        _out(r.to_dict())
    else:
        render_plan(r, top, show_all)
    if export and picked:
        write_export(picked, export, export_dir, r.epochs, err_console if json_out else console, dataset_report and dataset_report.policy)
    write_plan(write_to, sc, picked)
    if not r.plans:
        # a job larger than one node: say how to plan several, where the effective batch lets more GPUs work
        if max_gpus == GPUS_PER_NODE and r.effective_batch > GPUS_PER_NODE and not json_out:
            console.print(f"Nothing fits on one node of {GPUS_PER_NODE}: --max-gpus 64 plans whole nodes (16, 32, 64 GPUs).")
        raise typer.Exit(1)


def fit_cmd(
    scenario_args: dict,
    scenario_file: Path | None,
    safety_margin: float = typer.Option(SAFETY_MARGIN, help=_MARGIN_HELP, rich_help_panel=_P),
    gpus: Path | None = typer.Option(None, "--gpus", help="Your GPU CSV.", rich_help_panel=_P),
    write_to: Path | None = typer.Option(None, "--write-to", help="Save the --from config with the first change that fits.", rich_help_panel=_P),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    dataset_report=None,
) -> None:
    """The largest micro-batch and longest sequence that fit --gpu, and a batch × sequence grid."""
    from vramfit.plan import fit

    check_write_to("write-to", write_to)
    _load_gpus(gpus)
    sc = build_scenario(scenario_args, scenario_file)
    if not sc.gpu:
        raise ScenarioError("gpu", "fit needs the card: --gpu ID (see `vramfit gpus`)")
    cal = load_active()
    r = fit(sc, sc.gpu, safety_margin=safety_margin, calibration=cal, dataset=dataset_report,
            eval_follows_micro=eval_follows_micro())
    write_fit(write_to, sc, safety_margin)
    if json_out:
        _out(r.to_dict())
        return
    render_fit(r, sc, cal, console)


_VARY_HELP = ("key=a..b (doubling), key=a..b:step, key=a,b,c or key=* (all choices). A k is 1,024 for a length in "
              "tokens (seq_len=1k..32k), 1,000 for a count (grad_accum=1k).")


def sweep_cmd(
    scenario_args: dict,
    scenario_file: Path | None,
    vary: str = typer.Option(..., help=_VARY_HELP, rich_help_panel=_P),
    cards: str | None = typer.Option(None, help="Cards drawn as capacity lines (comma-separated ids).", rich_help_panel=_P),
    gpus: Path | None = typer.Option(None, "--gpus", help="Your GPU CSV.", rich_help_panel=_P),
    csv_out: Path | None = typer.Option(None, "--csv", help="Write the rows as CSV ('-' for stdout).", rich_help_panel=_P),
    chart: Path | None = typer.Option(None, help="Write a chart: .png, .svg (matplotlib) or .html (plotly).", rich_help_panel=_P),
    safety_margin: float = typer.Option(SAFETY_MARGIN, help=_MARGIN_HELP, rich_help_panel=_P),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Peak memory over the values of one scenario key, as a table, CSV or chart."""
    from vramfit.plan import parse_vary, sweep
    from vramfit.plan.inputs import gpu_id_list

    if json_out and csv_out is not None and str(csv_out) == "-":
        raise ScenarioError("csv", "--csv - and --json both write to stdout; give --csv a file name, or leave one out")
    csv_path, chart_path = _output("csv", csv_out), _output("chart", chart)
    _load_gpus(gpus)
    sc = build_scenario(scenario_args, scenario_file)
    key, values = parse_vary(vary)
    cal = load_active()
    r = sweep(sc, key, values, cards=gpu_id_list(cards), safety_margin=safety_margin, calibration=cal)
    if cal is not None and cal.for_card(sc.gpu) and not json_out and csv_out is None:
        console.print(f"[dim]{cal.for_card(sc.gpu).note()}[/dim]")
    if chart is not None:
        _write_sweep_chart(r, chart, chart_path, err_console if json_out else console)
    if csv_out is not None:
        _write_sweep_csv(r, csv_out, csv_path, err_console if json_out else console)
    if json_out:
        _out(r.to_dict())
    elif csv_out is None or str(csv_out) != "-":
        render_sweep(r, key)


def _write_sweep_chart(r, chart: Path, chart_path: Path | None, say: Console) -> None:
    from vramfit.plan.charts import sweep_chart

    try:
        sweep_chart(r, chart_path)
    except OSError as exc:
        raise ScenarioError("chart", f"cannot write {shown(str(chart))}: {exc.strerror}") from None
    say.print(f"wrote {chart}", highlight=False, markup=False)


def _write_sweep_csv(r, csv_out: Path, csv_path: Path | None, say: Console) -> None:
    text = sweep_csv(r)
    if str(csv_out) == "-":
        sys.stdout.write(text)
    else:
        write_text_file("csv", csv_path, text)
        say.print(f"wrote {csv_out}", highlight=False, markup=False)


def render_sweep(r, key: str) -> None:
    """The sweep as a table: the three peaks per value, and whether each card holds it."""
    t = Table(title=f"Peak per GPU over {key}; fits = needs (peak after cache release) ≤ usable less "
                    f"{r.safety_margin:.0%}" + ("; paging = fits only with paged optimizer state in host RAM"
                                                if any(p.paging for p in r.points) else ""), title_justify="left")
    for col in (key, "allocated GiB", "reserved GiB", "device GiB", "needs GiB", *[c["gpu_id"] for c in r.cards]):
        t.add_column(col, justify="right")
    for p in r.points:
        if p.error:
            t.add_row(escape(str(p.value)), f"[red]{escape(p.error)}[/red]", "", "", "", *[""] * len(r.cards))
        else:
            t.add_row(escape(str(p.value)), _gib(p.allocated_bytes), _gib(p.reserved_bytes), _gib(p.device_bytes),
                      _gib(p.required_bytes),
                      *["[yellow]paging[/yellow]" if (p.paging or {}).get(c["gpu_id"]) else "[green]fits[/green]"
                        if p.fits[c["gpu_id"]] else "[red]no[/red]" for c in r.cards])
    console.print(t)
    notes: dict[str, tuple[dict, list[str]]] = {}  # one line per path the sweep crosses, naming its values
    for p in r.points:
        if p.accuracy:
            notes.setdefault(p.accuracy["note"], (p.accuracy, []))[1].append(str(p.value))
    for acc, values in notes.values():
        accuracy_line(acc, console, f"{key} {', '.join(values)}" if len(notes) > 1 else "")


def guide_cmd(json_out: bool = typer.Option(False, "--json", help="Print the table as JSON.")) -> None:
    """The seed guide's sizing table recomputed, with every disagreement and why."""
    from vramfit.plan import guide_table

    g = guide_table()
    if json_out:
        _out(g.to_dict())
        return
    st = g.settings
    console.print(f"seq {st['seq_len']}, micro-batch {st['micro_batch_size']}, AdamW, full = bf16-mixed, LoRA r={st['lora_rank']} "
                  "all-linear, QLoRA NF4-DQ; checkpointing none or full; ZeRO-3 beyond one card; no safety margin")
    t = Table(title="The guide's table, recomputed (guide says N×class: does it fit?)", title_justify="left")
    for col in ("size", "method", "1 GPU GiB", "checkpointed GiB", "24 GB", "48 GB", "80 GB", "smallest", "guide says", "agrees"):
        t.add_column(col)
    for r in g.rows:
        short = {"agrees": "yes", "does not fit": "no", "more than needed": "more than needed"}
        pure = {True: " (pure bf16: yes)", False: " (pure bf16: no)", None: ""}  # full fine-tuning's bf16-true reading
        said = "; ".join(dict.fromkeys(f"{c['count']}×{c['class_gb']}: {short[c['verdict']]}{pure[c['pure_bf16_fits']]}"
                                       for c in r.claims)) or "—"
        t.add_row(r.size, r.method, _gib(r.device_bytes), _gib(r.device_bytes_checkpointed),
                  *[f"×{r.fewest[gb]}" if r.fewest[gb] else ">8" for gb in (24, 48, 80)], r.smallest, said,
                  "—" if not r.claims else "[green]yes[/green]" if r.agrees else "[red]no[/red]")
    console.print(t)
    console.print(f"[bold]Precision:[/bold] {st['precision_note']}", highlight=False)
    for r in g.disagreements:
        console.print(f"[bold]{r.size} {r.method}[/bold]")
        for sec, says in dict.fromkeys((c["section"], c["says"]) for c in r.claims):
            console.print(f" [dim]the guide, section {sec} (in our words): {says}[/dim]", highlight=False)
        for w in r.why:
            console.print(f" • {w}", highlight=False)


def register(app: typer.Typer) -> None:
    """Add plan, fit, sweep and guide-table to the app (decorated here: user_errors lives in cli.main)."""
    from vramfit.cli.main import user_errors

    app.command("plan")(user_errors(with_scenario_options(with_dataset_options(plan_cmd))))
    app.command("fit")(user_errors(with_scenario_options(with_dataset_options(fit_cmd))))
    app.command("sweep")(user_errors(with_scenario_options(sweep_cmd)))
    app.command("guide-table")(user_errors(guide_cmd))


def sweep_csv(r) -> str:
    """Rows of a sweep as CSV: value, the three peaks, each component, and the error if any."""
    comps: list[str] = []
    for p in r.points:
        for k in p.components or {}:
            if k not in comps:
                comps.append(k)
    w = csv.writer(buf := io.StringIO())
    w.writerow([r.key, "allocated_bytes", "reserved_bytes", "device_bytes", "required_bytes", *[f"{c}_bytes" for c in comps],
                *[f"fits_{c['gpu_id']}" for c in r.cards], "error"])
    for p in r.points:
        if p.error:
            w.writerow([p.value, "", "", "", "", *[""] * len(comps), *[""] * len(r.cards), p.error])
        else:
            w.writerow([p.value, p.allocated_bytes, p.reserved_bytes, p.device_bytes, p.required_bytes,
                        *[(p.components or {}).get(c, 0) for c in comps], *[p.fits[c["gpu_id"]] for c in r.cards], ""])
    return buf.getvalue()
