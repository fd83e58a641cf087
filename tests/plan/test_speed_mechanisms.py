"""The speed model's mechanisms added for issue 22, each checked against its formula by hand."""

from pathlib import Path

import pytest

from benchmark_modules import load_benchmark
from vramfit.errors import ScenarioError
from vramfit.gpus import get_gpu
from vramfit.plan.evaluate import Evaluator
from vramfit.plan.kernels import HOST_DRAM_BYTES_PER_GPU, card_speed
from vramfit.plan.throughput import mechanism_step_time, model_flops, step_time, step_work
from vramfit.plan.traffic import weight_gathers, zero3_exposed_share

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    return load_benchmark("speed_accuracy")


def _work(sc: dict):
    ev = Evaluator(sc)
    mf = model_flops(ev.spec, ev.base.seq_len)
    return ev, mf, step_work(ev.base, mf, ev.estimate().model.num_trainable_params)


QWEN72 = {"model": "Qwen/Qwen-72B", "framework": "hf", "micro_batch_size": 1, "seq_len": 256, "grad_accum": 8,
          "gradient_checkpointing": "full", "attention": "flash", "num_gpus": 4, "gpu": "a100-80gb-sxm",
          "method": "lora", "precision": "bf16-true", "lora_rank": 64, "lora_targets": ["c_attn", "c_proj", "w1", "w2"],
          "lora_dropout": 0.05, "parallelism": "zero3"}


def test_zero3_gathers_past_the_prefetch_bucket_wait():
    """HF 'auto' prefetch bucket = int(0.9 h^2) = 60,397,977 elements for h = 8192; a Qwen-72B block holds
    4 h^2 (c_attn + c_proj) + 3 h x 24,576 (w1, w2, c_proj of the MLP) = 872,415,232 weights, so 93.08 % of
    each gather is on the critical path; the rest and the gradient reduce overlap with compute."""
    ev, mf, w = _work(QWEN72)
    assert mf.quantizable_params // mf.num_layers == 872_415_232
    share = zero3_exposed_share(ev.base, mf.hidden_size, mf.quantizable_params / mf.num_layers)
    assert share == pytest.approx(1 - 60_397_977 / 872_415_232, rel=1e-12)
    assert share == pytest.approx(0.93077, abs=1e-5)
    c = card_speed(get_gpu("a100-80gb-sxm"))
    sp = mechanism_step_time(w, c)
    waits = w.exposed_peer_bytes / c.peer_bytes
    assert sp.step_s == pytest.approx(max(sp.compute_s, sp.comm_s - waits) + waits, rel=1e-12)
    assert sp.step_s == pytest.approx(17.8, abs=0.1)  # Qwen-1 README '72B | LoRA + Deepspeed Zero3', seq 256: 17.6 s/it
    # a bucket as large as a block: the whole gather is prefetched, nothing waits
    ev2, mf2, w2 = _work({**QWEN72, "deepspeed_config": {"zero_optimization": {
        "stage": 3, "stage3_prefetch_bucket_size": 1_000_000_000}}})
    assert zero3_exposed_share(ev2.base, mf2.hidden_size, mf2.quantizable_params / mf2.num_layers) == 0.0
    assert w2.exposed_peer_bytes == 0.0


_OFFLOAD70 = {"model": "meta-llama/Llama-3.1-70B", "method": "full", "precision": "bf16-true", "optimizer": "adamw",
              "micro_batch_size": 2, "seq_len": 2048, "gradient_checkpointing": "full", "attention": "sdpa",
              "num_gpus": 8, "parallelism": "fsdp", "offload": "optimizer+params", "gpu": "a100-80gb-sxm"}


