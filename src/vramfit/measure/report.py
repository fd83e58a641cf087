"""Rich rendering of runs and calibration reports. Presentation only: unit conversion, no arithmetic."""

from __future__ import annotations

from typing import Any

from rich.markup import escape

from vramfit.measure.calibration import CalibrationReport
from vramfit.measure.records import RunRecord
from vramfit.measure.runner import PEAKS, differences

GiB = 1024**3
MiB = 1024**2


def gib(n: int | None) -> str:
    return "—" if n is None else f"{n / GiB:,.2f}"


def pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:+.1f} %"


def _status(rec: RunRecord) -> str:
    colour = {"ok": "green", "oom": "yellow", "error": "red"}.get(rec.status, "white")
    return f"[{colour}]{rec.status}[/{colour}]"


def scenario_line(sc: dict[str, Any]) -> str:
    model = sc.get("model") or f"params={sc.get('params')}"
    ckpt = sc.get("gradient_checkpointing", "none")
    return (f"{model} · {sc.get('method')} · {sc.get('precision')} · {sc.get('optimizer')} · "
            f"mb {sc.get('micro_batch_size')} × seq {sc.get('seq_len')} × accum {sc.get('grad_accum')} · "
            f"checkpointing {ckpt} · {sc.get('num_gpus')} GPU{'s' if sc.get('num_gpus', 1) > 1 else ''}")


def render_run(rec: RunRecord, console: Any, db: str | None = None, full: bool = False) -> None:
    """A run: its figures next to the estimate and the simulation, with the differences."""
    from rich.table import Table

    env = rec.environment
    console.print(f"[bold]{escape(scenario_line(rec.scenario))}[/bold]")  # user text: never markup
    where = env.get("gpu_name") or env.get("device") or "?"
    pk = env.get("packages") or {}
    total = f" ({gib(env.get('gpu_total_bytes'))} GiB)" if isinstance(env.get("gpu_total_bytes"), int) else ""
    console.print(escape(f"run {rec.id} · {rec.created_at or 'imported'} · ") + _status(rec)
                  + escape(f" · {rec.steps_done} step(s) · {where}{total}"))
    if pk:  # an imported record's packages may be any JSON: shown as text, never as markup
        listed = ", ".join(f"{k} {v}" for k, v in pk.items() if v) if isinstance(pk, dict) else str(pk)
        console.print("[dim]" + escape(listed + (f", CUDA {env['cuda']}" if env.get("cuda") else "")
                                       + (f", driver {env['driver']}" if env.get("driver") else "")) + "[/dim]")
    if rec.source_id != "vramfit-measure":
        console.print(f"[dim]{escape(f'imported from {rec.source_id}: {rec.source}')}[/dim]")
    diffs = differences(rec)
    t = Table(title="Peak per GPU (GiB)", title_justify="left")
    for col in ("counter", "measured", "estimate", "est. − meas.", "simulation", "sim. − meas."):
        t.add_column(col, justify="left" if col == "counter" else "right")
    for key in PEAKS:
        name = key.replace("_bytes", "")
        d = diffs[name]
        t.add_row(name, gib(getattr(rec, key)), gib((rec.estimate or {}).get(key)), pct(d["estimate"]),
                  gib((rec.simulation or {}).get(key)), pct(d["simulation"]))
    if rec.unknown_bytes is not None:
        t.add_row("unknown", gib(rec.unknown_bytes), "", "", "", "")
    console.print(t)
    det = rec.details
    if rec.step_time_s:
        rate = f" · {rec.tokens_per_s:,.0f} tokens/s" if rec.tokens_per_s else ""
        console.print(f"step time {rec.step_time_s:.3f} s (median after the first step){rate}")
    if rec.status != "ok":
        stopped = f"stopped at {det.get('failed_at')}: {det.get('error')}"
        console.print(f"[yellow]{escape(stopped)}[/yellow]")
    load = det.get("load") if isinstance(det.get("load"), dict) else {}
    if load:
        console.print(f"[dim]after model build: allocated {gib(load.get('load_allocated_bytes'))} GiB, "
                      f"reserved {gib(load.get('load_reserved_bytes'))} GiB[/dim]")
    if env.get("memory_probe"):
        console.print("[dim]" + escape(f"device figure from: {env['memory_probe']}") + "[/dim]")
    if rec.notes:
        console.print(f"notes: {rec.notes}", markup=False)
    for remark in _texts(det.get("remarks")):
        console.print(f"[dim]{escape(remark)}[/dim]")
    if full:
        for a in _texts(det.get("assumptions")):
            console.print(f"[dim]· {escape(a)}[/dim]")
        if det.get("log_tail"):
            console.print(det["log_tail"], markup=False, highlight=False)
    if db:
        console.print(f"[dim]stored in {db}[/dim]")


