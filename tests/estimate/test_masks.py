"""The attention masks transformers builds (estimate/attention.py mask_count and window_masked,
block_extras.eager_mask, forward_extras.sliding_window_masks and sliding_window_recompute), per family, attention
implementation, checkpointing and transformers version. Bytes as each mechanism's source makes them; the simulator's
traces of the same tensors are in tests/sim/test_sim_masks.py."""

import importlib

from vramfit.estimate.framework import scenario_profile
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario

extras = importlib.import_module("vramfit.estimate.block_extras")
fwd = importlib.import_module("vramfit.estimate.forward_extras")
MIB = 1024**2


def _at(model: str, **keys):
    sc = parse_scenario({"model": model, "method": "lora", **keys})
    return resolve_model(model).spec, sc, scenario_profile(sc)


def eager(model: str, **keys) -> int:
    return extras.eager_mask(*_at(model, **keys))


def sliding(model: str, **keys) -> int:
    return fwd.sliding_window_masks(*_at(model, **keys))


def recompute(model: str, **keys) -> int:
    return fwd.sliding_window_recompute(*_at(model, **keys))


GEMMA2 = {"micro_batch_size": 2, "seq_len": 4096, "precision": "bf16-true"}


def test_gemma2_builds_a_causal_and_a_sliding_mask_even_when_sdpa_is_asked():
    # 2 x 4096 x 4096 scores per mask, bf16: 64 MiB; Gemma 2 has no SDPA path (soft-capping), so SDPA runs eager
    assert eager("google/gemma-2-9b", **GEMMA2, attention="eager") == 2 * 64 * MIB
    assert eager("google/gemma-2-9b", **GEMMA2, attention="sdpa") == 2 * 64 * MIB
    # -mixed: the embeddings, hence the masks, are fp32
    assert eager("google/gemma-2-9b", **{**GEMMA2, "precision": "bf16-mixed"}, attention="eager") == 2 * 128 * MIB
    # transformers 4.44-4.52: one model-level mask; the sliding one is made and dropped inside each sliding layer
    assert eager("google/gemma-2-9b", **GEMMA2, attention="eager", framework_version="transformers-4.44") == 64 * MIB


def test_one_mask_for_single_type_models_and_none_for_sdpa():
    assert eager("meta-llama/Llama-3.1-8B", **GEMMA2, attention="eager") == 64 * MIB
    assert eager("meta-llama/Llama-3.1-8B", **GEMMA2, attention="sdpa") == 0
    # BLOOM (ALiBi) has no SDPA path: eager with its one mask
    assert eager("bigscience/bloomz-7b1", **GEMMA2, attention="sdpa") == 64 * MIB
    # gpt-oss: sliding and full layers, no SDPA path
    assert eager("openai/gpt-oss-20b", **GEMMA2, attention="sdpa") == 2 * 64 * MIB


def test_a_sequence_as_long_as_the_window_is_masked():
    """Mistral 7B v0.1 (window 4096, 32 layers), one sequence: every layer's SDPA keeps a 4096 x 4096 bf16 bias."""
    one = {"micro_batch_size": 1, "precision": "bf16-true", "attention": "sdpa"}
    assert sliding("mistralai/Mistral-7B-v0.1", **one, seq_len=4096) == 32 * 32 * MIB
    assert sliding("mistralai/Mistral-7B-v0.1", **one, seq_len=4095) == 0
    # gpt-oss asked for SDPA runs eager: its masks are eager_mask's, no SDPA bias
    assert sliding("openai/gpt-oss-20b", **one, seq_len=4096) == 0


def test_checkpointed_layers_keep_the_boolean_mask_and_a_recompute_makes_its_own_bias():
    one = {"micro_batch_size": 1, "precision": "bf16-true", "attention": "sdpa", "seq_len": 4096,
           "gradient_checkpointing": "full"}
    assert sliding("mistralai/Mistral-7B-v0.1", **one) == 16 * MIB  # [1, 1, S, S] bool
    assert recompute("mistralai/Mistral-7B-v0.1", **one) == 32 * MIB  # one layer's bf16 bias
    # Gemma 3 4B (window 1024, 8 heads, 4 k/v heads, head_dim 256): the recomputed sliding layer also keeps k and v
    # at 8 heads: 2 x 4096 x 4 more heads x 256 x 2 bytes
    assert recompute("google/gemma-3-4b-pt", **one) == 32 * MIB + 2 * 4096 * 4 * 256 * 2
    assert recompute("mistralai/Mistral-7B-v0.1", **{**one, "gradient_checkpointing": "none"}) == 0


