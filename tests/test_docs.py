"""The README and docs/ are the contract: a test fails when a scenario key or a command is undocumented."""

from pathlib import Path

import pytest

from vramfit.scenario import SCENARIO_KEYS

ROOT = Path(__file__).resolve().parent.parent
#: The README and every documentation page (docs/), as one text.
README = "\n".join(p.read_text(encoding="utf-8") for p in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))])


@pytest.mark.parametrize("key", SCENARIO_KEYS)
def test_every_scenario_key_is_documented(key):
    assert f"`{key}`" in README or f" {key}," in README or f"{key})" in README, key


def _command_names():
    from typer.main import get_command

    from vramfit.cli.main import app

    group = get_command(app)
    return sorted(group.commands)


def test_every_command_is_documented():
    missing = [name for name in _command_names() if f"vramfit {name}" not in README]
    assert not missing, f"commands missing from the README and docs/: {missing}"
