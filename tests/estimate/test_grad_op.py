"""fsdp-grad-op (FSDP SHARD_GRAD_OP, FSDP2 reshard_after_forward=False): sharded parameters at rest, every unit's
gathered compute-dtype copy kept from its forward to its post-backward (estimate/grad_op.py, core.comm_buffers)."""

from __future__ import annotations

import pytest

from vramfit.estimate import estimate
from vramfit.estimate.core import comm_buffers, model_state
from vramfit.estimate.framework import scenario_profile
from vramfit.estimate.state import quantized_weight_bytes
from vramfit.models.catalog import resolve_model
from vramfit.scenario import parse_scenario

LLAMA = "meta-llama/Llama-3.1-8B"


def _sc(**kw) -> dict:
    return {"model": LLAMA, "method": "full", "num_gpus": 8, "seq_len": 2048, **kw}


def _phases(sc: dict) -> dict[str, int]:
    return {p.phase: p.allocated_bytes for p in estimate(sc).phases}


def _component(sc: dict, name: str) -> int:
    return next(c.bytes for c in estimate(sc).components if c.name == name)


def _gathered_model(spec, compute_bytes: int = 2) -> int:
    """Every block's and the root's unsharded bytes, from the catalog's parameter counts."""
    block = (sum((lin.weight_params + lin.bias_params) for lin in spec.block_linears) + spec.block_norm_params)
    root = spec.embedding_params + spec.lm_head_params + spec.final_norm_params
    return (spec.num_hidden_layers * block + root) * compute_bytes, block * compute_bytes


@pytest.mark.parametrize("framework,precision", [("torchtitan", "bf16-mixed"), ("hf", "bf16-mixed"), ("hf", "bf16-true")])
def test_every_unit_stays_gathered_in_the_compute_dtype(framework, precision):
    sc = parse_scenario(_sc(framework=framework, precision=precision, parallelism="fsdp-grad-op"))
    spec = resolve_model(LLAMA).spec
    profile = scenario_profile(sc)
    parts, _ = model_state(spec, sc, profile)
    gathered, block = _gathered_model(spec)
    # Llama-3.1-8B: 32 blocks of 218,112,000 params and a 1,050,677,248-param root, all in bf16 (never fp32)
    assert (gathered, block) == (16_060_522_496, 436_224_000)
    assert comm_buffers(spec, sc, profile, parts) == gathered + 2 * block


def test_the_stored_parameters_are_sharded_as_under_full_shard():
    """bf16-true: the at-rest copy is the 1/8 shard (it was counted whole before), the same as FULL_SHARD's."""
    grad_op = _component(_sc(framework="hf", precision="bf16-true", parallelism="fsdp-grad-op"), "weights")
    full = _component(_sc(framework="hf", precision="bf16-true", parallelism="fsdp"), "weights")
    assert grad_op == full == 2_007_565_312


@pytest.mark.parametrize("framework", ["torchtitan", "hf"])
def test_the_optimizer_step_sees_the_resharded_state_only(framework):
    """Post-backward reshards every unit (reshard_after_backward / _should_free_in_backward): the step holds what
    FULL_SHARD's holds."""
    grad_op = _phases(_sc(framework=framework, parallelism="fsdp-grad-op"))
    full = _phases(_sc(framework=framework, parallelism="fsdp"))
    assert grad_op["optimizer-step"] == full["optimizer-step"]


def test_the_start_of_backward_holds_the_whole_model_gathered():
    """torchtitan, 8 GPUs: the start of backward adds every block's and the root's bf16 copy, 14.96 GiB, beside the
    fp32 shards; grad-op now reads above full shard (it read 28.05 GiB, under fsdp's 29.61; 43.01 GiB while the
    unit gradients of backward's blocks were counted at the loss). torchtitan v0.2.2 passes the grouped k and v to SDPA:
    torchtitan-2024's repeat_kv copies add 32 layers x 2 x 3,072 x 2,048 tokens x 2 B (768 MiB)."""
    grad_op = estimate(_sc(framework="torchtitan", framework_version="torchtitan-0.2.2", parallelism="fsdp-grad-op"))
    full = estimate(_sc(framework="torchtitan", framework_version="torchtitan-0.2.2", parallelism="fsdp"))
    assert grad_op.peak.phase == "backward-loss"
    assert grad_op.peak.allocated_bytes == 44_506_437_632
    old = estimate(_sc(framework="torchtitan", parallelism="fsdp-grad-op", framework_version="torchtitan-2024"))
    assert old.peak.allocated_bytes - grad_op.peak.allocated_bytes == 32 * 2 * 3072 * 2048 * 2
    gathered, block = 16_060_522_496, 436_224_000  # test_every_unit_stays_gathered_in_the_compute_dtype
    # no unit's gradients nor reduce-scatter copy yet: a unit's post-backward makes them (grad_op.unit_grads_not_yet_made)
    assert dict(grad_op.peak.breakdown)["comm_buffers"] == gathered
    assert dict(grad_op.phases[[p.phase for p in grad_op.phases].index("backward-block")].breakdown)[
        "comm_buffers"] == gathered + 2 * block
    # FULL_SHARD's start of backward holds the bf16 root and torchtitan's last block (estimate/fsdp2.py, 2); all else
    # in the two peaks is the same
    root = 2 * 1_050_677_248
    assert grad_op.peak.allocated_bytes - full.peak.allocated_bytes == gathered - (root + block)


def test_qlora_keeps_the_gathered_frozen_quantized_base():
    """A frozen base is gathered and kept just the same: QLoRA keeps every block's 4-bit weights (and the bf16
    norms) until its post-backward. Only the packed weights are gathered (the absmax is ``quant_state``, not a
    parameter), and the fp32 embeddings and head the QLoRA recipe keeps are gathered in bf16: the Trainer's bf16
    sets FSDP's mixed precision (core._root_gathered_bytes)."""
    sc = parse_scenario(_sc(framework="hf", method="qlora", quantize="nf4", parallelism="fsdp-grad-op"))
    spec = resolve_model(LLAMA).spec
    profile = scenario_profile(sc)
    assert profile.qlora_unquantized_fp32  # prepare_model_for_kbit_training's fp32 casts, gathered in bf16 all the same
    parts, _ = model_state(spec, sc, profile)
    block = sum(lin.out_features * lin.in_features // 2 * lin.count
                + lin.bias_params * 2 for lin in spec.block_linears) + spec.block_norm_params * 2
    assert block < sum(quantized_weight_bytes(lin.out_features, lin.in_features, sc.quantize) * lin.count
                       for lin in spec.block_linears)  # the stored weights with their absmax
    root = (spec.embedding_params + spec.lm_head_params + spec.final_norm_params) * 2
    # no block-sized gradient buffers: a LoRA unit reduce-scatters its adapters' gradients only
    assert comm_buffers(spec, sc, profile, parts) == spec.num_hidden_layers * block + root
    phases = _phases(_sc(framework="hf", method="qlora", quantize="nf4", parallelism="fsdp-grad-op"))
    full = _phases(_sc(framework="hf", method="qlora", quantize="nf4", parallelism="fsdp"))
    assert phases["backward-loss"] > full["backward-loss"] + (spec.num_hidden_layers - 3) * block
