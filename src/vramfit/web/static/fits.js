/* The "cards that fit" panel: the planner's report (POST /api/plan) as a table, one row per card, in an
   order the reader chooses and sees; the chosen card pinned on top; why the other cards are missing. */
(function () {
  "use strict";
  const R = window.VFTr;
  const fmt = (s, vars) => s.replace(/\{(\w+)\}/g, (_, k) => vars[k]);
  const SHOWN = 8;
  const SETTINGS = ["gradient_checkpointing", "loss", "optimizer", "parallelism", "offload"];
  let order = null;  // the reader's choice of sort; null: the default for the inputs
  let last = null;  // the last report drawn, to redraw on a new sort
  let expanded = false;  // "Show all" pressed for the report drawn (a new sort keeps it; a new report does not)

  function hours(h) {
    if (h == null) return "—";
    if (h < 1) return Math.max(1, Math.round(h * 60)) + " min";
    if (h < 48) return VF.fmtNum(h, 1) + " h";
    return VF.fmtNum(h / 24, 1) + " d";
  }
  function usd(lo, hi) {
    if (lo == null) return "—";
    const one = (v) => { const d = v < 100 ? 2 : 0;  // always cents under $100: "$0.50", PT "$1,20"
      return "$" + v.toLocaleString(VF.locale(), { minimumFractionDigits: d, maximumFractionDigits: d }); };
    return hi != null && Math.abs(hi - lo) > 0.005 ? one(lo) + "–" + one(hi) : one(lo);
  }
  const bytes = (b) => (b ? VF.fmtGiB(b, b >= 10 * VF.GiB ? 0 : 1) + " GiB" : "—");

  /* What the plan changes from the user's scenario, in words. */
  function changes(plan, scenario, T) {
    const out = [];
    if (plan.micro_batch_size !== scenario.micro_batch_size || plan.grad_accum !== scenario.grad_accum) {
      out.push(fmt(T["fit.batch"], { mb: plan.micro_batch_size, ga: plan.grad_accum }));
    }
    SETTINGS.forEach((k) => {
      if (plan[k] != null && plan[k] !== scenario[k] && !(k === "parallelism" && plan.num_gpus === 1)) {
        out.push(`${R.key(k)}: ${R.value(plan[k])}`);
      }
    });
    return out.length ? out.join(", ") : T["fit.asgiven"];
  }

  /* One plan per card: the one with the fewest GPUs. */
  function perCard(plans) {
    const best = new Map();
    plans.forEach((p) => {
      const cur = best.get(p.gpu_id);
      if (!cur || p.num_gpus < cur.num_gpus) best.set(p.gpu_id, p);
    });
    return [...best.values()];
  }

  const perHour = (p) => (p.usd_per_gpu_hour_low == null ? Infinity : p.usd_per_gpu_hour_low * (p.billed_gpus || p.num_gpus));
  const SORTS = {
    hour: (a, b) => perHour(a) - perHour(b),
    cost: (a, b) => (a.usd_per_million_tokens ?? Infinity) - (b.usd_per_million_tokens ?? Infinity),
    time: (a, b) => (b.tokens_per_s || 0) - (a.tokens_per_s || 0),
    memory: (a, b) => a.usable_bytes - b.usable_bytes,
  };

  function cell(tr, text, cls) {
    const td = tr.insertCell();
    td.textContent = text;
    if (cls) td.className = cls;
    return td;
  }

  function small(text, cls) {
    const s = document.createElement("small");
    s.className = cls;
    s.textContent = text;
    return s;
  }

  function row(body, p, scenario, T, i, pinned) {
    const tr = body.insertRow();
    tr.dataset.gpu = p.gpu_id;
    tr.className = (pinned ? "pinned" : "") + (i >= SHOWN && !pinned ? " extra" : "");
    const name = cell(tr, p.gpu_name);
    if (pinned) name.prepend(small(T["fit.yours"], "badge"));
    name.append(small(changes(p, scenario, T), "settings"));
    (p.notes || []).forEach((n) => name.append(small(R.text(n), "plan-note")));
    if (window.VFExport) name.append(window.VFExport.button(p));
    cell(tr, "× " + p.num_gpus, "num");
    const need = cell(tr, VF.fmtGiB(p.required_bytes || p.device_bytes) + " / " + VF.fmtGiB(p.usable_bytes, 0), "num");
    if (p.paging) {  // fits only with its optimizer state paged to host RAM (the CLI's "(paging)")
      const s = small(T["fit.paging"], "paging");
      s.title = T["fit.paging.tip"];
      need.append(" ", s);
    }
    cell(tr, p.tokens_per_s ? VF.fmtNum(p.tokens_per_s, 0) : "—", "num");
    const time = cell(tr, hours(p.hours), "num");
    if (p.hours_range) time.append(small(hours(p.hours_range[0]) + "–" + hours(p.hours_range[1]), "band"));  // p90 band
    cell(tr, usd(p.cost_usd_low, p.cost_usd_high), "num");
    cell(tr, p.usd_per_gpu_hour_low == null ? "—" : usd(perHour(p)) + "/h", "num");
    const disk = cell(tr, bytes(p.disk && p.disk.total_bytes), "num");
    if (p.disk) {
      disk.title = fmt(T["fit.disk.parts"], { base: bytes(p.disk.base_model_bytes),
        data: bytes((p.disk.dataset_raw_bytes || 0) + (p.disk.dataset_tokenized_bytes || 0)),
        ckpt: bytes(p.disk.checkpoint_bytes * (p.disk.checkpoints_on_disk || p.disk.checkpoints_kept || 1)), out: bytes(p.disk.final_model_bytes) });
    }
    cell(tr, bytes(p.host_ram_bytes), "num");
  }

  function table(rows, pin, scenario, T) {
    const t = document.createElement("table");
    t.id = "fits";
    const head = t.createTHead().insertRow();
    [["fit.card"], ["fit.gpus", "num"], ["fit.peak", "num"], ["fit.tps", "num"], ["fit.time", "num"],
      ["fit.cost", "num"], ["fit.hour", "num"], ["fit.disk", "num"], ["fit.host", "num"]].forEach(([k, cls]) => {
      const th = document.createElement("th");
      th.textContent = T[k];
      if (T[k + ".tip"]) th.title = T[k + ".tip"];
      if (cls) th.className = cls;
      head.append(th);
    });
    const body = t.createTBody();
    if (pin) row(body, pin, scenario, T, 0, true);
    rows.forEach((p, i) => row(body, p, scenario, T, i, false));
    return t;
  }

  function sortControl(current, T, redraw) {
    const wrap = document.createElement("label");
    wrap.className = "sort";
    wrap.append(T["fit.sort"] + " ");
    const sel = document.createElement("select");
    sel.id = "fit-sort";
    ["hour", "cost", "time", "memory"].forEach((k) => {
      const o = document.createElement("option");
      o.value = k;
      o.textContent = T["sort." + k];
      sel.append(o);
    });
    sel.value = current;
    sel.addEventListener("change", () => { order = sel.value; redraw(); });
    wrap.append(sel);
    return wrap;
  }

  function fromEstimate(est) {
    const t = document.createElement("table");
    const body = t.createTBody();
    est.fits.forEach((f) => {
      const tr = body.insertRow();
      tr.className = f.fits ? "ok" : "bad";
      cell(tr, f.name);
      // the verdict's figure on this card (its own estimate: a Hopper card's context differs): what stays on it, the
      // device peak less the cache released on an OOM retry and any paged state (plan/verdict.py card_fit)
      cell(tr, (f.fits ? "✓ " : "✗ ") + VF.fmtGiB(f.limit_bytes - f.headroom_bytes) + " / " + VF.fmtGiB(f.usable_bytes) + " GiB", "num");
    });
    return t;
  }

  function note(text, cls) {
    const p = document.createElement("p");
    p.className = cls || "note";
    p.textContent = text;
    return p;
  }

  /* Why cards got no plan: the planner's reasons, grouped (the same reason for many cards once). */
  function excluded(report, T, open) {
    if (!report.excluded.length) return null;
    const groups = new Map();
    report.excluded.forEach((e) => {
      const why = R.text(e.reason.replace(new RegExp(e.gpu_id.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"), "g"), "…"));
      groups.set(why, (groups.get(why) || []).concat(e.gpu_id));
    });
    const d = document.createElement("details");
    d.id = "excluded";
    d.open = open;
    const s = document.createElement("summary");
    s.textContent = fmt(T["fit.excluded"], { n: report.excluded.length });
    const ul = document.createElement("ul");
    groups.forEach((ids, why) => {
      const li = document.createElement("li");
      li.textContent = `${ids.join(", ")}: ${why}`;
      ul.append(li);
    });
    d.append(s, ul);
    return d;
  }

  function render(host, countEl, res, est, T, resorted) {
    const parts = [];
    if (!resorted) expanded = false;
    if (!res || !res.ok) {
      const fit = est.fits.filter((f) => f.fits).length;
      countEl.textContent = fmt(T["fit.count"], { n: fit, m: est.fits.length });
      parts.push(fromEstimate(est));
      if (res && res.data && res.data.error) parts.push(note(R.text(res.data.error)));
      host.replaceChildren(...parts);
      last = null;
      return;
    }
    last = { host, countEl, res, est, T };
    const report = res.data;
    const hasData = !!report.inputs.dataset_tokens;
    const current = order || (hasData ? "cost" : "hour");
    let rows = perCard(report.plans).sort(SORTS[current]);
    const gpu = est.scenario.gpu;
    const pin = gpu ? rows.find((p) => p.gpu_id === gpu) : null;
    if (pin) rows = rows.filter((p) => p !== pin);
    const n = rows.length + (pin ? 1 : 0);
    const considered = new Set([...report.plans.map((p) => p.gpu_id), ...report.excluded.map((e) => e.gpu_id)]);
    countEl.textContent = fmt(T["fit.count"], { n, m: considered.size });
    if (!n) {
      parts.push(note(T["fit.none"], "none"));
    } else {
      const controls = document.createElement("div");
      controls.className = "controls";
      controls.append(sortControl(current, T, () => render(last.host, last.countEl, last.res, last.est, last.T, true)));
      if (window.VFExport) controls.append(window.VFExport.engineControl());
      parts.push(controls);
      parts.push(table(rows, pin, report.scenario, T));
    }
    if (gpu && !pin) {
      const why = report.excluded.find((e) => e.gpu_id === gpu);
      const card = (est.fits.find((f) => f.gpu_id === gpu) || { name: gpu }).name;  // the card's name, not its id
      if (why) parts.push(note(fmt(T["fit.yours.no"], { card, why: R.text(why.reason) }), "note yours-no"));
    }
    if (rows.length > SHOWN && !expanded) {
      const b = document.createElement("button");
      b.type = "button";
      b.className = "share";
      b.textContent = T["fit.more"] + ` (${n})`;
      b.addEventListener("click", () => { expanded = true; host.classList.add("all"); b.remove(); });
      parts.push(b);
    }
    parts.push(note(fmt(T["fit.order." + current], {}) + " " + (hasData ? fmt(T["fit.basis"], {
      tokens: VF.fmtCount(report.inputs.total_tokens), eff: report.inputs.effective_batch })
      : fmt(T["fit.nodata"], { eff: report.inputs.effective_batch }))));
    const ex = excluded(report, T, !n);
    if (ex) parts.push(ex);
    const box = document.createElement("div");
    box.id = "export";
    box.className = "export";
    box.hidden = true;
    parts.push(box);
    host.classList.toggle("all", expanded);
    host.replaceChildren(...parts);
  }

  /* Changes that make the scenario fit the target card, ranked as a renter would choose: those that fit
     first; changes to the training itself (shorter sequences, pure bf16, QLoRA) after those that keep it;
     then by time cost (GPU-hours per token, after / before); then free before slower before hardware.
     Those that do not fit alone follow, the largest saving first. */
  const KIND = { free: 0, slower: 1, hardware: 2, training: 3 };
  function rank(list) {
    const training = (c) => (c.kind === "training" ? 1 : 0);
    const missing = (a, b) => (a.fits ? 0 : b.saving_bytes - a.saving_bytes);  // not enough: the biggest saving first
    return list.slice().sort((a, b) => (b.fits - a.fits) || missing(a, b) || (training(a) - training(b)) ||
      ((a.cost_factor ?? 1) - (b.cost_factor ?? 1)) || ((KIND[a.kind] ?? 9) - (KIND[b.kind] ?? 9)) ||
      (a.device_bytes - b.device_bytes));
  }

  function renderChanges(host, res, gpu, T) {
    host.replaceChildren();
    if (!res || !res.ok || !gpu) return;
    const list = rank(((res.data.changes || {})[gpu] || []).filter((c) => !c.error)).slice(0, 5);
    if (!list.length) return;
    const title = document.createElement("b");
    title.textContent = T["fit.tofit"];
    const t = document.createElement("table");
    t.id = "changes";
    const head = t.createTHead().insertRow();
    ["ch.change", "ch.after", "ch.saving", "ch.time"].forEach((k, i) => {
      const th = document.createElement("th");
      th.textContent = T[k];
      if (i) th.className = "num";
      head.append(th);
    });
    const body = t.createTBody();
    list.forEach((c) => {
      const tr = body.insertRow();
      tr.className = c.fits ? "ok" : "bad";
      tr.dataset.change = c.name;
      tr.dataset.kind = c.kind;
      const name = cell(tr, (c.fits ? "✓ " : "✗ ") + R.text(c.description));
      if (c.tradeoff) name.append(small(R.text(c.tradeoff), "settings"));
      if (c.host_ram_bytes) name.append(small(fmt(T["ch.host"], { gb: VF.fmtNum(c.host_ram_bytes / 1e9, 0) }), "settings"));
      cell(tr, VF.fmtGiB(c.required_bytes ?? c.device_bytes) + " GiB", "num");  /* the figure "fits" holds to the limit */
      cell(tr, "−" + VF.fmtGiB(c.saving_bytes) + " GiB", "num");
      const f = c.cost_factor ?? c.slowdown;
      cell(tr, f == null ? "—" : Math.abs(f - 1) < 0.005 ? T["ch.same.time"] : "× " + VF.fmtNum(f, 2), "num");
    });
    const wrap = document.createElement("div");
    wrap.className = "table-wrap";
    wrap.append(t);
    host.append(title, wrap, note(T["ch.time.note"]));
  }

  window.VFFits = { render, renderChanges, rank, changes };
})();