def test_offloaded_optimizer_steps_at_host_dram_speed(monkeypatch):
    """70B full on 8 A100 with FSDP CPU offload under a launcher that gives each rank its share of the cores
    (litgpt: Lightning sets OMP_NUM_THREADS = cpus / processes; its scripts build FSDP with cpu_offload=False, so the
    profile is one edited to offload): each rank's AdamW step on the CPU reads weight, gradient and two moments and
    writes three (7 x 2 B in bf16) for its 1/8 of 70,553,706,496 weights: 123,468,986,368 B at 51.2 GB/s (DGX A100
    host DRAM per GPU) = 2.4115 s, added to the host time."""
    import dataclasses

    from vramfit.estimate.framework import PROFILES
    from vramfit.scenario import Framework

    monkeypatch.setitem(PROFILES, Framework.LITGPT, dataclasses.replace(PROFILES[Framework.LITGPT], runs_offload=True))
    ev, _, w = _work({**_OFFLOAD70, "framework": "litgpt"})
    trainable = ev.estimate().model.num_trainable_params
    assert trainable == 70_553_706_496 and w.opt_on_host and w.opt_host_params == 0.0
    assert w.opt_bytes == trainable / 8 * 7 * 2 == 123_468_986_368
    c = card_speed(get_gpu("a100-80gb-sxm"))
    sp = mechanism_step_time(w, c)
    assert HOST_DRAM_BYTES_PER_GPU.value == 2 * 8 * 25.6e9 / 8
    assert sp.host_s == pytest.approx(w.host_bytes / c.host_bytes + w.opt_bytes / 51.2e9, rel=1e-12)
    assert w.opt_bytes / 51.2e9 == pytest.approx(2.4115, abs=1e-4)
    on_gpu = mechanism_step_time(step_work(ev.base.replace(offload="none"), model_flops(ev.spec, 2048), trainable), c)
    assert on_gpu.host_s == 0.0  # not offloaded: the step is GPU memory traffic inside compute


def test_torchrun_ranks_step_the_offloaded_optimizer_on_one_thread():
    """The same run under torchtune (`tune run` = torchrun: OMP_NUM_THREADS=1 per rank; transformers under
    `accelerate launch` alike): each rank updates its
    8,819,213,312 bf16 weights at one thread's measured 1.06e9 parameters/s = 8.3200 s instead of 2.4115 s;
    one GPU (one rank, its threads untouched) keeps the DRAM-bound step, as does an fp32 run's slower check."""
    from vramfit.plan.kernels import CPU_ADAM_PARAMS_PER_S_ONE_THREAD, host_optimizer_seconds

    ev, _, w = _work({**_OFFLOAD70, "framework": "torchtune"})
    assert w.opt_host_params == 70_553_706_496 / 8 == 8_819_213_312
    assert _work({**_OFFLOAD70, "framework": "hf"})[2].opt_host_params == w.opt_host_params
    c = card_speed(get_gpu("a100-80gb-sxm"))
    one = w.opt_host_params / CPU_ADAM_PARAMS_PER_S_ONE_THREAD[2].value
    assert one == pytest.approx(8.3200, abs=1e-4)
    assert mechanism_step_time(w, c).host_s == pytest.approx(w.host_bytes / c.host_bytes + one, rel=1e-12)
    single = _work({**_OFFLOAD70, "framework": "torchtune", "model": "meta-llama/Llama-3.1-8B",
                    "num_gpus": 1})[2]
    assert single.opt_on_host and single.opt_host_params == 0.0
    # fp32 state: 28 B per parameter selects the fp32 rate (0.84e9/s), 1 G parameters = 1.1905 s > 28 GB at DRAM speed
    assert host_optimizer_seconds(28e9, 1e9) == pytest.approx(1e9 / 0.84e9, rel=1e-12)
    assert host_optimizer_seconds(28e9) == pytest.approx(28e9 / 51.2e9, rel=1e-12)


def test_paged_state_moves_in_and_out_each_step():
    ev, _, w = _work({"model": "meta-llama/Llama-2-7b-hf", "method": "full", "optimizer": "paged-adamw",
                      "micro_batch_size": 4, "seq_len": 2048, "gradient_checkpointing": "full", "gpu": "rtx4090",
                      "framework": "torchtune", "precision": "bf16-true", "optimizer_in_backward": True})
    g = get_gpu("rtx4090")
    links = dict(peak_tflops=g.bf16_tflops, mfu=0.4, mem_bandwidth_gbs=g.mem_bandwidth_gbs, peer_gbs=15.75,
                 host_gbs=g.host_link_gbs)
    paged = 20e9
    for card in (card_speed(g), None):  # the mechanism model and the utilisation rule alike
        base = step_time(w, card=card, **links)
        more = step_time(w, card=card, paged_bytes=paged, **links)
        assert more.host_s - base.host_s == pytest.approx(2 * paged / 31.5e9, rel=1e-12)
        assert more.step_s - base.step_s == pytest.approx(2 * paged / 31.5e9, rel=1e-9)
    from vramfit.plan.verdict import limit_bytes, result_paging

    # torchtune README @0217d44c2 '1 x RTX 4090 | Full finetune *' (PagedAdamW): 6.74e9 x 8 B of AdamW state
    # (53.9 GB) on a 24 GB card; what the rest leaves no room for, 48.4 GB, pages in and out: 3.07 s a step
    e = ev.estimate()
    out = result_paging(e, limit_bytes(g, 0.0))
    assert e.component("paged_optimizer_state") == 53_905_195_008
    # the verdict's figure: the device peak less the cached segments released on an OOM retry (plan/verdict.py)
    assert out == e.peak.required_bytes - limit_bytes(g, 0.0) == 48_361_701_376
    assert 2 * out / 31.5e9 == pytest.approx(3.0706, abs=1e-4)


