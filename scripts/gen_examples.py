#!/usr/bin/env python
"""Refresh every example output in README.md and docs/ by running its command (in the spirit of cog).

A generated example is marked in the Markdown::

    <!-- example: vramfit estimate --params 7B --method qlora -->
    ```console
    $ vramfit estimate --params 7B --method qlora
    ...the output, rewritten by this script...
    ```

Options after the command, separated by ``;``: ``columns=N`` (terminal width, default 100), ``cwd=PATH``
(relative to the repository root; default the root), ``stderr`` (show stderr only), ``head=N`` (the first N
lines, then ``…``), ``tmpdb`` (a fresh runs database for ``runs``/``calibrate``), ``noserve`` (``vramfit serve``: print its start line, do not start the server).
A generated table is marked ``<!-- generated: NAME -->`` … ``<!-- /generated -->`` (NAME in :data:`TABLES`).
``<!-- snippet -->`` before a ```` ```python ```` block makes the plain block after it that code's printed
output; ``<!-- stderr example -->`` before a block holding one ``vramfit …`` line makes the plain block after
it that command's stderr (both run from the repository root). Commands run in-process
through the real Typer app with no user calibration file. ``docs/commands/<name>.md`` (one page per
command, its ``--help``) and the Commands section of ``mkdocs.yml`` are written from the app's command
list, so a new command gets its page.

    python scripts/gen_examples.py          # rewrite every example and command page
    python scripts/gen_examples.py --check  # exit 1, naming each example that differs (tests/test_docs_examples.py)
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARK = re.compile(r"<!-- example: (?P<spec>.+?) -->\n```console\n(?P<body>.*?)```\n", re.S)
COMMANDS_DIR = ROOT / "docs" / "commands"


@dataclass(frozen=True)
class Example:
    path: Path
    spec: str
    body: str
    fresh: str


def _options(spec: str) -> tuple[str, dict[str, str]]:
    command, *opts = [p.strip() for p in spec.split(";")]
    out = {}
    for o in opts:
        k, _, v = o.partition("=")
        out[k] = v or "1"
    return command, out


def _invoke(args: list[str], env: dict[str, str], opts: dict[str, str]) -> str:
    from typer.testing import CliRunner

    from vramfit.cli.main import app

    old = Path.cwd()
    os.chdir(ROOT / opts.get("cwd", "."))
    try:
        if "noserve" in opts:
            import uvicorn

            real, uvicorn.run = uvicorn.run, lambda *a, **k: None
        res = CliRunner().invoke(app, args, env=env, prog_name="vramfit")
    finally:
        os.chdir(old)
        if "noserve" in opts:
            uvicorn.run = real
    return res.stderr if "stderr" in opts else res.output


def run(spec: str) -> str:
    """``$ command`` and what it prints, trailing spaces removed. ``a && b`` runs both, in turn."""
    import tempfile

    command, opts = _options(spec)
    env = {"COLUMNS": opts.get("columns", "100"), "NO_COLOR": "1", "TERM": "dumb", "VRAMFIT_CALIBRATION": "off"}
    text = ""
    with tempfile.TemporaryDirectory() as tmp:
        if "tmpdb" in opts:  # a fresh runs database, shown as runs.sqlite
            env["VRAMFIT_DB"] = str(Path(tmp) / "runs.sqlite")
        for part in command.split(" && "):
            args = shlex.split(part)
            if args[0] != "vramfit":
                raise SystemExit(f"example command must start with 'vramfit': {part}")
            text += _invoke(args[1:], env, opts)
        text = text.replace(f"sqlite:///{tmp}/", "sqlite:///").replace(tmp + "/", "")
    lines = [line.rstrip() for line in text.rstrip("\n").splitlines()]
    if "head" in opts and len(lines) > int(opts["head"]):
        lines = lines[: int(opts["head"])] + ["…"]
    return "\n".join([f"$ {command}", *lines]) + "\n"


def constants_table() -> str:
    """Every documented constant of the estimator with its value and source (vramfit.estimate.constants)."""
    from vramfit.estimate import constants

    rows = ["| constant | value | unit | source |", "|---|---:|---|---|"]
    for name, c in vars(constants).items():
        if isinstance(c, constants.Constant):
            src = c.source.replace("|", "\\|") + (f" ({c.note.replace('|', '/')})" if c.note else "")
            rows.append(f"| `{name}` | {c.value:,} | {c.unit} | {src} |")
    return "\n".join(rows) + "\n"


def guide_claims_table() -> str:
    """The guide's figures with their sections and our verdicts (src/vramfit/data/guide-claims.json)."""
    from vramfit.plan.guide import guide_claims

    rows = ["| section | the guide says (our words) | verdict | why |", "|---|---|---|---|"]
    for c in guide_claims()["claims"]:
        rows.append(f"| {c['section']} | {c['says']} | {c['verdict']} | {c.get('why', '')} |")
    return "\n".join(rows) + "\n"


