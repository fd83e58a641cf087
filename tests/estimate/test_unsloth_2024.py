"""Unsloth 2024.12, the release behind its published long-context tables (issue 13): Apple's Cut Cross-Entropy,
the first offloaded checkpointer, matmul_lora's out-of-place product, per-layer RoPE caches, and the step replayed
through the caching allocator for the reserved figure."""

import pytest

from vramfit.errors import ScenarioError
from vramfit.estimate import estimate
from vramfit.estimate.allocator import (
    plain_peak,
    reserved_for_tensors,
    round_allocation,
    rounded_sum,
    transient_reserved,
)
from vramfit.estimate.framework import LossLayout, profile_for
from vramfit.estimate.step import compute
from vramfit.estimate.unsloth import replays_step, rope_cache_bytes, step_events
from vramfit.models import resolve_model
from vramfit.plan.fit import max_seq_len_within
from vramfit.scenario import Framework, parse_scenario

MODEL = "meta-llama/Llama-3.1-8B"
SPEC = resolve_model(MODEL).spec
H, W, L, V = 4096, 14336, 32, 128256  # hidden, MLP width, layers, vocabulary
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _sc(seq_len=65536, version="unsloth-2024.12", **keys):
    base = {"model": MODEL, "framework": "unsloth", "method": "qlora", "quantize": "nf4-dq", "lora_rank": 32,
            "lora_targets": ALL, "attention": "flash", "optimizer": "adamw-8bit", "seq_len": seq_len,
            "gradient_checkpointing": "offload", **keys}
    if version:
        base["framework_version"] = version
    return parse_scenario(base)


def test_the_2024_release_is_a_version_of_the_unsloth_profile():
    now, old = profile_for(Framework.UNSLOTH), profile_for(Framework.UNSLOTH, "unsloth-2024.12")
    assert now.standard_loss is LossLayout.UNSLOTH_FUSED_CE and old.standard_loss is LossLayout.APPLE_CCE
    assert (now.offload_ckpt_block_tensors, old.offload_ckpt_block_tensors) == (5, 3)
    assert not now.rope_cache_per_layer and old.rope_cache_per_layer and old.lora_product_temporary
    assert old.version == "unsloth-2024.12"
    with pytest.raises(ScenarioError) as err:
        _sc(version="unsloth-2023")
    assert err.value.key == "framework_version" and "unsloth-2024.12" in str(err.value)


def test_each_layer_keeps_a_rope_cache_grown_in_steps_of_8192():
    old = profile_for(Framework.UNSLOTH, "unsloth-2024.12")
    per_row = L * 2 * 128 * 2  # layers x (cos, sin) x head_dim x bf16
    assert rope_cache_bytes(SPEC, _sc(65536), old) == 65536 * per_row == 2**30
    assert rope_cache_bytes(SPEC, _sc(40000), old) == 40960 * per_row  # regrown to a multiple of 8192
    assert rope_cache_bytes(SPEC, _sc(2972), old) == 32768 * per_row  # never below the 4 x 8192 it is built with
    assert rope_cache_bytes(SPEC, _sc(65536, None), profile_for(Framework.UNSLOTH)) == 0
    parts = dict(estimate(_sc(65536)).peak.breakdown)
    assert parts["rope_cache"] == 2**30 and "rope_cache" not in dict(estimate(_sc(65536, None)).peak.breakdown)


def test_cut_cross_entropy_keeps_no_logits_but_allocates_a_head_sized_gradient():
    T = 65536
    loss = compute(SPEC, _sc(T)).loss
    assert loss.saved == 2 * T * H + 12 * T + 4 * V  # e, fp32 lse, int64 valid positions, fp32 logit average
    assert loss.backward_peak - loss.saved == 2 * T * H + 2 * V * H  # de and dc = zeros_like(lm_head.weight)
    assert loss.forward_peak == loss.saved + 4 * T


def test_the_out_of_place_lora_product_doubles_the_mlp_backward_working_set():
    T = 65536
    assert compute(SPEC, _sc(T)).block_transient == 2 * 2 * T * W
    # in place (today's matmul_lora): the one (T, I) tensor is below flash attention's backward working set
    flash = 2 * T * 128 * (2 * 32 + 2 * 8) + 4 * T * 32 * 128
    assert 2 * T * W < flash == compute(SPEC, _sc(T, None)).block_transient


def test_offload_keeps_three_block_tensors_and_every_gradient_at_the_last_block():
    T = 65536
    step = compute(SPEC, _sc(T))
    assert step.acts.blocks == 3 * round_allocation(2 * T * H)  # recomputed output, dY, embedding output
    assert step.layer_grads == step.parts.gradients  # the block inputs are on the host: nothing shrinks
    assert compute(SPEC, _sc(T, None)).layer_grads == step.parts.gradients // L


