/* The PT page's Portuguese for sentences the API writes in English (rules from vramfit.web.translate),
   and words for option values (none, full, ...). On the EN page both return their input. */
(function () {
  "use strict";
  const cfg = VF.config();
  const T = cfg.strings;
  const rules = (cfg.tr || []).map(([p, r]) => [new RegExp(p, "g"), r]);
  const NUM = /⟨([\d,]+(?:\.\d+)?)⟩/g;

  function text(s) {
    if (!rules.length || s == null) return s;
    let out = String(s);
    rules.forEach(([rx, r]) => { out = out.replace(rx, r); });
    return out.replace(NUM, (_, n) => VF.fmtNum(Number(n.replace(/,/g, "")), 3));
  }
  /* An option value as a reader sees it: "optimizer+params" -> "otimizador e parâmetros". */
  function value(v) { return T["v." + v] || String(v); }
  /* A scenario key as a label, lower-case, for running text. */
  function key(k) { return (T["k." + k] || k).toLowerCase(); }

  window.VFTr = { text, value, key };
})();
