"""One real optimizer step of the exported train.py, on the CPU, on a tiny random model built here.

Nothing is downloaded: a 2-layer Llama (hidden 64) built from a config, a word-level tokenizer built with
``tokenizers``, and a four-line JSONL dataset. The only command-line overrides are the ones a CPU needs (no bf16,
no Liger/Triton kernels) and the ones that point at the tiny model and stop after one step.
"""

from __future__ import annotations

import ast
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_export_engines import PLANS, write

pytest.importorskip("trl")
LINES = ["the cat sat on the mat", "a dog ran in the park", "the sun is warm today", "we train a tiny model"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny(tmp_path_factory.mktemp("tiny"))


def build_tiny(root: Path) -> Path:
    """A saved random Llama and its tokenizer, plus data.jsonl, in one folder."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = sorted({w for line in LINES for w in line.split()})
    vocab = {t: i for i, t in enumerate(["<pad>", "<unk>", "<s>", "</s>", *words])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>")
    model_dir = root / "model"
    fast.save_pretrained(model_dir)
    cfg = LlamaConfig(vocab_size=len(vocab), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      bos_token_id=2, eos_token_id=3, pad_token_id=0)
    LlamaForCausalLM(cfg).save_pretrained(model_dir)
    (root / "data.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in LINES), encoding="utf-8")
    return root


def cpu_overrides(tiny: Path, out: Path) -> list[str]:
    return ["--dataset_path", str(tiny / "data.jsonl"), "--model_name_or_path", str(tiny / "model"),
            "--output_dir", str(out), "--max_steps", "1", "--bf16", "false", "--fp16", "false", "--use_cpu", "true",
            "--use_liger_kernel", "false", "--report_to", "none", "--save_strategy", "no", "--logging_steps", "1"]


def run_script(folder: Path, argv: list[str], launcher: list[str] | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    cmd = [*(launcher or [sys.executable]), "train.py", "--config", "train_config.yaml", *argv]
    return subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=300)


def one_step(r: subprocess.CompletedProcess, tiny: Path, out: Path, *, four_bit: bool) -> dict:
    """The step's logged record; checks it saw all the data and moved every LoRA B entry."""
    import torch
    from safetensors.torch import load_file

    assert r.returncode == 0, r.stderr[-3000:]
    assert f"4-bit: {four_bit}" in r.stdout and "rank 0 of" in r.stdout
    log = next(ast.literal_eval(line) for line in r.stdout.splitlines() if line.startswith("{'loss'"))
    # packing put every line and its EOS into the one step
    assert int(log["num_tokens"]) == sum(len(t.split()) + 1 for t in LINES) and math.isfinite(float(log["loss"]))
    if not (out / "adapter_model.safetensors").exists():  # full fine-tuning: every saved weight moved
        before, after = load_file(tiny / "model" / "model.safetensors"), load_file(out / "model.safetensors")
        assert before.keys() == after.keys() and all(not torch.equal(before[k], after[k]) for k in before)
        return log
    b = [v for k, v in load_file(out / "adapter_model.safetensors").items() if "lora_B" in k]
    # LoRA B starts at zero (PEFT init); one AdamW step moves every entry (2 layers x 7 linear targets)
    assert len(b) == 2 * 7 and all(bool((v != 0).all()) for v in b)
    return log


@pytest.mark.parametrize("name", ["single-lora-fused", "qlora-1gpu", "full-mixed-1gpu"])
def test_trl_export_runs_one_step_on_cpu(name, tiny, tmp_path, monkeypatch, capsys):
    """In this process (the imports are paid once); the launch test below runs it as its own processes."""
    from test_export_engines import load_script

    p = PLANS[name]
    write(p, "trl", tmp_path)
    out = tmp_path / "out"
    monkeypatch.chdir(tmp_path)
    load_script(tmp_path).main(["--config", "train_config.yaml", *cpu_overrides(tiny, out)])
    r = subprocess.CompletedProcess([], 0, capsys.readouterr().out, "")
    one_step(r, tiny, out, four_bit=p.scenario["method"] == "qlora")
    if p.scenario["method"] != "full":
        assert json.loads((out / "adapter_config.json").read_text())["r"] == p.scenario["lora_rank"]


@pytest.mark.slow
def test_accelerate_launch_runs_the_ddp_export_with_two_processes(tiny, tmp_path):
    """`accelerate launch` with the exported MULTI_GPU accelerate.yaml, as written: two ranks (gloo on the CPU)."""
    p = PLANS["ddp-lora-2gpu"]
    ex = write(p, "trl", tmp_path)
    assert ex.command.startswith("accelerate launch --config_file accelerate.yaml train.py")
    out = tmp_path / "out"
    launcher = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", "accelerate.yaml"]
    r = run_script(tmp_path, cpu_overrides(tiny, out), launcher)
    one_step(r, tiny, out, four_bit=False)
    assert "rank 0 of 2:" in r.stdout and "rank 1 of 2:" in r.stdout


def test_int8_qlora_export_loads_the_base_in_8bit(tiny, tmp_path):
    """quantize int8 is written as load_in_8bit, and train.py's loader turns it into a bitsandbytes 8-bit model."""
    from test_export_engines import load_script, trl_args

    from vramfit.plan import plan

    p = plan({"model": "meta-llama/Llama-2-7b-hf", "method": "qlora", "quantize": "int8"},
             gpu_ids=["h100-sxm"], effective_batch=8).plans[0]
    write(p, "trl", tmp_path)
    _, args, model_args = trl_args(tmp_path, "--use_cpu", "true", "--model_name_or_path", str(tiny / "model"))
    assert model_args.load_in_8bit and not model_args.load_in_4bit
    model = load_script(tmp_path).load_model(model_args, args)
    assert model.is_loaded_in_8bit and type(model.model.layers[0].mlp.up_proj).__name__ == "Linear8bitLt"
