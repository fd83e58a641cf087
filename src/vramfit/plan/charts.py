"""Charts of a sweep: device peak per GPU against the varied key, with card capacities as lines.

PNG/SVG with matplotlib, HTML with plotly; both imported only when a chart is asked for. The one
side effect of this package: writing the file the caller names.
"""

from __future__ import annotations

from pathlib import Path

from vramfit.errors import ScenarioError
from vramfit.plan.sweep import SweepResult
from vramfit.units import GiB

FORMATS = (".png", ".svg", ".html")


def _series(r: SweepResult) -> tuple[list[str], list[float | None], bool]:
    xs = [str(p.value) for p in r.points]
    ys = [None if p.device_bytes is None else p.device_bytes / GiB for p in r.points]
    numeric = all(isinstance(p.value, (int, float)) and not isinstance(p.value, bool) for p in r.points)
    return xs, ys, numeric


def sweep_chart(r: SweepResult, path: str | Path) -> Path:
    """Write the chart of ``r`` to ``path`` (.png, .svg or .html)."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in FORMATS:
        raise ScenarioError("chart", f"unknown chart format {p.suffix!r}", FORMATS)
    xs, ys, numeric = _series(r)
    title = f"{r.scenario.get('model') or r.scenario.get('params')}: device peak per GPU over {r.key}"
    if suffix == ".html":
        import plotly.graph_objects as go

        fig = go.Figure()
        xv = [pt.value for pt in r.points] if numeric else xs
        fig.add_trace(go.Scatter(x=xv, y=ys, mode="lines+markers", name="device peak (GiB)"))
        for c in r.cards:
            fig.add_hline(y=c["usable_bytes"] / GiB, line_dash="dash", annotation_text=f"{c['name']} ({c['usable_bytes'] / GiB:.1f} GiB)")
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
        ax.plot(xv, [y if y is not None else float("nan") for y in ys], marker="o", label="device peak")
        if len(xv) > 2 and max(xv) / max(1, min(xv)) >= 8:
            ax.set_xscale("log", base=2)
        ax.set_xticks(xv)
        ax.set_xticklabels([f"{v:,}" for v in xv], rotation=30 if len(xv) > 6 else 0, fontsize=8)
        ax.minorticks_off()
    else:
        ax.bar(xs, [y or 0 for y in ys], label="device peak")
    for c in r.cards:
        ax.axhline(c["usable_bytes"] / GiB, linestyle="--", linewidth=1)
        ax.annotate(f"{c['name']} ({c['usable_bytes'] / GiB:.1f} GiB usable)", (0.99, c["usable_bytes"] / GiB),
                    xycoords=("axes fraction", "data"), fontsize=7, va="bottom", ha="right")
    ax.set_xlabel(r.key)
    ax.set_ylabel("GiB (2^30 bytes)")
    ax.set_title(title, fontsize=9)
    ax.legend(loc="upper left", fontsize=8, framealpha=0.9)
    fig.tight_layout()
    fig.savefig(p)
    plt.close(fig)
    return p
