"""Session-wide test settings."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_user_calibration(tmp_path_factory, monkeypatch):
    """No test reads the calibration file of the user running the tests (vramfit.calibration.default_path)."""
    monkeypatch.setenv("VRAMFIT_CALIBRATION", str(tmp_path_factory.getbasetemp() / "no-calibration.json"))
