"""torchtune 0.1's one-GPU QLoRA build and load (estimate/nf4_load.py): torchao 0.1's un-chunked to_nf4 on the GPU,
at build (one layer, deep-copied per layer) and again in load_state_dict, leaves its transients' segments reserved."""

from vramfit.estimate import estimate
from vramfit.estimate.allocator import round_allocation
from vramfit.estimate.framework import profile_for
from vramfit.estimate.nf4_load import _Replay, block_weights, load_floor, load_state, step_on_load
from vramfit.estimate.step import compute
from vramfit.models import resolve_model
from vramfit.scenario import Framework, parse_scenario

MODEL = "meta-llama/Llama-2-7b-hf"
SPEC = resolve_model(MODEL).spec
H, W = 4096, 11008
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# pytorch/torchtune@0914d5cfb docs/source/tutorials/qlora_finetune.rst: QLoRA "Peak memory reserved, model init"
# 9.13 GB and "..., training" 9.29 GB (GB = 1e9; torchtune/utils/memory.py divides by 1e9)
TUTORIAL_INIT_RESERVED = 9_130_000_000
TUTORIAL_TRAIN_RESERVED = 9_290_000_000


def _sc(version="torchtune-0.1", **keys):
    base = {"model": MODEL, "framework": "torchtune", "method": "qlora", "quantize": "nf4-dq", "lora_rank": 8,
            "lora_alpha": 16, "lora_targets": ALL, "micro_batch_size": 2, "seq_len": 512, "grad_accum": 16,
            "gradient_checkpointing": "full", "precision": "bf16-true", **keys}
    if version:
        base["framework_version"] = version
    return parse_scenario(base)


def _step(**keys):
    sc = _sc(**keys)
    return compute(SPEC, sc, None)


def test_only_torchtune_0_1_quantizes_on_the_gpu_at_load():
    assert profile_for(Framework.TORCHTUNE, "torchtune-0.1").nf4_load_on_gpu
    assert not profile_for(Framework.TORCHTUNE).nf4_load_on_gpu  # torchao >= 0.2 quantizes in 1 Mi chunks
    assert not profile_for(Framework.HF).nf4_load_on_gpu


def test_to_nf4_peaks_with_the_two_numel_by_16_bf16_tensors():
    """quantize_tensor_nearest's (value - nf4) and its .abs() (32 B per weight each) beside scaled_blocks (2 B),
    the kept quantization_factor storage and int8 scalers, and the second get_block_absmax's scalers."""
    n = H * W
    p = _Replay()
    kept = p.to_nf4(n)
    expected = sum(round_allocation(x) for x in (n // 32, n // 64, n // 32, 2 * n, 32 * n, 32 * n))
    assert p.a.stats.peak_allocated == expected  # 2,982,330,368 B for one MLP weight
    assert p.a.stats.allocated == sum(round_allocation(x) for x in (n // 32, n // 64, n // 2))
    assert len(kept) == 3


def test_only_lora_linears_are_nf4_in_torchtune_module_order():
    r = _step(lora_targets=["q_proj", "v_proj"])
    assert block_weights(SPEC, r.adapters) == (
        (H * H, True), (H * H, False), (H * H, True), (H * H, False),  # q, k, v, output_proj
        (H * W, False), (W * H, False), (H * W, False))  # w1 (gate), w2 (down), w3 (up)


def test_llama2_7b_load_leaves_what_the_tutorial_logged_after_model_init():
    """A consistency check of the mechanism, not a fit: 9.10 GB replayed against 9.13 GB logged."""
    a = load_state(_step())
    assert 9.05e9 < a.stats.reserved < 9.15e9
    assert abs(a.stats.reserved - TUTORIAL_INIT_RESERVED) / TUTORIAL_INIT_RESERVED < 0.01
    assert 4.0e9 < a.stats.allocated < 4.2e9  # the NF4 model (with torchao 0.1's whole quantization_factor)


def test_the_tutorial_step_fits_in_the_load_residue():
    r = _step()
    opened, _, _ = step_on_load(r)
    assert opened == 0  # bs 2 x 512: every step tensor splits a cached quantizer block
    res = estimate(_sc()).peak.reserved_bytes
    assert res >= load_floor(r)
    assert abs(res - TUTORIAL_TRAIN_RESERVED) / TUTORIAL_TRAIN_RESERVED < 0.02
    new = estimate(_sc(version=None)).peak.reserved_bytes  # torchtune 0.4: chunked torchao, no load residue
    assert res - new > 3 * 2**30


def test_the_load_term_grows_with_the_micro_batch_and_says_so():
    figures = [estimate(_sc(micro_batch_size=b, seq_len=2048)).peak.reserved_bytes for b in (1, 2, 4, 8)]
    assert figures == sorted(figures)
    notes = " ".join(estimate(_sc()).assumptions)
    assert "un-chunked to_nf4" in notes and "empty_cache" in notes
    # the 512-token step fits in the load's cached blocks: no longer batch up to it opens a segment
    assert "variable-length batches" not in notes
    assert "variable-length batches" in " ".join(estimate(_sc(micro_batch_size=4, seq_len=2048)).assumptions)


def test_no_load_term_off_the_one_gpu_nf4_path():
    assert load_floor(_step(method="lora", quantize="none")) == 0
    assert load_floor(_step(quantize="int8")) == 0
    assert load_floor(_step(num_gpus=2, parallelism="fsdp")) == 0


def test_torchtune_0_1_recipes_run_lora_dropout_and_foreach_adamw():
    """torchtune@c69fba18b lora_llama2_7b(lora_dropout=0.05) and configs' plain torch.optim.AdamW (foreach by
    default in torch 2.2); torchtune 0.4 LoRALinear(dropout=0.0) and `fused: True`."""
    old, new = profile_for(Framework.TORCHTUNE, "torchtune-0.1"), profile_for(Framework.TORCHTUNE)
    assert (old.lora_dropout_default, new.lora_dropout_default) == (0.05, 0.0)
    assert (old.torch_optimizer_impl.value, new.torch_optimizer_impl.value) == ("foreach", "fused")
    r = _step(method="lora", quantize="none", lora_targets=["q_proj", "v_proj"], gradient_checkpointing="none")
    # each of q and v keeps native_dropout's bool mask and its bf16 output: 3 B per input element
    assert r.saved.items["q_proj.lora0.dropout_mask"] == 2 * 512 * H
    assert r.saved.items["q_proj.lora0.dropout_out"] == 2 * 2 * 512 * H


def test_required_releases_the_load_segments_the_step_leaves_free_but_not_below_the_load():
    """The step at 2 x 512 tokens splits some of the quantizer's cached blocks and leaves 2.69 GiB of the load's
    segments wholly free throughout (what release_cached_blocks gives back on a full card); the build and load
    themselves hold 8.47 GiB of segments with a live block at their high point, so the required figure stays there
    (plus the small-pool tensors and the CUDA context) instead of dropping by the whole 2.69 GiB."""
    r = _step()
    _, _, released = step_on_load(r)
    assert released == 2_889_875_456  # 2.69 GiB
    assert load_state(r).stats.peak_required == 9_097_445_376  # 8.47 GiB, the load's high point
    est = estimate(_sc())
    assert est.peak.device_bytes - est.peak.required_bytes == 147_460_096  # 0.14 GiB: the load's high point bounds it
    assert est.peak.required_bytes > load_state(r).stats.peak_required
