"""A card the run fits only with more host RAM than the planner assumes says so (a review found "does not fit 1 x
gh200-96gb even with ZeRO-3, checkpointing and offload" where `estimate` of exactly that fits the card: 11.6 GiB on
the GPU, 1.4 TB of offloaded state on the host, over the planner's 256 GB per GPU)."""

import re

from vramfit import estimate
from vramfit.gpus import get_gpu
from vramfit.plan import plan
from vramfit.plan.planner import HOST_RAM_PER_GPU
from vramfit.plan.verdict import fits, limit_bytes

RUN = {"model": "meta-llama/Llama-3.1-70B", "method": "full"}


def test_the_reason_is_the_host_ram_cap():
    r = plan(RUN, gpu_ids=["gh200-96gb"], dataset_tokens="10M")
    reason = next(e.reason for e in r.excluded if e.gpu_id == "gh200-96gb")
    m = re.search(r"fits 1 x gh200-96gb or more only with offloaded state, needing ([\d,]+) GB of host RAM per GPU at 1, over the "
                  r"256 GB per GPU plans assume", reason)
    assert m and int(m.group(1).replace(",", "")) * 10**9 > HOST_RAM_PER_GPU.value
    offload = estimate({**RUN, "parallelism": "zero3", "offload": "optimizer+params", "gradient_checkpointing": "full",
                        "gpu": "gh200-96gb"})
    assert fits(offload, limit_bytes(get_gpu("gh200-96gb"))) and offload.host_bytes > HOST_RAM_PER_GPU.value
    from vramfit.web.translate import untranslated

    assert untranslated([reason]) == []  # the Portuguese page says it too


def test_a_card_too_small_anyway_keeps_the_old_reason():
    r = plan({"model": "meta-llama/Llama-3.1-8B", "method": "full", "seq_len": 131072}, gpu_ids=["rtx4090"],
             dataset_tokens="10M")
    reason = next(e.reason for e in r.excluded if e.gpu_id == "rtx4090")
    assert reason.startswith("does not fit 1 x rtx4090 even with ZeRO-3, checkpointing and offload")


def test_a_change_over_the_host_ram_cap_does_not_fit():
    """The ranked changes hold the planner's host-RAM rule: ZeRO-Infinity for Qwen2.5-32B on one H100 needs ~655 GB
    of host RAM, which the planner refuses, so the change is not "fits: yes" (it was, beside "Not planned")."""
    r = plan({"model": "Qwen/Qwen2.5-32B", "method": "full", "seq_len": 2048}, gpu_ids=["h100-sxm"], max_gpus=1,
             effective_batch=16, dataset_tokens="20M")
    offload = next(c for c in r.changes["h100-sxm"] if c.changes.get("offload") == "optimizer+params")
    assert fits(estimate({"model": "Qwen/Qwen2.5-32B", "method": "full", "seq_len": 2048, "gpu": "h100-sxm",
                          "micro_batch_size": 1, "grad_accum": 16, **offload.changes}), limit_bytes(get_gpu("h100-sxm")))
    assert not offload.fits and offload.host_ram_bytes > HOST_RAM_PER_GPU.value
    assert offload.tradeoff == "weights stream over PCIe every micro-batch: much slower"  # translated as it is
    assert any(c.fits for c in r.changes["h100-sxm"])  # more GPUs still do
    from vramfit.web.translate import untranslated

    assert untranslated([e.reason for e in r.excluded]) == []
