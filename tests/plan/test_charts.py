"""The sweep chart plots the figure the verdict uses (required_bytes) against each card's limit."""

import pytest

from vramfit.plan import sweep
from vramfit.plan.charts import DEVICE, NEEDED, _series, card_lines, sweep_chart
from vramfit.units import GiB

# Qwen2.5-7B QLoRA, full checkpointing, on an RTX 4090 (25,756,172,288 B usable; limit 95 %: 24,468,363,673 B): at
# 6,144 tokens the device peak (28.26 GB) is over the card's usable memory, yet the run fits: PyTorch releases its
# cached segments before an OOM, and what stays (required_bytes) is under the limit
SC = {"model": "Qwen/Qwen2.5-7B", "method": "qlora", "gradient_checkpointing": "full"}


@pytest.fixture(scope="module")
def swept():
    return sweep(SC, "seq_len", [4096, 6144, 8192], cards=["rtx4090"])


def test_the_chart_plots_required_bytes_and_the_device_peak_labelled(swept):
    xs, ys, numeric = _series(swept)
    assert numeric and xs == ["4096", "6144", "8192"]
    assert ys[NEEDED] == [p.required_bytes / GiB for p in swept.points]
    assert ys[DEVICE] == [p.device_bytes / GiB for p in swept.points]
    assert all(n < d for n, d in zip(ys[NEEDED], ys[DEVICE], strict=True))


def test_card_lines_are_the_limit_fits_uses(swept):
    (y, label), = card_lines(swept)
    assert y == 24_468_363_673 / GiB and swept.cards[0]["limit_bytes"] == int(25_756_172_288 * 0.95)
    assert label == "GeForce RTX 4090 limit 22.8 GiB (24.0 usable - 5%)"


def test_a_point_under_the_line_fits_and_one_above_does_not(swept):
    (line, _), = card_lines(swept)
    needed = _series(swept)[1][NEEDED]
    assert [p.fits["rtx4090"] for p in swept.points] == [True, True, False]
    assert [n <= line for n in needed] == [True, True, False]
    at = swept.points[1]  # the case the device-peak chart drew above the card's line (usable) while saying "fits"
    assert at.device_bytes > swept.cards[0]["usable_bytes"] and at.fits["rtx4090"]


def test_html_chart_holds_both_curves_and_the_limit(swept, tmp_path):
    pytest.importorskip("plotly")
    html = sweep_chart(swept, tmp_path / "c.html").read_text()
    assert NEEDED in html and DEVICE in html and "limit 22.8 GiB (24.0 usable - 5%)" in html
