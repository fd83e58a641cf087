/* vramfit charts: thin helpers over Plotly (served by this server, no CDN). Plain JS, no build. */
(function () {
  "use strict";
  const GiB = 2 ** 30;
  const COLORS = {
    weights: "#3b6fd4", quantized_base: "#7ea6f0", adapters: "#16a394", master_weights: "#7b52c7",
    gradients: "#ef8a2c", optimizer_state: "#d8434b", paged_optimizer_state: "#f19aa0",
    activations: "#3da35d", autocast_copies: "#9bbb3f", logits_loss: "#e6b422", temporaries: "#8f98a5",
    comm_buffers: "#a0724b", workspaces: "#5b6573", allocator_overhead: "#c5cbd3",
    cuda_context: "#465266", nccl: "#b58d6a",
  };
  const LINE_COLORS = ["#3b6fd4", "#d8434b", "#3da35d", "#ef8a2c", "#7b52c7", "#16a394"];
  const FONT = { family: "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", size: 12, color: "#1f2733" };
  const CONFIG = { displayModeBar: false, responsive: true };

  function gib(bytes) { return bytes / GiB; }
  function fmtGiB(bytes, digits) {
    const v = gib(bytes);
    const max = digits ?? (v < 10 ? 2 : 1);
    return v.toLocaleString(undefined, { maximumFractionDigits: max, minimumFractionDigits: Math.min(1, max) });
  }
  function fmtCount(n) {
    if (n >= 1e12) return (n / 1e12).toPrecision(3) + "T";
    if (n >= 1e9) return (n / 1e9).toPrecision(3) + "B";
    if (n >= 1e6) return (n / 1e6).toPrecision(3) + "M";
    if (n >= 1e3) return (n / 1e3).toPrecision(3) + "k";
    return String(n);
  }
  function narrow() { return window.matchMedia("(max-width: 700px)").matches; }

  function baseLayout(extra) {
    return Object.assign({
      font: FONT, paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
      margin: { l: 52, r: 12, t: 8, b: 40 }, autosize: true,
      legend: { orientation: "h", x: 0, y: -0.22, yanchor: "top", font: { size: 11 } },
      hoverlabel: { font: { family: FONT.family } },
    }, extra || {});
  }

  /* Horizontal stacked bar of components (bytes), with capacity and peak lines. */
  function breakdown(el, opts) {
    const traces = opts.components.map((c) => ({
      type: "bar", orientation: "h", name: opts.label(c.name), y: [opts.barLabel || ""],
      x: [gib(c.bytes)], marker: { color: COLORS[c.name] || "#999" },
      hovertemplate: "%{fullData.name}: %{x:.2f} GiB<extra></extra>",
    }));
    const shapes = [];
    const annotations = [];
    const total = opts.components.reduce((a, c) => a + c.bytes, 0);
    const xmax = Math.max(gib(total), opts.capacity ? gib(opts.capacity.bytes) : 0) * 1.04;
    if (opts.peak) {
      shapes.push(vline(gib(opts.peak), "#1f2733", "dot"));
      annotations.push(vlabel(gib(opts.peak), opts.peakLabel, "#1f2733", 1.0, xmax));
    }
    if (opts.capacity) {
      const color = opts.capacity.fits ? "#2e7d32" : "#c62828";
      shapes.push(vline(gib(opts.capacity.bytes), color, "solid"));
      annotations.push(vlabel(gib(opts.capacity.bytes), opts.capacity.label, color, 1.16, xmax));
    }
    legend(el, opts.components.map((c) => ({ name: opts.label(c.name), color: COLORS[c.name] || "#999" })));
    const layout = baseLayout({
      barmode: "stack", showlegend: false, shapes, annotations,
      margin: { l: 8, r: 12, t: 44, b: 26 },
      xaxis: { ticksuffix: " GiB", range: [0, xmax], zeroline: false, gridcolor: "#e7eaef" },
      yaxis: { visible: false },
    });
    Plotly.react(el, traces, layout, CONFIG);
  }

  /* An HTML legend under a chart (wraps on a phone instead of scrolling inside the plot). */
  function legend(el, items) {
    let box = el.nextElementSibling;
    if (!box || !box.classList.contains("legend")) {
      box = document.createElement("ul");
      box.className = "legend";
      el.after(box);
    }
    box.replaceChildren(...items.map((it) => {
      const li = document.createElement("li");
      const sw = document.createElement("span");
      sw.className = "sw" + (it.line ? " line" : "");
      sw.style.background = it.color;
      li.append(sw, document.createTextNode(it.name));
      return li;
    }));
  }

  function vline(x, color, dash) {
    return { type: "line", xref: "x", yref: "paper", x0: x, x1: x, y0: 0, y1: 1, line: { color, width: 2, dash } };
  }
  function vlabel(x, text, color, y, xmax) {
    return { xref: "x", yref: "paper", x, y, text, showarrow: false, font: { color, size: 11 },
      xanchor: x > xmax * 0.5 ? "right" : "left", yanchor: "bottom", bgcolor: "rgba(255,255,255,0.85)" };
  }

  /* Lines of peak (bytes) against x, with horizontal capacity lines.
     opts: {x: [...], series: [{name, y: [bytes|null], dash}], caps: [{label, bytes, strong}],
            current: {x, y}, xTitle, yTitle, logX, tickText(x)} */
  function lines(el, opts) {
    const traces = opts.series.map((s, i) => ({
      type: "scatter", mode: "lines+markers", name: s.name, x: opts.x,
      y: s.y.map((b) => (b == null ? null : gib(b))), connectgaps: false,
      line: { color: s.color || LINE_COLORS[i % LINE_COLORS.length], width: s.width || 2, dash: s.dash || "solid" },
      marker: { size: 5 }, hovertemplate: "%{x}: %{y:.1f} GiB<extra>" + s.name + "</extra>",
    }));
    const all = traces.flatMap((t) => t.y).filter((v) => v != null);
    const cur = opts.current ? gib(opts.current.y) : (all.length ? Math.min(...all) : 1);
    const caps = (opts.caps || []).map((c) => ({ ...c, g: gib(c.bytes) })).sort((a, b) => a.g - b.g);
    const next = caps.find((c) => c.g >= cur);
    // Above every card drawn: a log axis keeps both the curves and the card lines readable.
    const logY = !opts.top && !next && caps.length > 0 && all.length > 0;
    let top = Math.max(cur * 1.6, next ? next.g * 1.12 : 0, 1);
    if (opts.top) top = opts.top;
    let yaxis = { range: [0, top] };
    if (logY) {
      const lo = Math.min(...all, caps[0].g) * 0.8;
      top = Math.max(...all) * 1.2;
      yaxis = { type: "log", range: [Math.log10(lo), Math.log10(top)] };
    }
    const shown = caps.filter((c) => c.g <= top);
    const shapes = shown.map((c) => ({
      type: "line", xref: "paper", yref: "y", x0: 0, x1: 1, y0: c.g, y1: c.g,
      line: { color: c.strong ? "#c62828" : "#8a94a3", width: c.strong ? 2 : 1, dash: c.strong ? "solid" : "dash" },
    }));
    const annotations = shown.map((c) => ({
      xref: "paper", yref: "y", x: 0.01, y: logY ? Math.log10(c.g) : c.g, text: c.label, showarrow: false, xanchor: "left", yanchor: "bottom",
      font: { size: 10, color: c.strong ? "#c62828" : "#5b6573" }, bgcolor: "rgba(255,255,255,0.7)",
    }));
    if (opts.current) {
      traces.push({
        type: "scatter", mode: "markers", name: opts.currentLabel, x: [opts.current.x], y: [cur],
        marker: { size: 13, symbol: "star", color: "#1f2733", line: { color: "#fff", width: 1 } },
        hovertemplate: "%{x}: %{y:.1f} GiB<extra>" + (opts.currentLabel || "") + "</extra>",
      });
    }
    const ticks = opts.logX ? { tickvals: opts.x, ticktext: opts.x.map(opts.tickText || String) } : {};
    const layout = baseLayout({
      shapes, annotations, showlegend: true,
      margin: { l: 48, r: 10, t: 8, b: 40 },
      xaxis: Object.assign({ type: opts.logX ? "log" : "linear", title: { text: opts.xTitle }, gridcolor: "#e7eaef" }, ticks),
      yaxis: Object.assign({ title: { text: opts.yTitle }, gridcolor: "#e7eaef", zeroline: false }, yaxis),
    });
    if (narrow()) layout.legend.y = -0.3;
    Plotly.react(el, traces, layout, CONFIG);
  }

  function shortTokens(n) { return n >= 1024 ? n / 1024 + "k" : String(n); }

  window.VF = { GiB, gib, fmtGiB, fmtCount, breakdown, lines, shortTokens, COLORS, legend,
    config: () => JSON.parse(document.getElementById("page-config").textContent) };
})();
