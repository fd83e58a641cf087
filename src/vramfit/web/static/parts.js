/* "Where the memory goes": the stacked bar of the parts alive at the peak, and the same parts as a
   table (GiB, the phase in which each is live, what counts it), readable without hovering. */
(function () {
  "use strict";
  const cfg = VF.config();
  const T = cfg.strings;
  const el = (id) => document.getElementById(id);
  const fmt = (s, vars) => s.replace(/\{(\w+)\}/g, (_, k) => vars[k]);
  const phase = (p) => T["ph." + p] || p;

  /* The parts alive at the peak (they add up to it), else every component. */
  function peakParts(r) {
    const at = r.peak.breakdown;
    if (!at) return r.components;
    const order = r.components.map((c) => c.name);
    const inside = Object.entries(at).filter(([, b]) => b > 0)
      .sort(([a], [b]) => (order.indexOf(a) + 1 || 99) - (order.indexOf(b) + 1 || 99))
      .map(([name, bytes]) => ({ name, bytes }));
    return inside.concat(r.components.filter((c) => c.counted_in && c.counted_in !== "allocated"));
  }

  function cell(tr, text, cls) {
    const td = tr.insertCell();
    td.textContent = text;
    if (cls) td.className = cls;
    return td;
  }

  function table(r) {
    const t = document.createElement("table");
    t.id = "parts";
    const head = t.createTHead().insertRow();
    [["p.part"], ["p.peak", "num"], ["p.max", "num"], ["p.phase"], ["p.counted"]].forEach(([k, cls]) => {
      const th = document.createElement("th");
      th.textContent = T[k];
      if (cls) th.className = cls;
      head.append(th);
    });
    const at = r.peak.breakdown || {};
    const body = t.createTBody();
    r.components.forEach((c) => {
      const tr = body.insertRow();
      tr.dataset.part = c.name;
      const name = cell(tr, T["c." + c.name] || c.name);
      name.title = c.detail || "";
      const live = c.counted_in && c.counted_in !== "allocated" ? c.bytes : at[c.name];
      cell(tr, live ? VF.fmtGiB(live) : "—", "num");
      cell(tr, VF.fmtGiB(c.bytes), "num");
      cell(tr, phase(c.phase));
      cell(tr, T["in." + (c.counted_in || "allocated")] || c.counted_in);
    });
    const foot = t.createTFoot().insertRow();
    cell(foot, fmt(T["p.total"], { phase: phase(r.peak.phase) }));
    cell(foot, VF.fmtGiB(r.peak.device_bytes), "num");
    cell(foot, "");
    cell(foot, "");
    cell(foot, "");
    return t;
  }

  function render(r, card) {
    el("breakdown-note").textContent = r.peak.breakdown
      ? fmt(T["ch.breakdown.peak"], { phase: phase(r.peak.phase) }) : T["ch.breakdown.note"];
    VF.breakdown(el("chart-breakdown"), {
      components: peakParts(r), label: (n) => T["c." + n] || n, barLabel: "",
      peak: r.peak.device_bytes, peakLabel: `${T["ch.peak"]} ${VF.fmtGiB(r.peak.device_bytes)} GiB`,
      capacity: card && { bytes: card.usable_bytes, fits: card.fits,
        label: `${card.name} · ${VF.fmtGiB(card.usable_bytes)} GiB` },
    });
    el("parts-table").replaceChildren(table(r));
  }

  window.VFParts = { render, peakParts };
})();