def _texts(value: Any) -> list[str]:
    """A record's list of remarks or assumptions as text lines; an imported record may hold any JSON there."""
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


RUN_COLUMNS = ("id", "status", "model", "method", "seq", "ckpt", "GPU", "alloc", "resv", "device", "est", "tok/s")
# left out first when the console is too narrow for every column; id, model and alloc always stay
_DROP_ORDER = ("ckpt", "est", "device", "resv", "method", "tok/s", "status", "seq", "GPU")
_MODEL_FOLD = 14  # the model column's width when folded: the only column whose text may go on a second line


def _run_cells(r: RunRecord) -> list[str]:
    sc = r.scenario
    est = (r.estimate or {}).get("allocated_bytes")
    alloc = gib(r.allocated_bytes) if r.unknown_bytes is None else f"{gib(r.unknown_bytes)}?"
    return [escape(r.id[:16]), _status(r), escape(r.model_name.rsplit("/", 1)[-1]), escape(str(sc.get("method", ""))),
            str(sc.get("seq_len", "")), escape(str(sc.get("gradient_checkpointing", ""))), escape(r.gpu_family), alloc,
            gib(r.reserved_bytes), gib(r.device_bytes), gib(est), f"{r.tokens_per_s:,.0f}" if r.tokens_per_s else "—"]


def _runs_table(title: str, rows: list[list[str]], dropped: list[str], fold: int | None) -> Any:
    from rich.table import Table

    t = Table(title=title, title_justify="left", pad_edge=False)
    keep = [i for i, col in enumerate(RUN_COLUMNS) if col not in dropped]
    for i in keep:
        col = RUN_COLUMNS[i]
        t.add_column(col, justify="left" if col in ("id", "status", "model", "method", "ckpt", "GPU") else "right",
                     no_wrap=col != "model", overflow="fold", max_width=fold if col == "model" else None)
    for cells in rows:
        t.add_row(*(cells[i] for i in keep))
    return t


def fitting_runs_table(console: Any, title: str, rows: list[list[str]]) -> tuple[Any, list[str]]:
    """The runs table at the console's width, and the columns left out. Figures and ids are never cut: the model
    column folds onto more lines first, then columns go, least needed first (as ``plan`` drops its columns)."""
    from rich.measure import Measurement

    wide = console.options.update_width(10_000)
    for n in range(len(_DROP_ORDER) + 1):
        dropped = list(_DROP_ORDER[:n])
        for fold in (None, _MODEL_FOLD):
            t = _runs_table(title, rows, dropped, fold)
            if Measurement.get(console, wide, t).maximum <= console.width:
                return t, dropped
    return t, dropped


def render_runs(recs: list[RunRecord], console: Any, title: str) -> None:
    t, dropped = fitting_runs_table(console, title + " · figures in GiB (est: the stored estimate of allocated)",
                                    [_run_cells(r) for r in recs])
    console.print(t)
    if dropped:
        console.print(f"[dim]left out at {console.width} columns: {', '.join(dropped)} (a wider terminal or "
                      "--json shows them)[/dim]")
    if any(r.unknown_bytes is not None for r in recs):
        console.print("[dim]x.xx? : a figure whose counter the source did not name (metric unknown)[/dim]")


