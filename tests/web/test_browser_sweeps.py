"""The sweep charts plot the figure the verdict uses (required_bytes) against each card's limit, in Chromium.

Same fixtures and skips as ``test_browser.py``.
"""

from __future__ import annotations

from test_browser import pytestmark, wait_result  # noqa: F401 - the same skips

from vramfit.estimate import estimate
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
