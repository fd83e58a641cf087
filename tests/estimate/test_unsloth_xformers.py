"""Unsloth on a card without FlashAttention-2 (a T4, a V100): its xformers path copies k and v out to every query
head before the kernel when a gradient is needed, and xformers saves those copies (profile
``flash_fallback_repeats_kv``, estimate/attention.py ``falls_back_repeating_kv``)."""

from vramfit.estimate import estimate
from vramfit.estimate.card_facts import card_facts
from vramfit.estimate.step import compute
from vramfit.estimate.unsloth import replays_step
from vramfit.gpus import get_gpu
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario

TINY = "TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T"  # 22 layers, 32 query heads, 4 k/v heads, head_dim 64
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _sc(gpu, **keys):
    # Unsloth's TinyLlama notebook of 2024: QLoRA r32, fp16 on a T4, 2 x 4,096 packed tokens, no checkpointing
    return parse_scenario({"model": TINY, "framework": "unsloth", "framework_version": "unsloth-2024.5",
                           "method": "qlora", "quantize": "nf4-dq", "lora_rank": 32, "lora_alpha": 32,
                           "lora_targets": ALL, "precision": "fp16-true", "optimizer": "adamw-8bit",
                           "micro_batch_size": 2, "seq_len": 4096, "grad_accum": 4, "gradient_checkpointing": "none",
                           "attention": "flash", "gpu": gpu, **keys})


def _allocated(sc) -> int:
    return estimate(sc).peak.allocated_bytes


def test_every_layer_keeps_full_head_k_and_v_on_a_card_without_flash_attention():
    """Without checkpointing all 22 layers keep them: 2 (k, v) x 8,192 tokens x (32 - 4) more heads x 64 x 2 bytes
    each, 1,291,845,632 B above the same run on an A100, where flash-attn takes the grouped k and v."""
    extra = 22 * 2 * 8192 * (32 - 4) * 64 * 2
    assert _allocated(_sc("t4")) - _allocated(_sc("a100-80gb-sxm")) == extra == 1_291_845_632


def test_the_copies_are_the_saved_k_and_v_of_each_block():
    spec = resolve_model(TINY).spec
    saved = {g: dict(compute(spec, _sc(g), get_gpu(g)).acts.saved.items) for g in ("t4", "a100-80gb-sxm")}
    tokens, d = 8192, 64
    assert saved["t4"]["k"] == saved["t4"]["v"] == 2 * tokens * 32 * d
    assert saved["a100-80gb-sxm"]["k"] == saved["a100-80gb-sxm"]["v"] == 2 * tokens * 4 * d
    assert {k: v for k, v in saved["t4"].items() if k not in ("k", "v")} == \
        {k: v for k, v in saved["a100-80gb-sxm"].items() if k not in ("k", "v")}


def test_only_where_the_fallback_repeats_them():
    """No card named (the flash kernel), a model whose k/v heads are its query heads, and the transformers profile
    (whose flash-attn refuses a T4 instead) are unchanged."""
    assert _allocated(_sc(None)) == _allocated(_sc("a100-80gb-sxm"))
    mha = {"model": "meta-llama/Llama-2-7b-hf", "lora_targets": ALL}
    assert _allocated(_sc("t4", **mha)) == _allocated(_sc("a100-80gb-sxm", **mha))
    hf = {"framework": "hf", "framework_version": None, "precision": "bf16-true"}
    assert _allocated(_sc("t4", **hf)) == _allocated(_sc("a100-80gb-sxm", **hf))


def test_a_card_verdict_re_estimates_where_the_fallback_differs():
    """card_facts tells a T4 from an A100 for this run (each card's verdict uses its own figure), and two cards that
    both lack FlashAttention-2 share one estimate."""
    sc = _sc("t4")
    t4, v100, a100 = (card_facts(sc, get_gpu(g)) for g in ("t4", "v100-sxm2-16gb", "a100-80gb-sxm"))
    assert t4[-1] is True and a100[-1] is False and t4 != a100
    assert v100[-1] is True


def test_the_2024_12_step_replay_describes_flash_attention_only():
    """The 2024.12 allocation replay (estimate/unsloth.py step_events) is flash-attn's grouped dq, dk, dv: a T4 run is
    estimated without it."""
    spec = resolve_model("meta-llama/Llama-3.1-8B").spec
    keys = {"model": "meta-llama/Llama-3.1-8B", "framework_version": "unsloth-2024.12", "precision": "fp16-true",
            "gradient_checkpointing": "offload"}
    on = {g: _sc(g, **keys) for g in ("t4", "a100-80gb-sxm")}
    from vramfit.estimate.framework import scenario_profile

    assert replays_step(spec, on["a100-80gb-sxm"], scenario_profile(on["a100-80gb-sxm"]))
    assert not replays_step(spec, on["t4"], scenario_profile(on["t4"]))


