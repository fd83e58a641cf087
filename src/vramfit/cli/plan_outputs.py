"""``plan``'s output options (--top, --export, --pick, --export-dir, --write-to): checked before any work or
output, then the picked plan's engine files written."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from vramfit.cli.from_config import check_write_to
from vramfit.errors import ScenarioError
from vramfit.safe_input import path_kind, shown, write_text_file

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
    taken = [name for name, text in ex.files.items() if _holds_other(out_dir / name, text)]
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


def _holds_other(path: Path, text: str) -> bool:
    """``path`` exists and is not already ``text`` (the same export written again is no loss)."""
    try:
        return path.exists() and path.read_text(encoding="utf-8") != text
    except (OSError, UnicodeDecodeError):
        return path.exists()
