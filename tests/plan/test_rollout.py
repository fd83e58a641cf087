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


def _rollout_on_a100(extra: dict):
    from vramfit.plan.search import peer_gbs

    s, mf, _ = _work({**GRPO, **extra})
    g = get_gpu("a100-80gb-sxm")
    return s, mf, rollout_work(s, mf), card_speed(g, peer_gbs(g, s.num_gpus), s.gpus_per_node)


def _added(r: Rollout, c) -> float:
    """Seconds the reference pass and the weight gather add to the generation of ``r`` on ``c``."""
    o = DECODE_LAYER_OVERHEAD_S.value
    bare = replace(r, ref_passes=0, gather_bytes=0.0)
    return (rollout_seconds(r, c.gemm_flops, c.mem_bytes, o, c.peer_bytes)
            - rollout_seconds(bare, c.gemm_flops, c.mem_bytes, o, c.peer_bytes))


@pytest.mark.parametrize("extra", [{"reference": "adapters-off"}, {"method": "full", "reference": "copy"}])
def test_beta_adds_the_reference_forward(extra):
    # TRL 1.16.0 grpo_trainer.py:2710-2739: beta != 0 scores the 16 sequences x 1024 tokens of each GPU with one
    # no-grad forward in chunks of per_device_train_batch_size (8): 2 N_mm + half the attention FLOPs per token
    s, mf, r, c = _rollout_on_a100(extra)
    assert (r.ref_passes, r.ref_layers) == (2, 24)
    assert r.ref_flops == 16 * 1024 * (2 * 494_032_768 + 0.5 * 88_080_384) == pytest.approx(1.6910e13, rel=1e-4)
    # 1.691e13 FLOPs at the A100's 268.0 TFLOP/s matmul rate (63.1 ms) + 2 chunks x 24 layers x 0.9 ms dispatch
    assert _added(r, c) == pytest.approx(1.6910e13 / 268.008e12 + 2 * 24 * 0.9e-3, rel=1e-4)
    assert _added(r, c) == pytest.approx(0.1063, abs=1e-4)
    # beta = 0 (TRL's default, reference auto -> none): no reference pass
    assert _rollout_on_a100({})[2].ref_passes == 0


def test_zero3_gathers_the_model_once_before_generating():
    # trl/models/utils.py:141-150: GatheredParameters(model.parameters()) around generate; each of 4 GPUs
    # receives the 3 other quarters of the 494M bf16 weights (741 MB) over NVLink (300 GB/s per direction)
    s, mf, r, c = _rollout_on_a100({"method": "full", "parallelism": "zero3", "num_gpus": 4})
    assert r.gather_bytes == 494_032_768 * 2 * 3 / 4 and not r.gather_per_forward
    assert _added(r, c) == pytest.approx(741_049_152 / 300e9)  # 2.47 ms, once per step
    # vLLM generates from its own copy of the weights: no gather before generate
    assert _rollout_on_a100({"method": "full", "parallelism": "zero3", "num_gpus": 4,
                             "generation": "vllm-colocate"})[2].gather_bytes == 0.0


def test_fsdp_gathers_in_every_forward_of_generate():
    # summon_full_params(recurse=False) materializes only the root's parameters (trl/distributed.py:74-91):
    # the prefill and each of the 256 decode steps all-gather the layers again, overlapped with their compute
    s, mf, r, c = _rollout_on_a100({"method": "full", "parallelism": "fsdp", "num_gpus": 4})
    assert r.gather_per_forward and r.gather_bytes == 741_049_152
    per_fwd = 741_049_152 / 300e9
    kv = 16 * r.kv_bytes_per_token * (256 * 768 + 256 * 255 / 2)
    decode_memory = (256 * r.weight_bytes + kv) / c.mem_bytes
    prefill = 16 * 768 * r.flops_per_token / c.gemm_flops
    assert _added(r, c) == pytest.approx(max(prefill, per_fwd) - prefill + max(256 * per_fwd, decode_memory) - decode_memory)
    assert _added(r, c) == pytest.approx(0.4862, abs=1e-4)