def test_before_masking_utils_one_float_mask_is_shared_by_every_layer():
    """transformers 4.44: _update_causal_mask bakes the window into one mask in the embeddings' dtype that every
    layer's SDPA gets (and every checkpointed layer holds); the recompute makes no new one."""
    old = {"micro_batch_size": 1, "precision": "bf16-true", "attention": "sdpa", "seq_len": 4096,
           "framework_version": "transformers-4.44"}
    assert sliding("mistralai/Mistral-7B-v0.1", **old) == 32 * MIB
    assert sliding("mistralai/Mistral-7B-v0.1", **old, gradient_checkpointing="full") == 32 * MIB
    assert recompute("mistralai/Mistral-7B-v0.1", **old, gradient_checkpointing="full") == 0


def _kv_heads_saved(model: str, seq: int = 1024, **keys) -> int:
    """Heads of the k the attention kernel keeps in one block (Llama 3.1 8B, Mistral 7B: 32 query, 8 k/v heads)."""
    block_saved = importlib.import_module("vramfit.estimate.activations").block_saved
    spec, sc, profile = _at(model, micro_batch_size=1, seq_len=seq, precision="bf16-true", **keys)
    return block_saved(spec, sc, profile, [], False).items["k"] // (2 * seq * spec.head_dim)


def test_transformers_before_4_54_repeats_k_and_v_for_sdpa_but_not_for_flash():
    llama = "meta-llama/Llama-3.1-8B"
    assert _kv_heads_saved(llama, attention="sdpa") == 8  # v5.24.0: enable_gqa, no mask
    assert _kv_heads_saved(llama, attention="sdpa", framework_version="transformers-4.53") == 32
    assert _kv_heads_saved(llama, attention="sdpa", framework_version="transformers-4.44") == 32
    assert _kv_heads_saved(llama, attention="flash", framework_version="transformers-4.44") == 8
    assert _kv_heads_saved(llama, attention="eager") == 32
    # Mistral 7B v0.1 at its window's length: the SDPA mask makes transformers 5 repeat k/v; flash-attn takes the
    # window itself and grouped k/v
    assert _kv_heads_saved("mistralai/Mistral-7B-v0.1", 4096, attention="sdpa") == 32
    assert _kv_heads_saved("mistralai/Mistral-7B-v0.1", 4096, attention="flash") == 8
    assert _kv_heads_saved("mistralai/Mistral-7B-v0.1", 4095, attention="sdpa") == 8


def test_old_transformers_repeats_k_and_v_on_every_layer_once():
    """Gemma 3 4B at transformers-4.53 (no enable_gqa): the walk repeats k/v on every layer, so the masked sliding
    layers add no second copy, in forward or in a recompute."""
    kv_repeat = importlib.import_module("vramfit.estimate.attention").sliding_layers_kv_repeat
    keys = {"micro_batch_size": 1, "precision": "bf16-true", "attention": "sdpa", "seq_len": 4096}
    assert kv_repeat(*_at("google/gemma-3-4b-pt", **keys)) == 29 * 2 * 4096 * 4 * 256 * 2
    assert kv_repeat(*_at("google/gemma-3-4b-pt", **keys, framework_version="transformers-4.53")) == 0
    assert recompute("google/gemma-3-4b-pt", **keys, gradient_checkpointing="full",
                     framework_version="transformers-4.53") == 32 * MIB


def test_uncheckpointed_transformers_masks_are_gone_when_the_output_layer_runs():
    """Not checkpointed, transformers' masks die with the base model's forward (the simulator's trace: freed in
    forward), so what stays saved outside the blocks holds none; litgpt's count is left as it was."""
    keys = {**GEMMA2, "attention": "eager"}
    hf = extras.model_extra_saved(*_at("google/gemma-2-9b", **keys), lm_head_trainable=False)
    assert hf == 4 * 2 * 4096 * 3584 + 4 * 2 * 4096  # the final RMSNorm's fp32 input and rstd only

    def lit(attention: str) -> int:
        at = _at("google/gemma-2-9b", **{**keys, "attention": attention}, framework="litgpt")
        return extras.model_extra_saved(*at, lm_head_trainable=False)

    assert lit("eager") - lit("sdpa") == 64 * MIB


