"""Time and cost arithmetic, checked against hand calculations with their sources."""

import pytest

from vramfit.estimate import resolve_spec
from vramfit.plan.throughput import (
    ModelFlops,
    model_flops,
    recompute_flops_per_token,
    run_cost,
    run_hours,
    step_time,
    step_work,
    train_flops_per_token,
)
from vramfit.scenario import Checkpointing, Method, parse_scenario


def test_flops_match_llm_foundry_benchmark_row():
    """mosaicml/llm-foundry@061f2c7 scripts/train/benchmarking/README.md, 'H100 80GB BF16' table, row
    '7b | 2048 | 8 | h100_80gb | 46.44 | 46.44 | 4.595096E+14 | ... | 10643 T/s/GPU | ... | 6658859008':
    MFU = (6 N + 12 L s d) x tokens/s / 989e12, N = 6658859008, L = 32, d = 4096, s = 2048."""
    n, layers, d, s = 6658859008, 32, 4096, 2048
    mf = ModelFlops(matmul_params=n, lm_head_params=0, attn_flops_per_token_fwd=4 * layers * s * d,
                    quantizable_params=0, num_params=n)
    per_token = train_flops_per_token(mf, Method.FULL)
    assert per_token == 6 * n + 12 * layers * s * d
    assert per_token * 10643 == pytest.approx(4.595096e14, rel=2e-4)  # the table's "Model TFLOP"
    assert per_token * 10643 / 989e12 == pytest.approx(0.4644, abs=5e-4)  # its MFU column (rounded peak)


def test_llama2_7b_full_on_one_h100_by_hand():
    """Llama-2-7b (config.json: 32 layers, hidden 4096, 32 heads x 128, vocab 32000, untied lm_head).

    N_mm = all parameters - embedding + lm_head matmul = 6,738,415,616 (the two are the same size)
    A    = 4 x 32 x 2048 x 4096 = 1,073,741,824 FLOPs per token (attention, forward)
    full = 6 N_mm + 3 A = 40,430,493,696 + 3,221,225,472 = 43,651,719,168 FLOPs per token
    H100 SXM dense BF16 989 TFLOPS x 0.40 = 395.6e12 FLOP/s -> 9,062.72 tokens/s
    1e9 tokens -> 110,341.4 s = 30.650 h; x $2.69 per GPU-hour (catalog low) = $82.45
    """
    sc = parse_scenario({"model": "meta-llama/Llama-2-7b-hf", "method": "full", "seq_len": 2048})
    spec = resolve_spec(sc)[1]
    mf = model_flops(spec, 2048)
    assert mf.matmul_params == 6_738_415_616
    assert mf.attn_flops_per_token_fwd == 1_073_741_824
    w = step_work(sc, mf, trainable_params=spec.num_params)
    assert w.flops_per_token == w.hardware_flops_per_token == 43_651_719_168
    sp = step_time(w, peak_tflops=989, mfu=0.40, mem_bandwidth_gbs=3350, peer_gbs=450, host_gbs=63)
    assert sp.tokens_per_s == pytest.approx(9062.72, rel=1e-5)
    hours = run_hours(1e9, sp.tokens_per_s)
    assert hours == pytest.approx(30.650, rel=1e-4)
    assert run_cost(hours, 1, 2.69) == pytest.approx(82.45, rel=1e-3)
    assert run_cost(hours, 8, None) is None


def test_lora_skips_weight_gradients_and_recompute_adds_a_forward():
    mf = ModelFlops(matmul_params=1000, lm_head_params=100, attn_flops_per_token_fwd=10, quantizable_params=800,
                    num_params=1100)
    assert train_flops_per_token(mf, Method.LORA, lora_params=5) == 4 * 1000 + 3 * 10 + 6 * 5
    assert recompute_flops_per_token(mf, Checkpointing.NONE) == 0
    assert recompute_flops_per_token(mf, Checkpointing.SELECTIVE) == 10
    assert recompute_flops_per_token(mf, Checkpointing.FULL, lora_params=5) == 2 * 900 + 10 + 10


