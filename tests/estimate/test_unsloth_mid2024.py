"""Unsloth's mid-2024 releases (unsloth-2024.8: 2024-07-18 to 2024.9.post4; unsloth-2024.5: before): its own Triton
cross-entropy over the whole model-dtype logits with the gradient written over them, expandable segments alone, and
(2024.5) RoPE caches of the whole context; and no whole-logits soft-capping tensors under any Unsloth loss."""

from dataclasses import replace

from vramfit.estimate import estimate
from vramfit.estimate.framework import LossLayout, profile_for
from vramfit.estimate.loss import logits_bytes_per_element, loss_memory
from vramfit.estimate.unsloth import rope_cache_bytes
from vramfit.models import resolve_model
from vramfit.scenario import Framework, parse_scenario

ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _sc(model="meta-llama/Llama-3.1-8B", version="unsloth-2024.8", **keys):
    base = {"model": model, "framework": "unsloth", "method": "qlora", "quantize": "nf4-dq", "lora_rank": 16,
            "lora_targets": ALL, "attention": "flash", "optimizer": "adamw-8bit", "seq_len": 2048, "micro_batch_size": 2,
            "precision": "fp16-true", "gradient_checkpointing": "offload", **keys}
    if version:
        base["framework_version"] = version
    return parse_scenario(base)


def test_the_mid_2024_releases_are_versions_of_the_unsloth_profile():
    p8, p5, p12 = (profile_for(Framework.UNSLOTH, v) for v in ("unsloth-2024.8", "unsloth-2024.5", "unsloth-2024.12"))
    assert p8.standard_loss is p5.standard_loss is LossLayout.UNSLOTH_TRITON_CE
    assert p12.standard_loss is LossLayout.APPLE_CCE
    # 2024.12's offloaded checkpointer, LoRA product and per-layer caches; its allocator setting without the divisions
    assert (p8.offload_ckpt_block_tensors, p8.lora_product_temporary, p8.rope_cache_per_layer) == (3, True, True)
    assert p8.alloc_conf.expandable_segments and p12.alloc_conf.expandable_segments
    assert p8.alloc_conf != p12.alloc_conf  # roundup_power2_divisions came in 2024.11 (ddf118a8fc)
    assert not p8.step_allocation_order and p12.step_allocation_order  # the replay is 2024.12's CCE and flash-attn
    assert p5.rope_cache_full_context and not p8.rope_cache_full_context


def test_the_triton_loss_keeps_the_logits_and_writes_their_gradient_over_them():
    spec = resolve_model("meta-llama/Llama-3.1-8B").spec
    sc = _sc()
    T, V = 2 * 2048, 128256
    assert logits_bytes_per_element(sc, profile_for(Framework.UNSLOTH, "unsloth-2024.8")) == 2
    m = loss_memory(spec, sc, profile_for(Framework.UNSLOTH, "unsloth-2024.8"))
    lse = 4 * T
    assert m.saved == 2 * T * V + lse  # the fp16 logits and the fp32 log-sum-exp, saved
    assert m.backward_peak == 2 * T * V + lse + 4 * T  # in place: no second (T, V) tensor
    # the kernel's own high point (128,256 rows: two 65,536 chunks, then reduced) is under the moment the forward
    # returns the fp16 logits and accelerate's convert_outputs_to_fp32 copies them to fp32 beside the saved ones
    assert 2 * T * V + 4 * T + 2 * 4 * T + lse < m.forward_peak == 2 * T * V + lse + 4 * T * V
    # the step peaks there: its loss component is those logits and their fp32 copy, three times the 16-bit logits
    # (Cut Cross-Entropy in 2024.12 returns none; its backward's lm_head-sized dc is about the 16-bit logits here)
    r8 = estimate(sc)
    assert r8.peak.phase == "forward"
    assert 0 <= r8.component("logits_loss") - 6 * T * V < 2**20


def test_no_unsloth_loss_makes_whole_logits_soft_capping_tensors():
    """Gemma 2's final_logit_softcapping: Unsloth soft-caps inside its kernels or chunks (estimate/loss.py
    _CAP_IN_KERNEL), so the figure is the one without soft-capping; the HF loss still makes its tanh tensors."""
    spec = resolve_model("google/gemma-2-9b").spec
    assert spec.final_logit_softcapping
    plain = replace(spec, final_logit_softcapping=None)
    for version in ("unsloth-2024.8", "unsloth-2024.12", None):
        sc = _sc("google/gemma-2-9b", version, attention="eager")
        prof = profile_for(Framework.UNSLOTH, version)
        assert loss_memory(spec, sc, prof) == loss_memory(plain, sc, prof), version
    hf = parse_scenario({"model": "google/gemma-2-9b", "method": "qlora", "seq_len": 2048, "micro_batch_size": 2})
    hf_prof = profile_for(Framework.HF)
    TV = 2 * 2048 * 256000
    assert loss_memory(spec, hf, hf_prof).forward_peak - loss_memory(plain, hf, hf_prof).forward_peak == 2 * 2 * TV


def test_2024_5_holds_a_rope_cache_of_the_whole_context_in_every_layer():
    spec = resolve_model("meta-llama/Llama-3.1-8B").spec  # 131,072 positions
    per_row = 32 * 2 * 128 * 2  # layers x (cos, sin) x head_dim x fp16
    assert rope_cache_bytes(spec, _sc(), profile_for(Framework.UNSLOTH, "unsloth-2024.8")) == 32768 * per_row
    assert rope_cache_bytes(spec, _sc(version="unsloth-2024.5"),
                            profile_for(Framework.UNSLOTH, "unsloth-2024.5")) == 131072 * per_row == 2 * 2**30
    llama3 = resolve_model("meta-llama/Meta-Llama-3-8B").spec  # 8,192 positions: both rules give 8,192 rows
    assert (rope_cache_bytes(llama3, _sc("meta-llama/Meta-Llama-3-8B"), profile_for(Framework.UNSLOTH, "unsloth-2024.8"))
            == rope_cache_bytes(llama3, _sc("meta-llama/Meta-Llama-3-8B", "unsloth-2024.5"),
                                profile_for(Framework.UNSLOTH, "unsloth-2024.5")) == 8192 * per_row)


def test_conversational_notebooks_whose_batches_reach_the_bound_are_met_with_the_fp32_copy():
    """Unsloth's 2024 T4 notebooks on conversational data (data/measured found.jsonl UNSLOTH_NB_24B-5..-8: Llama-3-8B,
    Mistral-7B-v0.3, Llama-3.2-3B, Qwen2.5-Coder-14B; their longest micro-batch reaches the 2,048 bound) peak within 5 %
    of the estimate once accelerate's fp32 copy of the returned logits is counted; without it they read -34.7 % to -4.3 %."""
    import json
    from pathlib import Path

    found = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "measured" / "found.jsonl"
    rows = {r["id"]: r for r in map(json.loads, found.read_text().splitlines()) if r["source_id"] == "UNSLOTH_NB_24B"}
    for i in (5, 6, 7, 8):
        row = rows[f"UNSLOTH_NB_24B-{i}"]
        ours = estimate(row["scenario"]).peak.reserved_bytes
        assert abs(ours / row["measured"]["bytes"] - 1) < 0.05, row["id"]
