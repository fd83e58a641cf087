"""Axolotl QLoRA trains norms, embeddings and lm_head in 16 bits: after peft's prepare_model_for_kbit_training casts them
to fp32, axolotl's _configure_embedding_dtypes casts them back to torch_dtype (axolotl@067b021 and ba3dba3e4
loaders/model.py ``should_convert``); FSDP and ZeRO-3 skip the preparation. The import said kbit_prepare auto (hf: yes,
fp32), 3.9 GiB more for Llama-3.1-8B QLoRA than the run holds (the published axolotl QLoRA rows of found.jsonl
already said no)."""

import json
from pathlib import Path

import pytest

from vramfit import estimate
from vramfit.config_import import from_text

HEAD = "base_model: meta-llama/Llama-3.1-8B\nsequence_len: 2048\nmicro_batch_size: 2\nbf16: true\nlora_r: 16\nlora_target_linear: true\n"
FOUND = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "measured" / "found.jsonl"


@pytest.mark.parametrize("base, quantize", [("adapter: qlora\nload_in_4bit: true\n", "nf4-dq"),
                                            ("adapter: lora\nload_in_8bit: true\n", "int8")])
def test_a_quantized_base_keeps_norms_and_embeddings_in_16_bits(base, quantize):
    imp = from_text(HEAD + base, dialect="axolotl")
    sc = imp.scenario
    assert sc.method.value == "qlora" and sc.quantize.value == quantize and sc.kbit_prepare.value == "no"
    key = "load_in_4bit" if quantize == "nf4-dq" else "load_in_8bit"
    line = next(e for e in imp.entries if e.key == key).line()
    assert "kbit_prepare=no" in line and "_configure_embedding_dtypes" in line
    ours, fp32 = estimate(sc), estimate(sc.replace(kbit_prepare="yes"))
    # the unquantized weights: embeddings, lm_head (untied) and norms, 1,050,939,392 parameters, 2 bytes each, not 4
    assert ours.component("weights") == 2 * 1_050_939_392 and fp32.component("weights") == 4 * 1_050_939_392
    assert fp32.peak.allocated_bytes - ours.peak.allocated_bytes > 2 * 2**30


def test_the_published_axolotl_qlora_rows_agree():
    rows = [json.loads(x) for x in FOUND.read_text().splitlines() if x.strip()]
    qlora = [r for r in rows if r["source_id"] == "AXOLOTL_EX_2508" and r["scenario"]["method"] == "qlora"]
    assert len(qlora) == 3 and {r["scenario"]["kbit_prepare"] for r in qlora} == {"no"}


def test_a_gptq_base_is_unchanged():
    sc = from_text(HEAD + "adapter: lora\ngptq: true\n", dialect="axolotl").scenario
    assert sc.quantize.value == "gptq-int4" and sc.kbit_prepare.value == "auto"


def test_qwen_1_with_a_lora_adapter_skips_the_fp32_cast():
    """axolotl loaders/model.py l. 991-993: model_config_type qwen with adapter lora skips prepare_model_for_kbit_training,
    so adapter lora + load_in_4bit keeps a 16-bit base there (an fp32 one, bf16-mixed, for other models)."""
    lora4 = "adapter: lora\nload_in_4bit: true\n"
    qwen = from_text(HEAD.replace("meta-llama/Llama-3.1-8B", "Qwen/Qwen-7B") + lora4, dialect="axolotl")
    assert qwen.scenario.precision.value == "bf16-true" and qwen.scenario.method.value == "lora"
    assert "Qwen-1 models skip" in next(e for e in qwen.entries if e.key == "load_in_4bit").line()
    other = from_text(HEAD.replace("meta-llama/Llama-3.1-8B", "Qwen/Qwen2.5-7B") + lora4, dialect="axolotl")
    assert other.scenario.precision.value == "bf16-mixed"


@pytest.mark.parametrize("extra, want", [
    ("gradient_checkpointing: true\n", "yes"),  # axolotl's normalize_config sets use_reentrant True
    ("gradient_checkpointing: true\ngradient_checkpointing_kwargs:\n  use_reentrant: false\n", "no"),
    ("gradient_checkpointing: true\nrl: dpo\n", "auto"),  # not for an RL stage: the release's default
    ("gradient_checkpointing: false\n", "yes"),  # what a planned change turning checkpointing on will run
])
def test_axolotl_checkpointing_is_reentrant_unless_the_file_says(extra, want):
    sc = from_text(HEAD + "adapter: lora\n" + extra, dialect="axolotl").scenario
    assert sc.use_reentrant.value == want
