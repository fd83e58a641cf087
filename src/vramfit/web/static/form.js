/* The calculator form: state <-> form fields <-> URL, the model search box, config.json upload. */
(function () {
  "use strict";
  const cfg = VF.config();
  const form = document.getElementById("form");
  const SIMPLE = cfg.field_keys.filter((k) => document.getElementById("f-" + k));
  const BOOLS = cfg.bool_keys.filter((k) => document.getElementById("f-" + k));
  const PLAN = ["dataset_tokens", "epochs", "effective_batch"];
  const INT_KEYS = cfg.int_keys;
  /* Left empty unless set: the library derives them from the stage (KTO's least micro-batch of 2; GRPO's accumulation
     that holds whole groups of completions), as the CLI does without the flag (stage_keys.check_stage_keys). */
  const DERIVED = ["micro_batch_size", "grad_accum"];
  const $ = (id) => document.getElementById("f-" + id);
  /* Fraction fields (inputmode=decimal) take "1,5" as "1.5" in both languages; anything else goes to the server as
     typed, which names the field and what it takes (a type=number field would have dropped it silently). */
  const DECIMAL = [...form.querySelectorAll("input[inputmode=decimal]")].map((x) => x.name);
  const decimal = (v) => (/^[+-]?\d*,\d+$/.test(v) ? v.replace(",", ".") : v);
  const value = (k) => (DECIMAL.includes(k) ? decimal($(k).value.trim()) : $(k).value.trim());

  function source() { return form.querySelector("input[name=source]:checked").value; }
  function setSource(v) {
    form.querySelector(`input[name=source][value="${v}"]`).checked = true;
    form.querySelectorAll(".src").forEach((el) => { el.hidden = el.dataset.src !== v; });
  }

  /* Fill the form from URL parameters (a shared link) or, with none, the initial scenario. */
  function fromURL() {
    const p = new URLSearchParams(location.search);
    const has = [...p.keys()].some((k) => k !== "lang");
    const get = (k) => (has ? p.get(k) : (cfg.initial[k] ?? null));
    SIMPLE.forEach((k) => {
      const v = get(k);
      const el = $(k);
      if (el.tagName === "SELECT") {
        const fallback = el.querySelector('option[value=""]') ? "" : String(cfg.defaults[k] ?? "");
        el.value = v != null && [...el.options].some((o) => o.value === v) ? v : fallback;
      } else {
        el.value = v ?? (INT_KEYS.includes(k) && !DERIVED.includes(k) ? String(cfg.defaults[k] ?? "") : "");
      }
    });
    PLAN.forEach((k) => { $(k).value = p.get(k) ?? ""; });
    $("eval_follows_micro").checked = p.get("eval_follows_micro") === "true";
    BOOLS.forEach((k) => { $(k).checked = ["true", "1", "on"].includes(get(k)); });
    $("model").value = get("model") || "";
    $("params").value = get("params") || "";
    $("config_json").value = get("config_json") || "";
    setSource(get("config_json") ? "config" : get("params") ? "params" : "catalog");
    placeholders();
    localOptions();
    syncVisibility();
  }

  function syncVisibility() {
    document.getElementById("sec-lora").classList.toggle("muted", $("method").value === "full");
    $("effective_batch").placeholder = effectivePlaceholder();
  }

  /* The effective batch the library takes when the field is empty, with the batch keys the stage derives when they
     are left empty (stage_keys.check_stage_keys: KTO's least micro-batch; GRPO's accumulation of whole groups). */
  function effectivePlaceholder() {
    const typed = (k) => ($(k) && /^\d+$/.test($(k).value.trim()) ? Number($(k).value) : null);
    const stage = $("stage") ? $("stage").value : "";
    const gpus = typed("num_gpus") || cfg.defaults.num_gpus || 1;
    const kto = stage === "kto" && typed("micro_batch_size") == null;
    const mb = typed("micro_batch_size") || (kto ? cfg.stage_batch.kto_micro_batch : cfg.defaults.micro_batch_size || 1);
    const n = typed("num_generations") || cfg.stage_batch.grpo_generations;
    const gcd = (a, b) => (b ? gcd(b, a % b) : a);
    const grpo = stage === "grpo" && typed("grad_accum") == null;
    const ga = typed("grad_accum") || (grpo ? n / gcd(n, mb * gpus) : cfg.defaults.grad_accum || 1);
    const key = grpo ? "eff.grpo" : kto ? "eff.kto" : "eff.auto";
    return cfg.strings[key].replace("{v}", mb * ga * gpus).replace("{ga}", ga).replace("{n}", n).replace("{mb}", mb);
  }

  /* An emptied number field computes with the default: say which (placeholder "2048 (default)"). */
  function placeholders() {
    INT_KEYS.forEach((k) => {
      const el = $(k);
      if (el && cfg.defaults[k] != null && !el.placeholder) {
        el.placeholder = DERIVED.includes(k) ? cfg.strings["auto"]
          : cfg.strings["default.v"].replace("{v}", cfg.defaults[k]);
      }
    });
  }

  /* On the PT page, option values read in Portuguese ("none — ..." -> "nenhum — ..."). */
  function localOptions() {
    if (cfg.lang !== "pt") return;
    form.querySelectorAll("select option").forEach((o) => {
      const m = o.textContent.match(/^([\w+.-]+)( — .*)?$/);
      const word = m && cfg.strings["v." + m[1]];
      if (word) o.textContent = word + (m[2] || "");
    });
  }

  /* The scenario object (scenario.md keys) the form describes; only non-empty fields. */
  function scenario() {
    const s = {};
    const src = source();
    if (src === "catalog") s.model = $("model").value.trim();
    if (src === "params") s.params = $("params").value.trim();
    if (src === "config") {
      const text = $("config_json").value.trim();
      try { s.config_json = text ? JSON.parse(text) : ""; } catch (e) { s.config_json = text; }
    }
    SIMPLE.forEach((k) => {
      const v = value(k);
      if (v === "") return;
      if (INT_KEYS.includes(k) && /^\d+$/.test(v)) s[k] = Number(v);
      else if (DECIMAL.includes(k) && !isNaN(Number(v))) s[k] = Number(v);
      else if (k === "lora_targets" || k === "modules_to_save") s[k] = v.split(",").map((x) => x.trim()).filter(Boolean);
      else s[k] = v;
    });
    BOOLS.forEach((k) => { if ($(k).checked) s[k] = true; });
    return s;
  }

  /* The planner's own inputs, as typed ("50M", "2e9"): the planner reads and checks them. */
  function planOptions() {
    const tokens = $("dataset_tokens").value.trim();
    const epochs = value("epochs");
    const eff = $("effective_batch").value.trim();
    return { dataset_tokens: tokens || null, epochs: epochs === "" ? null : (isNaN(Number(epochs)) ? epochs : Number(epochs)),
      effective_batch: eff === "" ? null : (/^\d+$/.test(eff) ? Number(eff) : eff),
      eval_follows_micro: $("eval_follows_micro").checked || null };
  }

  /* The URL query for this state: every key that differs from the scenario defaults. */
  function query(lang) {
    const q = new URLSearchParams();
    const s = scenario();
    Object.entries(s).forEach(([k, v]) => {
      if (k === "config_json") { if (v) q.set(k, typeof v === "string" ? v : JSON.stringify(v)); return; }
      const text = Array.isArray(v) ? v.join(",") : String(v);
      const def = cfg.defaults[k];
      const defText = Array.isArray(def) ? def.join(",") : def == null ? null : String(def);
      const el = $(k);
      const derived = el && el.tagName === "SELECT" && el.querySelector('option[value=""]');  // "auto" default
      if (text !== "" && (text !== defText || derived)) q.set(k, text);
    });
    if (s.model) q.set("model", s.model);
    if (s.gpu) q.set("gpu", s.gpu);
    PLAN.forEach((k) => { const v = value(k); if (v) q.set(k, v); });
    if ($("eval_follows_micro").checked) q.set("eval_follows_micro", "true");
    if (lang === "pt") q.set("lang", "pt");
    return q;
  }

  function writeURL() {
    const q = query(cfg.lang);
    const text = q.toString();
    history.replaceState(null, "", location.pathname + (text ? "?" + text : ""));
    const other = cfg.lang === "pt" ? "en" : "pt";
    const sw = query(other).toString();
    document.getElementById("lang-switch").href = location.pathname + (sw ? "?" + sw : "");
  }

  /* Catalog matches for typed words: whole-word matches first, then the newest family ("qwen 7b":
     Qwen2.5-7B before Qwen-7B), the server's order otherwise. */
  function rankModels(list, text) {
    const words = text.toLowerCase().split(/\s+/).filter(Boolean);
    const version = (m) => { const v = (m.family || "").match(/\d+(\.\d+)?/); return v ? Number(v[0]) : 0; };
    const score = (m) => {
      const tokens = m.id.toLowerCase().split(/[\/_ -]+/);
      return words.filter((w) => tokens.includes(w)).length;
    };
    return list.map((m, i) => ({ m, i, s: score(m), v: version(m) }))
      .sort((a, b) => (b.s - a.s) || (b.v - a.v) || (a.i - b.i)).map((x) => x.m);
  }

  /* ----- the model search box (combobox over GET /api/models?q=) ----- */
  function modelSearch(onPick) {
    const input = $("model");
    const list = document.getElementById("model-list");
    let items = [];
    let active = -1;
    let timer = null;
    let seq = 0;
    const close = () => { list.hidden = true; input.setAttribute("aria-expanded", "false"); active = -1; };
    const pick = (i) => {
      if (!items[i]) return;
      input.value = items[i].id;
      close();
      onPick();
    };
    const highlight = (i) => {
      active = i;
      [...list.children].forEach((li, j) => li.setAttribute("aria-selected", String(j === i)));
      if (list.children[i]) {
        input.setAttribute("aria-activedescendant", list.children[i].id);
        list.children[i].scrollIntoView({ block: "nearest" });
      }
    };
    async function search() {
      const mine = ++seq;
      const r = await fetch("/api/models?q=" + encodeURIComponent(input.value.trim().slice(0, 100)));
      if (mine !== seq || !r.ok) return;
      items = rankModels(await r.json(), input.value).slice(0, 30);
      list.replaceChildren(...items.map((m, i) => {
        const li = document.createElement("li");
        li.id = "model-opt-" + i;
        li.setAttribute("role", "option");
        const b = document.createElement("b");
        b.textContent = m.display_name;
        const small = document.createElement("small");
        small.textContent = m.id + " · " + VF.fmtCount(m.params);
        li.append(b, small);
        li.addEventListener("mousedown", (e) => { e.preventDefault(); pick(i); });
        return li;
      }));
      if (!items.length) {
        const li = document.createElement("li");
        li.className = "empty";
        li.textContent = cfg.strings["model.none"];
        list.append(li);
      }
      list.hidden = false;
      input.setAttribute("aria-expanded", "true");
      active = -1;
    }
    input.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(search, 120); });
    input.addEventListener("focus", () => { input.select(); search(); });
    input.addEventListener("blur", () => setTimeout(close, 100));
    input.addEventListener("keydown", (e) => {
      if (e.key === "ArrowDown") { e.preventDefault(); if (list.hidden) search(); else highlight(Math.min(active + 1, items.length - 1)); }
      else if (e.key === "ArrowUp") { e.preventDefault(); highlight(Math.max(active - 1, 0)); }
      else if (e.key === "Enter") { e.preventDefault(); if (!list.hidden && items.length) pick(active >= 0 ? active : 0); else onPick(); }
      else if (e.key === "Escape") close();
    });
  }

  function wire(onChange) {
    form.addEventListener("submit", (e) => e.preventDefault());
    form.addEventListener("change", (e) => {
      if (e.target.name === "source") setSource(e.target.value);
      if (e.target.id === "f-config-file") return;  // read by its own listener; a typed model commits on change
      syncVisibility();
      onChange();
    });
    form.addEventListener("input", (e) => {
      if (["f-model", "f-config-file"].includes(e.target.id) || e.target.tagName === "SELECT") return;
      syncVisibility();
      onChange();
    });
    form.querySelectorAll("[data-targets]").forEach((b) => b.addEventListener("click", () => {
      $("lora_targets").value = b.dataset.targets;
      onChange();
    }));
    $("config-file").addEventListener("change", async (e) => {
      const file = e.target.files[0];
      if (!file) return;
      $("config_json").value = file.size > 200000 ? "" : await file.text();
      onChange();
    });
    modelSearch(onChange);
  }

  window.VFForm = { fromURL, scenario, planOptions, writeURL, wire, rankModels, $ };
})();
