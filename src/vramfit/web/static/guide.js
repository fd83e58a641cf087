/* The guide's figures, drawn from the data the server computed for this page. */
(function () {
  "use strict";
  const cfg = VF.config();
  const T = cfg.strings;
  const fig = cfg.figures;

  function breakdown() {
    const bars = fig.breakdown.bars;
    const labels = bars.map((b) => (T["g." + b.recipe] || b.recipe).replace(", ", ",<br>"));
    const names = [];
    bars.forEach((b) => Object.keys(b.components).forEach((n) => { if (!names.includes(n)) names.push(n); }));
    const traces = names.map((n) => ({
      type: "bar", name: T["c." + n] || n, x: labels, y: bars.map((b) => b.components[n] || 0),
      marker: { color: VF.COLORS[n] || "#999" }, hovertemplate: "%{fullData.name}: %{y:.1f} GiB<extra></extra>",
    }));
    traces.push({  // the peak's value above each bar
      type: "scatter", mode: "text", x: labels, y: bars.map((b) => b.peak_gib), text: bars.map((b) => VF.fmtNum(b.peak_gib, 1)),
      textposition: "top center", hoverinfo: "skip", showlegend: false, textfont: { size: 11, color: VF.INK },
    });
    VF.legend(document.getElementById("fig-breakdown"),
      names.map((n) => ({ name: T["c." + n] || n, color: VF.COLORS[n] || "#999" })));
    const layout = {
      barmode: "stack", showlegend: false, font: { family: "system-ui, sans-serif", size: 12, color: VF.INK }, separators: VF.locale().startsWith("pt") ? ", " : ".,", paper_bgcolor: "rgba(0,0,0,0)",
      plot_bgcolor: "rgba(0,0,0,0)", margin: { l: 48, r: 8, t: 8, b: 44 },
      xaxis: { tickangle: 0 },
      yaxis: { title: { text: T["ch.gib"] }, gridcolor: VF.GRID, range: [0, Math.max(...bars.map((b) => b.peak_gib)) * 1.12] },
    };
    Plotly.react("fig-breakdown", traces, layout, { displayModeBar: false, responsive: true });
  }

  function seq() {
    const d = fig.seq;
    const dashes = { "none-sdpa": "solid", "full-sdpa": "solid", "none-eager": "dot" };
    VF.lines(document.getElementById("fig-seq"), {
      x: d.seq_lens, logX: true, tickText: VF.shortTokens, xTitle: T["k.seq_len"], yTitle: T["ch.gib"],
      series: Object.entries(d.lines).map(([k, ys]) => ({ name: T["g." + k] || k, y: ys.map((g) => g * VF.GiB), dash: dashes[k] })),
      caps: d.cards.map((c) => ({ bytes: c.gib * VF.GiB, label: `${c.name} · ${Math.round(c.gib)} GiB` })),
      top: Math.max(...d.cards.map((c) => c.gib)) * 1.12,
    });
  }

  breakdown();
  seq();
})();
