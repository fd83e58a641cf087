import pytest

from vramfit import gpus


@pytest.fixture(autouse=True)
def isolated_gpu_catalog(tmp_path_factory, monkeypatch):
    """No user GPU file leaks in or out: an empty config directory, user files forgotten."""
    monkeypatch.setenv("VRAMFIT_CONFIG_DIR", str(tmp_path_factory.mktemp("vramfit-config")))
    gpus.reset_user_gpus()
    yield
    gpus.reset_user_gpus()
