/* A model the catalog does not know: three distinct catalog models near what was typed, and a way to
   paste the model's config.json instead (not the wall of every valid id). */
(function () {
  "use strict";
  const cfg = VF.config();
  const T = cfg.strings;

  /* Up to three distinct catalog models: the server's own "did you mean" ids first, then catalog
     searches for the typed words, longest prefix first ("llama 3 8b", then "llama 3", ...). */
  async function near(text, hinted) {
    const words = text.toLowerCase().split(/[^a-z0-9.]+/).filter(Boolean);
    const seen = new Map();
    const queries = [...(hinted || [])];
    for (let n = words.length; n > 0; n--) queries.push(words.slice(0, n).join(" "));
    for (const q of queries) {
      if (seen.size >= 3 || !q) continue;
      try {
        const r = await fetch("/api/models?q=" + encodeURIComponent(q.slice(0, 100)));
        if (r.ok) {
          const found = await r.json();
          const exact = found.find((m) => m.id === q || (m.aliases || []).includes(q));
          (exact ? [exact] : found).forEach((m) => { if (seen.size < 3 && !seen.has(m.id)) seen.set(m.id, m); });
        }
      } catch (e) { return [...seen.values()]; }
    }
    return [...seen.values()];
  }

  async function show(p, text, onPick, message) {
    const hint = /did you mean ([^)]*)\)/.exec(message || "");
    const box = document.createElement("span");
    box.className = "suggest";
    p.append(box);
    const found = await near(text, hint ? hint[1].replace(/\?$/, "").split(/,\s*/) : []);
    const parts = [];
    if (found.length) parts.push(document.createTextNode(" " + T["model.try"] + " "));
    found.forEach((m) => {
      const b = document.createElement("button");
      b.type = "button";
      b.className = "chip";
      b.textContent = m.display_name;
      b.title = m.id;
      b.addEventListener("click", () => { document.getElementById("f-model").value = m.id; onPick(); });
      parts.push(b);
    });
    const paste = document.createElement("button");
    paste.type = "button";
    paste.className = "chip";
    paste.id = "use-config";
    paste.textContent = T["model.paste"];
    paste.addEventListener("click", () => {
      const radio = document.querySelector('input[name=source][value="config"]');
      radio.checked = true;
      radio.dispatchEvent(new Event("change", { bubbles: true }));
      document.getElementById("f-config_json").focus();
    });
    parts.push(paste);
    box.replaceChildren(...parts);
  }

  window.VFSuggest = { show, near };
})();
