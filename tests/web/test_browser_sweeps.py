"""The sweep charts plot the figure the verdict uses (required_bytes) against each card's limit, in Chromium.

Same fixtures and skips as ``test_browser.py``.
"""

from __future__ import annotations

from test_browser import pytestmark, wait_result  # noqa: F401 - the same skips

from vramfit.estimate import estimate
from vramfit.gpus import get_gpu
from vramfit.plan.verdict import estimate_fits
from vramfit.units import GiB

# Qwen2.5-7B QLoRA, full checkpointing, 6,144 tokens on an RTX 4090: the device peak is over the card's usable
# memory (24.0 GiB), yet the run fits: what stays after PyTorch releases its cache (required_bytes) is under the
# limit (usable less 5 %). The device-peak chart drew this point above the card's line beside "fits".
SC = {"model": "Qwen/Qwen2.5-7B", "method": "qlora", "gradient_checkpointing": "full", "seq_len": 6144,
      "gpu": "rtx4090"}
URL = "/?" + "&".join(f"{k}={v}".replace("/", "%2F") for k, v in SC.items())


def test_sweep_points_and_card_lines_are_the_verdicts_figures(base_url, page_factory):
    page = page_factory()
    page.goto(base_url + URL)
    wait_result(page, "Qwen/Qwen2.5-7B")
    r = estimate(SC)
    for chart in ("chart-seq", "chart-batch"):
        got = page.evaluate(f"""() => {{ const el = document.getElementById('{chart}');
            const star = el.data[el.data.length - 1];
            const strong = el.layout.shapes.filter(s => s.line.color === '#c62828');
            return {{ star: star.y[0], strong: strong.map(s => s.y0), title: el.layout.yaxis.title.text,
                      labels: el.layout.annotations.map(a => a.text) }}; }}""")
        assert abs(got["star"] - r.peak.required_bytes / GiB) < 1e-9
        assert got["strong"] == [24_468_363_673 / GiB]  # the card's limit: 25,756,172,288 B usable less 5 %
        # the device figure is the card full: the run fits only after the allocator's release (estimate.on_card)
        assert got["star"] < got["strong"][0] < r.peak.device_bytes / GiB == 25_756_172_288 / GiB
        assert "GeForce RTX 4090 · limit 22.8 GiB (24.0 usable − 5 %)" in got["labels"]
        assert got["title"].startswith("GiB needed per GPU")
    full = page.evaluate("""() => { const el = document.getElementById('chart-seq');
        const t = el.data.find(t => t.name.startsWith('checkpointing: full'));
        return t.y[t.x.indexOf(6144)]; }""")
    assert abs(full - r.peak.required_bytes / GiB) < 1e-9  # the full-checkpointing curve at 6,144 tokens


def _url(sc):
    return "/?" + "&".join(f"{k}={v}".replace("/", "%2F") for k, v in sc.items())


def test_a_card_the_run_cannot_start_on_is_said_so_not_drawn_as_a_limit(base_url, page_factory):
    # Qwen2.5-0.5B in bf16-mixed on a T4: a few GiB, far under the T4's limit, yet the T4 has no BF16 (plan/verdict.py
    # card_refusal). The summary said "Does not fit Tesla T4: -9.1 GiB over" and the charts drew the T4's limit as
    # the red line every point sat under.
    sc = {"model": "Qwen/Qwen2.5-0.5B", "method": "lora", "precision": "bf16-mixed", "gpu": "t4"}
    page = page_factory()
    page.goto(base_url + _url(sc))
    wait_result(page, "Qwen/Qwen2.5-0.5B")
    assert page.locator("#fitline").inner_text().startswith(
        "cannot run: no BF16 on Tesla T4 (--precision fp16-mixed runs)")
    assert "over" not in page.locator("#fitline").inner_text()
    assert "cannot run: no BF16" in page.locator("#verdicts li[data-gpu='t4']").get_attribute("title")
    got = page.evaluate("""() => { const el = document.getElementById('chart-seq');
        const t4 = el.layout.annotations.findIndex(a => a.text.startsWith('Tesla T4'));
        return { label: el.layout.annotations[t4].text, shape: el.layout.shapes[t4].line,
                 red: el.layout.shapes.filter(s => s.line.color === '#c62828').length }; }""")
    assert got["label"] == "Tesla T4 · cannot run: no BF16 on Tesla T4 (--precision fp16-mixed runs)"
    assert got["shape"]["dash"] == "dot" and got["shape"]["color"] == "#8a94a3"
    assert got["red"] == 0  # no line drawn as the limit to hold to


def test_a_point_that_fits_only_by_paging_is_a_diamond_that_says_so(base_url, page_factory):
    # Llama 3.1 8B full fine-tuning with paged AdamW on an H100: at micro-batch 16 it fits only with 50+ GiB of
    # optimizer state paged to host RAM (tests/plan/test_sweep_paging.py); its point sits far above the card's line.
    sc = {"model": "meta-llama/Llama-3.1-8B", "method": "full", "optimizer": "paged-adamw",
          "gradient_checkpointing": "full", "gpu": "h100-sxm"}
    page = page_factory()
    page.goto(base_url + _url(sc))
    wait_result(page, "meta-llama/Llama-3.1-8B")
    p = estimate_fits({**sc, "micro_batch_size": 16}, [get_gpu("h100-sxm")]).fits[0]
    assert p.fits and p.paging_bytes > 50 * GiB
    got = page.evaluate("""() => { const el = document.getElementById('chart-batch');
        const t = el.data.find(t => t.name === 'full fine-tuning');
        const lora = el.data.find(t => t.name === 'LoRA');
        const k = t.x.indexOf(16);
        return { symbol: t.marker.symbol[k], text: t.text[k], hover: t.hovertemplate,
                 lora: lora.marker.symbol[0], loraText: lora.text[0] }; }""")
    assert got["symbol"] == "diamond"
    assert (got["lora"], got["loraText"]) == ("circle", "")  # LoRA's few MiB of state stay on the card
    assert got["text"].startswith(f"<br>fits H100 SXM5 80GB only by paging {p.paging_bytes / GiB:.1f} GiB of "
                                  "optimizer state to host RAM (slower)")
    assert "%{text}" in got["hover"]
