"""NCCL's device memory (estimate/nccl.py): NCCL 2.18-2.20's eager NVLS buffers on NVSwitch nodes and the second
communicator DeepSpeed ZeRO-3 holds (its engine's clone of the world group)."""

import pytest

from vramfit.estimate import estimate
from vramfit.estimate.framework import scenario_profile
from vramfit.estimate.nccl import NCCL_2_18_TO_2_20, communicators, nccl_bytes, nvls_bytes
from vramfit.estimate.reserved import process_bytes
from vramfit.scenario import parse_scenario

MiB = 2**20
RING = 8 * 2 * 10 * MiB  # 8 channels x 2 neighbours x (4 MiB + 0.5 MiB + 4.69 MiB aligned to 2 MiB)
OLD = "transformers-4.44+peft-0.11+torch-2.2"


def _sc(**keys):
    base = {"model": "meta-llama/Llama-2-7b-hf", "method": "lora", "seq_len": 1024, "num_gpus": 8,
            "parallelism": "fsdp", "gpu": "h100-sxm", "framework_version": OLD}
    return parse_scenario({k: v for k, v in {**base, **keys}.items() if v is not None})


def test_nccl_2_19_nvls_buffers_are_heads_x_16_channels_x_2_x_6_mib():
    # v2.19.3-1 nvls.cc: nvlsTotalSize = nHeads * nChannels * 2 * (buffSize + memSize), one head per GPU of the node
    assert NCCL_2_18_TO_2_20.per_communicator(8) == 8 * 16 * 2 * (4 + 2) * MiB == 1536 * MiB
    sc = _sc()
    assert scenario_profile(sc).nccl_nvls is NCCL_2_18_TO_2_20
    assert nvls_bytes(sc, NCCL_2_18_TO_2_20) == 1536 * MiB
    assert nvls_bytes(_sc(num_gpus=4), NCCL_2_18_TO_2_20) == 768 * MiB


@pytest.mark.parametrize("keys", [
    {"num_gpus": 2},  # ncclNvlsInit: gpuCount <= 2
    {"gpu": "a100-80gb-sxm"},  # NVSwitch, but sm80 (search.cc: ccMin < 90)
    {"gpu": "h100-pcie"},  # no NVSwitch
    {"gpu": None},  # no card named
    {"framework_version": "transformers-4.44+peft-0.11"},  # the profile's NCCL (>= 2.22) connects NVLS lazily
    {"num_gpus": 16, "num_nodes": 2},  # NVLS across nodes is not modelled
])
def test_no_nvls_buffers_where_nccl_makes_none(keys):
    sc = _sc(**keys)
    assert nvls_bytes(sc, scenario_profile(sc).nccl_nvls) == 0
    assert process_bytes(sc)[1] == (RING if sc.num_gpus > 1 else 0)


def test_deepspeed_zero3_holds_two_communicators_fsdp_one():
    z3, fsdp = _sc(parallelism="zero3"), _sc()
    assert (communicators(z3), communicators(fsdp)) == (2, 1)
    assert nccl_bytes(z3, NCCL_2_18_TO_2_20) == 2 * (RING + 1536 * MiB)
    assert nccl_bytes(fsdp, NCCL_2_18_TO_2_20) == RING + 1536 * MiB
    assert nccl_bytes(_sc(parallelism="zero3", num_gpus=2), None) == 2 * RING
    assert nccl_bytes(_sc(num_gpus=1, parallelism="none"), NCCL_2_18_TO_2_20) == 0


def test_the_device_figure_carries_the_nvls_buffers_and_says_so():
    new, old = estimate(_sc(parallelism="zero3", framework_version="transformers-4.44+peft-0.11")), \
        estimate(_sc(parallelism="zero3"))
    assert old.peak.allocated_bytes == new.peak.allocated_bytes
    assert old.peak.reserved_bytes == new.peak.reserved_bytes
    assert old.peak.device_bytes - new.peak.device_bytes == 2 * 1536 * MiB
    assert any("2 x 1,536 MiB of NVLS buffers" in a for a in old.assumptions)
    assert not any("NVLS" in a for a in new.assumptions)
