"""Checkpoint disk sizing shares the estimator's optimizer-state rule (estimate/state.py state_bytes_per_element)."""

import importlib

import pytest

from vramfit.estimate import estimate
from vramfit.plan.disk import checkpoint_bytes, trainable_bytes
from vramfit.scenario import Optimizer

state = importlib.import_module("vramfit.estimate.state")
L7 = "meta-llama/Llama-2-7b-hf"  # 6,738,415,616 parameters


@pytest.mark.parametrize(("optimizer", "param_bytes", "rate"), [
    (Optimizer.LION, 2, 4.0),  # bitsandbytes 32-bit Lion: fp32 state under bf16 weights
    (Optimizer.LION, 4, 4.0),
    (Optimizer.ADAMW, 2, 4.0),  # torch AdamW: m, v zeros_like(p)
    (Optimizer.PAGED_ADAMW, 2, 8.0),  # bitsandbytes 32-bit paged AdamW: fp32 m, v
    (Optimizer.SGD_MOMENTUM, 2, 2.0),
    (Optimizer.ADAMW_8BIT, 2, 2 + 2 * 4 / 256),  # uint8 m, v + fp32 absmax per 256
    (Optimizer.LION_8BIT, 2, 1 + 4 / 256),
    (Optimizer.ADAMW_4BIT, 2, 2 * (0.5 + 4 / 128)),  # torchao: two codes a byte + fp32 scale per 128
    (Optimizer.SGD, 2, 0.0),
])
def test_state_rate_per_element(optimizer, param_bytes, rate):
    assert state.state_bytes_per_element(optimizer, param_bytes) == rate


def _estimated_state(sc: dict) -> tuple[int, int]:
    r = estimate(sc)
    est = r.component("optimizer_state") + r.component("paged_optimizer_state")
    n = r.model.num_trainable_params
    copy, master = trainable_bytes(r.scenario)
    return est, checkpoint_bytes(r.scenario, r.model.num_params, n) - n * (copy + master)


@pytest.mark.parametrize("optimizer", ["lion", "adamw", "paged-adamw", "sgd-momentum"])
@pytest.mark.parametrize("precision", ["bf16-true", "bf16-mixed"])
def test_checkpoint_state_equals_the_estimated_state_on_one_gpu(optimizer, precision):
    est, disk = _estimated_state({"model": L7, "method": "full", "precision": precision, "optimizer": optimizer})
    assert disk == est  # Llama-2-7B's tensors are all multiples of 512 B: no allocator rounding between them


def test_lion_bf16_true_checkpoint_is_bf16_weights_and_fp32_state():
    n = 6_738_415_616
    r = estimate({"model": L7, "method": "full", "precision": "bf16-true", "optimizer": "lion"})
    assert checkpoint_bytes(r.scenario, n, n) == 2 * n + 4 * n  # was 2 n + 2 n (state in the parameter dtype)


def test_lora_checkpoint_state_in_the_adapters_fp32_dtype_under_bf16_true():
    # PEFT keeps the adapters fp32 (autocast_adapter_dtype), so AdamW's m, v are fp32 too: 8 B, not 4 B
    est, disk = _estimated_state({"model": L7, "method": "lora", "precision": "bf16-true", "optimizer": "adamw"})
    assert disk == est == 8 * estimate({"model": L7, "method": "lora"}).model.num_trainable_params


def test_deepspeed_bf16_true_checkpoint_has_the_fp32_master_and_fp32_state():
    r = estimate({"model": L7, "method": "full", "precision": "bf16-true", "parallelism": "zero2", "num_gpus": 2})
    n = r.model.num_params
    assert trainable_bytes(r.scenario) == (2, 4)
    assert checkpoint_bytes(r.scenario, n, n) == (2 + 4 + 8) * n  # 16-bit module, fp32 partition, fp32 m and v
    assert 2 * r.component("optimizer_state") == 8 * n  # the estimator: fp32 m and v, sharded over 2 GPUs


@pytest.mark.parametrize("optimizer", ["adamw-8bit", "lion-8bit", "adamw-4bit", "adamw-8bit-torchao"])
def test_quantized_states_agree_with_the_estimator_to_their_small_tensors(optimizer):
    est, disk = _estimated_state({"model": L7, "method": "full", "precision": "bf16-true", "optimizer": optimizer})
    # per tensor of Llama-2-7B's 291, the two differ by at most each state's 512 B allocator rounding and the
    # blocks' ceil (and torchao's 1 KiB qmap per state, which the rate spreads over a 4096 x 4096 matrix)
    assert abs(est - disk) < 291 * 2 * (512 + 1024)


def test_peak_disk_holds_one_checkpoint_more_while_a_save_rotates():
    """transformers Trainer._save_checkpoint writes checkpoint-N whole, then _rotate_checkpoints deletes the oldest:
    with save_total_limit k, k + 1 checkpoints are on disk during a save (helper-found: 145 GB stated for 242 GB)."""
    from vramfit.plan.disk import disk_needed
    from vramfit.scenario import parse_scenario

    sc = parse_scenario({"model": "meta-llama/Llama-3.1-8B", "method": "full", "precision": "bf16-mixed"})
    n = 8_030_261_248
    one, two, none = (disk_needed(sc, n, n, 100_000_000, k) for k in (1, 2, 0))
    fixed = one.base_model_bytes + one.dataset_raw_bytes + one.dataset_tokenized_bytes
    assert one.checkpoint_bytes == n * (4 + 8)  # fp32 weights + AdamW m, v
    assert one.total_bytes == fixed + 2 * one.checkpoint_bytes and one.checkpoints_on_disk == 2
    assert two.total_bytes == fixed + 3 * two.checkpoint_bytes and two.checkpoints_on_disk == 3
    # nothing saved: the final 16-bit model beside the base and the data
    assert none.total_bytes == fixed + 2 * n and none.checkpoints_on_disk == 0
