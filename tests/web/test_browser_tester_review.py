"""A tester's review of the calculator page, in Chromium: one test per defect (numbered as the review).

Same fixtures and skips as ``test_browser.py`` (Playwright driving Debian's Chromium, local uvicorn).
"""

from __future__ import annotations

import re
from urllib.parse import urlencode

from test_browser import expect, pytestmark, wait_result  # noqa: F401 - the same skips

from vramfit.estimate import estimate
from vramfit.gpus import list_gpus

PAGING = ("/?model=meta-llama%2FLlama-3.1-70B&method=full&num_gpus=8&parallelism=zero3&gradient_checkpointing=full"
          "&gpu=h100-sxm")
LLAMA_LORA = "/?model=meta-llama%2FLlama-3.1-8B&method=lora&gpu=rtx4090"
QLORA = {"model": "meta-llama/Llama-3.1-8B", "method": "qlora", "seq_len": 1024, "gpu": "rtx4090"}  # fits: room left
AXOLOTL = """\
base_model: meta-llama/Llama-3.1-8B
adapter: lora
lora_r: 16
lora_target_linear: true
sequence_len: 1536
micro_batch_size: 3
"""


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def test_1_a_plan_that_fits_only_by_paging_is_marked(base_url, page_factory):
    page = page_factory()
    page.goto(base_url + PAGING)
    wait_result(page, "meta-llama/Llama-3.1-70B")
    mark = page.locator('#fits tr[data-gpu="h100-sxm"] small.paging')
    expect(mark).to_have_text("paging", timeout=60000)
    assert "host RAM" in mark.get_attribute("title")
    cell = page.locator('#fits tr[data-gpu="h100-sxm"] td:nth-child(3)').inner_text()
    need, usable = cell.split("paging")[0].strip().split(" / ")
    assert _num(need) > _num(usable) * 0.95  # over the limit: why it pages
    assert page.locator("#fits small.paging").count() < page.locator("#fits tbody tr").count()  # not on every row


def test_2_an_imported_config_keeps_the_card_and_the_planners_inputs(base_url, page_factory):
    page = page_factory()
    page.goto(base_url + "/?model=Qwen%2FQwen2.5-0.5B&method=full&gpu=h100-sxm&dataset_tokens=50M&epochs=2"
              "&effective_batch=16")
    wait_result(page, "Qwen/Qwen2.5-0.5B")
    page.click("#import summary")
    page.fill("#import-text", AXOLOTL)
    page.click("#import-go")
    expect(page.locator("#import-msg")).to_contain_text("axolotl config", timeout=10000)
    assert page.input_value("#f-model") == "meta-llama/Llama-3.1-8B" and page.input_value("#f-seq_len") == "1536"
    assert page.input_value("#f-gpu") == "h100-sxm"
    assert (page.input_value("#f-dataset_tokens"), page.input_value("#f-epochs"),
            page.input_value("#f-effective_batch")) == ("50M", "2", "16")
    wait_result(page, "meta-llama/Llama-3.1-8B")
    for part in ("gpu=h100-sxm", "dataset_tokens=50M", "epochs=2", "effective_batch=16"):
        assert part in page.url


def test_3_a_typed_model_applies_on_change(base_url, page_factory):
    page = page_factory()
    page.goto(base_url + "/")
    wait_result(page, "meta-llama/Llama-3.1-8B")
    page.fill("#f-model", "Qwen/Qwen2.5-0.5B")
    page.locator("#f-seq_len").focus()  # blur: the field's change event, no Enter and no pick from the list
    wait_result(page, "Qwen/Qwen2.5-0.5B")
    assert "model=Qwen%2FQwen2.5-0.5B" in page.url


