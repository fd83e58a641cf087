"""POST /api/import: a pasted training config becomes scenario keys plus the report of every key."""

from __future__ import annotations

AXOLOTL = """\
base_model: meta-llama/Llama-2-7b-hf
load_in_4bit: true
adapter: qlora
lora_r: 32
lora_alpha: 16
lora_dropout: 0.05
lora_target_linear: true
datasets:
  - path: mhenrichsen/alpaca_2k_test
    type: alpaca
output_dir: ./outputs/qlora-out
sequence_len: 4096
micro_batch_size: 2
gradient_accumulation_steps: 4
optimizer: paged_adamw_32bit
bf16: auto
gradient_checkpointing: true
flash_attention: true
"""

TORCHTUNE = """\
output_dir: /tmp/torchtune/llama3_1_8B/qlora
model:
  _component_: torchtune.models.llama3_1.qlora_llama3_1_8b
  lora_attn_modules: ['q_proj', 'v_proj', 'output_proj']
  apply_lora_to_mlp: True
  apply_lora_to_output: False
  lora_rank: 8
  lora_alpha: 16
  lora_dropout: 0.0
tokenizer:
  _component_: torchtune.models.llama3.llama3_tokenizer
  path: /tmp/Meta-Llama-3.1-8B-Instruct/original/tokenizer.model
  max_seq_len: 2048
batch_size: 2
gradient_accumulation_steps: 8
enable_activation_checkpointing: True
dtype: bf16
"""


def test_axolotl_paste_becomes_its_scenario(client):
    r = client.post("/api/import", json={"text": AXOLOTL})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["dialect"] == "axolotl"
    s = out["scenario"]
    assert (s["model"], s["method"], s["quantize"]) == ("meta-llama/Llama-2-7b-hf", "qlora", "nf4-dq")
    assert (s["seq_len"], s["micro_batch_size"], s["grad_accum"]) == (4096, 2, 4)
    assert (s["lora_rank"], s["lora_alpha"], s["lora_targets"]) == (32, 16, ["all-linear"])
    assert (s["optimizer"], s["attention"], s["gradient_checkpointing"]) == ("paged-adamw", "flash", "full")
    by_key = {e["key"]: e for e in out["report"]}
    assert by_key["sequence_len"]["kind"] == "read" and by_key["sequence_len"]["becomes"] == ["seq_len=4096"]
    assert by_key["output_dir"]["kind"] == "ignored" and by_key["output_dir"]["note"]
    assert {e["kind"] for e in out["report"]} <= {"read", "default", "ignored", "not modelled yet"}