def test_op_level_selective_checkpointing_reruns_the_memory_bound_ops():
    """torchtitan's op policy saves only mm/sdpa/reduce-scatter outputs: every elementwise op runs again."""
    base = {"model": "meta-llama/Llama-3.1-8B", "method": "full", "seq_len": 8192, "micro_batch_size": 2,
            "attention": "sdpa", "gpu": "h100-sxm"}
    _, mf, sel = _work({**base, "gradient_checkpointing": "selective"})
    _, _, op = _work({**base, "gradient_checkpointing": "selective-op"})
    assert sel.elem_bytes_mb == 2 * 8192 * mf.elem_bytes_per_token_fwd * 3
    assert op.elem_bytes_mb == 2 * 8192 * mf.elem_bytes_per_token_fwd * 4


def test_attention_rate_follows_the_architecture_and_the_bench_card():
    """GH200 (Hopper) gets FlashAttention-2's 35 % on Hopper; torchtitan's 96 GB HBM2e H100 at 500 W runs
    at the midpoint of the doc's SXM-NVL interval, (989 + 835.5) / 2 = 912.3 TFLOPS, 2.4 TB/s."""
    assert card_speed(get_gpu("gh200-96gb")).attn_flops == pytest.approx(get_gpu("gh200-96gb").bf16_tflops * 1e12 * 0.35)
    b = _bench()
    with b.bench_cards():
        g = get_gpu("h100-96gb-hbm2e-500w")
        c = card_speed(g)
    assert g.bf16_tflops == pytest.approx((989 + 835.5) / 2, abs=0.05)
    assert c.gemm_flops == pytest.approx(912.3e12 * 0.683) and c.attn_flops == pytest.approx(912.3e12 * 0.35)  # kernels.py
    assert c.mem_bytes == 2400e9 and c.p2p and c.peer_bytes == 450e9
    with pytest.raises(ScenarioError):
        get_gpu("h100-96gb-hbm2e-500w")  # the benchmark card leaves the catalog as it was


def test_torchtitan_rows_say_what_the_run_was():
    rows = [r for r in _bench().load(_bench().DEFAULT_DATA) if r["source_id"] == "TORCHTITAN_PERF"]
    assert len(rows) == 4
    assert {r["scenario"]["gradient_checkpointing"] for r in rows} == {"selective-op"}
    assert {r["scenario"]["gpu"] for r in rows} == {"h100-96gb-hbm2e-500w"}


def test_every_planned_time_carries_the_p90_band():
    """Plans timed by the mechanism model show hours x (1 -/+ SPEED_ERROR_P90); a user --mfu has no band."""
    from vramfit.plan.kernels import SPEED_ERROR_P90
    from vramfit.plan.planner import plan

    sc = {"model": "meta-llama/Llama-2-7b-hf", "method": "qlora", "seq_len": 1024}
    rep = plan(sc, gpu_ids=["a100-80gb-sxm"], max_gpus=1, effective_batch=8, dataset_tokens=10_000_000,
               with_changes=False)
    p = rep.plans[0]
    assert p.hours_range == (p.hours * (1 - SPEED_ERROR_P90), p.hours * (1 + SPEED_ERROR_P90))
    assert p.to_dict()["hours_range"] == p.hours_range
    fixed = plan(sc, gpu_ids=["a100-80gb-sxm"], max_gpus=1, effective_batch=8, dataset_tokens=10_000_000,
                 mfu=0.4, with_changes=False)
    assert fixed.plans[0].hours is not None and fixed.plans[0].hours_range is None


def test_the_plan_table_heads_its_time_column_with_the_band():
    """README's generated `vramfit plan` example (scripts/gen_examples.py) shows the band over the time column."""
    from vramfit.plan.kernels import SPEED_ERROR_P90

    readme = (ROOT / "README.md").read_text()
    assert f"┃   ±{SPEED_ERROR_P90:.0%} ┃" in readme