def test_5_decimal_fields_take_a_comma(base_url, page_factory):
    page = page_factory(expect_422=True)
    page.goto(base_url + "/?lang=pt&model=meta-llama%2FLlama-3.1-8B&method=lora&gpu=rtx4090")
    wait_result(page)
    for key in ("epochs", "lora_dropout", "label_share"):
        assert page.get_attribute(f"#f-{key}", "inputmode") == "decimal"
        assert page.get_attribute(f"#f-{key}", "type") == "text"
    page.fill("#f-dataset_tokens", "50M")
    page.fill("#f-epochs", "1,5")
    page.fill("#f-lora_dropout", "0,1")
    page.wait_for_function("() => location.search.includes('epochs=1.5') && location.search.includes('lora_dropout=0.1')",
                           timeout=15000)
    wait_result(page)
    expect(page.locator("#fit-table")).to_contain_text("75M tokens", timeout=30000)  # 50M tokens x 1.5 epochs
    page.fill("#f-lora_dropout", "0,1x")  # not a number: said under the field, in Portuguese
    err = page.locator('[data-err-for="lora_dropout"]')
    expect(err).to_be_visible(timeout=15000)
    expect(err).to_contain_text("tem de ser um número")


def test_6_sweep_charts_keep_the_y_title_short_and_the_cards_label_visible(base_url, page_factory):
    page = page_factory()
    page.goto(base_url + "/?model=meta-llama%2FLlama-3.1-8B&method=lora&gpu=a100-80gb-sxm")
    wait_result(page)
    info = page.evaluate("""() => { const l = document.getElementById('chart-seq').layout;
        return { title: l.yaxis.title.text, ann: l.annotations.map(a => [a.text, a.font.color, a.yanchor]) }; }""")
    assert info["title"] == "GiB needed per GPU"
    assert info["ann"][-1][1] == "#c62828" and info["ann"][-1][0].startswith("A100 80GB SXM4")  # drawn last, on top
    sides = page.evaluate("""() => { const caps = [{g: 79.1, strong: false}, {g: 79.2, strong: true},
        {g: 40, strong: false}, {g: 79.3, strong: false}];
        const s = VF.labelSides(caps, (c) => c.g, 100, 272); return caps.map((c) => s.get(c)); }""")
    # the user's card keeps its place above its line; the card at the same height goes below its own line
    # (79.3 finds neither side free and stays above its line, under the user's label drawn last)
    assert sides == ["top", "bottom", "bottom", "bottom"]


def test_8_the_fit_line_states_the_figure_the_verdict_uses(base_url, page_factory):
    for lang, words in (("", ("Fits GeForce RTX 4090: ", " free", "needed ", "limit ")),
                        ("&lang=pt", ("Cabe na GeForce RTX 4090: ", " livres", "necessário ", "limite "))):
        page = page_factory()
        page.goto(base_url + "/?" + urlencode(QLORA) + lang)
        wait_result(page)
        line = page.locator("#fitline").inner_text()
        gib = r"([\d.,]+) GiB"
        free = re.search(re.escape(words[0]) + gib + re.escape(words[1]), line)
        need = re.search(words[2] + gib, line)
        limit = re.search(words[3] + gib + r" \(" + gib, line)
        assert free and need and limit, line
        num = (lambda s: float(s.replace(",", "."))) if lang else _num
        assert abs(num(need[1]) + num(free[1]) - num(limit[1])) < 0.06, line  # the figures add up
        assert num(limit[2]) > num(limit[1])  # usable above the limit: less the margin
        r = estimate(QLORA)
        assert abs(num(need[1]) - r.peak.required_bytes / 2**30) < 0.06
        assert abs(r.peak.device_bytes - r.peak.required_bytes) > 0.1 * 2**30  # the peak is another figure


def test_9_the_effective_batch_placeholder_says_what_the_stage_derives(base_url, page_factory):
    page = page_factory()
    for query, key, words in (("&stage=grpo&micro_batch_size=3", "eff.grpo", "derived: whole groups of 8"),
                              ("&stage=kto", "eff.kto", "derived: KTO's least"), ("", "eff.auto", "")):
        page.goto(base_url + "/?model=Qwen%2FQwen2.5-0.5B" + query)
        wait_result(page, "Qwen/Qwen2.5-0.5B")
        text = page.get_attribute("#f-effective_batch", "placeholder")
        sc = estimate({"model": "Qwen/Qwen2.5-0.5B", **dict(p.split("=") for p in query.split("&")[1:])}).scenario
        assert text.startswith(f"{sc.micro_batch_size * sc.grad_accum * sc.num_gpus} = "), (key, text)
        assert words in text
    page.goto(base_url + "/?model=Qwen%2FQwen2.5-0.5B&stage=grpo")
    wait_result(page)
    assert page.get_attribute("#f-effective_batch", "placeholder").startswith("8 = micro-batch × accumulation 8")
    page.fill("#f-num_gpus", "2")
    expect(page.locator("#f-effective_batch")).to_have_attribute("placeholder", re.compile("^8 = .*accumulation 4"))


