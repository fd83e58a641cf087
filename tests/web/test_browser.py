"""The pages in a real browser: Playwright driving Debian's Chromium against a local uvicorn.

Skipped (with the reason) when /usr/bin/chromium or playwright is missing. Screenshots go to
``test-artifacts/web/`` (gitignored).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

# (the fixtures base_url, browser and page_factory are in conftest.py, shared with test_browser_page.py)
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "web"
DESKTOP = {"width": 1440, "height": 900}
PHONE = {"width": 390, "height": 844}

pytestmark = pytest.mark.browser

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # pragma: no cover - depends on the environment
    sync_playwright = None

if sync_playwright is None:
    pytestmark = [pytest.mark.browser, pytest.mark.skip(reason="playwright is not installed (pip install playwright)")]
elif not (os.path.exists(CHROMIUM) or shutil.which("chromium")):
    pytestmark = [pytest.mark.browser, pytest.mark.skip(
        reason=f"{CHROMIUM} is missing (apt-get install chromium; see scripts/system-deps.sh)")]


def wait_result(page, model_id=None):
    """Wait until the summary shows a result (for ``model_id`` if given) and the charts are drawn."""
    expect(page.locator("#peak")).not_to_have_text("—", timeout=15000)
    if model_id:
        expect(page.locator("#peak-sub")).to_contain_text(model_id, timeout=15000)
    page.wait_for_function("() => !document.body.classList.contains('busy')", timeout=15000)
    page.wait_for_function("() => (document.getElementById('chart-seq').data || []).length > 0", timeout=15000)


def star_x(page, chart):
    return page.evaluate(f"() => {{ const d = document.getElementById('{chart}').data; return d[d.length - 1].x[0]; }}")


def shot(page, name):
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_calculator_flow(base_url, page_factory):
    page = page_factory()
    page.goto(base_url + "/")
    wait_result(page, "meta-llama/Llama-3.1-8B")
    shot(page, "calculator-desktop")

    # choose a model by searching the catalog
    page.fill("#f-model", "llama 2 7b")
    option = page.locator("#model-list li", has_text="meta-llama/Llama-2-7b-hf").first
    expect(option).to_be_visible()
    option.click()
    wait_result(page, "meta-llama/Llama-2-7b-hf")
    page.select_option("#f-gpu", "rtx4090")
    page.select_option("#f-method", "qlora")
    page.fill("#f-seq_len", "1024")  # QLoRA 7B at 1024 tokens fits a 24 GB card with room to spare
    page.wait_for_timeout(400)
    wait_result(page, "meta-llama/Llama-2-7b-hf")
    peak_short = float(page.locator("#peak").inner_text().replace(",", ""))
    fits_short = page.locator("#fit-count").inner_text()
    assert "✓" in page.locator("#fitline").inner_text() or "Fits" in page.locator("#fitline").inner_text()

    # a longer sequence: the peak, the chart and the fitting cards change
    page.fill("#f-seq_len", "65536")
    expect(page.locator("#fitline")).to_contain_text("Does not fit", timeout=15000)
    wait_result(page)
    page.wait_for_function("() => { const d = document.getElementById('chart-seq').data;"
                           " return d[d.length - 1].x[0] === 65536; }", timeout=15000)
    peak_long = float(page.locator("#peak").inner_text().replace(",", ""))
    assert peak_long > peak_short
    expect(page.locator("#fit-count")).not_to_have_text(fits_short)
    assert star_x(page, "chart-seq") == 65536
    bar = page.evaluate("() => document.getElementById('chart-breakdown').data.map(t => t.name)")
    assert "activations" in bar
    assert "seq_len=65536" in page.url and "method=qlora" in page.url
    shot(page, "calculator-long-sequence")

    # the shared link restores the same scenario and result in a fresh page
    shared = page.url
    other = page_factory()
    other.goto(shared)
    wait_result(other, "meta-llama/Llama-2-7b-hf")
    assert other.input_value("#f-seq_len") == "65536"
    assert other.input_value("#f-method") == "qlora"
    assert other.locator("#peak").inner_text() == page.locator("#peak").inner_text()

    # language switch keeps the scenario
    other.click("#lang-switch")
    expect(other.locator("h1")).to_have_text("Memória de GPU para ajuste fino")
    wait_result(other, "meta-llama/Llama-2-7b-hf")
    assert other.evaluate("document.documentElement.lang") == "pt-PT"
    assert other.input_value("#f-seq_len") == "65536"
    expect(other.locator("#fitline")).to_contain_text("Não cabe")
    shot(other, "calculator-pt-desktop")


def test_invalid_field_shows_the_message_and_valid_values(base_url, page_factory):
    page = page_factory(expect_422=True)
    page.goto(base_url + "/?model=meta-llama%2FLlama-2-7b-hf")
    wait_result(page)
    page.fill("#f-num_gpus", "4")
    page.select_option("#f-parallelism", "none")
    err = page.locator('[data-err-for="parallelism"]')
    expect(err).to_be_visible(timeout=15000)
    expect(err).to_contain_text("zero3")
    assert page.get_attribute("#f-parallelism", "aria-invalid") == "true"
    page.select_option("#f-parallelism", "fsdp")
    expect(err).to_be_hidden(timeout=15000)


def test_pasted_config(base_url, page_factory):
    from vramfit.models import load_catalog

    config = next(e["config"] for e in load_catalog() if e["id"] == "meta-llama/Llama-2-7b-hf")
    page = page_factory()
    page.goto(base_url + "/?model=meta-llama%2FLlama-2-7b-hf")
    wait_result(page, "meta-llama/Llama-2-7b-hf")
    catalog_peak = page.locator("#peak").inner_text()
    page.check('input[name=source][value=config]')
    page.fill("#f-config_json", json.dumps(config, indent=1))
    wait_result(page, "config.json (llama")
    assert page.locator("#peak").inner_text() == catalog_peak
    assert "config_json=" in page.url
    expect(page.locator("#fit-table")).to_contain_text("config.json")  # the planner's note, estimate fits

    # the same file, uploaded: a smaller model this time
    small = next(e["config"] for e in load_catalog() if e["id"] == "Qwen/Qwen2.5-0.5B")
    page.set_input_files("#f-config-file", files=[{"name": "config.json", "mimeType": "application/json",
                                                   "buffer": json.dumps(small).encode()}])
    wait_result(page, "config.json (qwen2")
    assert float(page.locator("#peak").inner_text()) < float(catalog_peak)


def test_phone_layout(base_url, page_factory):
    page = page_factory(PHONE)
    page.goto(base_url + "/?model=meta-llama%2FLlama-2-7b-hf&method=qlora&gpu=rtx4090&seq_len=4096")
    wait_result(page, "meta-llama/Llama-2-7b-hf")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"the page scrolls sideways on a phone ({width}px)"
    expect(page.locator("#mini")).to_be_visible()
    shot(page, "calculator-phone")


@pytest.mark.parametrize(("lang", "viewport", "heading"), [
    ("en", DESKTOP, "Memory decides first"), ("pt", PHONE, "A memória decide primeiro"),
    ("en", PHONE, "Memory decides first"), ("pt", DESKTOP, "A memória decide primeiro")],
    ids=["en-desktop", "pt-phone", "en-phone", "pt-desktop"])
def test_guide(base_url, page_factory, lang, viewport, heading):
    page = page_factory(viewport)
    page.goto(f"{base_url}/guide?lang={lang}")
    expect(page.locator("#why h2")).to_contain_text(heading)
    page.wait_for_function("() => (document.getElementById('fig-breakdown').data || []).length > 3")
    page.wait_for_function("() => (document.getElementById('fig-seq').data || []).length === 3")
    assert page.locator("#t-sizing tbody tr").count() == 12
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= viewport["width"], f"the guide scrolls sideways ({width}px)"
    name = "phone" if viewport is PHONE else "desktop"
    shot(page, f"guide-{lang}-{name}")
    page.click("#lang-switch")
    other = "pt" if lang == "en" else "en"
    expect(page.locator("html")).to_have_attribute("lang", re.compile("^" + other))
