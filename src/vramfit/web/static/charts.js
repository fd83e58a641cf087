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
  const DARK = window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
  const INK = DARK ? "#e3e8f0" : "#1f2733";
  const GRID = DARK ? "#343d4c" : "#e7eaef";
  const LABEL_BG = DARK ? "rgba(24,29,38,0.85)" : "rgba(255,255,255,0.85)";
  const FONT = { family: "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", size: 12, color: INK };
  /* Numbers in the page's language (not the browser's): set from the page config below. */
  let LOCALE = "en-US";
  const CONFIG = { displayModeBar: false, responsive: true };

  function gib(bytes) { return bytes / GiB; }
  function fmtGiB(bytes, digits) {
    const v = gib(bytes);
    const max = digits ?? (v < 10 ? 2 : 1);
    return v.toLocaleString(LOCALE, { maximumFractionDigits: max, minimumFractionDigits: Math.min(1, max) });
  }
  function fmtNum(v, digits) {
    return Number(v).toLocaleString(LOCALE, { maximumFractionDigits: digits ?? 1 });
  }
  function fmtCount(n) {
    const p3 = (v) => Number(v.toPrecision(3)).toLocaleString(LOCALE, { maximumFractionDigits: 2 });
    if (n >= 1e12) return p3(n / 1e12) + "T";
    if (n >= 1e9) return p3(n / 1e9) + "B";
    if (n >= 1e6) return p3(n / 1e6) + "M";
    if (n >= 1e3) return p3(n / 1e3) + "k";
    return String(n);
  }
  function narrow() { return window.matchMedia("(max-width: 700px)").matches; }

  function baseLayout(extra) {
    return Object.assign({
      font: FONT, paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
      margin: { l: 52, r: 12, t: 8, b: 40 }, autosize: true,
      legend: { orientation: "h", x: 0, y: -0.22, yanchor: "top", font: { size: 11 } },
      hoverlabel: { font: { family: FONT.family } }, separators: LOCALE.startsWith("pt") ? ", " : ".,",
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
      shapes.push(vline(gib(opts.peak), INK, "dot"));
      annotations.push(vlabel(gib(opts.peak), opts.peakLabel, INK, 1.0, xmax));
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
      xaxis: { ticksuffix: " GiB", range: [0, xmax], zeroline: false, gridcolor: GRID },
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
      xanchor: x > xmax * 0.5 ? "right" : "left", yanchor: "bottom", bgcolor: LABEL_BG };
  }

  /* Tick values 1-2-5 per decade between lo and hi (GiB), labelled in the page's language. */
  function logTicks(lo, hi) {
    const vals = [];
    for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
      [1, 2, 5].forEach((m) => { const v = m * 10 ** e; if (v >= lo && v <= hi) vals.push(v); });
    }
    return { tickvals: vals, ticktext: vals.map((v) => fmtNum(v, v < 1 ? 2 : 0)) };
  }

  /* For each series, the index of an earlier series it would hide (every point within 3 %), or -1. */
  function sameLines(series) {
    return series.map((s, i) => series.findIndex((o, j) => j < i && o.y.length === s.y.length &&
      o.y.every((v, k) => (v == null && s.y[k] == null) ||
        (v != null && s.y[k] != null && Math.abs(v - s.y[k]) <= 0.03 * Math.max(v, s.y[k])))));
  }

  /* Which side of its line each card's label sits on ("bottom": above the line, "top": below), so that no two
     labels overlap where one side is free: the user's card (strong) first, keeping its place above its line; the
     others in ascending order. span: the y axis' range in its units; px: the plot's height in pixels. */
  function labelSides(caps, at, span, px) {
    const h = (span * 15) / Math.max(px, 100);  // a 10 px label with its padding, in axis units
    const taken = [];
    const free = ([a, b]) => taken.every(([c, d]) => b <= c + 1e-9 || a >= d - 1e-9);
    const sides = new Map();
    caps.filter((c) => c.strong).concat(caps.filter((c) => !c.strong)).forEach((c) => {
      const above = [at(c), at(c) + h];
      const below = [at(c) - h, at(c)];
      const side = free(above) || !free(below) ? "bottom" : "top";
      taken.push(side === "bottom" ? above : below);
      sides.set(c, side);
    });
    return sides;
  }

  /* Lines of peak (bytes) against x, with horizontal capacity lines.
     opts: {x: [...], series: [{name, y: [bytes|null], dash, notes: [text|null]}], caps: [{label, bytes, strong,
            blocked}], current: {x, y}, xTitle, yTitle, logX, tickText(x), sameAs(name) -> legend suffix}
     The y axis holds every point of every curve (log when they span more than 20x); a curve equal to
     an earlier one is drawn dashed and its legend says so; card labels sit away from the star. A point with a
     note (it fits a card only by paging) is a diamond and its hover says why; a blocked card (the run cannot
     start on it, whatever its memory) is a grey dotted line whose label says so. */
  function lines(el, opts) {
    const same = sameLines(opts.series);
    const traces = opts.series.map((s, i) => {
      const base = same[i] >= 0 ? "circle-open" : "circle";
      const notes = s.notes || s.y.map(() => null);
      return {
        type: "scatter", mode: "lines+markers", x: opts.x,
        name: same[i] >= 0 && opts.sameAs ? s.name + " " + opts.sameAs(opts.series[same[i]].name) : s.name,
        y: s.y.map((b) => (b == null ? null : gib(b))), connectgaps: false,
        line: { color: s.color || LINE_COLORS[i % LINE_COLORS.length], width: s.width || 2,
          dash: same[i] >= 0 ? "dash" : (s.dash || "solid") },
        marker: { size: notes.map((n) => (n ? 9 : same[i] >= 0 ? 8 : 5)),
          symbol: notes.map((n) => (n ? "diamond" : base)) },
        text: notes.map((n) => (n ? "<br>" + n : "")),
        hovertemplate: "%{x}: %{y:.1f} GiB%{text}<extra>" + s.name + "</extra>",
      };
    });
    const all = traces.flatMap((t) => t.y).filter((v) => v != null);
    const cur = opts.current ? gib(opts.current.y) : (all.length ? Math.min(...all) : 1);
    const caps = (opts.caps || []).map((c) => ({ ...c, g: gib(c.bytes) })).sort((a, b) => a.g - b.g);
    const hi = Math.max(...all, cur, 1);
    const lo = Math.min(...all, cur);
    const next = caps.find((c) => c.g >= cur);
    const logY = !opts.top && all.length > 0 && hi / lo > 20;
    let top = opts.top || Math.max(hi * 1.08, next ? next.g * 1.1 : 0);
    let yaxis = { range: [0, top] };
    if (logY) {
      const bottom = Math.min(lo, caps.length ? caps[0].g : lo) * 0.8;
      top = Math.max(hi, next ? next.g : 0) * 1.25;
      yaxis = Object.assign({ type: "log", range: [Math.log10(bottom), Math.log10(top)] }, logTicks(bottom, top));
    }
    const within = caps.filter((c) => c.g <= top);
    // the user's card last: its line and label drawn on top of any they still meet (shapes and labels in one order)
    const shown = within.filter((c) => !c.strong).concat(within.filter((c) => c.strong));
    const shapes = shown.map((c) => ({
      type: "line", xref: "paper", yref: "y", x0: 0, x1: 1, y0: c.g, y1: c.g,
      line: { color: c.blocked ? "#8a94a3" : c.strong ? "#c62828" : "#8a94a3", width: c.strong ? 2 : 1,
        dash: c.blocked ? "dot" : c.strong ? "solid" : "dash" },
    }));
    // the star's place across the plot (0..1); labels go to the other side
    let frac = 0.5;
    if (opts.current && opts.x.length > 1) {
      const f = opts.logX ? Math.log : (v) => v;
      const a = f(Math.min(...opts.x));
      const b = f(Math.max(...opts.x));
      frac = b > a ? (f(opts.current.x) - a) / (b - a) : 0.5;
    }
    const right = frac < 0.5;
    const at = (c) => (logY ? Math.log10(c.g) : c.g);
    const span = logY ? yaxis.range[1] - yaxis.range[0] : top;
    const sides = labelSides(shown, at, span, (el.clientHeight || 320) - 48);
    const annotations = shown.map((c) => ({
      xref: "paper", yref: "y", x: right ? 0.99 : 0.01, y: at(c), text: c.label,
      showarrow: false, xanchor: right ? "right" : "left", yanchor: sides.get(c),
      font: { size: 10, color: c.strong && !c.blocked ? "#c62828" : (DARK ? "#aab3c2" : "#5b6573") }, bgcolor: LABEL_BG,
    }));
    if (opts.current) {
      traces.push({
        type: "scatter", mode: "markers", name: opts.currentLabel, x: [opts.current.x], y: [cur],
        marker: { size: 14, symbol: "star", color: INK, line: { color: DARK ? "#000" : "#fff", width: 1 } },
        hovertemplate: "%{x}: %{y:.1f} GiB<extra>" + (opts.currentLabel || "") + "</extra>",
      });
    }
    const ticks = opts.logX ? { tickvals: opts.x, ticktext: opts.x.map(opts.tickText || String) } : {};
    const layout = baseLayout({
      shapes, annotations, showlegend: true,
      margin: { l: 52, r: 10, t: 8, b: 40 },
      xaxis: Object.assign({ type: opts.logX ? "log" : "linear", title: { text: opts.xTitle }, gridcolor: GRID }, ticks),
      yaxis: Object.assign({ title: { text: opts.yTitle }, gridcolor: GRID, zeroline: false }, yaxis),
    });
    if (narrow()) layout.legend.y = -0.3;
    Plotly.react(el, traces, layout, CONFIG);
  }

  function shortTokens(n) { return n >= 1024 ? n / 1024 + "k" : String(n); }

  function config() {
    const c = JSON.parse(document.getElementById("page-config").textContent);
    LOCALE = c.lang === "pt" ? "pt-PT" : "en-US";
    return c;
  }

  window.VF = { GiB, gib, fmtGiB, fmtNum, fmtCount, breakdown, lines, shortTokens, COLORS, legend, logTicks,
    sameLines, labelSides, config, INK, GRID, DARK, locale: () => LOCALE };
})();
