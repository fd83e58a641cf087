/* The two sweep charts: the memory a run needs per GPU against sequence length (one line per checkpointing
   mode) and against micro-batch (one line per method), from POST /api/sweep. Every point is the figure the
   verdict holds to a card's limit (peak.required_bytes: the device peak less the cache PyTorch releases before
   an OOM, vramfit.plan.verdict) and every card line is that limit (usable memory less the safety margin), so a
   point on or under a card's line fits it and one above does not, with two exceptions each drawn as such: a point
   that fits a card only by paging its paged optimizer state to host RAM is a diamond whose hover says so, and a
   card the run cannot start on at all (result.fits[].runs false: no BF16, FlashAttention-2 before Ampere) is a
   grey dotted line whose label gives the estimate's reason. */
(function () {
  "use strict";
  const cfg = VF.config();
  const T = cfg.strings;
  const R = window.VFTr;
  const el = (id) => document.getElementById(id);
  const fmt = (s, vars) => s.replace(/\{(\w+)\}/g, (_, k) => vars[k]);
  const SEQS = [512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072];
  const BATCHES = [1, 2, 4, 8, 16, 32, 64];

  function withValue(list, v) { return [...new Set([...list, v])].sort((a, b) => a - b); }
  function peaks(res) {
    if (!res.ok) return null;
    return res.data.points.map((p) => (p.peak ? p.peak.required_bytes : null));
  }
  /* card id -> paged bytes, per point (a point fits that card only by paging: plan/sweep.py SweepPoint.paging) */
  function paging(res) { return res.ok ? res.data.points.map((p) => p.paging || {}) : null; }

  async function seq(s, signal, post) {
    const values = withValue(SEQS, s.seq_len || cfg.defaults.seq_len);
    const modes = ["none", "selective", "full", "offload"];
    const res = await Promise.all(modes.map((m) => post("/api/sweep",
      { scenario: { ...s, gradient_checkpointing: m }, key: "seq_len", values }, signal)));
    return { values, series: modes.map((m, i) => ({ id: m, y: peaks(res[i]), paging: paging(res[i]) })) };
  }

  function methodVariant(s, m) {
    const out = { ...s, method: m };
    if (m !== "qlora" || out.quantize === "none") delete out.quantize;
    return out;
  }

  async function batch(s, signal, post) {
    const values = withValue(BATCHES, s.micro_batch_size || 1);
    const methods = ["full", "lora", "qlora"];
    const res = await Promise.all(methods.map((m) => post("/api/sweep",
      { scenario: methodVariant(s, m), key: "micro_batch_size", values }, signal)));
    return { values, series: methods.map((m, i) => ({ id: m, y: peaks(res[i]), paging: paging(res[i]) })) };
  }

  /* The estimate's own verdicts (result.fits) give each card's limit, with the margin the user chose. */
  function drawn(r) {
    const ids = [...new Set([...(r.scenario.gpu ? [r.scenario.gpu] : []), ...cfg.capacity_cards])];
    return ids.map((id) => r.fits.find((f) => f.gpu_id === id)).filter(Boolean);
  }
  function caps(r) {
    return drawn(r).map((f) => ({
      bytes: f.limit_bytes, strong: f.gpu_id === r.scenario.gpu, blocked: !f.runs,
      label: f.runs ? fmt(T["ch.limit"], { card: f.name, limit: VF.fmtGiB(f.limit_bytes, 1),
        usable: VF.fmtGiB(f.usable_bytes, 1), margin: Math.round(f.safety_margin * 100) })
        : fmt(T["ch.cannot"], { card: f.name, why: R.text(f.verdict) }),
    }));
  }
  /* Per point, the drawn cards it fits only by paging (null where none). */
  function notes(r, pages) {
    const cards = drawn(r).filter((f) => f.runs);
    return pages.map((p) => cards.filter((f) => p[f.gpu_id]).map((f) => fmt(T["ch.paging"],
      { card: f.name, paged: VF.fmtGiB(p[f.gpu_id]) })).join("<br>") || null);
  }

  const sameAs = (name) => fmt(T["ch.same"], { v: name });

  function draw(s, r, seqData, batchData) {
    const mode = r.scenario.gradient_checkpointing;
    VF.lines(el("chart-seq"), {
      x: seqData.values, logX: true, tickText: VF.shortTokens, xTitle: T["k.seq_len"], yTitle: T["ch.need"], sameAs,
      series: seqData.series.filter((x) => x.y).map((x) => ({ name: fmt(T["ch.ckpt"], { v: R.value(x.id) }), y: x.y,
        notes: notes(r, x.paging), width: x.id === mode ? 3 : 1.5 })),
      caps: caps(r), current: { x: r.scenario.seq_len, y: r.peak.required_bytes }, currentLabel: T["ch.current"],
    });
    const method = r.scenario.method;
    VF.lines(el("chart-batch"), {
      x: batchData.values, logX: true, xTitle: T["k.micro_batch_size"], yTitle: T["ch.need"], sameAs,
      series: batchData.series.filter((x) => x.y).map((x) => ({ name: T["m." + x.id] || x.id, y: x.y,
        notes: notes(r, x.paging), width: x.id === method ? 3 : 1.5 })),
      caps: caps(r), current: { x: r.scenario.micro_batch_size, y: r.peak.required_bytes },
      currentLabel: T["ch.current"],
    });
  }

  window.VFSweeps = { seq, batch, draw };
})();
