"""Speed mechanisms and row settings read from Answer.AI's fsdp_qlora (issue 22, throughput tail)."""

import json
from pathlib import Path

import pytest

from vramfit.plan.elementwise import lora_4bit_clone_bytes_per_token
from vramfit.plan.evaluate import Evaluator
from vramfit.plan.throughput import model_flops, step_work

ROOT = Path(__file__).resolve().parents[2]
# Llama-2-7B with train.py's lora_target_modules 'all' (no o_proj), rank 64
L7 = {"model": "meta-llama/Llama-2-7b-hf", "framework": "hf", "method": "qlora", "quantize": "nf4-dq",
      "precision": "bf16-true", "lora_rank": 64, "lora_targets": ["k_proj", "q_proj", "v_proj", "up_proj",
                                                                   "down_proj", "gate_proj"],
      "micro_batch_size": 1, "seq_len": 2048, "gradient_checkpointing": "full", "attention": "sdpa",
      "gpu": "rtx4090"}


def _work(sc: dict):
    ev = Evaluator(sc)
    return step_work(ev.base, model_flops(ev.spec, ev.base.seq_len), ev.estimate().model.num_trainable_params)


def test_peft_clones_every_4bit_adapted_output_in_forward_and_recompute():
    """Per layer: q, k, v (4096 + 4096) x 64 and up, gate, down (4096 + 11008) x 64 = 4,472,832 adapter weights,
    x 32 layers = 143,130,624; / rank 64 = 2,236,416 in + out widths, half of them outputs, read and written
    in bf16: 4,472,832 bytes per token per forward. With full checkpointing the forward runs twice."""
    ev = Evaluator(L7)
    assert ev.estimate().model.num_trainable_params == 143_130_624
    sc = ev.base
    assert lora_4bit_clone_bytes_per_token(sc, 143_130_624, True) == 4_472_832
    assert lora_4bit_clone_bytes_per_token(sc, 143_130_624, False) == 0  # a profile without the clone
    nf4, int8 = _work(L7), _work({**L7, "quantize": "int8"})  # peft's 8-bit layer does not clone
    assert nf4.elem_bytes_mb - int8.elem_bytes_mb == pytest.approx(2048 * 4_472_832 * 2)
    plain = {**L7, "gradient_checkpointing": "none"}  # no recompute: the clone runs once
    assert _work(plain).elem_bytes_mb - _work({**plain, "quantize": "int8"}).elem_bytes_mb == pytest.approx(
        2048 * 4_472_832)


def test_no_clone_without_a_bitsandbytes_4bit_base():
    for extra in ({"method": "lora", "quantize": "none"}, {"quantize": "gptq-int4"}):
        sc = Evaluator({**L7, **extra}).base
        assert lora_4bit_clone_bytes_per_token(sc, 143_130_624, True) == 0


def test_answerai_rows_follow_train_py():
    """train.py @4cd6923: lora_target_modules 'all' has no o_proj, Linear4bit double-quantizes; the hardware
    table aims at an effective batch of 32 (grad_accum x micro-batch x GPUs nearest to 32), and its
    'CPU+Activation Offload' row runs offload_wrapper (checkpointing 'offload')."""
    rows = [json.loads(x) for x in (ROOT / "benchmarks/data/throughput/published.jsonl").read_text().splitlines()]
    aa = {r["id"]: r["scenario"] for r in rows if r["source_id"] == "ANSWERAI_FSDP_QLORA"}
    assert len(aa) == 20 and all("o_proj" not in s["lora_targets"] for s in aa.values())
    assert {s.get("quantize") for s in aa.values()} == {"nf4-dq", None}
    hw = {k: (s["micro_batch_size"], s["num_gpus"], s["grad_accum"]) for k, s in aa.items() if k.startswith("AA-HW")}
    assert hw == {"AA-HW-rtxa5000-2": (2, 2, 8), "AA-HW-rtxa5000-4": (1, 4, 8), "AA-HW-rtxa5000-8": (1, 8, 4),
                  "AA-HW-rtx6000ada-2": (2, 2, 8), "AA-HW-rtx6000ada-4": (3, 4, 3),
                  "AA-HW-a100-40gb-sxm-2": (1, 2, 16), "AA-HW-a100-40gb-sxm-4": (4, 4, 2),
                  "AA-HW-a100-40gb-sxm-8": (4, 8, 1), "AA-HW-h100-sxm-4": (8, 4, 1)}
    assert [k for k, s in aa.items() if s["gradient_checkpointing"] == "offload"] == ["AA-HW-rtxa5000-2"]
