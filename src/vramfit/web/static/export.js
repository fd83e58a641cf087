/* Ready configs for a plan (the planner's --export files, POST /api/export): the command to launch, the
   notes, and each file to download. */
(function () {
  "use strict";
  const cfg = VF.config();
  const T = cfg.strings;
  const R = window.VFTr;
  const ENGINES = ["accelerate", "deepspeed", "fsdp", "trl", "torchtitan"];
  let body = null;  // the /api/plan body of the table on screen
  let engine = "trl";

  function set(planBody) { body = planBody; }

  function h(tag, text, cls) {
    const e = document.createElement(tag);
    if (text != null) e.textContent = text;
    if (cls) e.className = cls;
    return e;
  }

  function engineControl() {
    const wrap = h("label", T["ex.engine"] + " ", "sort");
    const sel = h("select");
    sel.id = "export-engine";
    ENGINES.forEach((k) => { const o = h("option", k); o.value = k; sel.append(o); });
    sel.value = engine;
    sel.addEventListener("change", () => { engine = sel.value; });
    wrap.append(sel);
    return wrap;
  }

  function button(plan) {
    const b = h("button", "⤓ " + T["ex.button"], "chip export-btn");
    b.type = "button";
    b.title = T["ex.tip"];
    b.addEventListener("click", () => open(plan));
    return b;
  }

  async function open(plan) {
    const host = document.getElementById("export");
    host.hidden = false;
    host.replaceChildren(h("p", T["r.loading"], "note"));
    let data;
    try {
      const r = await fetch("/api/export", { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ ...body, gpu_id: plan.gpu_id, num_gpus: plan.num_gpus, engine }) });
      data = await r.json();
      if (!r.ok) { host.replaceChildren(h("p", R.text(data.error), "err")); return; }
    } catch (e) {
      host.replaceChildren(h("p", T["r.offline"], "err"));
      return;
    }
    const parts = [h("b", `${T["ex.title"]} ${plan.num_gpus} × ${plan.gpu_name} (${data.engine})`)];
    const cmd = h("pre");
    cmd.append(h("code", data.command));
    parts.push(cmd);
    Object.entries(data.files).forEach(([name, text]) => {
      const a = h("a", "⤓ " + name, "chip");
      a.download = name;
      a.href = URL.createObjectURL(new Blob([text], { type: "text/plain" }));
      const d = h("details");
      d.append(h("summary", name), h("pre", text));
      parts.push(a, d);
    });
    (data.notes || []).forEach((n) => parts.push(h("p", R.text(n), "note")));
    host.replaceChildren(...parts);
    host.scrollIntoView({ block: "nearest" });
  }

  window.VFExport = { set, button, engineControl };
})();
