/* /docs: the API read from /openapi.json and written out as plain HTML (no Swagger UI, no CDN). */
(function () {
  "use strict";
  const T = VF.config().strings;
  const host = document.getElementById("api-docs");
  const h = (tag, text, cls) => { const e = document.createElement(tag); if (text != null) e.textContent = text; if (cls) e.className = cls; return e; };

  function resolve(schema, spec) {
    if (schema && schema.$ref) return spec.components.schemas[schema.$ref.split("/").pop()] || {};
    return schema || {};
  }
  function typeOf(p) {
    if (p.enum) return p.enum.length > 8 ? `${p.enum.slice(0, 8).join(" | ")} | …` : p.enum.join(" | ");
    if (p.anyOf) return p.anyOf.map(typeOf).filter((x) => x !== "null").join(" | ");
    if (p.type === "array") return typeOf(p.items || {}) + "[]";
    if (p.$ref) return p.$ref.split("/").pop();
    if (p.const != null) return JSON.stringify(p.const);
    return p.type || "any";
  }
  function fields(schema, spec) {
    const s = resolve(schema, spec);
    const props = s.properties || {};
    if (!Object.keys(props).length) return null;
    const t = h("table");
    const head = t.createTHead().insertRow();
    [T["docs.field"], T["docs.type"], T["docs.about"]].forEach((x) => head.append(h("th", x)));
    const body = t.createTBody();
    Object.entries(props).forEach(([k, p]) => {
      const tr = body.insertRow();
      tr.insertCell().append(h("code", k));
      tr.insertCell().textContent = typeOf(p);
      tr.insertCell().textContent = p.description || "";
    });
    const wrap = h("div", null, "table-wrap");
    wrap.append(t);
    return wrap;
  }

  function render(spec) {
    const parts = [h("p", spec.info.description || "")];
    Object.entries(spec.paths).forEach(([path, ops]) => {
      Object.entries(ops).forEach(([method, op]) => {
        const sec = h("section");
        sec.id = (method + path).replace(/[^a-z0-9]+/gi, "-");
        const title = h("h2");
        title.append(h("code", method.toUpperCase() + " " + path));
        sec.append(title, h("p", op.description || op.summary || ""));
        const body = op.requestBody && op.requestBody.content && op.requestBody.content["application/json"];
        if (body) { sec.append(h("h3", T["docs.body"])); const f = fields(body.schema, spec); if (f) sec.append(f); }
        (op.parameters || []).forEach((p) => sec.append(h("p", `${p.name} (${p.in}): ${p.description || typeOf(p.schema || {})}`)));
        sec.append(h("p", T["docs.responses"] + " " + Object.keys(op.responses || {}).join(", "), "note"));
        parts.push(sec);
      });
    });
    host.replaceChildren(...parts);
  }

  fetch("/openapi.json").then((r) => r.json()).then(render)
    .catch(() => { host.replaceChildren(h("p", T["r.offline"], "banner")); });
})();
