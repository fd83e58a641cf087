"""The ``vramfit`` console script: checks the command line's own packages before importing it.

``pip install vramfit`` (no extras) installs the estimator library only; the command line needs the
``cli`` extra (Typer, Rich). Without them ``vramfit`` prints which extra to install, one line per use,
instead of an ImportError traceback.
"""

from __future__ import annotations

import importlib.util
import sys

#: Which extra serves which use (README "Install", docs/install.md).
EXTRAS = (
    ("cli", "the commands: estimate, plan, fit, sweep, models, gpus"),
    ("web", "vramfit serve: the web calculator and JSON API (includes cli)"),
    ("sim", "vramfit simulate: run the step on PyTorch's meta device (torch, transformers, peft)"),
    ("measure", "vramfit measure, runs, calibrate: measure real runs on a GPU (torch, SQLAlchemy)"),
    ("postgres", "a shared PostgreSQL runs database: --db postgresql://... (psycopg)"),
    ("all", "everything above"),
)
NEEDED = ("typer", "rich")


def missing_message(missing: list[str]) -> str:
    lines = [f"vramfit: the command line needs the 'cli' extra ({', '.join(missing)} not installed):",
             "    pip install 'vramfit[cli]'", "extras by use:"]
    lines += [f"    vramfit[{name}]: {use}" for name, use in EXTRAS]
    lines.append("Without extras, vramfit is the Python library: from vramfit import estimate")
    return "\n".join(lines)


def run() -> None:
    """Console-script entry point."""
    missing = [m for m in NEEDED if importlib.util.find_spec(m) is None]
    if missing:
        sys.stderr.write(missing_message(missing) + "\n")
        raise SystemExit(2)
    from vramfit.cli.main import run as main_run

    main_run()