def test_qlora_dequantization_is_per_micro_batch_and_checkpointing_costs_time():
    sc = parse_scenario({"model": "meta-llama/Llama-2-70b-hf", "method": "qlora", "seq_len": 512})
    mf = model_flops(resolve_spec(sc)[1], 512)
    args = dict(peak_tflops=989, mfu=0.4, mem_bandwidth_gbs=3350, peer_gbs=450, host_gbs=63)
    one = step_time(step_work(sc, mf, 10**8), **args)
    four = step_time(step_work(sc.replace(micro_batch_size=4), mf, 10**8), **args)
    assert one.dequant_s == pytest.approx(2 * mf.quantizable_params * 2.5 / 3350e9)
    assert four.tokens_per_s > one.tokens_per_s  # the same de-quantization serves 4x the tokens
    ck = step_time(step_work(sc.replace(gradient_checkpointing="full"), mf, 10**8), **args)
    assert ck.tokens_per_s < one.tokens_per_s


def test_multi_gpu_traffic_over_pcie_can_dominate():
    sc = parse_scenario({"model": "meta-llama/Llama-2-7b-hf", "method": "full", "num_gpus": 8, "parallelism": "zero3"})
    mf = model_flops(resolve_spec(sc)[1], 2048)
    w = step_work(sc, mf, mf.num_params)
    nvlink = step_time(w, peak_tflops=989, mfu=0.4, mem_bandwidth_gbs=3350, peer_gbs=450, host_gbs=63)
    pcie = step_time(w, peak_tflops=989, mfu=0.4, mem_bandwidth_gbs=3350, peer_gbs=31.5, host_gbs=31.5)
    assert nvlink.step_s == nvlink.compute_s and pcie.step_s == pcie.comm_s > pcie.compute_s


# --- the mechanism model (kernels.py) and its benchmark against published throughputs ----------

def _bench():
    from benchmark_modules import load_benchmark

    return load_benchmark("speed_accuracy")


def test_benchmark_summary_beats_the_old_model():
    """105 published rows (87 held out): the mechanism model's median and p90 error pass thresholds that
    the 0.40-MFU rule fails (median 38 %, p90 171 %); the naive 6N rule's tail is worse still.
    Before the ZeRO-3 prefetch, CPU optimizer, paging and torchtitan-row mechanisms: 13 %/58 %; before the
    FSDP1 rate limiter, the shared HGX host uplink and the measured GeForce/workstation matmul rates: 10 %/47 %;
    before torchtune 0.1's per-rank tokens/s (2 x / 4 x RTX 4090 rows) and the 128-GPU torchtitan rows' 16 hosts:
    8.6 %/35.3 % (held out 7.6 %/39.1 %); before torchrun's one CPU thread per rank for the offloaded optimizer
    step, torchtune 0.1's nested LoRA units, the measured/interpolated power-capped H100 matmul rates and the
    torchtune @30b8519e8 "A6000" cells scored on the Ada card they fit: 8 %/31 % (held out 7 %/31 %); before
    NCCL's PCIe peer-to-peer rule (kernels.nccl_pcie_p2p: the rented RTX A5000 / RTX 6000 Ada machines copy through
    host memory): 7 %/28 % (held out 6.5 %/28 %); before one-GPU ZeRO-3's host time overlapping its kernels
    (kernels.ZERO3_HOST_S_PER_LAYER): 6.9 %/24.7 % (design rows 9.5 %/22.9 %; held out unchanged)."""
    b = _bench()
    rows = b.load(b.DEFAULT_DATA)
    everything = b.score(rows)["summary"]
    # the published rows, as before this project's own H200 runs were added (scored separately below)
    s = b.score([r for r in rows if r["source_id"] not in ("VRAMFIT_H200", "VRAMFIT_H100")])["summary"]
    assert s["all"]["model"]["n"] == 105 and s["held_out"]["model"]["n"] == 87
    assert s["all"]["model"]["median"] <= 0.065 and s["all"]["model"]["p90"] <= 0.225
    assert s["design"]["model"]["median"] <= 0.075 and s["design"]["model"]["p90"] <= 0.15
    assert s["held_out"]["model"]["median"] <= 0.065 and s["held_out"]["model"]["p90"] <= 0.235
    assert s["TT_README_2409"]["model"]["median"] <= 0.115 and s["TT_README_2409"]["model"]["p90"] <= 0.175
    assert s["TT_README_2405"]["model"]["median"] <= 0.17 and s["TT_README_2405"]["model"]["p90"] <= 0.39
    assert s["ANSWERAI_FSDP_QLORA"]["model"]["median"] <= 0.085
    assert s["QWEN1_README"]["model"]["median"] <= 0.06 and s["QWEN1_README"]["model"]["p90"] <= 0.165
    assert s["TORCHTITAN_PERF"]["model"]["median"] <= 0.095 and s["TORCHTITAN_PERF"]["model"]["p90"] <= 0.165
    assert s["all"]["old"]["median"] > 0.15 and s["all"]["old"]["p90"] > 0.60
    assert s["all"]["naive"]["p90"] > 1.5
    from vramfit.plan.kernels import SPEED_ERROR_MEDIAN, SPEED_ERROR_P90

    # 9 held-out runs of benchmarks/gpu_grid.py on an H200 (2026-12-04): steps of 60-470 ms, where the model misses the
    # plain loop's launch and bitsandbytes overheads (Llama-3.2-1B QLoRA at 512 measured 12.8k tokens/s, modelled 24k)
    h200 = everything["VRAMFIT_H200"]["model"]
    assert h200["n"] == 9 and h200["median"] <= 0.28 and h200["p90"] <= 0.56
    # 14 held-out runs on an H100 (2026-12-05): 8-bit AdamW (+103 %) and DoRA (+58 %; +182 % before its weight norms
    # were timed, plan/elementwise.py dora_traffic) are the misses; plain LoRA is 6 % off, LoRA with both whole copies
    # too (-57 % when they were timed as adapters)
    h100 = everything["VRAMFIT_H100"]["model"]
    assert h100["n"] == 14 and h100["median"] <= 0.25 and h100["p90"] <= 0.60
    from vramfit.plan.kernels import SPEED_ROWS

    assert everything["all"]["model"]["n"] == SPEED_ROWS == 128 and everything["held_out"]["model"]["n"] == 110
    # the band every planned time states is the whole set's, the H200 runs included
    assert (SPEED_ERROR_MEDIAN, SPEED_ERROR_P90) == (round(everything["all"]["model"]["median"], 2),
                                                     round(everything["all"]["model"]["p90"], 2))


