"""Light imports, GPU families, environment capture and the probes that need no GPU."""

from __future__ import annotations

import subprocess
import sys

import pytest

from vramfit.measure.env import gpu_family, package_versions


def test_importing_the_package_and_its_cli_loads_neither_torch_nor_sqlalchemy():
    code = ("import sys, vramfit, vramfit.measure, vramfit.measure.records, vramfit.measure.runner, "
            "vramfit.measure.calibration, vramfit.measure.report, vramfit.measure.launch, vramfit.cli.measure_cmd; "
            "heavy = [m for m in ('torch', 'sqlalchemy', 'transformers', 'peft', 'bitsandbytes') if m in sys.modules]; "
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_lazy_attributes():
    import vramfit.measure as m

    assert m.RunRecord.__name__ == "RunRecord" and callable(m.measure) and callable(m.calibrate)
    with pytest.raises(AttributeError):
        m.nothing_here  # noqa: B018


@pytest.mark.parametrize("name,family", [
    ("NVIDIA A100-SXM4-80GB", "a100"),
    ("NVIDIA A100 80GB PCIe", "a100"),
    ("NVIDIA H100 80GB HBM3", "h100"),
    ("NVIDIA H200", "h200"),
    ("NVIDIA GeForce RTX 4090", "rtx4090"),
    ("NVIDIA RTX A6000", "rtxa6000"),
    ("NVIDIA L40S", "l40s"),
    ("Tesla T4", "t4"),
    ("a100-40gb-sxm", "a100"),
    ("rtx4090", "rtx4090"),
    ("Some Future Card 9000", "somefuturecard9000"),
    (None, "unknown"),
], ids=lambda x: str(x))
def test_gpu_family(name, family):
    assert gpu_family(name) == family


def test_package_versions_name_the_libraries_that_matter():
    v = package_versions()
    assert {"torch", "transformers", "peft", "bitsandbytes", "vramfit"} <= set(v)
    assert v["vramfit"]


def test_capture_on_cpu():
    pytest.importorskip("torch")
    from vramfit.measure.env import capture

    env = capture("cpu", 1, "none")
    assert env["device"] == "cpu" and env["gpu_name"] is None and env["memory_probe"] == "none"
    assert env["packages"]["torch"]


def test_fake_probe_spec_and_prefix_matching():
    pytest.importorskip("torch")
    import torch

    from vramfit.measure.probe import FakeProbe, make_probe

    p = make_probe("fake", "cpu", {"allocated": 1, "reserved": 2, "device": 3, "oom_at": "step2"})
    assert isinstance(p, FakeProbe) and p.peaks() == {"allocated_bytes": 1, "reserved_bytes": 2, "device_bytes": 3}
    p.checkpoint("step1.mb1.forward")
    p.checkpoint("step20.mb1.forward")  # "step2" is a prefix of labels, not of "step20"
    with pytest.raises(torch.OutOfMemoryError):
        p.checkpoint("step2.mb1.forward")
    assert make_probe("none", "cpu").peaks()["device_bytes"] is None


@pytest.mark.parametrize("name,total,gpu_id", [
    ("NVIDIA H100 80GB HBM3", 85_024_112_640, "h100-sxm"),
    ("NVIDIA H100 PCIe", 85_024_112_640, "h100-pcie"),
    ("NVIDIA H100 NVL", 99_950_000_000, "h100-nvl"),
    ("NVIDIA H200", 150_110_000_000, "h200-sxm"),
    ("NVIDIA A100-SXM4-80GB", 85_100_000_000, "a100-80gb-sxm"),
    ("NVIDIA A100-SXM4-40GB", 42_400_000_000, "a100-40gb-sxm"),
    ("NVIDIA A100 80GB PCIe", 85_100_000_000, "a100-80gb-pcie"),
    ("NVIDIA GeForce RTX 4090", 25_250_000_000, "rtx4090"),
    ("NVIDIA RTX A6000", 51_000_000_000, "rtxa6000"),
    ("Some Future Card 9000", 10**11, None),
    (None, None, None),
], ids=lambda x: str(x))
def test_catalog_gpu_id(name, total, gpu_id):
    from vramfit.measure.env import catalog_gpu_id

    assert catalog_gpu_id(name, total) == gpu_id


def test_measured_scenario_names_the_card_it_ran_on():
    from vramfit.measure.runner import _with_detected_gpu
    from vramfit.scenario import parse_scenario

    sc = parse_scenario({"model": "meta-llama/Llama-3.2-1B"})
    remarks: list[str] = []
    env = {"device": "cuda", "gpu_name": "NVIDIA H100 80GB HBM3", "gpu_total_bytes": 85_024_112_640}
    assert _with_detected_gpu(sc, env, remarks).gpu == "h100-sxm" and "h100-sxm" in remarks[0]
    given = sc.replace(gpu="a100-80gb-sxm")
    assert _with_detected_gpu(given, env, []) is given  # the user's choice stays
    assert _with_detected_gpu(sc, {"device": "cpu"}, []) is sc
