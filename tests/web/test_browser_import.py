"""The "Paste your training config" box in Chromium: an Axolotl config fills the calculator form."""

from __future__ import annotations

from test_browser import expect, pytestmark, wait_result  # noqa: F401 - the same skips

AXOLOTL = """\
base_model: meta-llama/Llama-3.1-8B
adapter: lora
lora_r: 16
lora_alpha: 32
lora_target_linear: true
sequence_len: 1536
micro_batch_size: 3
gradient_accumulation_steps: 2
bf16: true
gradient_checkpointing: true
output_dir: ./out
"""


def test_pasted_axolotl_config_fills_the_form(base_url, page_factory):
    page = page_factory()
    page.goto(base_url + "/?model=Qwen%2FQwen2.5-0.5B&method=full&seq_len=512")
    wait_result(page)
    assert page.input_value("#f-method") == "full" and page.input_value("#f-seq_len") == "512"
    page.click("#import summary")
    page.fill("#import-text", AXOLOTL)
    page.select_option("#import-dialect", "axolotl")
    page.click("#import-go")
    expect(page.locator("#import-msg")).to_contain_text("axolotl config", timeout=10000)
    assert page.input_value("#f-model") == "meta-llama/Llama-3.1-8B"
    assert page.input_value("#f-method") == "lora"
    assert page.input_value("#f-seq_len") == "1536"
    assert page.input_value("#f-micro_batch_size") == "3"
    expect(page.locator("#import-report li", has_text="output_dir")).to_contain_text("ignored")
    wait_result(page, "meta-llama/Llama-3.1-8B")
    assert "seq_len=1536" in page.url


def test_dataset_upload_draws_the_length_histogram(base_url, page_factory, tmp_path):
    rows = "".join('{"text": "%s"}\n' % ("word " * n) for n in (8, 80, 400, 2000))
    sample = tmp_path / "sample.jsonl"
    sample.write_text(rows)
    page = page_factory()
    page.goto(base_url + "/?model=meta-llama%2FLlama-3.1-8B&method=qlora&gpu=rtx4090")
    wait_result(page)
    page.click("#dsup summary")
    page.set_input_files("#ds-file", str(sample))
    expect(page.locator("#ds-msg")).to_contain_text("4 samples", timeout=10000)
    expect(page.locator("#ds-msg")).to_contain_text("with this dataset's lengths in random order")  # reserved_spread_text
    bars = page.evaluate("() => document.getElementById('ds-chart').data[0].y.reduce((a, b) => a + b, 0)")
    assert bars == 4
    expect(page.locator("#ds-chart")).to_contain_text("fits up to")


def test_pasted_config_that_evaluates_at_its_micro_batch_ticks_the_planner_box(base_url, page_factory):
    """/api/import's eval_follows_micro ticks the planner's box, which the URL keeps and /api/plan receives."""
    page = page_factory()
    page.goto(base_url + "/?model=Qwen%2FQwen2.5-0.5B&method=full&seq_len=512")
    wait_result(page)
    assert not page.is_checked("#f-eval_follows_micro")
    page.click("#import summary")
    page.fill("#import-text", AXOLOTL + "val_set_size: 0.05\neval_steps: 10\n")
    page.select_option("#import-dialect", "axolotl")
    follows = '"eval_follows_micro":true'
    with page.expect_request(lambda r: r.url.endswith("/api/plan") and follows in (r.post_data or ""), timeout=15000):
        page.click("#import-go")
    expect(page.locator("#import-msg")).to_contain_text("axolotl config", timeout=10000)
    wait_result(page, "meta-llama/Llama-3.1-8B")
    assert page.is_checked("#f-eval_follows_micro")
    assert "eval_follows_micro=true" in page.url
