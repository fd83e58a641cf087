"""A checkpoint quantized before training (GPTQ, AWQ) is loaded with its own quantization_config by LLaMA-Factory and
ms-swift, whatever the training config says; the imports read it as a 16-bit base (LLaMA-Factory's
examples/train_qlora/llama3_lora_sft_gptq.yaml: 18.75 GiB instead of about 9). And LLaMA-Factory's on-the-fly QLoRA
never calls peft's prepare_model_for_kbit_training, which the import counted (norms, embeddings, head in fp32)."""

import pytest
from typer.testing import CliRunner

from vramfit import estimate
from vramfit.cli.main import app
from vramfit.config_import import from_text
from vramfit.errors import ScenarioError

LF = "stage: sft\ndo_train: true\nfinetuning_type: lora\nlora_target: all\ncutoff_len: 2048\nbf16: true\n"
SWIFT = "swift sft --train_type lora --max_length 2048 --torch_dtype bfloat16 --model "


def _lf(model: str, extra: str = "") -> str:
    return f"model_name_or_path: {model}\n" + LF + extra


def test_llamafactory_gptq_checkpoint_is_a_4bit_gptq_base():
    imp = from_text(_lf("TechxGenus/Meta-Llama-3-8B-Instruct-GPTQ", "quantization_bit: 4\n"), dialect="llamafactory")
    sc = imp.scenario
    assert (sc.method.value, sc.quantize.value, sc.kbit_prepare.value) == ("qlora", "gptq-int4", "no")
    line = next(e for e in imp.entries if e.key == "model_name_or_path").line()
    assert "a GPTQ checkpoint by its name" in line and "quantize=gptq-int4" in line
    assert next(e for e in imp.entries if e.key == "quantization_bit").kind == "ignored"  # the checkpoint's wins
    gptq, base = estimate(sc), estimate(sc.replace(method="lora", quantize="none"))
    # 4-bit block linears: Llama-3-8B's 6.98 B linear weights at 2 bytes would be about 13 GiB of weights
    assert base.component("weights") - gptq.component("weights") > 8 * 2**30
    assert base.peak.allocated_bytes - gptq.peak.allocated_bytes > 8 * 2**30


def test_swift_gptq_checkpoint_is_a_4bit_gptq_base():
    sc = from_text(SWIFT + "Qwen/Qwen2.5-7B-Instruct-GPTQ-Int4\n", dialect="swift").scenario
    assert (sc.method.value, sc.quantize.value, sc.kbit_prepare.value) == ("qlora", "gptq-int4", "no")


@pytest.mark.parametrize("text, dialect, words", [
    (_lf("TechxGenus/Meta-Llama-3-8B-Instruct-AWQ"), "llamafactory", "is an AWQ checkpoint (its name), whose LoRA"),
    (_lf("Qwen/Qwen2.5-7B-Instruct-GPTQ-Int8"), "llamafactory", "is an 8-bit GPTQ checkpoint (its name)"),
    (_lf("TechxGenus/Meta-Llama-3-8B-Instruct-GPTQ").replace("finetuning_type: lora", "finetuning_type: full"),
     "llamafactory", "quantized weights cannot be fully fine-tuned"),
    (SWIFT + "Qwen/Qwen2.5-7B-Instruct-AWQ\n", "swift", "model: 'Qwen/Qwen2.5-7B-Instruct-AWQ' is an AWQ checkpoint"),
])
def test_unmodelled_or_impossible_prequantized_runs_are_refused(text, dialect, words):
    with pytest.raises(ScenarioError) as err:
        from_text(text, dialect=dialect)
    assert words in str(err.value) and "valid:" in str(err.value)


def test_llamafactory_on_the_fly_qlora_keeps_norms_in_16_bits():
    sc = from_text(_lf("Qwen/Qwen3-4B", "quantization_bit: 4\n"), dialect="llamafactory").scenario
    assert (sc.method.value, sc.quantize.value, sc.kbit_prepare.value) == ("qlora", "nf4-dq", "no")
    ours, cast = estimate(sc), estimate(sc.replace(kbit_prepare="yes"))
    # prepare_model_for_kbit_training's fp32 copies of the (tied) embedding and the norms: 2 more bytes each
    assert cast.component("weights") - ours.component("weights") > 2 * 151_936 * 2560


def test_a_16bit_or_fp8_release_name_changes_nothing():
    for model in ("meta-llama/Meta-Llama-3-8B-Instruct", "Qwen/Qwen3-8B-FP8"):
        sc = from_text(_lf(model), dialect="llamafactory").scenario
        assert (sc.method.value, sc.quantize.value) == ("lora", "none")


def test_the_estimate_says_what_a_gptq_name_means():
    r = CliRunner().invoke(app, ["estimate", "--model", "TheBloke/Mistral-7B-v0.1-GPTQ", "--json"])
    assert r.exit_code == 0
    assert ("TheBloke/Mistral-7B-v0.1-GPTQ is a GPTQ checkpoint by its name: a run that loads it trains on its "
            "quantized weights") in r.output
    r = CliRunner().invoke(app, ["estimate", "--model", "mistralai/Mistral-7B-Instruct-v0.2", "--json"])
    assert r.exit_code == 0 and "checkpoint by its name" not in r.output


def test_the_new_sentences_have_portuguese():
    from vramfit.web.translate import to_pt, untranslated

    imp = from_text(_lf("TechxGenus/Meta-Llama-3-8B-Instruct-GPTQ"), dialect="llamafactory")
    note = next(e for e in imp.entries if e.key == "model_name_or_path").note
    assert untranslated([note]) == [] and "pesos de 4 bits" in to_pt(note)
    with pytest.raises(ScenarioError) as err:
        from_text(_lf("TechxGenus/Meta-Llama-3-8B-Instruct-AWQ"), dialect="llamafactory")
    assert "é um checkpoint AWQ (pelo nome), cujo treino LoRA ainda não é modelado" in to_pt(str(err.value))
    r = estimate({"model": "TheBloke/Mistral-7B-v0.1-GPTQ"})
    assert untranslated([a for a in r.assumptions if "checkpoint by its name" in a]) == []
