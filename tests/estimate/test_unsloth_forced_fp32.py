"""Unsloth's forced-float32 mode for the model types on its FORCE_FLOAT32 list asked for in fp16
(FrameworkProfile.fp16_forced_fp32, unslothai/unsloth-zoo@ce232d6c model_lists.py, unsloth@015bdef loader.py).
Gemma 3 (temporary_patches/gemma.py): the residual stream and the MLP's gate/act/up products are fp32, the norms'
outputs and the down projection's input fp16. Qwen3-MoE (qwen3_moe_float32.py): the stream and q, k, v and the
attention output fp32, the experts fp16. gpt-oss (gpt_oss.py): the stream and the experts' SwiGLU products fp32."""

from __future__ import annotations

from vramfit.estimate.activations import block_saved, dtypes_for
from vramfit.estimate.framework import profile_for
from vramfit.models.catalog import resolve_model
from vramfit.scenario import Framework, parse_scenario

T = 512
GEMMA3 = resolve_model("google/gemma-3-4b-it").spec  # model_type gemma3_text: h 2560, I 10240
QWEN3_MOE = resolve_model("Qwen/Qwen3-30B-A3B").spec  # qwen3_moe: h 2048, 32 q heads and 4 kv heads of 128
GPT_OSS = resolve_model("openai/gpt-oss-20b").spec  # gpt_oss
LLAMA = resolve_model("meta-llama/Llama-3.2-1B").spec
UNSLOTH = profile_for(Framework.UNSLOTH)


def _sc(model: str, precision: str, framework: str = "unsloth", version: str | None = None):
    keys = {"model": model, "method": "full", "seq_len": T, "precision": precision, "framework": framework}
    if version:
        keys["framework_version"] = version
    return parse_scenario(keys)


def _items(spec, sc, profile=UNSLOTH):
    return block_saved(spec, sc, profile, [], False).items


def test_gemma3_in_fp16_keeps_an_fp32_residual_stream_and_fp32_mlp_products():
    h, width = GEMMA3.hidden_size, GEMMA3.intermediate_size
    items = _items(GEMMA3, _sc("google/gemma-3-4b-it", "fp16-true"))
    assert items["block_in"] == 4 * T * h  # Gemma3TextScaledWordEmbedding returns fp32; fp32 + fp16 adds to fp32
    assert items["resid_mid"] == 4 * T * h
    assert items["mlp.gate_out"] == 4 * T * width  # gate_proj_out.to(torch.float32), saved by act_fn
    assert items["mlp.act_out"] == 4 * T * width
    assert items["mlp.up_out"] == 4 * T * width
    assert items["mlp_in"] == 2 * T * h  # Gemma3RMSNorm returns fp16
    assert items["mlp_mid"] == 2 * T * width  # intermediate_fp32.to(torch.float16) into down_proj
    dt = dtypes_for(_sc("google/gemma-3-4b-it", "fp16-true"), UNSLOTH, GEMMA3)
    assert (dt.residual, dt.norm_out, dt.mlp, dt.autocast) == (4, 2, 4, False)


def test_bf16_and_other_families_and_frameworks_keep_the_plain_layout():
    h, width = GEMMA3.hidden_size, GEMMA3.intermediate_size
    bf16 = _items(GEMMA3, _sc("google/gemma-3-4b-it", "bf16-true"))
    assert (bf16["block_in"], bf16["mlp.gate_out"]) == (2 * T * h, 2 * T * width)
    llama = _items(LLAMA, _sc("meta-llama/Llama-3.2-1B", "fp16-true"))
    assert llama["block_in"] == 2 * T * LLAMA.hidden_size
    assert llama["mlp.gate_out"] == 2 * T * LLAMA.intermediate_size
    hf = profile_for(Framework.HF)
    assert _items(GEMMA3, _sc("google/gemma-3-4b-it", "fp16-true", "hf"), hf)["mlp.gate_out"] == 2 * T * width


def test_releases_before_gemma3_do_not_force_fp32():
    old = profile_for(Framework.UNSLOTH, "unsloth-2024.12")
    assert old.fp16_forced_fp32 == ()
    items = _items(GEMMA3, _sc("google/gemma-3-4b-it", "fp16-true", version="unsloth-2024.12"), old)
    assert items["block_in"] == 2 * T * GEMMA3.hidden_size