def test_torchtune_paste_with_its_dialect(client):
    r = client.post("/api/import", json={"text": TORCHTUNE, "dialect": "torchtune"})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["dialect"] == "torchtune"
    s = out["scenario"]
    assert (s["model"], s["method"], s["framework"]) == ("meta-llama/Llama-3.1-8B", "qlora", "torchtune")
    assert (s["seq_len"], s["micro_batch_size"], s["grad_accum"], s["lora_rank"]) == (2048, 2, 8, 8)
    assert s["lora_targets"] == ["q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    # the tokenizer path is named, never opened: it is reported as ignored
    tok = next(e for e in out["report"] if e["key"] == "tokenizer.path")
    assert tok["kind"] == "ignored"
    # the imported scenario estimates as is (the catalog knows the model)
    est = client.post("/api/estimate", json=s)
    assert est.status_code == 200, est.text


def test_bad_pastes_are_one_422_line(client):
    cases = [
        ({"text": "base_model: x\nsequence_len: [\n"}, "is not valid YAML"),
        ({"text": AXOLOTL + "wat: 3\n"}, "unknown axolotl key 'wat'"),
        ({"text": AXOLOTL, "dialect": "deepspeed"}, "valid values: axolotl, llamafactory, trl, torchtune, litgpt"),
        ({"text": "   "}, "paste a training config"),
        ({"text": AXOLOTL, "path": "/etc/passwd"}, "unknown key"),
    ]
    for body, words in cases:
        r = client.post("/api/import", json=body)
        assert r.status_code == 422, (body, r.text)
        err = r.json()["error"]
        assert words in err and "\n" not in err and len(err) <= 320, err


def test_long_error_is_cut_and_big_body_refused(client):
    r = client.post("/api/import", json={"text": AXOLOTL + "x" * 500 + ": 1\n"})
    assert r.status_code == 422
    err = r.json()["error"]
    assert err.startswith("text: <pasted config>: unknown axolotl key 'xxx") and err.endswith("...")
    assert len(err) == len("text: ") + 300
    r = client.post("/api/import", json={"text": "a: " + "b" * (300 * 1024)})
    assert r.status_code == 413


def test_form_offers_every_dialect_the_importer_reads(client):
    """The calculator's dialect list is the importer's own (config_import/detect.py DIALECTS), so a dialect added
    there (swift, torchtitan) is offered on the page, and a pasted torchtitan TOML imports with it."""
    from pathlib import Path

    from vramfit.config_import.detect import DIALECTS

    page = client.get("/").text
    for d in DIALECTS:
        assert f'<option value="{d}">{d}</option>' in page
    toml = (Path(__file__).parents[1] / "config_import" / "fixtures" / "torchtitan_llama3_8b.toml").read_text()
    r = client.post("/api/import", json={"text": toml, "dialect": "torchtitan"})
    assert r.status_code == 200, r.text
    assert r.json()["scenario"]["framework"] == "torchtitan"


def test_hostile_swift_and_torchtitan_pastes_are_one_422_line(client):
    """A pasted ms-swift script or torchtitan TOML with bad values: 422 naming the key, never a 500 (each of these
    raised TypeError, ZeroDivisionError or MemoryError in the importer before the g5 review)."""
    sft = "swift sft --model Qwen/Qwen2.5-7B-Instruct --max_length 2048 "
    titan = '[job]\ndump_folder = "x"\n[model]\nname = "llama3"\nflavor = "8B"\n[parallelism]\n' \
            'data_parallel_shard_degree = 4\n[training]\n'
    cases = [
        (sft + "--per_device_train_batch_size 0\n", "micro_batch_size: must be from 1 to 1000000, got 0"),
        (sft + "--attn_impl sdpa eager\n", "is not modelled yet (valid values: sdpa"),
        ("V0=xxxxxxxxxx\n" + "".join(f'V{i}="$V{i - 1}$V{i - 1}"\n' for i in range(1, 40)) + sft + "--a $V39\n",
         "expands to over 65,536 characters"),
        (sft + "--output_dir $(rm -rf /)\n", "vramfit does not run scripts"),
        (titan + 'local_batch_size = "a"\n', "training.local_batch_size must be a whole number ≥ 1, got 'a'"),
        (titan + "local_batch_size = 0\nglobal_batch_size = 8\n", "training.local_batch_size must be a whole number"),
    ]
    for text, words in cases:
        r = client.post("/api/import", json={"text": text})
        assert r.status_code == 422, (text[:80], r.text[:300])
        err = r.json()["error"]
        assert words in err and "\n" not in err and len(err) <= 320, err


EVAL_FOLLOWS = """\
base_model: meta-llama/Llama-3.1-8B
adapter: lora
lora_r: 16
lora_alpha: 32
lora_target_linear: true
sequence_len: 4096
micro_batch_size: 4
gradient_accumulation_steps: 8
gradient_checkpointing: true
val_set_size: 0.05
eval_steps: 10
bf16: true
flash_attention: true
"""


def test_a_config_that_evaluates_at_its_micro_batch_is_planned_so(client):
    """/api/import says the config evaluates at its micro-batch (Axolotl's eval_batch_size default), and /api/plan
    with that flag estimates each micro-batch it offers with the evaluation batch following it, as `vramfit fit
    --from` does; without the flag the evaluation batch stays where the scenario puts it."""
    from vramfit import estimate

    imp = client.post("/api/import", json={"text": EVAL_FOLLOWS}).json()
    assert imp["eval_follows_micro"] is True and imp["scenario"]["eval_batch_size"] == 4
    s = {**imp["scenario"], "gpu": "rtx4090"}
    smaller = {}
    for follows in (False, True):
        report = client.post("/api/plan", json={"scenario": s, "eval_follows_micro": follows}).json()
        smaller[follows] = next(c for c in report["changes"]["rtx4090"] if c["name"] == "smaller-micro-batch")
        assert smaller[follows]["changes"]["micro_batch_size"] == 1
    at_one = estimate({**s, "micro_batch_size": 1, "grad_accum": 32, "eval_batch_size": 1}).peak.device_bytes
    held = estimate({**s, "micro_batch_size": 1, "grad_accum": 32}).peak.device_bytes
    assert smaller[True]["device_bytes"] == at_one < smaller[False]["device_bytes"] == held
    bad = client.post("/api/plan", json={"scenario": s, "eval_follows_micro": "yes"})
    assert bad.status_code == 422 and bad.json()["key"] == "eval_follows_micro"
    plain = client.post("/api/import", json={"text": EVAL_FOLLOWS.replace("val_set_size: 0.05\n", "")}).json()
    assert plain["eval_follows_micro"] is False


def test_an_unknown_dialect_is_the_dialects_error_whatever_the_text(client):
    for text in (AXOLOTL, "[1, 2]"):
        r = client.post("/api/import", json={"text": text, "dialect": "nope"})
        assert r.status_code == 422 and r.json()["key"] == "dialect" and "--dialect" not in r.json()["error"]
        assert r.json()["valid"][:2] == ["axolotl", "llamafactory"]


def test_a_huge_integer_in_a_pasted_config_is_one_clean_line(client):
    for text in ("lora_r: 1" + "0" * 5000 + "\n", '{"lora_r": 1' + "0" * 5000 + "}"):  # pasted JSON is read as YAML
        r = client.post("/api/import", json={"text": text})
        assert r.status_code == 422, r.text
        assert r.json() == {"error": "text: <pasted config>: holds a number too large to read (over 4,300 digits)",
                            "key": "text", "valid": None}


def test_the_import_boxs_example_imports(client):
    """The placeholder of the page's import box is an example a user copies: it must import (it lacked lora_r and
    the targets, which Axolotl requires of an adapter, so it was a 422)."""
    import html
    import re

    page = client.get("/").text
    example = html.unescape(re.search(r'id="import-text"[^>]*placeholder="([^"]*)"', page).group(1))
    r = client.post("/api/import", json={"text": example})
    assert r.status_code == 200, r.text
    assert r.json()["dialect"] == "axolotl" and r.json()["scenario"]["lora_rank"] == 16


def test_a_key_that_is_not_a_finite_number_is_reported_as_its_text(client):
    # fuzzing, 2026-12-05: YAML's .nan in an ignored key was a 500 (JSON holds no NaN); the CLI reads the same file
    for text, key in ((AXOLOTL + "learning_rate: .nan\n", "learning_rate"),
                      ("[job]\ndump_folder='./out'\n[model]\nname='llama3'\nflavor='8B'\n[optimizer]\nname='AdamW'\n"
                       "lr = inf\n", "optimizer.lr")):
        r = client.post("/api/import", json={"text": text, **({"dialect": "torchtitan"} if "[job]" in text else {})})
        assert r.status_code == 200, r.text
        by_key = {e["key"]: e for e in r.json()["report"]}
        assert by_key[key]["value"] in ("nan", "inf")
