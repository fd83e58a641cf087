/* The calculator: on every change, ask the API and redraw, without reloading the page.
   A result that no longer matches the form is marked stale (dimmed, with a banner) until a new one comes. */
(function () {
  "use strict";
  const cfg = VF.config();
  const T = cfg.strings;
  const F = window.VFForm;
  const R = window.VFTr;
  const el = (id) => document.getElementById(id);
  const fmt = (s, vars) => s.replace(/\{(\w+)\}/g, (_, k) => vars[k]);
  const gib = (b) => VF.fmtGiB(b) + " GiB";
  let timer = null;
  let seq = 0;
  let shown = false;  // a result is on screen

  class NetworkError extends Error {}

  async function post(path, body, signal) {
    let r;
    try {
      r = await fetch(path, { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify(body), signal });
    } catch (e) {
      if (e.name === "AbortError") throw e;
      throw new NetworkError(e.message);
    }
    const data = await r.json().catch(() => ({ error: T["r.server"], key: "body" }));
    if (r.status >= 500) throw new NetworkError(String(r.status));
    return { ok: r.ok, status: r.status, data };
  }

  function clearErrors() {
    document.querySelectorAll("[data-err-for]").forEach((p) => { p.hidden = true; p.textContent = ""; });
    document.querySelectorAll("[aria-invalid]").forEach((x) => x.removeAttribute("aria-invalid"));
    el("error").hidden = true;
    el("error").replaceChildren();
  }

  function errorText(err) {
    let text = R.text(err.error || String(err));
    if (err.key === "model") {  // suggestions are shown apart (VFSuggest), not as a wall of ids
      return text.replace(/ \(did you mean [^)]*\)/, "").split(" (valid values:")[0].split(". ")[0];
    }
    if (err.valid && err.valid.length && !/valid values|valores válidos/.test(text)) {
      const v = err.valid.length > 12 ? err.valid.slice(0, 12).join(", ") + ", …" : err.valid.join(", ");
      text += ` (${T.valid}: ${v})`;
    }
    return text;
  }

  function showError(err) {
    const p = document.querySelector(`[data-err-for="${err.key}"]`);
    const text = errorText(err);
    if (p && p.parentElement.closest("[hidden]") === null) {
      p.textContent = text;
      p.hidden = false;
      const input = F.$(err.key);
      if (input) input.setAttribute("aria-invalid", "true");
      if (err.key === "model") window.VFSuggest.show(p, F.$("model").value, schedule, err.error);
    } else {
      el("error").textContent = text;
      el("error").hidden = false;
    }
  }

  /* The result on screen no longer matches the form (invalid input, or the network failed). */
  function markStale(reason) {
    document.body.classList.toggle("stale", shown);
    el("stale-note").textContent = reason;
    el("stale-note").hidden = !shown;
    el("peak-sub").textContent = shown ? el("peak-sub").textContent : reason;
    el("mini").classList.add("stale");
  }
  function clearStale() {
    document.body.classList.remove("stale");
    el("stale-note").hidden = true;
    el("mini").classList.remove("stale");
  }

  function schedule() {
    F.writeURL();
    if (shown) { document.body.classList.add("pending"); }
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
        markStale(T["r.fix"]);
        return;
      }
      renderSummary(est.data);
      window.VFParts.render(est.data, targetCard(est.data));
      renderAssumptions(est.data);
      shown = true;
      clearStale();
      const [plan, seqLines, batchLines] = await Promise.all([
        planFor(s, est.data, signal), window.VFSweeps.seq(s, signal, post), window.VFSweeps.batch(s, signal, post)]);
      if (mine !== seq) return;
      renderFits(plan, est.data);
      window.VFSweeps.draw(s, est.data, seqLines, batchLines);
    } catch (e) {
      if (e.name === "AbortError" || mine !== seq) return;
      el("error").textContent = e instanceof NetworkError ? T["r.offline"] : T["r.server"];
      el("error").hidden = false;
      markStale(T["r.offline"]);
    } finally {
      if (mine === seq) document.body.classList.remove("busy", "pending");
    }
  }

  function targetCard(result) {
    const id = result.scenario.gpu;
    return id ? result.fits.find((f) => f.gpu_id === id) : null;
  }

  function renderSummary(r) {
    el("peak").textContent = VF.fmtGiB(r.peak.device_bytes);
    const m = r.model;
    el("peak-sub").textContent = `${T["r.device"]} · ${T["r.allocated"]} ${VF.fmtGiB(r.peak.allocated_bytes)} GiB · ` +
      `${T["r.reserved"]} ${VF.fmtGiB(r.peak.reserved_bytes)} GiB — ${m.id} · ${VF.fmtCount(m.num_params)} ` +
      `${T["r.params"]}, ${VF.fmtCount(m.num_trainable_params)} ${T["r.trainable"]}`;
    const card = targetCard(r);
    const line = el("fitline");
    line.className = "fitline " + (card ? (card.fits ? "ok" : "bad") : "");
    let text = card
      ? (card.runs ? fmt(card.paging_bytes ? T["r.paging"] : card.fits ? T["r.fits"] : T["r.nofit"], { card: card.name,
        free: VF.fmtGiB(card.headroom_bytes) + " GiB", over: VF.fmtGiB(-card.headroom_bytes) + " GiB",
        paged: VF.fmtGiB(card.paging_bytes) + " GiB" })
        : R.text(card.verdict))  // a card the run cannot start on: why, not a memory figure (plan/verdict.py)
        + " · " + fmt(T["r.margin"], { margin: Math.round(card.safety_margin * 100) + " %", limit: gib(card.limit_bytes),
          need: gib(card.limit_bytes - card.headroom_bytes), usable: gib(card.usable_bytes) })  // the verdict's figures
      : T["r.nocard"];
    if (r.host_bytes) text += " · " + fmt(T["r.host"], { v: VF.fmtGiB(r.host_bytes) + " GiB" });
    line.textContent = text;
    const acc = el("accuracy");  /* the measured cases behind this path (result.accuracy) */
    acc.textContent = r.accuracy ? T["r.accuracy"] + " " + R.text(r.accuracy.note) : "";
    acc.className = "accuracy " + (r.accuracy && !r.accuracy.measured_path ? "warn" : "");
    renderVerdicts(r);
    const mini = el("mini");
    mini.textContent = VF.fmtGiB(r.peak.device_bytes) + " GiB" + (card ? (card.fits ? " ✓ " : " ✗ ") + card.name : "");
    mini.className = "mini " + (card ? (card.fits ? "ok" : "bad") : "");
  }

  /* The verdict on several common cards at once (the estimate's "fits"). */
  function renderVerdicts(r) {
    el("verdicts").replaceChildren(...r.fits.map((f) => {
      const li = document.createElement("li");
      li.className = f.fits ? "ok" : "bad";
      li.dataset.gpu = f.gpu_id;
      li.textContent = `${f.fits ? "✓" : "✗"} ${f.name} · ${VF.fmtGiB(f.usable_bytes, 0)} GiB`;
      li.title = f.fits ? fmt(T["r.fits"], { card: f.name, free: VF.fmtGiB(f.headroom_bytes) + " GiB" })
        : !f.runs ? R.text(f.verdict)  // a card the run cannot start on (plan/verdict.py card_refusal)
        : fmt(T["r.nofit"], { card: f.name, over: VF.fmtGiB(-f.headroom_bytes) + " GiB" });
      return li;
    }));
  }

  function renderAssumptions(r) {
    el("assumptions").replaceChildren(...r.assumptions.map((a) => {
      const li = document.createElement("li");
      li.textContent = R.text(a);
      return li;
    }));
  }

  /* ----- cards that fit (the planner, over the whole catalog) ----- */
  async function planFor(s, est, signal) {
    const opts = F.planOptions();
    const body = { scenario: { ...s } };
    delete body.scenario.gpu;  // every card, not only the target one
    Object.entries(opts).forEach(([k, v]) => { if (v != null) body[k] = v; });
    if (s.config_json) return { all: { ok: false, data: { error: T["fit.pasted"] } }, target: null };
    window.VFExport.set(body);
    const card = targetCard(est);
    const [all, target] = await Promise.all([
      post("/api/plan", body, signal),
      card && !card.fits ? post("/api/plan", { ...body, scenario: s }, signal) : null,
    ]);
    if (!all.ok && all.status === 422) showError(all.data);
    return { all, target };
  }

  function renderFits(plan, est) {
    window.VFFits.render(el("fit-table"), el("fit-count"), plan.all, est, T);
    window.VFFits.renderChanges(el("tofit"), plan.target, est.scenario.gpu, T);
  }

  /* "Copy link": the clipboard where the browser allows it (https or localhost), else the link to copy by hand. */
  async function share() {
    F.writeURL();
    const box = el("share-url");
    let copied = false;
    if (navigator.clipboard && window.isSecureContext) {
      try { await navigator.clipboard.writeText(location.href); copied = true; } catch (e) { copied = false; }
    }
    if (copied) {
      box.hidden = true;
      el("share").textContent = T["r.copied"];
      setTimeout(() => { el("share").textContent = T["r.share"]; }, 1500);
      return;
    }
    box.hidden = false;
    box.querySelector("input").value = location.href;
    box.querySelector("input").select();
  }

  function start() {  /* the charts' card lines come with the estimate (result.fits), no /api/gpus call */
    F.fromURL();
    F.wire(schedule);
    el("share").addEventListener("click", share);
    F.writeURL();
    update();
  }
  start();
})();
