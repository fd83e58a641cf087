"""GRPO/PPO steps include the generation of their rollouts (plan/rollout.py), timed on the card."""

from dataclasses import replace

import pytest

from vramfit.gpus import get_gpu
from vramfit.plan import plan
from vramfit.plan.evaluate import Evaluator
from vramfit.plan.kernels import DECODE_LAYER_OVERHEAD_S, card_speed
from vramfit.plan.rollout import Rollout, rollout_seconds, rollout_work
from vramfit.plan.throughput import mechanism_step_time, model_flops, step_work
from vramfit.scenario import parse_scenario

Q = "Qwen/Qwen2.5-0.5B"
GRPO = {"model": Q, "method": "lora", "stage": "grpo", "seq_len": 1024, "completion_len": 256,
        "micro_batch_size": 8, "grad_accum": 2, "num_gpus": 2, "parallelism": "ddp"}


def _work(sc: dict):
    ev = Evaluator(sc)
    s = ev.base
    mf = model_flops(ev.spec, s.seq_len)
    return s, mf, step_work(s, mf, 1_000_000)


def test_rollout_reads_the_weights_and_the_kv_cache_per_decode_step():
    s, mf, _ = _work(GRPO)
    r = rollout_work(s, mf)
    assert r == Rollout(16, 768, 256, 2.0 * mf.matmul_params, mf.num_layers * mf.kv_width * 2,
                        2.0 * mf.matmul_params, mf.num_layers)
    # vllm-server: every completion of the step on one server GPU, CUDA graphs (no eager dispatch)
    s2, _, _ = _work({**GRPO, "generation": "vllm-server"})
    assert rollout_work(s2, mf).sequences == 32 and rollout_work(s2, mf).eager_layers == 0
    assert rollout_work(parse_scenario({k: v for k, v in GRPO.items() if k not in ("stage", "completion_len")}), mf) is None


def test_rollout_seconds_is_prefill_plus_the_bound_decode():
    r = Rollout(4, 100, 10, 1e9, 1000, 2e9, 24)
    kv = 4 * 1000 * (10 * 100 + 45)
    memory = (10 * 1e9 + kv) / 1e12
    assert rollout_seconds(r, 1e14, 1e12, 1e-4) == pytest.approx(4 * 100 * 2e9 / 1e14 + memory + 10 * 24 * 1e-4)
    # a big batch turns decode compute-bound
    big = replace(r, sequences=4096)
    assert rollout_seconds(big, 1e14, 1e12, 0.0) == pytest.approx(4096 * 100 * 2e9 / 1e14 + 10 * 4096 * 2e9 / 1e14)


def test_grpo_step_time_adds_its_generation():
    s, mf, w = _work(GRPO)
    c = card_speed(get_gpu("a100-80gb-sxm"))
    with_gen, without = mechanism_step_time(w, c), mechanism_step_time(replace(w, rollout=None), c)
    gen = rollout_seconds(w.rollout, c.gemm_flops, c.mem_bytes, DECODE_LAYER_OVERHEAD_S.value)
    assert gen > 0 and with_gen.generate_s == gen
    assert with_gen.step_s == pytest.approx(without.step_s + gen)
    assert with_gen.tokens_per_s == pytest.approx(w.tokens_per_step / (without.step_s + gen))


def test_grpo_plans_show_generation_time():
    r = plan({"model": Q, "method": "lora", "stage": "grpo", "seq_len": 1024}, gpu_ids=["a100-80gb-sxm"],
             effective_batch=16, dataset_tokens="1M")
    assert r.plans and all(p.speed.generate_s > 0 for p in r.plans)