def test_10_dataset_upload_checks_its_size_and_reads_as_sentences(base_url, page_factory, tmp_path):
    page = page_factory()
    posted = []
    page.on("request", lambda r: posted.append(r.url) if "/api/dataset" in r.url else None)
    page.goto(base_url + "/?model=meta-llama%2FLlama-3.1-8B&method=qlora&gpu=rtx4090")
    wait_result(page)
    page.click("#dsup summary")
    big = tmp_path / "big.jsonl"
    big.write_text('{"text": "x"}\n' * (4 * 2**20 // 14 + 10))
    page.set_input_files("#ds-file", str(big))
    expect(page.locator("#ds-msg")).to_have_text("file: is larger than 4 MiB; use `vramfit plan --dataset`")
    assert posted == []
    sample = tmp_path / "sample.jsonl"
    sample.write_text("".join('{"text": "%s"}\n' % ("word " * n) for n in (8, 80, 400, 2000)))
    page.set_input_files("#ds-file", str(sample))
    expect(page.locator("#ds-msg")).to_contain_text("the fit verdict uses the fixed-length figure. Token counts "
                                                    "approximate", timeout=10000)
    assert page.locator("#ds-msg").inner_text().endswith(".")
    label = page.evaluate("() => document.getElementById('ds-chart').layout.annotations[0].text")
    ticks = page.evaluate("() => document.getElementById('ds-chart').layout.xaxis.ticktext")
    assert re.fullmatch(r"GeForce RTX 4090 fits up to \d{1,3}(,\d{3})* tokens", label), label
    assert "2,048–4,096" in ticks  # the axis writes counts as the label does


def test_11_sorting_keeps_show_all(base_url, page_factory):
    page = page_factory()
    page.goto(base_url + LLAMA_LORA)
    wait_result(page)
    page.click("#fit-table button.share")
    extra = page.locator("#fits tr.extra").first
    expect(extra).to_be_visible(timeout=15000)
    page.select_option("#fit-sort", "time")
    expect(page.locator("#fit-table")).to_have_class(re.compile(r"\ball\b"))
    expect(page.locator("#fits tr.extra").first).to_be_visible()
    assert page.locator("#fit-table button.share").count() == 0


def test_12_units_prices_and_the_cards_name(base_url, page_factory):
    page = page_factory()
    page.goto(base_url + LLAMA_LORA)
    wait_result(page)
    assert re.search(r"allocated [\d.,]+ GiB · reserved [\d.,]+ GiB", page.locator("#peak-sub").inner_text())
    expect(page.locator("#fits")).to_be_visible(timeout=15000)
    prices = page.eval_on_selector_all("#fits tbody td:nth-child(7)", "tds => tds.map(t => t.textContent)")
    priced = [p for p in prices if p != "—"]
    assert priced and all(re.fullmatch(r"\$\d+(,\d{3})*\.\d{2}/h|\$\d{3,}/h", p) for p in priced), priced
    pt = page_factory()
    pt.goto(base_url + LLAMA_LORA + "&lang=pt")
    wait_result(pt)
    expect(pt.locator("#fits")).to_be_visible(timeout=15000)
    prices = pt.eval_on_selector_all("#fits tbody td:nth-child(7)", "tds => tds.map(t => t.textContent)")
    assert all(re.fullmatch(r"\$\d+,\d{2}/h|\$\d{3,}/h", p) for p in prices if p != "—"), prices
    card = page_factory()
    card.goto(base_url + "/?model=codellama%2FCodeLlama-34b-hf&method=full&precision=bf16-mixed&gpu=a100-80gb-sxm")
    wait_result(card)
    name = next(g.name for g in list_gpus() if g.gpu_id == "a100-80gb-sxm")
    expect(card.locator("#fit-table .yours-no")).to_contain_text(f"Your card ({name}) is not in the list",
                                                                 timeout=30000)
