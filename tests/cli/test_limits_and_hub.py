"""vramfit.limits (every limit named, with its reason, listed in the README) and the Hub deadline (item 7)."""

from __future__ import annotations

import socket
import sys
import threading
import time
import types
from pathlib import Path

import pytest

from vramfit import limits
from vramfit.errors import ModelError

README = Path(__file__).resolve().parents[2] / "docs" / "limits.md"  # moved from the README


def test_every_limit_has_a_reason():
    found = limits.limits()
    assert {"MAX_CONFIG_LAYERS", "MAX_PARAMS", "MAX_SWEEP_VALUES", "HUB_DEADLINE_S", "MIN_MFU"} <= set(found)
    for name, (value, reason) in found.items():
        assert isinstance(value, (int, float)) and len(reason) > 20, name


def test_readme_limits_section_is_generated_from_limits_py():
    text = README.read_text(encoding="utf-8")
    assert limits.limits_markdown() in text, "README 'Limits' is stale: paste limits.limits_markdown()"


def test_hub_lookup_has_one_overall_deadline(monkeypatch):
    """A Hub that accepts connections and never answers: the lookup ends at HUB_DEADLINE_S."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []
    threading.Thread(target=lambda: held.append(server.accept()[0]), daemon=True).start()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)

    def download(repo_id, filename, local_files_only=False):
        if local_files_only:
            raise FileNotFoundError("not cached")
        time.sleep(30)  # the silent Hub: huggingface_hub would retry for minutes

    module = types.ModuleType("huggingface_hub")
    module.hf_hub_download = download
    monkeypatch.setitem(sys.modules, "huggingface_hub", module)
    monkeypatch.setattr(limits, "HUB_DEADLINE_S", 0.5)
    from vramfit.models import resolve_model

    t = time.perf_counter()
    with pytest.raises(ModelError, match=r"did not answer .* within 0.5 s \(HUB_DEADLINE_S\)"):
        resolve_model("someone/silent-model")
    assert time.perf_counter() - t < 3
    server.close()
