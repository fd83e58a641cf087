/* The "cards that fit" panel: the planner's report (POST /api/plan) as a table, one row per card. */
(function () {
  "use strict";
  const fmt = (s, vars) => s.replace(/\{(\w+)\}/g, (_, k) => vars[k]);
  const SHOWN = 8;
  const SETTINGS = ["gradient_checkpointing", "loss", "optimizer", "parallelism", "offload"];

  function hours(h) {
    if (h == null) return "—";
    if (h < 1) return Math.max(1, Math.round(h * 60)) + " min";
    if (h < 48) return h.toFixed(1) + " h";
    return (h / 24).toFixed(1) + " d";
  }
  function usd(lo, hi) {
    if (lo == null) return "—";
    const one = (v) => "$" + (v < 100 ? v.toFixed(2) : Math.round(v).toLocaleString());
    return hi != null && Math.abs(hi - lo) > 0.005 ? one(lo) + "–" + one(hi) : one(lo);
  }

  /* What the plan changes from the user's scenario, in scenario words. */
  function changes(plan, scenario, T) {
    const out = [];
    if (plan.micro_batch_size !== scenario.micro_batch_size || plan.grad_accum !== scenario.grad_accum) {
      out.push(`${plan.micro_batch_size} × ${plan.grad_accum}`);
    }
    SETTINGS.forEach((k) => {
      if (plan[k] != null && plan[k] !== scenario[k] && !(k === "parallelism" && plan.num_gpus === 1)) {
        out.push(`${(T["k." + k] || k).toLowerCase()}: ${plan[k]}`);
      }
    });
    return out.length ? out.join(", ") : T["fit.asgiven"];
  }

  /* One plan per card: the one with the fewest GPUs, in the planner's ranking order. */
  function perCard(plans) {
    const best = new Map();
    plans.forEach((p, rank) => {
      const cur = best.get(p.gpu_id);
      if (!cur || p.num_gpus < cur.p.num_gpus) best.set(p.gpu_id, { p, rank: cur ? cur.rank : rank });
    });
    return [...best.values()].sort((a, b) => a.rank - b.rank).map((x) => x.p);
  }

  function cell(tr, text, cls) {
    const td = tr.insertCell();
    td.textContent = text;
    if (cls) td.className = cls;
    return td;
  }

  function table(rows, scenario, T) {
    const t = document.createElement("table");
    t.id = "fits";
    const head = t.createTHead().insertRow();
    [[T["fit.card"]], [T["fit.gpus"], "num"], [T["fit.peak"], "num"], [T["fit.time"], "num"],
      [T["fit.cost"], "num"]].forEach(([h, cls]) => {
      const th = document.createElement("th");
      th.textContent = h;
      if (cls) th.className = cls;
      head.append(th);
    });
    const body = t.createTBody();
    rows.forEach((p, i) => {
      const tr = body.insertRow();
      tr.dataset.gpu = p.gpu_id;
      if (i >= SHOWN) tr.className = "extra";
      const name = cell(tr, p.gpu_name);
      const small = document.createElement("small");
      small.className = "settings";
      small.textContent = changes(p, scenario, T);
      name.append(small);
      cell(tr, "× " + p.num_gpus, "num");
      cell(tr, VF.fmtGiB(p.device_bytes) + " / " + VF.fmtGiB(p.usable_bytes, 0), "num");
      cell(tr, hours(p.hours), "num");
      cell(tr, usd(p.cost_usd_low, p.cost_usd_high), "num");
    });
    return t;
  }

  function fromEstimate(est, T) {
    const t = document.createElement("table");
    const body = t.createTBody();
    est.fits.forEach((f) => {
      const tr = body.insertRow();
      tr.className = f.fits ? "ok" : "bad";
      cell(tr, f.name);
      cell(tr, (f.fits ? "✓ " : "✗ ") + VF.fmtGiB(est.peak.device_bytes) + " / " + VF.fmtGiB(f.usable_bytes) + " GiB", "num");
    });
    return t;
  }

  function note(text, cls) {
    const p = document.createElement("p");
    p.className = cls || "note";
    p.textContent = text;
    return p;
  }

  function render(host, countEl, res, est, T) {
    const parts = [];
    if (!res || !res.ok) {
      const fit = est.fits.filter((f) => f.fits).length;
      countEl.textContent = fmt(T["fit.count"], { n: fit, m: est.fits.length });
      parts.push(fromEstimate(est, T));
      if (res && res.data && res.data.error) parts.push(note(res.data.error));
      host.replaceChildren(...parts);
      return;
    }
    const report = res.data;
    const rows = perCard(report.plans);
    const considered = new Set([...report.plans.map((p) => p.gpu_id), ...report.excluded.map((e) => e.gpu_id)]);
    countEl.textContent = fmt(T["fit.count"], { n: rows.length, m: considered.size });
    if (!rows.length) parts.push(note(T["fit.none"], ""));
    else parts.push(table(rows, report.scenario, T));
    if (rows.length > SHOWN) {
      const b = document.createElement("button");
      b.type = "button";
      b.className = "share";
      b.textContent = T["fit.more"] + ` (${rows.length})`;
      b.addEventListener("click", () => { host.classList.add("all"); b.remove(); });
      parts.push(b);
    }
    parts.push(note(report.inputs.dataset_tokens ? fmt(T["fit.basis"], {
      tokens: VF.fmtCount(report.inputs.total_tokens), eff: report.inputs.effective_batch }) : T["fit.nodata"]));
    host.classList.remove("all");
    host.replaceChildren(...parts);
  }

  /* Ranked changes that make the scenario fit the target card (planner's "changes"). */
  function renderChanges(host, res, gpu, T) {
    host.replaceChildren();
    if (!res || !res.ok || !gpu) return;
    const list = ((res.data.changes || {})[gpu] || []).filter((c) => c.fits).slice(0, 3);
    if (!list.length) return;
    const title = document.createElement("b");
    title.textContent = T["fit.tofit"];
    const ul = document.createElement("ul");
    list.forEach((c) => {
      const li = document.createElement("li");
      li.textContent = `${c.description} — ${VF.fmtGiB(c.device_bytes)} GiB` + (c.tradeoff ? ` (${c.tradeoff})` : "");
      ul.append(li);
    });
    host.append(title, ul);
  }

  window.VFFits = { render, renderChanges };
})();
