"""FSDP1 LoRA units nested in the decoder layers' units serialize the weight all-gathers (issue 22)."""

from dataclasses import replace

import pytest

from vramfit.gpus import get_gpu
from vramfit.plan.evaluate import Evaluator
from vramfit.plan.kernels import card_speed
from vramfit.plan.throughput import mechanism_step_time, model_flops, step_work
from vramfit.plan.traffic import fsdp_serial_gather_bytes

# Answer.AI fsdp_qlora's 70B QLoRA on 4 x A100 40GB (benchmarks_03_2024.md hardware table)
AA = {"model": "meta-llama/Llama-2-70b-hf", "framework": "hf", "method": "qlora", "precision": "bf16-true",
      "lora_rank": 64, "lora_targets": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
      "lora_dropout": 0.1, "micro_batch_size": 4, "seq_len": 2048, "grad_accum": 1, "gradient_checkpointing": "full",
      "attention": "sdpa", "num_gpus": 4, "parallelism": "fsdp", "offload": "none", "gpu": "a100-40gb-sxm",
      "quantize": "nf4"}


def _work(sc: dict):
    ev = Evaluator(sc)
    mf = model_flops(ev.spec, ev.base.seq_len)
    return ev, mf, step_work(ev.base, mf, ev.estimate().model.num_trainable_params)


def test_hf_fsdp_lora_gathers_all_wait():
    """Two gathers per micro-batch (forward, backward: the recompute runs on the backward's gather), each
    3/4 of the 4-bit block weights plus the 16-bit rest, none hidden behind compute."""
    ev, mf, w = _work(AA)
    param_bytes = mf.quantizable_params // 2 + (mf.num_params - mf.quantizable_params) * 2
    assert w.exposed_peer_bytes == pytest.approx(2 * 3 / 4 * param_bytes)
    assert w.exposed_peer_bytes == pytest.approx(fsdp_serial_gather_bytes(ev.base, param_bytes)[0])
    c = card_speed(get_gpu("a100-40gb-sxm"))
    hidden = mechanism_step_time(replace(w, exposed_peer_bytes=0.0), c)
    assert mechanism_step_time(w, c).step_s == pytest.approx(hidden.step_s + w.exposed_peer_bytes / c.peer_bytes)


@pytest.mark.parametrize("change", [{"framework": "torchtune", "quantize": "nf4-dq"},  # FSDP2: no rate limiter
                                    {"method": "full", "quantize": "none"},  # no LoRA units
                                    {"parallelism": "zero3"}])  # DeepSpeed: its own prefetch rule
def test_other_stacks_overlap_their_fsdp_gathers(change):
    ev, mf, w = _work({**AA, **change})
    assert fsdp_serial_gather_bytes(ev.base, 10**9) == ((0.0, 0.0) if change.get("parallelism") else (1.5e9, 0.0))
    if "parallelism" not in change:
        assert w.exposed_peer_bytes == 0.0


def test_hsdp_keeps_the_serial_gathers_inside_the_node():
    ev, _, _ = _work({**AA, "num_gpus": 16, "num_nodes": 2, "shard_scope": "node", "gpu": "a100-80gb-sxm"})
    assert fsdp_serial_gather_bytes(ev.base, 8 * 10**9) == (2 * 7 / 8 * 8e9, 0.0)
    ev, _, _ = _work({**AA, "num_gpus": 16, "num_nodes": 2, "gpu": "a100-80gb-sxm"})
    assert fsdp_serial_gather_bytes(ev.base, 8 * 10**9) == (0.0, 2 * 15 / 16 * 8e9)
