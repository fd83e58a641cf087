"""Session-wide test settings."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_user_calibration(tmp_path_factory, monkeypatch):
    """No test reads the calibration file of the user running the tests (vramfit.calibration.default_path), nor one an
    earlier test wrote there (``vramfit calibrate`` without ``--calibration`` writes the default path: removed after
    each test, else every later estimate applied it)."""
    path = tmp_path_factory.getbasetemp() / "no-calibration.json"
    monkeypatch.setenv("VRAMFIT_CALIBRATION", str(path))
    yield
    path.unlink(missing_ok=True)