def _benchmark_markdown(name: str) -> str:
    """``python benchmarks/NAME.py --markdown``, run in this process."""
    import contextlib
    import importlib.util
    import io

    spec = importlib.util.spec_from_file_location(f"vramfit_{name}_bench", ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        mod.main(["--markdown"])
    return buf.getvalue()


def accuracy_table() -> str:
    """The validation table: ``python benchmarks/accuracy.py --markdown`` on benchmarks/data/measured/."""
    return _benchmark_markdown("accuracy")


def speed_table() -> str:
    """The speed validation table: ``python benchmarks/speed_accuracy.py --markdown`` on its published rows."""
    return _benchmark_markdown("speed_accuracy")


def max_context_table() -> str:
    """The long-context table: ``python benchmarks/max_context.py --markdown`` on data/measured/max_context.jsonl."""
    return _benchmark_markdown("max_context")


def limits_list() -> str:
    """docs/limits.md's list: every named limit of ``vramfit.limits`` with its value."""
    from vramfit import limits

    return limits.limits_markdown()


TABLES = {"constants": constants_table, "guide-claims": guide_claims_table, "accuracy": accuracy_table,
          "speed": speed_table, "limits": limits_list, "max-context": max_context_table}
TABLE = re.compile(r"<!-- generated: (?P<name>[a-z-]+) -->\n(?P<body>.*?)<!-- /generated -->\n", re.S)


SNIPPET = re.compile(r"(?P<head><!-- snippet -->\n```python\n(?P<code>.*?)\n```\n```\n)(?P<out>.*?)```\n", re.S)
STDERR = re.compile(r"(?P<head><!-- stderr example -->\n```\n(?P<cmd>vramfit [^\n]*)\n```\n```\n)(?P<out>.*?)\n```\n", re.S)


def _snippet_output(code: str) -> str:
    """What the Python ``code`` prints, run from the repository root."""
    import contextlib
    import io

    out, here = io.StringIO(), os.getcwd()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, "docs snippet", "exec"), {})
    finally:
        os.chdir(here)
    return out.getvalue()


def _stderr_output(cmd: str) -> str:
    """The stderr of ``vramfit …`` (one line, split on spaces) run in-process from the repository root."""
    from typer.testing import CliRunner

    from vramfit.cli.main import app

    here = os.getcwd()
    os.chdir(ROOT)
    try:
        r = CliRunner().invoke(app, cmd.split()[1:])
    finally:
        os.chdir(here)
    if r.exit_code != 0:
        raise SystemExit(f"{cmd}: exit {r.exit_code}\n{r.output}")
    return r.stderr.rstrip("\n")


def _tables(text: str) -> str:
    """``text`` with its generated tables, snippet outputs and stderr examples refreshed."""
    text = TABLE.sub(lambda m: f"<!-- generated: {m.group('name')} -->\n{TABLES[m.group('name')]()}<!-- /generated -->\n",
                     text)
    text = SNIPPET.sub(lambda m: m.group("head") + _snippet_output(m.group("code")) + "```\n", text)
    return STDERR.sub(lambda m: m.group("head") + _stderr_output(m.group("cmd")) + "\n```\n", text)


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def examples(files: list[Path] | None = None) -> list[Example]:
    out = []
    cache: dict[str, str] = {}
    for path in files or markdown_files():
        for m in MARK.finditer(path.read_text(encoding="utf-8")):
            spec = m.group("spec")
            if spec not in cache:
                cache[spec] = run(spec)
            out.append(Example(path, spec, m.group("body"), cache[spec]))
    return out


