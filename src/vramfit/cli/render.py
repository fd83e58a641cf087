"""Rich rendering of results. Pure presentation: no arithmetic beyond unit conversion."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from vramfit.estimate.result import EstimateResult
from vramfit.models.context import trained_to
from vramfit.scenario import parse_scenario
from vramfit.stage_keys import min_micro_batch
from vramfit.units import gb, gib


def render_estimate(r: EstimateResult, console: Console) -> None:
    sc = r.scenario
    title = (
        f"{r.model.id} · {sc.method.value} · {sc.precision.value} · mb {sc.micro_batch_size} × seq {sc.seq_len}"
        f" · {sc.num_gpus} GPU{'s' if sc.num_gpus > 1 else ''}"
    )
    console.print(f"[bold]{escape(title)}[/bold]")  # a config path may hold "[/...]": text, not markup
    console.print(
        f"parameters {r.model.num_params:,} · trainable {r.model.num_trainable_params:,} "
        f"({100 * r.model.num_trainable_params / max(1, r.model.num_params):.3f} %)"
    )
    t = Table(title=f"Per-GPU memory by component, at the peak ({r.peak.phase})", title_justify="left")
    t.add_column("component")
    t.add_column("GiB", justify="right")
    t.add_column("live", style="dim")
    t.add_column("seen by", style="dim")
    wide = console.width >= 110
    if wide:
        t.add_column("what", style="dim", overflow="fold")
    for c in r.components:
        row = [c.name, gib(c.bytes), c.phase, c.counted_in] + ([c.detail] if wide else [])
        t.add_row(*row)
    console.print(t)

    p = Table(title="Peak per GPU", title_justify="left")
    p.add_column("counter")
    p.add_column("GiB (2^30 B)", justify="right")
    p.add_column("GB (10^9 B)", justify="right")
    p.add_column("what it matches", style="dim")
    p.add_row("allocated", gib(r.peak.allocated_bytes), gb(r.peak.allocated_bytes), "torch.cuda.max_memory_allocated()")
    p.add_row("reserved", gib(r.peak.reserved_bytes), gb(r.peak.reserved_bytes), "torch.cuda.max_memory_reserved()")
    p.add_row("[bold]device[/bold]", f"[bold]{gib(r.peak.device_bytes)}[/bold]", gb(r.peak.device_bytes), "nvidia-smi")
    console.print(p)
    if released_materially(r):
        console.print(f"needs {gib(r.peak.required_bytes)} GiB when the allocator releases its cache (what the fit "
                      "verdict counts)")
    phases = ", ".join(f"{x.phase} {gib(x.allocated_bytes)}" for x in r.phases)
    console.print(f"allocated by phase (GiB): {phases}; peak in [bold]{r.peak.phase}[/bold]")
    at_peak = ", ".join(f"{name} {gib(b)}" for name, b in sorted(r.peak.breakdown, key=lambda x: -x[1]))
    console.print(f"live at the peak (GiB): {at_peak}")
    if r.ranks:
        render_ranks(r, console)
    if r.host_bytes:
        console.print(f"host RAM for offloaded state: {gib(r.host_bytes)} GiB")
    accuracy_line(r.accuracy, console)

    if r.fits:
        render_fits(r, console)
    console.print("[bold]Assumptions[/bold]")
    for a in r.assumptions:
        console.print(f" • {a}", markup=False)


def released_materially(r: EstimateResult) -> bool:
    """Whether the cache released on an out-of-memory retry is worth a line: whenever the figure the fit verdict
    counts differs from the device peak at the table's rounding (0.01 GiB), so the "needs" figure that ``plan`` and
    ``fit`` state is always found here too."""
    return gib(r.peak.required_bytes) != gib(r.peak.device_bytes)


def render_ranks(r: EstimateResult, console: Console) -> None:
    """Tensor/pipeline/context parallel: each pipeline rank's share, the most loaded one marked."""
    t = Table(title="Per rank (tensor / pipeline / context / expert parallel)", title_justify="left")
    for col in ("rank", "layers", "micro-batches in flight", "parameters", "activations GiB", "allocated GiB"):
        t.add_column(col, justify="left" if col == "rank" else "right")
    top = max(x.allocated_bytes for x in r.ranks)
    for x in r.ranks:
        mark = " (peak)" if x.allocated_bytes == top else ""
        t.add_row(f"{x.role}{mark}", str(x.layers), f"{x.in_flight:g}", f"{x.params:,}", gib(x.activations_bytes),
                  gib(x.allocated_bytes))
    console.print(t)


def accuracy_line(accuracy: dict | None, console: Console, which: str = "") -> None:
    """How far to trust a figure (``result.accuracy``): yellow where no measurement is on its path; ``which``: the
    figures it is about (a sweep's values)."""
    if accuracy:
        style = "" if accuracy["measured_path"] else "[yellow]"
        console.print(f"{style}accuracy{escape(f' ({which})') if which else ''}: {escape(accuracy['note'])}")


