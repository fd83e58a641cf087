"""Rich rendering of a simulation, next to the estimator's figures. Presentation only."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:  # pragma: no cover
    from vramfit.estimate.result import EstimateResult
    from vramfit.sim.result import SimulationResult

GiB = 1024**3


def _gib(n: int | None) -> str:
    return "—" if n is None else f"{n / GiB:,.2f}"


def _diff(sim: int | None, est: int | None) -> str:
    """Estimator minus simulator, in GiB and percent of the simulated figure."""
    if sim is None or est is None:
        return ""
    d = est - sim
    pct = f" ({100 * d / sim:+.1f} %)" if sim else ""
    color = "green" if sim and abs(d) <= 0.03 * sim else "yellow"
    return f"[{color}]{d / GiB:+,.2f}{pct}[/{color}]"


def render_simulation(result: SimulationResult, estimate: EstimateResult | None, console: Console) -> None:
    """Print the simulated peaks, components, phase timeline and top tensors; the estimate alongside."""
    r = result.result
    _print_header(result, estimate, console)
    console.print(_peak_table(result, estimate))
    console.print(_components_table(result, estimate))
    console.print(_timeline_table(result))
    if result.top_tensors:
        console.print(_top_tensors_table(result))
    if r.host_bytes:
        console.print(f"host memory (offloaded activations / paged optimizer state): {_gib(r.host_bytes)} GiB")
    console.print("[bold]Assumptions[/bold]")
    for a in r.assumptions:
        console.print(f" • {a}", markup=False)


def _print_header(result: SimulationResult, estimate: EstimateResult | None, console: Console) -> None:
    """The scenario line, how the trace was taken, and the parameter counts."""
    r = result.result
    sc = r.scenario
    console.print(
        f"[bold]{escape(r.model.id)} · {sc.method.value} · {sc.precision.value} · mb {sc.micro_batch_size} × seq "
        f"{sc.seq_len} · {sc.num_gpus} GPU{'s' if sc.num_gpus > 1 else ''} · simulated[/bold]"
    )
    traced = " and ".join(str(d) for d in result.layers_traced)
    how = f"traced {traced} of {result.num_layers} layers, extrapolated" if result.extrapolated \
        else f"traced all {result.num_layers} layers"
    rank = f" · rank {result.rank} of {result.world_size}" if result.world_size > 1 else ""
    console.print(f"{how} · {result.seconds:.1f} s{rank} · peak in {result.peak_label}")
    console.print(
        f"parameters {r.model.num_params:,} · trainable {r.model.num_trainable_params:,}"
        + (f" (estimator: {estimate.model.num_trainable_params:,})"
           if estimate and estimate.model.num_trainable_params != r.model.num_trainable_params else "")
    )


def _comparison_table(title: str, first: str, last: str, estimate: EstimateResult | None) -> Table:
    """A table of simulated GiB, with the estimate and the difference when there is one."""
    t = Table(title=title, title_justify="left")
    t.add_column(first)
    t.add_column("simulated GiB", justify="right")
    if estimate is not None:
        t.add_column("estimated GiB", justify="right")
        t.add_column("estimate − sim", justify="right")
    t.add_column(last, style="dim")
    return t


def _peak_table(result: SimulationResult, estimate: EstimateResult | None) -> Table:
    r = result.result
    p = _comparison_table("Peak per GPU", "counter", "what it matches", estimate)
    rows = (
        ("allocated", r.peak.allocated_bytes, estimate.peak.allocated_bytes if estimate else None,
         "torch.cuda.max_memory_allocated()"),
        ("reserved", r.peak.reserved_bytes, estimate.peak.reserved_bytes if estimate else None,
         "torch.cuda.max_memory_reserved()"),
        ("device", r.peak.device_bytes, estimate.peak.device_bytes if estimate else None, "nvidia-smi"),
    )
    for name, sim, est, what in rows:
        cells = [name, _gib(sim)] + ([_gib(est), _diff(sim, est)] if estimate is not None else []) + [what]
        p.add_row(*cells)
    return p


def _components_table(result: SimulationResult, estimate: EstimateResult | None) -> Table:
    r = result.result
    c = _comparison_table(f"Components at the peak ({result.peak_label})", "component", "seen by", estimate)
    sim_c = {x.name: x for x in r.components}
    est_c = {x.name: x for x in estimate.components} if estimate is not None else {}
    for name in list(sim_c) + [n for n in est_c if n not in sim_c]:
        s, e = sim_c.get(name), est_c.get(name)
        sb, eb = (s.bytes if s else None), (e.bytes if e else None)
        seen = (s or e).counted_in if (s or e) else ""
        cells = [name, _gib(sb)] + ([_gib(eb), _diff(sb or 0, eb or 0) if (sb or eb) else ""]
                                    if estimate is not None else []) + [seen]
        c.add_row(*cells)
    return c


def _timeline_table(result: SimulationResult) -> Table:
    r = result.result
    t = Table(title="Timeline (allocated, per phase)", title_justify="left")
    t.add_column("phase")
    t.add_column("GiB", justify="right")
    t.add_column("", no_wrap=True)
    top = max((b for _, b in result.timeline), default=1) or 1
    for label, b in result.timeline:
        bar = "█" * max(0, round(30 * b / top))
        style = "bold" if b == r.peak.allocated_bytes else ""
        t.add_row(f"[{style}]{label}[/{style}]" if style else label, _gib(b), f"[dim]{bar}[/dim]")
    return t


def _top_tensors_table(result: SimulationResult) -> Table:
    tt = Table(title="Largest tensors live at the peak" + (" (from the deepest traced model)"
                                                           if result.extrapolated else ""),
               title_justify="left")
    for col in ("MiB", "shape", "dtype", "component", "made by"):
        tt.add_column(col, justify="right" if col == "MiB" else "left")
    for x in result.top_tensors:
        tt.add_row(f"{x.bytes / 2**20:,.1f}", "×".join(map(str, x.shape)) or "scalar", x.dtype, x.component,
                   f"{x.where} · {x.op}")
    return tt