def rewrite(path: Path) -> bool:
    text = path.read_text(encoding="utf-8")
    new = _tables(text)
    new = MARK.sub(lambda m: f"<!-- example: {m.group('spec')} -->\n```console\n{run(m.group('spec'))}```\n", new)
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


def command_names() -> dict[str, str]:
    """Every command of the app (``runs`` sub-commands as ``runs list`` ...) and its one-line summary."""
    from typer.main import get_command

    from vramfit.cli.main import app

    group = get_command(app)
    out = {}
    for name, cmd in sorted(group.commands.items()):
        if hasattr(cmd, "commands"):
            for sub, c in sorted(cmd.commands.items()):
                out[f"{name} {sub}"] = (c.help or "").strip().split("\n")[0]
        else:
            out[name] = (cmd.help or "").strip().split("\n")[0]
    return out


def command_page(name: str, summary: str) -> str:
    return (f"# vramfit {name}\n\n<!-- generated by scripts/gen_examples.py from the command's --help -->\n\n"
            f"{summary}\n\n<!-- example: vramfit {name} --help; columns=100 -->\n```console\n```\n")


def command_pages() -> dict[Path, str]:
    """The page of each command, with its --help example filled in."""
    pages = {}
    for name, summary in command_names().items():
        text = command_page(name, summary)
        text = MARK.sub(lambda m: f"<!-- example: {m.group('spec')} -->\n```console\n{run(m.group('spec'))}```\n", text)
        pages[COMMANDS_DIR / f"{name.replace(' ', '-')}.md"] = text
    return pages


NAV = re.compile(r"  - Commands:\n(?:      - commands/.*\n)+")


def nav(text: str, pages: dict[Path, str]) -> str:
    """mkdocs.yml with its Commands section listing every command page."""
    items = "".join(f"      - commands/{p.name}\n" for p in sorted(pages))
    return NAV.sub(lambda m: "  - Commands:\n" + items, text)


def check() -> list[str]:
    """What differs: stale examples and command pages (missing, extra or out of date)."""
    stale = [f"{e.path.relative_to(ROOT)}: {e.spec}" for e in examples() if e.body != e.fresh]
    for path in markdown_files():
        text = path.read_text(encoding="utf-8")
        if _tables(text) != text:
            stale.append(f"{path.relative_to(ROOT)}: a generated table or output")
    pages = command_pages()
    for path, text in pages.items():
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(f"{path.relative_to(ROOT)}: out of date")
    for path in COMMANDS_DIR.glob("*.md"):
        if path not in pages:
            stale.append(f"{path.relative_to(ROOT)}: no such command")
    mk = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    if nav(mk, pages) != mk:
        stale.append("mkdocs.yml: the Commands section of nav")
    return stale


def main(argv: list[str]) -> int:
    if "--check" in argv:
        stale = check()
        for s in stale:
            print(f"stale: {s}")
        if stale:
            print("refresh: python scripts/gen_examples.py")
        return 1 if stale else 0
    COMMANDS_DIR.mkdir(parents=True, exist_ok=True)
    pages = command_pages()
    for path in COMMANDS_DIR.glob("*.md"):
        if path not in pages:
            path.unlink()
    for path, text in pages.items():
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    mk = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    if nav(mk, pages) != mk:
        (ROOT / "mkdocs.yml").write_text(nav(mk, pages), encoding="utf-8")
        print("wrote mkdocs.yml (Commands)")
    for path in markdown_files():
        if path.parent != COMMANDS_DIR and rewrite(path):
            print(f"refreshed {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "src"))
    raise SystemExit(main(sys.argv[1:]))
