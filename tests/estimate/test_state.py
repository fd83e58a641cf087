"""Model-state memory against the papers and library formats it models."""

import pytest

from vramfit.estimate.core import model_state
from vramfit.estimate.framework import profile_for
from vramfit.estimate.params import ParamTensor, base_tensors
from vramfit.estimate.state import optimizer_state_bytes, quantized_weight_bytes
from vramfit.estimate.zero12_partition import module_order, rank0_partition
from vramfit.models import generic_spec, resolve_model
from vramfit.scenario import Framework, Optimizer, Quantize, parse_scenario

HF = profile_for(Framework.HF)


def _state_per_param(spec, **keys):
    sc = parse_scenario({"params": spec.num_params, "method": "full", **keys})
    parts, _ = model_state(spec, sc, HF)
    total = parts.weights + parts.gradients + parts.master_weights + parts.optimizer_state
    # allocator rounding: at most 511 bytes per tensor per state part (5 parts)
    slack = 5 * 512 * sum(t.count for t in base_tensors(spec))
    return total, slack


@pytest.mark.parametrize(
    ("parallelism", "expected_per_param"),
    [("zero1", 2 + 2 + 12 / 64), ("zero2", 2 + (2 + 12) / 64), ("zero3", 16 / 64)],
    ids=["zero1", "zero2", "zero3"],
)
def test_zero_paper_per_gpu_model_states(parallelism, expected_per_param):
    """Rajbhandari et al. 2020, sec. 5 / Fig. 1: mixed-precision Adam keeps 2+2+12 bytes per
    parameter; with Psi = 7.5B on 64 GPUs: 120 GB baseline, 31.4 GB (P_os), 16.6 GB (P_os+g),
    1.9 GB (P_os+g+p)."""
    spec = generic_spec(7_500_000_000)
    total, slack = _state_per_param(spec, precision="bf16-mixed", num_gpus=64, parallelism=parallelism)
    psi = spec.num_params
    # (ZeRO-3's fp32 sub-group gradient exists only inside the step, DeepSpeed 0.19.8 stage3.py
    # _prepare_fp32_grad_for_sub_group: not model state, as in the paper)
    # ZeRO-2: rank 0's 16-bit gradient buffer holds its parameters counted whole, here the whole 131M-element
    # embedding beside its 1/64 partition (estimate/zero12_partition.py grads_in_partition): 26 MB above the paper
    whole = rank0_partition(module_order(spec), 64)[0] if parallelism == "zero2" else -(-psi // 64)
    assert abs(total - expected_per_param * psi - 2 * (whole - psi / 64)) <= slack + 64 * 16  # + shard padding
    paper_gb = {"zero1": 31.4, "zero2": 16.6, "zero3": 1.9}[parallelism]
    # the paper's per-GPU figure is any rank's partition: without rank 0's whole-parameter excess
    assert (total - 2 * (whole - psi / 64)) * 7.5e9 / psi / 1e9 == pytest.approx(paper_gb, abs=0.06)


def test_zero_paper_baseline_16_bytes_per_parameter():
    spec = generic_spec(7_500_000_000)
    total, slack = _state_per_param(spec, precision="bf16-mixed", num_gpus=1, parallelism="zero1")
    assert abs(total - 16 * spec.num_params) <= slack
    assert total * 7.5e9 / spec.num_params / 1e9 == pytest.approx(120, abs=0.05)


def test_torch_amp_layout_keeps_fp32_weights_grads_and_states():
    spec = generic_spec(1_000_000_000)
    sc = parse_scenario({"params": spec.num_params, "method": "full", "precision": "bf16-mixed"})
    parts, _ = model_state(spec, sc, HF)
    n = spec.num_params
    assert parts.weights == 0
    assert parts.master_weights == pytest.approx(4 * n, rel=1e-4)
    assert parts.gradients == pytest.approx(4 * n, rel=1e-4)
    assert parts.optimizer_state == pytest.approx(8 * n, rel=1e-4)


def test_bf16_true_adamw_states_follow_the_parameter_dtype():
    spec = generic_spec(1_000_000_000)
    sc = parse_scenario({"params": spec.num_params, "method": "full", "precision": "bf16-true"})
    parts, _ = model_state(spec, sc, HF)
    assert parts.optimizer_state == pytest.approx(4 * spec.num_params, rel=1e-4)
    assert parts.gradients == pytest.approx(2 * spec.num_params, rel=1e-4)


@pytest.mark.parametrize(
    ("quantize", "bits"),
    [(Quantize.NF4, 4.5), (Quantize.FP4, 4.5), (Quantize.NF4_DQ, 4 + 8 / 64 + 32 / (64 * 256))],
    ids=["nf4", "fp4", "nf4-dq"],
)
def test_qlora_paper_storage_per_parameter(quantize, bits):
    """QLoRA paper (Dettmers et al. 2023) sec. 3: 4-bit weights plus 32/64 = 0.5 bit of fp32
    absmax per parameter; double quantization brings the constants to 8/64 + 32/(64*256) = 0.127 bit."""
    out, inp = 11008, 4096
    got = quantized_weight_bytes(out, inp, quantize) * 8 / (out * inp)
    assert got == pytest.approx(bits, abs=2e-4)  # + the 1 KiB code table of the DQ state


def test_int8_and_gptq_storage():
    assert quantized_weight_bytes(4096, 4096, Quantize.INT8) == 4096 * 4096 + 4 * 4096
    gptq = quantized_weight_bytes(4096, 4096, Quantize.GPTQ_INT4)
    groups = 4096 // 128
    assert gptq == 4096 * 4096 // 2 + 2 * groups * 4096 + groups * 4096 // 8 * 4 + 4 * 4096


def _t(*shape):
    return ParamTensor("w", shape, 1, "linear")


def test_bitsandbytes_8bit_adam_state_sizes():
    """bitsandbytes Optimizer2State: uint8 states + fp32 absmax per 256 (2.03125 B/param); tensors
    under 4096 elements keep fp32 states (8 B/param)."""
    big = optimizer_state_bytes(_t(4096, 4096), Optimizer.ADAMW_8BIT, 2)
    assert big.device_bytes == 2 * (4096 * 4096 + 4 * 4096 * 4096 // 256)
    assert big.device_bytes / (4096 * 4096) == 2.03125
    small = optimizer_state_bytes(_t(1000), Optimizer.ADAMW_8BIT, 2)
    assert small.device_bytes == 2 * 4096  # 2 x 4000 bytes, each rounded to 512 by the allocator


def test_paged_states_leave_the_torch_counters_above_1e5_elements():
    big = optimizer_state_bytes(_t(4096, 4096), Optimizer.PAGED_ADAMW_8BIT, 2)
    assert big.device_bytes == 0 and big.paged_bytes > 0
    small = optimizer_state_bytes(_t(256, 256), Optimizer.PAGED_ADAMW, 2)
    assert small.paged_bytes == 0 and small.device_bytes == 2 * 256 * 256 * 4


def test_torchao_4bit_adafactor_sgd_lion():
    n = 4096 * 4096
    assert optimizer_state_bytes(_t(4096, 4096), Optimizer.ADAMW_4BIT, 2).device_bytes == 2 * (n // 2 + 4 * n // 128)
    assert optimizer_state_bytes(_t(4096, 1024), Optimizer.ADAFACTOR, 2).device_bytes == 4 * (4096 + 1024)
    assert optimizer_state_bytes(_t(4096, 4096), Optimizer.SGD, 2).device_bytes == 0
    assert optimizer_state_bytes(_t(4096, 4096), Optimizer.SGD_MOMENTUM, 2).device_bytes == 2 * n
    # bitsandbytes' 32-bit Lion keeps its state in fp32 whatever the parameter dtype (estimate/state.py)
    assert optimizer_state_bytes(_t(4096, 4096), Optimizer.LION, 2).device_bytes == 4 * n


def test_lora_adapters_and_frozen_base():
    rm = resolve_model("meta-llama/Llama-2-7b-hf")
    sc = parse_scenario({"model": rm.id, "method": "lora", "lora_rank": 8, "lora_targets": ["q_proj", "v_proj"]})
    parts, adapters = model_state(rm.spec, sc, HF)
    # 32 layers x 2 targets x r (4096 + 4096) = 4,194,304 trainable parameters (PEFT prints this)
    assert parts.num_trainable == 4_194_304
    assert parts.adapters == 4 * 4_194_304  # PEFT keeps adapters in fp32
    assert parts.weights == pytest.approx(2 * rm.spec.num_params, rel=1e-4)


def test_qlora_quantizes_block_linears_only():
    rm = resolve_model("meta-llama/Llama-2-7b-hf")
    sc = parse_scenario({"model": rm.id, "method": "qlora", "framework": "torchtune"})
    parts, _ = model_state(rm.spec, sc, profile_for(Framework.TORCHTUNE))
    linear = sum(lin.weight_params for lin in rm.spec.block_linears) * 32
    assert parts.quantized_base == pytest.approx(linear * 4.127 / 8, rel=2e-3)
    rest = rm.spec.num_params - linear
    assert parts.weights == pytest.approx(2 * rest, rel=1e-3)


def test_adafactor_steps_lora_adapters_not_the_frozen_embedding():
    # transformers' Adafactor.step makes fp32 copies of one *trained* parameter at a time: under LoRA an adapter
    # tensor (or a modules_to_save copy), never the frozen 128,256 x 2,048 embedding, whose 4 fp32 copies (4,008 MiB)
    # the step was charged; `vramfit simulate` (Llama-3.2-1B LoRA, 128 tokens) peaks at 2.85 GiB in backward
    from vramfit import estimate

    lora = {"model": "meta-llama/Llama-3.2-1B", "method": "lora", "seq_len": 128, "optimizer": "adafactor"}
    r = estimate(lora)
    assert r.peak.phase == "backward-loss" and round(r.peak.allocated_bytes / 2**30, 2) == 2.85
    step = next(p for p in r.phases if p.phase == "optimizer-step")
    assert dict(step.breakdown)["temporaries"] < 64 * 2**20
    # a modules_to_save copy of the head is trained whole: its fp32 copies are the step's
    saved = estimate({**lora, "lora_targets": ["q_proj", "v_proj"], "modules_to_save": ["lm_head"]})
    step = next(p for p in saved.phases if p.phase == "optimizer-step")
    assert dict(step.breakdown)["temporaries"] >= 2 * 4 * 128_256 * 2048


def test_torchao_steps_a_modules_to_save_copy_whole_too():
    # torchao's per-parameter step (estimate/step_grads.py _largest_trained, shared with Adafactor): the head's trained
    # copy is the largest tensor it dequantizes, not the largest adapter
    from vramfit import estimate

    lora = {"model": "meta-llama/Llama-3.2-1B", "method": "lora", "seq_len": 128, "optimizer": "adamw-8bit-torchao",
            "lora_targets": ["q_proj", "v_proj"]}
    temp = [dict(next(p for p in estimate(sc).phases if p.phase == "optimizer-step").breakdown)["temporaries"]
            for sc in (lora, {**lora, "modules_to_save": ["lm_head"]})]
    assert temp[1] > 100 * temp[0] and temp[1] >= 2 * 4 * 128_256 * 2048
