"""``plan``'s output options (--top, --export, --pick, --export-dir, --write-to): checked before any work or
output, then the picked plan's engine files written."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from vramfit.cli.from_config import check_write_to
from vramfit.errors import ScenarioError
from vramfit.safe_input import holds_other, path_kind, shown, write_text_file
from vramfit.units import GB, GiB

_PICK_NAMES = ("cheapest", "fastest")


def check_outputs(top: int, export: str | None, pick: str, export_dir: Path, write_to: Path | None) -> None:
    """Refuse bad output options before the plan is computed or printed (they used to fail after the table)."""
    if top < 1:
        raise ScenarioError("top", f"must be 1 or more (rows to show), got {top}")
    if export:
        from vramfit.plan.export import check_engine

        check_engine(export)
        if path_kind("export_dir", export_dir) not in ("dir", "missing"):
            raise ScenarioError("export_dir", f"{shown(str(export_dir))} exists and is not a folder")
    if pick not in _PICK_NAMES and not (pick.isascii() and pick.isdigit() and int(pick) >= 1):
        raise ScenarioError("pick", f"must be cheapest, fastest or a row number from 1, got {shown(pick)}")
    check_write_to("write-to", write_to)


def pick_plan(r, pick: str):
    """The plan ``--pick`` names among ``r.plans`` (its form checked by :func:`check_outputs`)."""
    if pick == "cheapest":
        return r.cheapest
    if pick == "fastest":
        return r.fastest
    if not (pick.isascii() and pick.isdigit()) or not 1 <= int(pick) <= len(r.plans):
        raise ScenarioError("pick", f"must be cheapest, fastest or a row number 1..{len(r.plans)}, got {shown(pick)}")
    return r.plans[int(pick) - 1]


def write_export(plan, engine: str, out_dir: Path, epochs: float, say: Console, batching: dict | None = None) -> None:
    """The files of ``plan`` for ``engine``; what was written, the command and the notes go to ``say`` (stderr when
    stdout carries --json). ``batching``: the dataset's batching policy the plan was sized for (export_plan)."""
    from vramfit.plan.export import export_plan

    ex = export_plan(plan, engine, epochs=epochs, batching=batching)
    taken = [name for name, text in ex.files.items() if holds_other(out_dir / name, text)]
    if taken:  # all or nothing, before any file is written: a user's own file is never replaced
        raise ScenarioError("export_dir", f"{', '.join(shown(str(out_dir / n)) for n in taken)} already "
                            f"{'exists' if len(taken) == 1 else 'exist'} with other content; vramfit never writes over "
                            "a file: give another --export-dir or move it")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ScenarioError("export_dir", f"cannot create the folder {shown(str(out_dir))}: {exc.strerror}") from None
    for name, text in ex.files.items():
        write_text_file("export_dir", out_dir / name, text)
        say.print(f"wrote {out_dir / name}", highlight=False, markup=False)
    say.print(f"run: {ex.command}")
    for n in ex.notes:
        say.print(f" • {n}")


def gib1(n: int | None) -> str:
    """GiB to one decimal, as the planner's tables print them; empty for None."""
    return "" if n is None else f"{n / GiB:,.1f}"


def disk_line(d) -> str:
    """The top plan's disk at its peak (plan/disk.py disk_needed): while a checkpoint is saved, kept + 1 are on disk."""
    saving = " while one is saved" if d.checkpoints_on_disk > d.checkpoints_kept else ""
    # the final model is written after the last save, beside the kept ones: the peak is the larger moment
    final = "after the last save" if saving else "at the end"
    return (f"Disk for #1: base model {d.base_model_bytes / GB:,.0f} GB, dataset {d.dataset_raw_bytes / GB:,.1f} GB raw + "
            f"{d.dataset_tokenized_bytes / GB:,.1f} GB tokenized, checkpoint {d.checkpoint_bytes / GB:,.1f} GB × "
            f"{d.checkpoints_on_disk}{saving}, final {d.final_model_bytes / GB:,.1f} GB ({final}) → "
            f"{d.total_bytes / GB:,.0f} GB at peak")


def render_changes(console: Console, gid: str, changes: list) -> None:
    if not changes:
        console.print(f"{gid}: the scenario already fits.")
        return
    t = Table(title=f"{gid}: the scenario does not fit as given; changes ranked", title_justify="left")
    for col in ("change", "set", "needs GiB after", "saves GiB", "fits", "time×", "trade-off"):
        t.add_column(col, overflow="fold")
    for c in changes:
        setk = ", ".join(f"{k}={v}" for k, v in c.changes.items())
        t.add_row(escape(c.description), escape(setk), gib1(c.required_bytes), gib1(c.saving_bytes),
                  "[green]yes[/green]" if c.fits else "[red]no[/red]" + (
                      f" (host RAM {c.host_ram_bytes / GB:,.0f} GB per GPU)" if c.host_ram_bytes else ""),
                  "" if c.slowdown is None else f"{c.slowdown:.2f}", c.tradeoff)
    console.print(t)
