"""Fixtures for the simulator tests; helpers live in simconfigs.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from simconfigs import GiB, catalog_config, tiny  # noqa: E402,F401


@pytest.fixture
def config_file(tmp_path: Path):
    """Write a config dict as ``config.json`` and return its path (a scenario's ``model``)."""

    def write(cfg: dict, name: str = "model") -> str:
        d = tmp_path / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(cfg))
        return str(d / "config.json")

    return write