def test_gemm_rate_is_the_measured_mamf():
    from vramfit.gpus import get_gpu
    from vramfit.plan.kernels import card_speed

    a100 = card_speed(get_gpu("a100-80gb-sxm"))
    assert a100.gemm_flops == pytest.approx(267.9e12, rel=1e-3)  # ml-engineering MAMF: A100 SXM 267.9 TFLOPS
    assert a100.attn_flops == pytest.approx(312e12 * 0.68)
    assert card_speed(get_gpu("h100-sxm")).attn_flops == pytest.approx(989e12 * 0.35)  # FA2 on Hopper
    # the 350 W H100 PCIe measured at 495.93 of its 756 TFLOPS (torch-performance-test-data)
    assert card_speed(get_gpu("h100-pcie")).gemm_flops == pytest.approx(495.93e12, rel=1e-3)


def test_power_capped_h100_bench_card_interpolates_the_measured_h100s():
    """torchtitan's 500 W H100 96GB: 495.93 + (500 - 350) / (700 - 350) x (792.1 - 495.93) = 622.86 TFLOPS."""
    from vramfit.gpus import get_gpu
    from vramfit.plan.kernels import card_speed

    with _bench().bench_cards():
        g = get_gpu("h100-96gb-hbm2e-500w")
        assert g.bf16_tflops == 912.3 and "500 W" in g.name
        assert card_speed(g).gemm_flops == pytest.approx(622.86e12, rel=1e-3)


def test_geforce_without_nvlink_has_no_p2p_and_adds_comm():
    from vramfit.gpus import get_gpu
    from vramfit.plan.kernels import card_speed

    g = card_speed(get_gpu("rtx4090"))
    assert not g.p2p and g.peer_bytes == pytest.approx(31.5e9 / 2)  # two PCIe 4.0 x16 hops through the host
    assert card_speed(get_gpu("a100-80gb-sxm")).p2p


