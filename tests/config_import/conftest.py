"""Shared fixtures of the config-import tests."""

from pathlib import Path

import pytest
import yaml

FIX = Path(__file__).parent / "fixtures"


@pytest.fixture
def accelerate_config(tmp_path):
    """Write the bundled accelerate FSDP config with ``fsdp_config`` keys overridden; returns its path."""

    def write(**fsdp) -> Path:
        cfg = yaml.safe_load((FIX / "accelerate_fsdp.yaml").read_text())
        cfg["fsdp_config"].update(fsdp)
        path = tmp_path / "accelerate.yaml"
        path.write_text(yaml.safe_dump(cfg))
        return path

    return write