def test_reserved_keeps_the_forward_high_water_mark_when_a_later_phase_peaks(monkeypatch):
    """Mistral-7B-v0.3 on a T4 (Unsloth's 2024 notebook, 2 x 2,048): the full-head k and v of the recomputed block put
    the allocated peak in the block backward, 20 MB above forward's, but reserved does not fall with it: forward
    reached its logits with the de-quantized weight's segment cached, and max_memory_reserved never falls."""
    import importlib

    from vramfit.estimate.allocator import round_allocation

    attention = importlib.import_module("vramfit.estimate.attention")
    keys = {"model": "mistralai/Mistral-7B-v0.3", "lora_rank": 16, "lora_alpha": 16, "micro_batch_size": 2,
            "seq_len": 2048, "gradient_checkpointing": "offload"}
    sc = _sc("t4", **keys)
    on = estimate(sc)
    monkeypatch.setattr(attention, "falls_back_repeating_kv", lambda *a, **k: False)
    off = estimate(sc)
    assert on.peak.phase == "backward-block" and off.peak.phase == "forward"
    assert on.peak.allocated_bytes > off.peak.allocated_bytes
    forward = dict(next(p for p in on.phases if p.phase == "forward").breakdown)
    r = compute(resolve_model("mistralai/Mistral-7B-v0.3").spec, sc, get_gpu("t4"))
    segment = round_allocation(r.dequant) - forward.get("temporaries", 0)
    assert off.peak.allocated_bytes == sum(forward.values()) and segment > 100 * 2**20  # a 14,336 x 4,096 weight
    assert off.peak.reserved_bytes - off.peak.allocated_bytes > segment  # the segment sits in forward's slack
    assert on.peak.reserved_bytes == off.peak.reserved_bytes  # and stays the high-water mark


def test_the_attention_backward_makes_full_head_k_and_v_gradients():
    """xformers returns the gradients of the k and v it was given (every head) before expand's backward sums them:
    TinyLlama at 8,192 tokens, dO, dq, dk and dv of 32 heads x 64 in fp16 plus the fp32 dq accumulator, 201,326,592 B,
    above the LoRA MLP's two (T, 5,632) tensors that set the A100's block working set."""
    from vramfit.estimate.block_extras import block_backward_transient
    from vramfit.estimate.framework import scenario_profile

    spec = resolve_model(TINY).spec
    t4, a100 = _sc("t4"), _sc("a100-80gb-sxm")
    T = 8192
    assert block_backward_transient(spec, t4, scenario_profile(t4)) == 2 * T * 64 * (2 * 32 + 2 * 32) + 4 * T * 32 * 64
    assert block_backward_transient(spec, a100, scenario_profile(a100)) == 2 * 2 * T * 5632


def test_a_model_type_unsloth_leaves_to_transformers_keeps_its_own_attention():
    """Unsloth runs its own attention (and so this fallback) for the model types its loader hands to FastLlamaModel
    and its subclasses; another grouped-query type goes through transformers' modeling code (FastModel): unchanged."""
    from vramfit.estimate.attention import falls_back_repeating_kv
    from vramfit.estimate.framework import scenario_profile

    sc = _sc("t4")
    profile = scenario_profile(sc)
    assert falls_back_repeating_kv(sc, profile, spec=resolve_model(TINY).spec)
    phi3 = resolve_model("microsoft/Phi-4-mini-instruct").spec  # model type phi3: 24 query heads, 8 k/v heads
    assert phi3.num_key_value_heads < phi3.num_attention_heads
    assert phi3.model_type not in profile.fallback_attention_model_types
    assert not falls_back_repeating_kv(sc, profile, spec=phi3)


def test_the_estimate_says_which_kernel_runs_on_the_card():
    notes = [a for a in estimate(_sc("t4")).assumptions if a.startswith("Attention: ")]
    assert notes == ["Attention: the Tesla T4 has no FlashAttention-2, so unsloth runs xformers with k and v copied "
                     "out to all 32 query heads (not 4), and those copies are saved for backward."]
    assert not [a for a in estimate(_sc("a100-80gb-sxm")).assumptions if a.startswith("Attention: ")]
