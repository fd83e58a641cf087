"""Fuzz tests run offline, in a scratch folder, against a scratch runs database."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True, scope="module")
def scratch(tmp_path_factory):
    """No Hub, no writes outside a temporary folder (random --db and output values land there)."""
    d = tmp_path_factory.mktemp("fuzz")
    saved = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "VRAMFIT_DB")}
    cwd = os.getcwd()
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["VRAMFIT_DB"] = str(d / "runs.sqlite")
    os.chdir(d)
    yield d
    os.chdir(cwd)
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