def render_calibration(rep: CalibrationReport, console: Any) -> None:
    from rich.table import Table

    console.print(f"[bold]Estimator error on {rep.scored} run(s) with figures[/bold] ({rep.runs} stored; "
                  f"{len(rep.skipped)} skipped" + (f"; {rep.stored_estimates} scored against the stored estimate"
                                                  if rep.stored_estimates else "") + ")")
    t = Table(title="(estimate − measured) / measured, per GPU family and method", title_justify="left")
    for col in ("GPU", "method", "runs", "OOM", "counter", "n", "mean", "mean |err|", "worst", "fit verdicts"):
        t.add_column(col, justify="left" if col in ("GPU", "method", "counter", "fit verdicts") else "right")
    for g in rep.groups:
        verdict = (f"{g.fit_correct} right, {g.fit_missed_oom} missed OOM, {g.fit_false_alarm} false alarm"
                   if g.fit_correct + g.fit_missed_oom + g.fit_false_alarm else "—")
        rows = list(g.errors.values()) or [None]
        for i, e in enumerate(rows):
            first = i == 0
            t.add_row(g.gpu_family if first else "", g.method if first else "", str(g.runs) if first else "",
                      str(g.oom_runs) if first else "", e.metric if e else "—", str(e.n) if e else "",
                      pct(e.mean_signed) if e else "", pct(e.mean_abs).lstrip("+") if e else "",
                      pct(e.worst) if e else "", verdict if first else "")
    console.print(t)
    if rep.overheads:
        o = Table(title="Implied overheads (single-GPU runs, medians)", title_justify="left")
        for col in ("GPU", "runs", "context MiB (device − reserved)", "range MiB", "estimator assumes MiB",
                    "allocator MiB (reserved − allocated)", "of allocated", "estimator MiB"):
            o.add_column(col, justify="left" if col == "GPU" else "right")
        for x in rep.overheads:
            o.add_row(x.gpu_family, str(x.runs), f"{x.context_median_bytes / MiB:,.0f}",
                      f"{x.context_min_bytes / MiB:,.0f}–{x.context_max_bytes / MiB:,.0f}",
                      f"{x.estimator_context_bytes / MiB:,.0f}", f"{x.allocator_median_bytes / MiB:,.0f}",
                      f"{100 * x.allocator_median_fraction:.1f} %", f"{x.estimator_allocator_median_bytes / MiB:,.0f}")
        console.print(o)
    else:
        console.print("[dim]No single-GPU run with all three counters: no overheads to infer yet.[/dim]")
    _render_speeds(rep, console)
    for run_id, why in rep.skipped[:10]:
        console.print(f"[dim]skipped {run_id}: {why}[/dim]")
    if len(rep.skipped) > 10:
        console.print(f"[dim]… and {len(rep.skipped) - 10} more skipped[/dim]")


def _render_speeds(rep: CalibrationReport, console: Any) -> None:
    """Per GPU family: measured / predicted step time (the planner's speed model), the factor plans apply."""
    from rich.table import Table

    if not rep.speeds:
        console.print("[dim]No run with a step time on a card the speed model times: no speed factor yet.[/dim]")
        return
    t = Table(title="Step time, measured / predicted by the planner's speed model (medians)", title_justify="left")
    for col in ("GPU", "runs", "speed factor", "range", "cards"):
        t.add_column(col, justify="left" if col in ("GPU", "cards") else "right")
    for f in rep.speeds:
        t.add_row(f.gpu_family, str(f.runs), f"x{f.factor:.3f}", f"x{f.factor_min:.2f}–x{f.factor_max:.2f}",
                  escape(", ".join(f.gpus)))
    console.print(t)