def test_reserved_is_the_allocated_peak_plus_what_the_replayed_step_leaves_cached():
    """Under the release's PYTORCH_CUDA_ALLOC_CONF (expandable segments, power-of-two rounding): the replayed step's
    reserved figure less its high-water mark at 512-byte rounding, and no per-parameter segment rounding."""
    sc = _sc(131072)
    old = profile_for(Framework.UNSLOTH, "unsloth-2024.12")
    assert replays_step(SPEC, sc, old) and old.alloc_conf.expandable_segments
    st = compute(SPEC, sc)
    resident = st.parts.param_tensors  # loaded before accelerate's dispatch moves the first RoPE caches to the GPU
    events = step_events(SPEC, sc, st.parts.optimizer_state / st.parts.num_trainable, resident)
    n = sum(count for _, count in resident)
    assert sum(events[:n]) == sum(size * count for size, count in resident) and events[n: n + 2 * L] == [
        2 * 32768 * 128] * 2 * L
    peak, reserved = transient_reserved(events, old.alloc_conf)
    cached = (reserved - plain_peak(events)) // 2**21 * 2**21
    assert cached > 2**30  # blocks freed between the long-lived RoPE caches, gradients and states stay mapped
    # each tensor rounded up to a 1/128 or 1/32 step of its power of two (e.g. the 1,002 MiB embedding to 1,008 MiB)
    assert peak - plain_peak(events) == 28_672_000
    r = estimate(sc)
    assert r.peak.reserved_bytes == r.peak.allocated_bytes + cached
    assert reserved_for_tensors(st.parts.param_tensors) > rounded_sum(st.parts.param_tensors)  # not under expandable
    assert not replays_step(SPEC, _sc(131072, None), profile_for(Framework.UNSLOTH))
    assert profile_for(Framework.UNSLOTH).alloc_conf is None  # unsloth@015bdef sets no allocator configuration


def test_max_seq_len_within_holds_the_named_counter_to_the_budget():
    budget = 24 * 2**30
    s = max_seq_len_within(_sc(1024), budget, "reserved")
    peak = lambda n: estimate(_sc(n)).peak.reserved_bytes  # noqa: E731
    assert peak(s) <= budget < peak(s + 1)
    assert max_seq_len_within(_sc(1024), budget) < s  # the device figure adds the CUDA context
    with pytest.raises(ScenarioError) as err:
        max_seq_len_within(_sc(1024), budget, "nvidia-smi")
    assert err.value.key == "counter" and "reserved" in str(err.value)


def test_transformers_4_47_loss_keeps_a_shifted_fp32_copy_of_the_logits_from_two_sequences():
    """The HF + FA2 column ran transformers 4.47 (December 2024): ForCausalLMLoss upcast the logits and made a
    shifted .contiguous() fp32 copy (huggingface/transformers PR #35646 removed it) - but only from two sequences
    per micro-batch: logits[..., :-1, :] of a (1, T, V) tensor is already contiguous, so .contiguous() returns it
    (`vramfit simulate` with 4.47.1's ForCausalLMLoss patched in: no copy at micro-batch 1)."""
    base = {"model": MODEL, "method": "qlora", "quantize": "nf4-dq", "lora_rank": 32, "lora_targets": ALL,
            "attention": "flash", "seq_len": 4096, "gradient_checkpointing": "full"}
    old = {"framework_version": "transformers-4.47"}
    TV = 4096 * V
    for mb, copy in ((1, 0), (2, 4)):
        o = compute(SPEC, parse_scenario({**base, **old, "micro_batch_size": mb})).loss
        n = compute(SPEC, parse_scenario({**base, "micro_batch_size": mb})).loss
        assert o.forward_peak == (2 + 4 + copy + 4) * mb * TV and n.forward_peak == (2 + 4 + 4) * mb * TV
        assert o.saved == n.saved == 4 * mb * TV and o.backward_peak == n.backward_peak == 12 * mb * TV


def test_unsloth_2024_11_checkpoints_the_mllama_tower_as_transformers_4_46_did():
    """Unsloth 2024.11.9 on transformers 4.46.2 (UNSLOTH_VLM_NB-4): for_training turns on every module's
    gradient_checkpointing, and that release's MllamaVisionEncoder checkpoints its 40 layers, so the tower keeps one
    block input per layer (fp16, micro-batch 2 x 4 tiles x 1608 patches x 1280) instead of every layer's tensors."""
    import importlib

    vis = importlib.import_module("vramfit.estimate.vision")
    sc = parse_scenario({"model": "meta-llama/Llama-3.2-11B-Vision", "framework": "unsloth", "method": "qlora",
                         "quantize": "nf4-dq", "lora_targets": "all-linear", "freeze_vision": "no",
                         "precision": "fp16-true", "micro_batch_size": 2, "seq_len": 128, "images_per_sample": 1,
                         "gradient_checkpointing": "full"})
    spec = resolve_model(sc.model).spec
    old, now = profile_for(Framework.UNSLOTH, "unsloth-2024.11"), profile_for(Framework.UNSLOTH)
    assert old.vision_v4_checkpointing and not now.vision_v4_checkpointing
    blocks, _, recompute = vis.tower_kept(spec, sc, old, vis.vision_adapters(spec, sc, old))
    assert blocks == 40 * round_allocation(2 * 2 * 4 * 1608 * 1280) == 1_317_273_600
    full_blocks, _, none = vis.tower_kept(spec, sc, now, vis.vision_adapters(spec, sc, now))
    assert none == 0 and full_blocks == 40 * recompute  # v5.24.0 keeps every layer's saved tensors
    assert estimate(sc).peak.allocated_bytes > estimate(parse_scenario(
        {**sc.to_dict(), "framework_version": "unsloth-2024.11"})).peak.allocated_bytes + 12 * 2**30
