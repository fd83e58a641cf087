"""Charts of a sweep: the memory needed per GPU against the varied key, with each card's limit as a line.

The plotted figure is the one the verdict holds to a card's limit (``required_bytes``: the device peak less the
cache PyTorch releases before an OOM, :mod:`vramfit.plan.verdict`) and each card's line is that limit (usable memory
less the safety margin), so a point on or under a line fits that card and one above does not (paged optimizer
state aside). The device peak (what nvidia-smi shows on a card with headroom) is drawn too, dotted and labelled.

PNG/SVG with matplotlib, HTML with plotly; both imported only when a chart is asked for. The one
side effect of this package: writing the file the caller names.
"""

from __future__ import annotations

from pathlib import Path

from vramfit.errors import ScenarioError
from vramfit.plan.sweep import SweepResult
from vramfit.units import GiB

FORMATS = (".png", ".svg", ".html")


NEEDED = "needed per GPU (what fits holds to the limit)"
DEVICE = "device peak (nvidia-smi)"


def _gib(b: int | None) -> float | None:
    return None if b is None else b / GiB


def _series(r: SweepResult) -> tuple[list[str], dict[str, list[float | None]], bool]:
    """x labels, the two curves in GiB (needed first: the verdict's figure) and whether x is numeric."""
    xs = [str(p.value) for p in r.points]
    ys = {NEEDED: [_gib(p.required_bytes) for p in r.points], DEVICE: [_gib(p.device_bytes) for p in r.points]}
    numeric = all(isinstance(p.value, (int, float)) and not isinstance(p.value, bool) for p in r.points)
    return xs, ys, numeric


def card_lines(r: SweepResult) -> list[tuple[float, str]]:
    """(GiB, label) of each card's line: its limit, the figure ``fits`` compares ``required_bytes`` with."""
    return [(c["limit_bytes"] / GiB, f"{c['name']} limit {c['limit_bytes'] / GiB:.1f} GiB "
             f"({c['usable_bytes'] / GiB:.1f} usable - {r.safety_margin:.0%})") for c in r.cards]


def sweep_chart(r: SweepResult, path: str | Path) -> Path:
    """Write the chart of ``r`` to ``path`` (.png, .svg or .html)."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in FORMATS:
        raise ScenarioError("chart", f"unknown chart format {p.suffix!r}", FORMATS)
    xs, ys, numeric = _series(r)
    title = f"{r.scenario.get('model') or r.scenario.get('params')}: memory needed per GPU over {r.key}"
    if suffix == ".html":
        import plotly.graph_objects as go

        fig = go.Figure()
        xv = [pt.value for pt in r.points] if numeric else xs
        for name, y in ys.items():
            fig.add_trace(go.Scatter(x=xv, y=y, mode="lines+markers", name=name,
                                     line={"dash": "dot", "width": 1} if name == DEVICE else None))
        for y, label in card_lines(r):
            fig.add_hline(y=y, line_dash="dash", annotation_text=label)
        fig.update_layout(title=title, xaxis_title=r.key, yaxis_title="GiB (2^30 bytes)")
        if numeric and len(xv) > 2 and max(xv) / max(1, min(xv)) >= 8:
            fig.update_xaxes(type="log")
        fig.write_html(str(p), include_plotlyjs=True)
        return p
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    if numeric:
        xv = [pt.value for pt in r.points]
        for name, y in ys.items():
            dev = name == DEVICE
            ax.plot(xv, [v if v is not None else float("nan") for v in y], marker="." if dev else "o", label=name,
                    linestyle=":" if dev else "-", linewidth=1 if dev else 1.5)
        if len(xv) > 2 and max(xv) / max(1, min(xv)) >= 8:
            ax.set_xscale("log", base=2)
        ax.set_xticks(xv)
        ax.set_xticklabels([f"{v:,}" for v in xv], rotation=30 if len(xv) > 6 else 0, fontsize=8)
        ax.minorticks_off()
    else:
        ax.bar(xs, [v or 0 for v in ys[NEEDED]], label=NEEDED)
        ax.plot(xs, [v if v is not None else float("nan") for v in ys[DEVICE]], "k_", markersize=14, label=DEVICE)
    for y, label in card_lines(r):
        ax.axhline(y, linestyle="--", linewidth=1)
        ax.annotate(label, (0.99, y), xycoords=("axes fraction", "data"), fontsize=7, va="bottom", ha="right")
    ax.set_xlabel(r.key)
    ax.set_ylabel("GiB (2^30 bytes)")
    ax.set_title(title, fontsize=9)
    ax.legend(loc="upper left", fontsize=8, framealpha=0.9)
    fig.tight_layout()
    fig.savefig(p)
    plt.close(fig)
    return p
