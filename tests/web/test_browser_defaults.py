"""The page follows the framework's defaults as the CLI and the API do: precision and offload are "auto" choices, so a
framework whose default precision is not bf16-true (litgpt, torchtitan) and a pasted DeepSpeed config whose offload
sections name the offload get the same estimate on the page as from ``vramfit estimate`` and POST /api/estimate.

Same fixtures and skips as ``test_browser.py``."""

from __future__ import annotations

import json

from test_browser import (
    expect,
    pytestmark,  # noqa: F401 - the same skips
    wait_result,
)

from vramfit import estimate

LITGPT = {"model": "meta-llama/Llama-3.1-8B", "gpu": "h100-sxm", "framework": "litgpt"}
DS_OFFLOAD = {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}


def _shown(device_bytes):
    """The summary's figure for ``device_bytes``: VF.fmtGiB in English (one decimal from 10 GiB up)."""
    v = device_bytes / 2**30
    return f"{v:,.1f}" if v >= 10 else f"{v:,.2f}".rstrip("0")


def test_litgpt_gets_its_own_default_precision_on_the_page(base_url, page_factory):
    want = estimate(LITGPT)
    assert want.scenario.precision.value == "bf16-mixed"  # litgpt's default, not the schema's bf16-true
    page = page_factory()
    page.goto(base_url + "/?model=meta-llama%2FLlama-3.1-8B&gpu=h100-sxm&framework=litgpt")
    wait_result(page, "meta-llama/Llama-3.1-8B")
    assert page.input_value("#f-precision") == "" and page.input_value("#f-offload") == ""
    expect(page.locator("#peak")).to_have_text(_shown(want.peak.device_bytes), timeout=15000)
    assert want.peak.device_bytes > 70 * 2**30  # 77.7 GiB: the page read 32.9 GiB (bf16-true) before
    assert "precision=" not in page.url  # the shared link leaves the default out, and means the same


def test_a_pasted_deepspeed_config_sets_the_offload_as_the_api_does(base_url, page_factory):
    keys = {"model": "Qwen/Qwen3-0.6B", "gpu": "rtx4090", "deepspeed_config": DS_OFFLOAD}
    want = estimate(keys)
    assert want.scenario.offload.value == "optimizer" and want.scenario.parallelism.value == "zero2"
    page = page_factory()
    page.goto(base_url + "/?model=Qwen%2FQwen3-0.6B&gpu=rtx4090")
    wait_result(page, "Qwen/Qwen3-0.6B")
    page.fill("#f-deepspeed_config", json.dumps(DS_OFFLOAD))
    expect(page.locator("#peak")).to_have_text(_shown(want.peak.device_bytes), timeout=15000)
    expect(page.locator('[data-err-for="deepspeed_config"]')).to_be_hidden()


def test_kto_and_grpo_take_their_derived_batch_keys_on_the_page(base_url, page_factory):
    """The form sent micro_batch_size 1 and grad_accum 1 always, so KTO (at least 2 a batch) and GRPO (whole groups of
    completions per step) were 422s where `vramfit estimate --stage kto|grpo` gives an answer: both are left empty
    now ("auto"), and the library derives them as the CLI does."""
    page = page_factory()
    page.goto(base_url + "/?model=meta-llama%2FLlama-3.1-8B&gpu=rtx4090")
    wait_result(page, "meta-llama/Llama-3.1-8B")
    assert page.input_value("#f-micro_batch_size") == "" and page.input_value("#f-grad_accum") == ""
    for stage in ("kto", "grpo"):
        want = estimate({"model": "meta-llama/Llama-3.1-8B", "gpu": "rtx4090", "stage": stage})
        page.select_option("#f-stage", stage)
        expect(page.locator("#peak")).to_have_text(_shown(want.peak.device_bytes), timeout=15000)
