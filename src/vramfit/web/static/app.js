/* The calculator: on every change, ask the API and redraw, without reloading the page. */
(function () {
  "use strict";
  const cfg = VF.config();
  const T = cfg.strings;
  const F = window.VFForm;
  const el = (id) => document.getElementById(id);
  const fmt = (s, vars) => s.replace(/\{(\w+)\}/g, (_, k) => vars[k]);
  const SEQS = [512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072];
  const BATCHES = [1, 2, 4, 8, 16, 32, 64];
  let gpus = {};
  let timer = null;
  let seq = 0;

  async function post(path, body, signal) {
    const r = await fetch(path, { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body), signal });
    const data = await r.json().catch(() => ({ error: r.statusText, key: "body" }));
    return { ok: r.ok, status: r.status, data };
  }

  function clearErrors() {
    document.querySelectorAll("[data-err-for]").forEach((p) => { p.hidden = true; p.textContent = ""; });
    document.querySelectorAll("[aria-invalid]").forEach((x) => x.removeAttribute("aria-invalid"));
    el("error").hidden = true;
  }

  function showError(err) {
    const p = document.querySelector(`[data-err-for="${err.key}"]`);
    let text = err.error || String(err);
    if (err.valid && err.valid.length && !text.includes("valid values")) {
      const v = err.valid.length > 12 ? err.valid.slice(0, 12).join(", ") + ", …" : err.valid.join(", ");
      text += ` (${T.valid}: ${v})`;
    }
    if (p && p.parentElement.closest("[hidden]") === null) {
      p.textContent = text;
      p.hidden = false;
      const input = F.$(err.key);
      if (input) input.setAttribute("aria-invalid", "true");
    } else {
      el("error").textContent = text;
      el("error").hidden = false;
    }
  }

  function schedule() {
    F.writeURL();
    clearTimeout(timer);
    timer = setTimeout(update, 160);
  }

  let controller = null;
  async function update() {
    const mine = ++seq;
    if (controller) controller.abort();
    controller = new AbortController();
    const signal = controller.signal;
    const s = F.scenario();
    clearErrors();
    document.body.classList.add("busy");
    try {
      const est = await post("/api/estimate", s, signal);
      if (mine !== seq) return;
      if (!est.ok) {
        showError(est.data);
        el("peak-sub").textContent = T["r.fix"];
        document.body.classList.add("stale");
        return;
      }
      document.body.classList.remove("stale");
      renderSummary(est.data);
      renderBreakdown(est.data);
      renderAssumptions(est.data);
      const [plan, seqLines, batchLines] = await Promise.all([
        planFor(s, est.data, signal), seqSweep(s, signal), batchSweep(s, signal)]);
      if (mine !== seq) return;
      renderFits(plan, est.data);
      renderSeq(s, est.data, seqLines);
      renderBatch(s, est.data, batchLines);
    } catch (e) {
      if (e.name !== "AbortError") { el("error").textContent = String(e); el("error").hidden = false; }
    } finally {
      if (mine === seq) document.body.classList.remove("busy");
    }
  }

  function targetCard(result) {
    const id = result.scenario.gpu;
    return id ? result.fits.find((f) => f.gpu_id === id) : null;
  }

  function renderSummary(r) {
    el("peak").textContent = VF.fmtGiB(r.peak.device_bytes);
    const m = r.model;
    el("peak-sub").textContent = `${T["r.device"]} · ${T["r.allocated"]} ${VF.fmtGiB(r.peak.allocated_bytes)} · ` +
      `${T["r.reserved"]} ${VF.fmtGiB(r.peak.reserved_bytes)} GiB — ${m.id} · ${VF.fmtCount(m.num_params)} ` +
      `${T["r.params"]}, ${VF.fmtCount(m.num_trainable_params)} ${T["r.trainable"]}`;
    const card = targetCard(r);
    const line = el("fitline");
    line.className = "fitline " + (card ? (card.fits ? "ok" : "bad") : "");
    let text = card
      ? fmt(card.paging_bytes ? T["r.paging"] : card.fits ? T["r.fits"] : T["r.nofit"], { card: card.name,
        free: VF.fmtGiB(card.headroom_bytes) + " GiB", over: VF.fmtGiB(-card.headroom_bytes) + " GiB",
        paged: VF.fmtGiB(card.paging_bytes) + " GiB" })
        + " · " + fmt(T["r.margin"], { margin: Math.round(card.safety_margin * 100) + " %" })
      : T["r.nocard"];
    if (r.host_bytes) text += " · " + fmt(T["r.host"], { v: VF.fmtGiB(r.host_bytes) + " GiB" });
    line.textContent = text;
    const mini = el("mini");
    if (mini) {
      mini.textContent = VF.fmtGiB(r.peak.device_bytes) + " GiB" + (card ? (card.fits ? " ✓ " : " ✗ ") + card.name : "");
      mini.className = "mini " + (card ? (card.fits ? "ok" : "bad") : "");
    }
  }

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

  function renderBreakdown(r) {
    const card = targetCard(r);
    el("breakdown-note").textContent = r.peak.breakdown
      ? fmt(T["ch.breakdown.peak"], { phase: r.peak.phase }) : T["ch.breakdown.note"];
    VF.breakdown(el("chart-breakdown"), {
      components: peakParts(r), label: (n) => T["c." + n] || n, barLabel: "",
      peak: r.peak.device_bytes, peakLabel: `${T["ch.peak"]} ${VF.fmtGiB(r.peak.device_bytes)} GiB`,
      capacity: card && { bytes: card.usable_bytes, fits: card.fits,
        label: `${card.name} · ${VF.fmtGiB(card.usable_bytes)} GiB` },
    });
  }

  function renderAssumptions(r) {
    el("assumptions").replaceChildren(...r.assumptions.map((a) => {
      const li = document.createElement("li");
      li.textContent = a;
      return li;
    }));
  }

  /* ----- sweeps: one line per checkpointing mode (sequence length) or method (micro-batch) ----- */
  function withValue(list, v) { return [...new Set([...list, v])].sort((a, b) => a - b); }
  function peaks(res) {
    if (!res.ok) return null;
    return res.data.points.map((p) => (p.peak ? p.peak.device_bytes : null));
  }

  async function seqSweep(s, signal) {
    const values = withValue(SEQS, s.seq_len || cfg.defaults.seq_len);
    const modes = ["none", "selective", "full", "offload"];
    const res = await Promise.all(modes.map((m) => post("/api/sweep",
      { scenario: { ...s, gradient_checkpointing: m }, key: "seq_len", values }, signal)));
    return { values, series: modes.map((m, i) => ({ id: m, y: peaks(res[i]) })) };
  }

  function methodVariant(s, m) {
    const out = { ...s, method: m };
    if (m !== "qlora" || out.quantize === "none") delete out.quantize;
    return out;
  }

  async function batchSweep(s, signal) {
    const values = withValue(BATCHES, s.micro_batch_size || 1);
    const methods = ["full", "lora", "qlora"];
    const res = await Promise.all(methods.map((m) => post("/api/sweep",
      { scenario: methodVariant(s, m), key: "micro_batch_size", values }, signal)));
    return { values, series: methods.map((m, i) => ({ id: m, y: peaks(res[i]) })) };
  }

  function caps(r) {
    const ids = [...new Set([...(r.scenario.gpu ? [r.scenario.gpu] : []), ...cfg.capacity_cards])];
    return ids.filter((id) => gpus[id]).map((id) => ({
      bytes: gpus[id].usable_bytes, strong: id === r.scenario.gpu,
      label: `${gpus[id].name} · ${VF.fmtGiB(gpus[id].usable_bytes, 0)} GiB`,
    }));
  }

  function renderSeq(s, r, data) {
    const mode = r.scenario.gradient_checkpointing;
    VF.lines(el("chart-seq"), {
      x: data.values, logX: true, tickText: VF.shortTokens, xTitle: T["k.seq_len"], yTitle: T["ch.gib"],
      series: data.series.filter((x) => x.y).map((x) => ({ name: fmt(T["ch.ckpt"], { v: x.id }), y: x.y,
        width: x.id === mode ? 3 : 1.5 })),
      caps: caps(r), current: { x: r.scenario.seq_len, y: r.peak.device_bytes }, currentLabel: T["ch.current"],
    });
  }

  function renderBatch(s, r, data) {
    const method = r.scenario.method;
    VF.lines(el("chart-batch"), {
      x: data.values, logX: true, xTitle: T["k.micro_batch_size"], yTitle: T["ch.gib"],
      series: data.series.filter((x) => x.y).map((x) => ({ name: x.id, y: x.y, width: x.id === method ? 3 : 1.5 })),
      caps: caps(r), current: { x: r.scenario.micro_batch_size, y: r.peak.device_bytes }, currentLabel: T["ch.current"],
    });
  }

  /* ----- cards that fit (the planner, over the whole catalog) ----- */
  async function planFor(s, est, signal) {
    const opts = F.planOptions();
    const body = { scenario: { ...s } };
    delete body.scenario.gpu;  // every card, not only the target one
    if (opts.dataset_tokens != null) body.dataset_tokens = opts.dataset_tokens;
    if (opts.epochs != null) body.epochs = opts.epochs;
    if (s.config_json) return { all: { ok: false, data: { error: T["fit.pasted"] } }, target: null };
    const card = targetCard(est);
    const [all, target] = await Promise.all([
      post("/api/plan", body, signal),
      card && !card.fits && !s.config_json ? post("/api/plan", { ...body, scenario: s }, signal) : null,
    ]);
    if (!all.ok && all.status === 422) showError(all.data);
    return { all, target };
  }

  function renderFits(plan, est) {
    window.VFFits.render(el("fit-table"), el("fit-count"), plan.all, est, T);
    window.VFFits.renderChanges(el("tofit"), plan.target, est.scenario.gpu, T);
  }

  async function start() {
    const r = await fetch("/api/gpus");
    (await r.json()).forEach((g) => { gpus[g.gpu_id] = g; });
    F.fromURL();
    F.wire(schedule);
    el("share").addEventListener("click", async () => {
      F.writeURL();
      try { await navigator.clipboard.writeText(location.href); } catch (e) { /* not allowed: the URL is shown */ }
      el("share").textContent = T["r.copied"];
      setTimeout(() => { el("share").textContent = T["r.share"]; }, 1500);
    });
    F.writeURL();
    update();
  }
  start();
})();
