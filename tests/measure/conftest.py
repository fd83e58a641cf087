"""Fixtures for the measuring harness: a tiny Llama config, run records, throwaway databases."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

TINY_CONFIG = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
    "max_position_embeddings": 1024, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}

GiB = 2**30


def pytest_configure(config):
    warnings.filterwarnings("ignore", message=".*kernels.*")


@pytest.fixture
def tiny_config(tmp_path: Path) -> Path:
    path = tmp_path / "tiny-config.json"
    path.write_text(json.dumps(TINY_CONFIG), encoding="utf-8")
    return path


@pytest.fixture
def tiny(tiny_config: Path):
    """A scenario factory on the tiny model: ``tiny(method="full", seq_len=64)``."""

    def make(**keys):
        return {"model": str(tiny_config), "seq_len": 32, **keys}

    return make


@pytest.fixture
def make_record():
    """A RunRecord with plausible figures; keyword arguments override fields."""
    import itertools

    from vramfit.measure.records import RunRecord

    counter = itertools.count(1)

    def make(**over):
        n = next(counter)
        base = dict(
            id=f"run{n:04d}abcdef",
            created_at=f"2026-01-01T00:00:{n % 60:02d}Z",
            scenario={"model": "meta-llama/Llama-3.2-1B", "method": "lora", "seq_len": 512},
            environment={"device": "cuda", "gpu_name": "NVIDIA H100 80GB HBM3", "gpu_family": "h100",
                         "gpu_total_bytes": 80 * GiB, "packages": {"torch": "2.13.0"}, "memory_probe": "nvml-process"},
            status="ok", steps_done=5, allocated_bytes=10 * GiB, reserved_bytes=11 * GiB, device_bytes=12 * GiB,
            step_time_s=0.5, tokens_per_s=1024.0,
            estimate={"allocated_bytes": 10 * GiB, "reserved_bytes": 11 * GiB, "device_bytes": 12 * GiB},
            source="vramfit measure test", details={"step_times_s": [0.6, 0.5]},
        )
        base.update(over)
        rec = RunRecord(**base)
        from vramfit.measure.records import validate

        return validate(rec)

    return make


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.sqlite'}"


@pytest.fixture
def store(sqlite_url: str):
    from vramfit.measure.store import RunStore

    st = RunStore(sqlite_url)
    yield st
    st.close()