def test_pcie_cards_follow_nccls_p2p_rule():
    """NCCL (src/graph/paths.cc ncclTopoCheckP2p) uses PCIe peer-to-peer across the CPU's host bridge only on AMD
    hosts (before 2.23.4 any count, since then two GPUs); the catalog's node (Intel, no switch) copies through host
    memory like the GeForce cards, at half the link and not overlapped. NVLink-linked cards keep P2P."""
    from vramfit.gpus import get_gpu
    from vramfit.plan.kernels import PCIE_HOST, CpuVendor, PcieHost, card_speed, nccl_pcie_p2p

    assert PCIE_HOST == PcieHost(CpuVendor.INTEL, gpus_behind_one_switch=False)
    for n in (2, 4, 8):
        c = card_speed(get_gpu("rtxa5000"), 31.5, n)
        assert not c.p2p and c.peer_bytes == pytest.approx(31.5e9 / 2)
        assert not nccl_pcie_p2p(PCIE_HOST, n) and not nccl_pcie_p2p(PCIE_HOST, n, nccl_before_2_23_4=True)
        assert nccl_pcie_p2p(PcieHost(CpuVendor.INTEL, gpus_behind_one_switch=True), n)
        assert nccl_pcie_p2p(PcieHost(CpuVendor.AMD, False), n, nccl_before_2_23_4=True)
        assert nccl_pcie_p2p(PcieHost(CpuVendor.AMD, False), n) is (n <= 2)
    bridged = card_speed(get_gpu("a100-80gb-pcie"), get_gpu("a100-80gb-pcie").peer_gbs, 2)  # NVLink bridge pair
    assert bridged.p2p and bridged.peer_bytes == pytest.approx(300e9)
    assert card_speed(get_gpu("h100-sxm"), 450.0, 8).p2p


def _qwen_speed(method: str, seq: int, **kw):
    b = _bench()
    sc = {"model": "Qwen/Qwen-7B", "method": method, "micro_batch_size": 1, "seq_len": seq, "grad_accum": 8,
          "gradient_checkpointing": "full", "attention": "flash", "gpu": "a100-80gb-sxm", "lora_rank": 64,
          "lora_targets": ["c_attn", "c_proj", "w1", "w2"], **kw}
    return b.predict(sc)["model"]


def test_gptq_dequantization_costs_more_than_nf4():
    """Qwen-1 README (held out): 7B Q-LoRA (GPTQ) 3.0 s/it vs LoRA 1.2 s/it at seq 256, ratio 2.5; NF4 is cheaper."""
    lora, gptq, nf4 = (_qwen_speed("lora", 256), _qwen_speed("qlora", 256, quantize="gptq-int4"),
                       _qwen_speed("qlora", 256, quantize="nf4"))
    assert lora / gptq == pytest.approx(2.41, abs=0.01)  # measured 2.5
    assert lora / nf4 == pytest.approx(1.14, abs=0.01)


def test_recompute_adds_a_third_of_the_matmuls():
    """Full checkpointing re-runs the forward: 4N+3A -> 6N+4A for LoRA's frozen matmuls (Hu et al.; Korthikanti)."""
    from vramfit.plan.evaluate import Evaluator
    from vramfit.plan.throughput import model_flops, step_work

    ev = Evaluator({"model": "meta-llama/Llama-2-7b-hf", "method": "full", "seq_len": 2048,
                    "gradient_checkpointing": "full"})
    mf = model_flops(ev.spec, 2048)
    w = step_work(ev.base, mf, mf.num_params)
    assert w.mm_flops_mb / 2048 == 8 * mf.matmul_params - 2 * mf.lm_head_params


def _speed(sc: dict):
    from vramfit.gpus import get_gpu
    from vramfit.plan.evaluate import Evaluator
    from vramfit.plan.kernels import card_speed
    from vramfit.plan.throughput import mechanism_step_time, model_flops, step_work

    ev = Evaluator(sc)
    w = step_work(ev.base, model_flops(ev.spec, ev.base.seq_len), ev.estimate().model.num_trainable_params)
    return w, mechanism_step_time(w, card_speed(get_gpu(ev.base.gpu)))


def test_traffic_adds_without_p2p_and_overlaps_with_it():
    """FSDP over two cards: GeForce without NVLink waits for its PCIe traffic; A100 NVLink hides it."""
    base = {"model": "meta-llama/Llama-2-7b-hf", "method": "lora", "micro_batch_size": 4, "seq_len": 2048,
            "num_gpus": 2, "parallelism": "fsdp", "gradient_checkpointing": "full"}
    _, geforce = _speed({**base, "gpu": "rtx4090"})
    assert geforce.step_s == pytest.approx(geforce.compute_s + geforce.comm_s)
    # 6,738,415,616 weights x 2 B x 2 gathers (forward, backward: FSDP's pre-backward unshard also serves the
    # recompute) x 1/2 (ring of 2) = 13.5 GB at 15.75 GB/s (PCIe 4.0 x16 / 2: through host memory) = 0.8557 s,
    # plus the adapters' gradients
    assert geforce.comm_s == pytest.approx(0.8582, rel=1e-3)
    # torchtune's FSDP2 prefetches: 300 GB/s per direction, hidden under compute
    _, a100 = _speed({**base, "gpu": "a100-80gb-sxm", "framework": "torchtune"})
    assert a100.step_s == pytest.approx(a100.compute_s)
    # PEFT's LoRA units nested in FSDP1's layer units under its rate limiter: every gather waits
    # (tests/plan/test_fsdp_lora_units.py), 13.5 GB at 300 GB/s
    w, hf = _speed({**base, "gpu": "a100-80gb-sxm"})
    assert hf.step_s == pytest.approx(hf.compute_s + w.exposed_peer_bytes / 300e9)
    assert w.exposed_peer_bytes == pytest.approx(6_738_415_616 * 2, rel=0.01)


