"""The planner's card classes are the estimator's own card facts (estimate/card_facts.py), so a plan's figure is its
card's figure: NCCL 2.18-2.20 (torch 2.1-2.4) sets NVLS buffers up on an NVSwitch sm90+ node, which the H100 SXM has
and the H100 PCIe has not; the classes used to group them on a one-GPU probe, and an 8 x h100-sxm plan carried the
PCIe's figure (1.5 GiB under, one plan over its limit)."""

from __future__ import annotations

import pytest

from vramfit import estimate
from vramfit.gpus import get_gpu, list_gpus
from vramfit.plan import plan
from vramfit.plan.evaluate import class_shifts, gpu_classes
from vramfit.scenario import parse_scenario

TORCH_22 = {"model": "meta-llama/Llama-3.1-8B", "method": "full", "framework_version": "transformers-4.44+torch-2.2"}
GiB = 2**30


def test_nvswitch_cards_are_their_own_class_where_nvls_buffers_exist():
    classes = gpu_classes(parse_scenario(TORCH_22))
    assert classes["h100-sxm"] == classes["h200-sxm"] != classes["h100-pcie"] == classes["h100-nvl"]
    assert classes["b200"] == classes["b100"] != classes["a100-80gb-sxm"] == classes[""]
    shifts = class_shifts(classes)  # at one GPU no NVLS: the SXM shifts the figure as the PCIe does
    assert shifts[classes["h100-sxm"]] == shifts[classes["h100-pcie"]] > 0 and shifts[""] == 0


def test_every_card_gets_its_class_figure():
    """The premise of one estimate per class: over the catalog, at 8 GPUs under ZeRO-3, a card's own figure is its
    class's, and the NVLS cards' figure is ZeRO-3's 2 communicators x 1.5 GiB (NCCL 2.18-2.20 at 8 ranks,
    estimate/nccl.py) above their PCIe siblings'."""
    sc = parse_scenario({**TORCH_22, "num_gpus": 8, "parallelism": "zero3"})
    classes = gpu_classes(sc)
    own = {g.gpu_id: estimate(sc.replace(gpu=g.gpu_id)).peak for g in list_gpus()}
    for gid, cls in classes.items():
        if gid and cls:
            assert (own[gid].device_bytes, own[gid].required_bytes) == (own[cls].device_bytes, own[cls].required_bytes), gid
    assert own["h100-sxm"].device_bytes - own["h100-pcie"].device_bytes == 2 * int(1.5 * GiB)


@pytest.mark.parametrize("seq", [1024, 4096])
def test_plan_figures_are_the_estimate_of_the_plan(seq):
    rep = plan({**TORCH_22, "seq_len": seq}, effective_batch=64, gpu_ids="h100-sxm,h100-pcie,b200", with_changes=False)
    multi = [p for p in rep.plans if p.num_gpus >= 4]
    assert {p.gpu_id for p in multi} == {"h100-sxm", "h100-pcie", "b200"}
    for p in rep.plans:
        r = estimate(parse_scenario(p.scenario))
        assert (p.required_bytes, p.device_bytes) == (r.peak.required_bytes, r.peak.device_bytes), (p.gpu_id, p.num_gpus)
        assert p.paging or p.required_bytes <= p.limit_bytes <= get_gpu(p.gpu_id).usable_bytes
