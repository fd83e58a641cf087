"""The length distribution as a chart: samples per length bin, the truncation limit, and the longest
sequence the card fits (matplotlib, imported only when a chart is asked for)."""

from __future__ import annotations

from pathlib import Path

from vramfit.dataset.limits import DatasetError

FORMATS = (".png", ".svg")


def length_chart(r, path: str | Path, card: tuple[str, int | None] | None = None) -> Path:
    """Write the histogram of ``r`` (a DatasetReport) to ``path``; ``card`` = (name, longest seq_len that fits)."""
    p = Path(path)
    if p.suffix.lower() not in FORMATS:
        raise DatasetError("length_chart", f"unknown chart format {p.suffix!r}", FORMATS)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(8, 4))
    lefts = [max(lo, 1) for lo, _, _ in r.histogram]  # log axis: the first bin drawn from 1
    widths = [hi - left for left, (_, hi, _) in zip(lefts, r.histogram, strict=True)]
    ax.bar(lefts, [c for _, _, c in r.histogram], width=widths, align="edge", edgecolor="white", label="samples")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_xlabel("tokens per sample (after the chat template)")
    ax.set_ylabel("samples")
    if r.policy["max_length"]:
        ax.axvline(r.policy["max_length"], color="tab:orange", linestyle="--", label=f"max_length {r.policy['max_length']:,}")
    if card and card[1]:
        ax.axvline(card[1], color="tab:red", label=f"{card[0]}: fits up to {card[1]:,} at this micro-batch")
    ax.set_title(f"{Path(r.path).name}: {r.rows:,} rows, p99 {r.percentiles['p99']:,}, max {r.percentiles['max']:,} tokens")
    ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(p)
    plt.close(fig)
    return p