def test_zero3_host_time_runs_beside_the_kernels_on_one_gpu():
    """One GPU: ZeRO-3 gathers nothing and never blocks the host on the kernels inside a micro-batch (DeepSpeed v0.12.3,
    kernels.ZERO3_HOST_S_PER_LAYER), so a micro-batch takes the longer of its host time and its kernels."""
    base = {"model": "Qwen/Qwen-1_8B", "method": "full", "micro_batch_size": 1, "grad_accum": 8,
            "gradient_checkpointing": "full", "attention": "flash", "gpu": "a100-80gb-sxm", "precision": "bf16-mixed"}
    w, short = _speed({**base, "seq_len": 256, "parallelism": "zero3"})
    opt = w.opt_bytes / 2039e9  # the optimizer step's memory traffic at the A100's bandwidth
    # host-bound: 8 micro-batches x 24 layers x 11.2 ms (Qwen-1 README: 2.1 s/it measured)
    assert short.step_s == pytest.approx(8 * 24 * 11.2e-3 + opt)
    _, long_plain = _speed({**base, "seq_len": 8192, "parallelism": "none"})
    _, long_z3 = _speed({**base, "seq_len": 8192, "parallelism": "zero3"})
    assert long_z3.step_s == pytest.approx(long_plain.step_s)  # kernel-bound: the host time hides (5.6 s/it measured)
    assert 8 * 8192 / long_z3.step_s == pytest.approx(10254, rel=0.01)  # README: 11,703 tokens/s


def test_zero3_hooks_add_a_fixed_cost_over_several_gpus():
    """Two GPUs: the host waits on the hooks' all-gathers, so their 5.5 ms per layer per micro-batch adds."""
    base = {"model": "Qwen/Qwen-1_8B", "method": "full", "micro_batch_size": 1, "seq_len": 256, "grad_accum": 8,
            "gradient_checkpointing": "full", "attention": "flash", "gpu": "a100-80gb-sxm", "num_gpus": 2}
    _, plain = _speed({**base, "parallelism": "zero2"})
    w, z3 = _speed({**base, "parallelism": "zero3"})
    assert w.zero3_partitions == 2
    assert z3.compute_s - plain.compute_s == pytest.approx(8 * 24 * 5.5e-3)


def test_readme_shows_the_benchmark_as_it_runs():
    """docs/planner.md 'Time and cost' quotes the first four summary lines of benchmarks/speed_accuracy.py verbatim."""
    from pathlib import Path

    b = _bench()
    lines = b.format_summary(b.score(b.load(b.DEFAULT_DATA))["summary"]).splitlines()[:4]
    readme = (Path(__file__).resolve().parents[2] / "docs" / "planner.md").read_text()
    assert "\n".join(lines) in readme


def test_the_by_source_sentence_is_the_benchmarks():
    """docs/planner.md's "By source: ..." figures (the review found two a point off the generated table)."""
    import re
    from pathlib import Path

    b = _bench()
    summary = b.score(b.load(b.DEFAULT_DATA))["summary"]
    doc = " ".join((Path(__file__).resolve().parents[2] / "docs" / "planner.md").read_text().split())
    named = {"QWEN1_README": "Qwen-1", "TT_README_OPT": "torchtune optimisation flags", "TORCHTITAN_PERF": "torchtitan",
             "TT_README_2409": "torchtune Llama 3.1", "ANSWERAI_FSDP_QLORA": "Answer.AI", "TT_README_2405": "torchtune Llama 2",
             "VRAMFIT_H200": "The H200 runs"}
    for source, words in named.items():
        m = summary[source]["model"]
        figure = f"{m['median']:.0%}".replace("%", " %") + "/" + f"{m['p90']:.0%}".replace("%", " %")
        assert re.search(re.escape(words) + r" \(?" + re.escape(figure), doc), (words, figure)