def test_fsdp_gathers_twice_zero3_thrice_under_full_checkpointing():
    """FSDP's pre-backward unshard serves the recomputed forward; DeepSpeed's module hooks fetch again."""
    base = {"model": "meta-llama/Llama-2-7b-hf", "method": "full", "num_gpus": 4, "gpu": "a100-80gb-sxm"}
    for ckpt, fsdp, zero3 in (("full", 2, 3), ("offload", 2, 3), ("selective", 2, 2), ("none", 2, 2)):
        assert weight_gathers(Evaluator({**base, "parallelism": "fsdp", "gradient_checkpointing": ckpt}).base) == fsdp
        assert weight_gathers(Evaluator({**base, "parallelism": "zero3", "gradient_checkpointing": ckpt}).base) == zero3
    ev, mf, w = _work({**base, "parallelism": "fsdp", "gradient_checkpointing": "full"})
    param_bytes, grad_bytes = 2 * mf.num_params, 2 * mf.num_params
    assert w.peer_bytes == pytest.approx(2 * 0.75 * param_bytes + 0.75 * grad_bytes, rel=1e-12)


def test_zero3_gathers_across_nodes_wait_past_the_bucket_too():
    """Flat ZeRO-3 over 2 nodes of 8: all 3 gathers (full checkpointing) cross the NICs, 15/16 of the 2-byte
    weights each; the share past the prefetch bucket waits, the rest hides but for one layer's share."""
    from vramfit.plan.throughput import net_rate

    P, L = 70_553_706_496, 80
    ev, mf, w = _work({"model": "meta-llama/Llama-3.1-70B", "method": "full", "gradient_checkpointing": "full",
                       "seq_len": 4096, "parallelism": "zero3", "num_gpus": 16, "num_nodes": 2})
    share = zero3_exposed_share(ev.base, 8192, mf.quantizable_params / L)
    assert share == pytest.approx(1 - int(0.9 * 8192**2) / (mf.quantizable_params / L), rel=1e-12)
    assert w.exposed_peer_bytes == 0.0
    assert w.exposed_net_bytes == pytest.approx(share * 3 * 15 / 16 * 2 * P, rel=1e-12)
    c = card_speed(get_gpu("h100-sxm"))
    ib = net_rate(c.peer_bytes, 400e9, 9.6)
    sp = mechanism_step_time(w, c, ib)
    across, waits = w.net_bytes / 400e9, w.exposed_net_bytes / 400e9
    exposed = waits + (across - waits) / L + w.net_hops * 9.6e-6
    assert sp.step_s == pytest.approx(max(sp.compute_s, sp.comm_s - waits) + exposed, rel=1e-12)
    hpz = _work({"model": "meta-llama/Llama-3.1-70B", "method": "full", "gradient_checkpointing": "full",
                 "seq_len": 4096, "parallelism": "zero3", "num_gpus": 16, "num_nodes": 2, "shard_scope": "node"})[2]
    assert hpz.exposed_net_bytes == pytest.approx(share * 15 / 16 * 2 * P, rel=1e-12)  # the forward gather only
    assert hpz.exposed_peer_bytes == pytest.approx(share * 2 * 7 / 8 * 2 * P, rel=1e-12)


def test_torchtune_01_lora_units_wait_under_fsdp1s_rate_limiter():
    """torchtune 0.1 wraps each LoRA A and B as an FSDP1 unit inside its layer's (lora_fsdp_wrap_policy), with
    FSDP's default limit_all_gathers: every weight gather of the step waits, 2 x 7/8 x the weights' bytes per
    micro-batch; torchtune 0.4's FSDP2 units prefetch, so none waits."""
    sc = {"model": "meta-llama/Llama-2-70b-hf", "method": "lora", "precision": "bf16-true", "lora_rank": 16,
          "lora_targets": ["q_proj", "k_proj", "v_proj"], "micro_batch_size": 4, "seq_len": 4096,
          "gradient_checkpointing": "full", "attention": "sdpa", "num_gpus": 8, "parallelism": "fsdp",
          "gpu": "a100-80gb-sxm", "framework": "torchtune"}
    ev, mf, old = _work({**sc, "framework_version": "torchtune-0.1"})
    assert ev.base.grad_accum == 1 and old.exposed_peer_bytes == pytest.approx(2 * 7 / 8 * mf.num_params * 2, rel=1e-9)
    assert _work(sc)[2].exposed_peer_bytes == 0.0