def test_old_transformers_gives_qwen2_with_a_window_one_shared_float_mask(tmp_path):
    """Qwen2 with use_sliding_window has ``layer_types`` (12 of 24 layers slide from max_window_layers 12 on), but
    transformers before masking_utils (4.44/4.47: masks_per_layer_type False) builds one float mask in the
    embeddings' dtype for every layer: 32 MiB, not each sliding layer's bf16 bias (12 x 32 MiB, the v5 path it
    took before)."""
    import json

    from vramfit.models import spec_from_hf_config

    cfg = {**resolve_model("Qwen/Qwen2.5-0.5B").config, "use_sliding_window": True, "max_window_layers": 12,
           "sliding_window": 1024}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    spec = spec_from_hf_config(cfg)
    assert spec.layer_types.count("sliding_attention") == 12 == importlib.import_module(
        "vramfit.estimate.attention").sliding_layers(spec)
    keys = {"micro_batch_size": 1, "precision": "bf16-true", "attention": "sdpa", "seq_len": 4096}
    for version in ("transformers-4.44", "transformers-4.47"):
        sc = parse_scenario({"model": str(tmp_path / "config.json"), "method": "lora", **keys,
                             "framework_version": version})
        assert fwd.sliding_window_masks(spec, sc, scenario_profile(sc)) == 32 * MIB
    sc = parse_scenario({"model": str(tmp_path / "config.json"), "method": "lora", **keys})
    assert fwd.sliding_window_masks(spec, sc, scenario_profile(sc)) == 12 * 32 * MIB


def test_transformers_4_49_to_4_52_keep_one_model_mask_and_4_53_builds_one_per_layer_type():
    """masking_utils.py first ships in v4.53.0: Gemma 2 (a causal and a sliding mask from 4.53 on) has one model-level
    eager mask under transformers-4.52 (v4.49-v4.52), as under 4.44; the rest of 4.52 is 4.53's (foreach AdamW)."""
    keys = {**GEMMA2, "attention": "eager"}
    assert eager("google/gemma-2-9b", **keys, framework_version="transformers-4.52") == 64 * MIB
    assert eager("google/gemma-2-9b", **keys, framework_version="transformers-4.53") == 2 * 64 * MIB
    old, new = (scenario_profile(parse_scenario({"model": "meta-llama/Llama-3.1-8B", "framework_version": v}))
                for v in ("transformers-4.52", "transformers-4.53"))
    assert (old.masks_per_layer_type, new.masks_per_layer_type) == (False, True)
    assert old.torch_optimizer_impl == new.torch_optimizer_impl and old.standard_loss == new.standard_loss
    assert old.expands_kv_for_sdpa and new.expands_kv_for_sdpa


def test_gpt_oss_masks_count_in_forward_without_checkpointing():
    """gpt-oss's sink softmax keeps the scores' dtype (no fp32-softmax moment), so without checkpointing its two eager
    masks (causal, sliding: 64 MiB each) count in the forward phase only; the forward phase of gpt-oss-20b at
    1 x 4096 gains them (two 32 MiB masks), the backward phases do not. Gemma 2's count at its softmax moment."""
    keys = {**GEMMA2, "attention": "eager"}
    only = extras.forward_only_masks
    assert only(*_at("openai/gpt-oss-20b", **keys)) == 2 * 64 * MIB
    assert only(*_at("openai/gpt-oss-20b", **keys, gradient_checkpointing="full")) == 0
    assert only(*_at("google/gemma-2-9b", **keys)) == 0
    assert only(*_at("google/gemma-2-9b", **keys, framework="litgpt")) == 0
    from vramfit.estimate import estimate

    est = estimate({"model": "openai/gpt-oss-20b", "method": "lora", "seq_len": 4096, "micro_batch_size": 1,
                    "attention": "eager", "gradient_checkpointing": "none"})
    acts = {p.phase: dict(p.breakdown)["activations"] for p in est.phases if "activations" in dict(p.breakdown)}
    assert acts["forward"] == 77_181_239_296 + 2 * 32 * MIB
    assert acts["backward-loss"] == 77_181_239_296