def test_the_layout_raises_a_long_gemma3_fp16_estimate_by_its_activations():
    from vramfit.estimate import estimate

    keys = {"model": "google/gemma-3-4b-it", "method": "qlora", "quantize": "nf4-dq", "seq_len": 2048,
            "framework": "unsloth", "gradient_checkpointing": "offload"}
    fp16, bf16 = (estimate(parse_scenario({**keys, "precision": p})) for p in ("fp16-true", "bf16-true"))
    # the training peak's phase (backward-block): in fp16 the load's cast (estimate/cast_load.py) is the overall peak
    acts = {r: dict(next(p.breakdown for p in r.phases if p.phase == "backward-block"))["activations"]
            for r in (fp16, bf16)}
    tokens, h, width = 2048, GEMMA3.hidden_size, GEMMA3.intermediate_size
    # the recomputed block: block_in and resid_mid 2 bytes wider, gate_out and up_out too (LoRA_MLP recomputes
    # act); the offloaded checkpointer's GPU tensors are residual-sized (offload_ckpt_block_tensors)
    block = 2 * 2 * tokens * h + 2 * 2 * tokens * width
    assert acts[fp16] - acts[bf16] == block + UNSLOTH.offload_ckpt_block_tensors * 2 * tokens * h


def test_the_list_is_unsloths_force_float32_at_the_pinned_commits():
    # unsloth-zoo@ce232d6c model_lists.py FORCE_FLOAT32 = ["gemma3,", "gemma3text", "gemma3n", "gemma4", "gemma4text",
    # "glm4_moe", "glm4_moe_lite", "gpt_oss", "qwen3_5", "qwen3_moe"], as the config model types the loader's
    # substring / underscore-free match catches
    assert [t for t, _ in UNSLOTH.fp16_forced_fp32] == [
        "gemma3", "gemma3_text", "qwen3_moe", "gpt_oss", "gemma3n", "gemma3n_text", "gemma4", "gemma4_text",
        "glm4_moe", "glm4_moe_lite", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"]
    catalog = {GEMMA3.model_type, QWEN3_MOE.model_type, GPT_OSS.model_type}
    assert catalog == {"gemma3_text", "qwen3_moe", "gpt_oss"}
    assert catalog <= {t for t, _ in UNSLOTH.fp16_forced_fp32}


def test_qwen3_moe_in_fp16_keeps_an_fp32_stream_and_fp32_attention_but_fp16_experts():
    sc = _sc("Qwen/Qwen3-30B-A3B", "fp16-true")
    dt = dtypes_for(sc, UNSLOTH, QWEN3_MOE)
    assert (dt.residual, dt.norm_out, dt.mlp, dt.attn, dt.autocast) == (4, 2, 2, 4, False)
    items = _items(QWEN3_MOE, sc)
    h = QWEN3_MOE.hidden_size
    q_el, kv_el = T * 32 * 128, T * 4 * 128
    assert items["block_in"] == 4 * T * h  # residual = hidden_states.to(torch.float32)
    assert items["attn_in"] == 2 * T * h  # Qwen3MoeRMSNorm returns fp16
    assert (items["q"], items["k"], items["v"]) == (4 * q_el, 4 * kv_el, 4 * kv_el)  # .to(torch.float32) before SDPA
    assert items["attn.out"] == 4 * q_el  # SDPA in fp32 keeps its output ...
    assert items["attn_out"] == 2 * q_el  # ... and o_proj its fp16 cast
    bf16 = _items(QWEN3_MOE, _sc("Qwen/Qwen3-30B-A3B", "bf16-true"))
    assert (bf16["block_in"], bf16["q"], bf16["attn.out"]) == (2 * T * h, 2 * q_el, 2 * q_el)


def test_gpt_oss_in_fp16_keeps_an_fp32_stream_and_fp32_mlp_products():
    dt = dtypes_for(_sc("openai/gpt-oss-20b", "fp16-true"), UNSLOTH, GPT_OSS)
    assert (dt.residual, dt.norm_out, dt.mlp, dt.attn, dt.autocast) == (4, 2, 4, 2, False)
    hf = dtypes_for(_sc("openai/gpt-oss-20b", "fp16-true", "hf"), profile_for(Framework.HF), GPT_OSS)
    assert (hf.residual, hf.mlp) == (2, 2)
