/* "Paste your training config": POST /api/import, fill the form from the scenario it returns, show the key report. */
(function () {
  "use strict";
  const cfg = VF.config();
  const T = cfg.strings;
  const box = document.getElementById("import");
  if (!box) return;
  const el = (id) => document.getElementById(id);
  // typing in the paste box is not a change of the scenario: keep it from the form's listeners
  /* What a training config does not say but the page holds: the target card, the GPU count, the planner's inputs. */
  const KEEP = ["gpu", "num_gpus", "dataset_tokens", "epochs", "effective_batch"];
  ["input", "change"].forEach((ev) => box.addEventListener(ev, (e) => e.stopPropagation()));

  /* The scenario as the URL query the form reads (lists comma-joined, booleans as true/false). */
  function toQuery(s) {
    const q = new URLSearchParams();
    Object.entries(s).forEach(([k, v]) => {
      if (v == null) return;
      q.set(k, Array.isArray(v) ? v.join(",") : typeof v === "object" ? JSON.stringify(v) : String(v));
    });
    if (cfg.lang === "pt") q.set("lang", "pt");
    return q;
  }

  function showReport(data) {
    const list = el("import-report");
    list.replaceChildren();
    data.report.forEach((e) => {
      const li = document.createElement("li");
      li.dataset.kind = e.kind;
      const to = e.becomes.length ? " → " + e.becomes.join(", ") : "";
      const why = e.note ? " (" + window.VFTr.text(e.note) + ")" : "";  /* the PT page's Portuguese (tr.js) */
      li.textContent = (T["imp.kind." + e.kind] || e.kind) + ": " + e.key + to + why;
      list.appendChild(li);
    });
    const n = (k) => data.report.filter((e) => e.kind === k).length;
    el("import-msg").textContent = T["imp.done"].replace("{dialect}", data.dialect)
      .replace("{read}", n("read")).replace("{default}", n("default"))
      .replace("{ignored}", n("ignored")).replace("{nm}", n("not modelled yet"));
  }

  async function run() {
    const msg = el("import-msg");
    msg.classList.remove("err");
    msg.textContent = T["imp.busy"];
    el("import-report").replaceChildren();
    try {
      const r = await fetch("/api/import", { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ text: el("import-text").value, dialect: el("import-dialect").value || null }) });
      const data = await r.json();
      if (!r.ok) { msg.classList.add("err"); msg.textContent = window.VFTr.text(data.error); return; }
      const q = toQuery(data.scenario);
      KEEP.forEach((k) => {  // the page's, where the config does not say
        const v = window.VFForm.$(k).value.trim();
        if (!q.has(k) && v) q.set(k, v);
      });
      if (data.eval_follows_micro) q.set("eval_follows_micro", "true");  // the planner evaluates at each micro-batch
      history.replaceState(null, "", location.pathname + "?" + q.toString());
      window.VFForm.fromURL();
      document.getElementById("form").dispatchEvent(new Event("change"));
      showReport(data);
    } catch (e) {
      msg.classList.add("err");
      msg.textContent = String(e);
    }
  }
  el("import-go").addEventListener("click", run);
})();