def render_fits(r: EstimateResult, console: Console) -> None:
    """The card verdicts (made by the planner: ``vramfit.plan.verdict``) and what "fits" means."""
    from vramfit.plan.verdict import definition

    margin = r.fits[0].safety_margin
    f = Table(title="Fits one GPU?", title_justify="left")
    f.add_column("GPU", no_wrap=True)
    f.add_column("usable GiB", justify="right")
    f.add_column(f"limit (−{margin:.0%})", justify="right")
    f.add_column("fits")
    f.add_column("headroom GiB", justify="right")
    for fit in r.fits:
        word = ("[yellow]with paging[/yellow]" if fit.paging_bytes else "[green]yes[/green]" if fit.fits
                else "[red]cannot run[/red]" if fit.verdict.startswith("cannot run") else "[red]no[/red]")
        f.add_row(escape(fit.name), gib(fit.usable_bytes), gib(fit.limit_bytes), word, gib(fit.headroom_bytes))
    console.print(f)
    for fit in r.fits:
        if fit.paging_bytes or fit.verdict.startswith("cannot run"):
            console.print(f"{fit.name}: {fit.verdict}", highlight=False, markup=False)
    console.print(f"[dim]{definition(margin)}[/dim]", highlight=False)


def gib1(n: int | None) -> str:
    """GiB with one decimal (empty for None)."""
    return "" if n is None else f"{n / 2**30:,.1f}"


def render_fit(r, sc, cal, console: Console) -> None:
    """The fit report: the verdict, the largest micro-batch and sequence, and the batch × sequence grid. Every size
    stated next to a verdict is the verdict's own figure (``required_bytes``: the device peak less the cache PyTorch
    releases before an out-of-memory error, vramfit.plan.verdict), so it is at most the limit wherever it fits."""
    console.print(f"[bold]{escape(r.gpu_name)}[/bold]: usable {gib1(r.usable_bytes)} GiB, limit {gib1(r.limit_bytes)} GiB "
                  f"(margin {r.safety_margin:.0%}); your scenario needs {gib1(r.required_bytes)} GiB "
                  f"(device peak {gib1(r.device_bytes)}) → "
                  + (f"[{'yellow' if r.paging_bytes else 'green'}]{r.verdict}[/]" if r.fits else f"[red]{escape(r.verdict)}[/red]"))
    if cal is not None and cal.for_card(sc.gpu):
        console.print(f"[dim]{cal.for_card(sc.gpu).note()}[/dim]")
    accuracy_line(r.accuracy, console)
    # GRPO: the micro-batches tried keep the scenario's accumulation (num_generations must divide the step's
    # completions); typed without --grad-accum, a micro-batch takes the least that does (plan/fit.py)
    n = r.max_micro_batch_grad_accum
    accum = f" × {n} accumulation (--grad-accum {n})" if r.scenario.get("stage") == "grpo" else ""
    least = min_micro_batch(parse_scenario(r.scenario))  # KTO's 2, GRPO's whole groups (stage_keys)
    mb = (f"none (micro-batch {least} does not fit)" if r.max_micro_batch is None
          else f"{r.max_micro_batch}{accum} (needs {gib1(r.max_micro_batch_required_bytes)} GiB)")
    seq = "none" if r.max_seq_len is None else f"{r.max_seq_len:,} tokens (needs {gib1(r.max_seq_len_required_bytes)} GiB)"
    console.print(f"largest micro-batch at seq {r.max_micro_batch_seq_len or r.scenario['seq_len']}: {mb}")
    console.print(f"longest sequence at micro-batch {r.scenario['micro_batch_size']}: {seq}"
                  + (f" [dim]({trained_to(r.max_position_embeddings)})[/dim]" if r.max_position_embeddings else ""))
    t = Table(title="GiB needed per GPU, the fit verdict's figure (✓ fits the limit; unmarked: does not)",
              title_justify="left")
    t.add_column("mb \\ seq")
    for s in r.seq_lens:
        t.add_column(f"{s:,}", justify="right")
    for b, row in zip(r.batches, r.grid, strict=True):
        t.add_row(str(b), *[("" if c.required_bytes is None else
                             f"[green]{gib1(c.required_bytes)} ✓[/]" if c.fits else f"[red]{gib1(c.required_bytes)}[/]")
                            for c in row])
    console.print(t)
    errors = sorted({c.error for row in r.grid for c in row if c.required_bytes is None and c.error})
    for e in errors[:3]:  # why a cell is blank: e.g. GRPO's seq_len must hold its completion_len
        console.print(f"[dim]blank: {escape(e)}[/dim]")
    if r.verdict.startswith("cannot run"):  # refused whatever its memory (plan/verdict.py card_refusal): say why
        console.print("[dim]No micro-batch or sequence runs on this card: the verdict above says why, and what runs.[/dim]")
    elif r.max_micro_batch is None:
        console.print("[dim]Nothing fits as given: `vramfit plan` with the same options ranks the changes that make it "
                      "fit (sharding, checkpointing, offload, more cards).[/dim]")


def fitting_table(console: Console, build, order: tuple[str, ...]) -> tuple[Table, list[str]]:
    """``build(dropped)``'s table with as many columns as the console's width holds: columns go in ``order`` until
    the table's natural width fits, so no cell is cut (rich folds or crops a table wider than the console). Returns
    the table and the columns left out, which the caller names ("left out at N columns: ...")."""
    from rich.measure import Measurement

    dropped: list[str] = []
    while True:
        t = build(dropped)
        if len(dropped) == len(order) or Measurement.get(console, console.options.update_width(10_000), t).maximum \
                <= console.width:
            return t, dropped
        dropped.append(order[len(dropped)])
