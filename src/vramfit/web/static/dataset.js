/* "Your dataset's lengths": upload a small file to POST /api/dataset, draw the length histogram with
   the target card's longest fitting sequence as a line (approximate tokens: no tokenizer in a browser). */
(function () {
  "use strict";
  const cfg = VF.config();
  const T = cfg.strings;
  const box = document.getElementById("dsup");
  if (!box) return;
  const el = (id) => document.getElementById(id);
  ["input", "change"].forEach((ev) => box.addEventListener(ev, (e) => e.stopPropagation()));

  /* A token count as the axis and the card's label both write it: whole, in the page's style (no k of 1000 or 1024). */
  const tokens = (n) => VF.fmtNum(n, 0);
  /* A sentence of the message: capitalised and ended with a full stop (the spread line and the notes come without). */
  const sentence = (t) => " " + t.charAt(0).toUpperCase() + t.slice(1) + (/[.!?]$/.test(t) ? "" : ".");

  /* Bars at 0, 1, 2, ... (one per bin, labelled "64–128"); a length L sits inside its bin linearly. */
  function position(hist, n) {
    const i = hist.findIndex((b) => n >= b.from && n < b.to);
    if (i < 0) return hist.length - 0.5;
    return i - 0.5 + (n - hist[i].from) / (hist[i].to - hist[i].from);
  }

  function draw(data) {
    const h = data.histogram;
    const traces = [{ type: "bar", x: h.map((_, i) => i), y: h.map((b) => b.samples), name: T["ds.samples"],
      marker: { color: "#3b6fd4" },
      hovertemplate: h.map((b) => `${tokens(b.from)}–${tokens(b.to)}: %{y}<extra></extra>`) }];
    const shapes = [];
    const notes = [];
    if (data.card && data.card.max_seq_len) {
      const x = position(h, data.card.max_seq_len);
      shapes.push({ type: "line", x0: x, x1: x, yref: "paper", y0: 0, y1: 1, line: { color: "#dc2626", width: 2 } });
      notes.push({ x, yref: "paper", y: 1, text: T["ds.card"].replace("{card}", data.card.name)
        .replace("{n}", tokens(data.card.max_seq_len)),
      showarrow: false, xanchor: "left", yanchor: "bottom", font: { color: "#dc2626" } });
    }
    Plotly.react(el("ds-chart"), traces, {
      margin: { l: 50, r: 10, t: 30, b: 60 }, height: 280, bargap: 0.05, shapes, annotations: notes,
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
      xaxis: { tickvals: h.map((_, i) => i), ticktext: h.map((b) => `${tokens(b.from)}–${tokens(b.to)}`), title: { text: T["ds.tokens"] } },
      yaxis: { title: { text: T["ds.samples"] } },
    }, { displayModeBar: false, responsive: true });
  }

  async function upload(file) {
    const msg = el("ds-msg");
    msg.classList.remove("err");
    if (file.size > cfg.dataset_max_bytes) {  // the server's own refusal, without sending 4 MiB for it
      msg.classList.add("err");
      msg.textContent = T["ds.big"].replace("{mib}", cfg.dataset_max_bytes / 2 ** 20);
      el("ds-file").value = "";
      return;
    }
    msg.textContent = T["ds.busy"];
    const body = new FormData();
    body.append("file", file);
    body.append("scenario", JSON.stringify(window.VFForm.scenario()));
    try {
      const r = await fetch("/api/dataset", { method: "POST", body });
      const data = await r.json();
      if (!r.ok) { msg.classList.add("err"); msg.textContent = window.VFTr.text(data.error); return; }
      const p = data.percentiles;
      msg.textContent = T["ds.done"].replace("{rows}", data.rows).replace("{p50}", p.p50)
        .replace("{p99}", p.p99).replace("{max}", p.max)
        + (data.reserved_spread_text ? sentence(window.VFTr.text(data.reserved_spread_text)) : "")  /* POST /api/dataset's own sentence */
        + (data.notes || []).map((n) => sentence(window.VFTr.text(n))).join("");
      draw(data);
    } catch (e) {
      msg.classList.add("err");
      msg.textContent = String(e);
    }
  }
  el("ds-file").addEventListener("change", (e) => { if (e.target.files[0]) upload(e.target.files[0]); });
})();
