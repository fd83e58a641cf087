"""transformers 4's per-layer RoPE caches (estimate/rope_v4.py): framework_version transformers-4.40 on the families
whose modelling then kept them."""

from vramfit import estimate
from vramfit.estimate.framework import scenario_profile
from vramfit.estimate.rope_v4 import rope_cache_v4_bytes
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario


def _sc(model, **keys):
    return parse_scenario({"model": model, "method": "lora", "seq_len": 2048, "framework": "hf", **keys})


def _bytes(model, **keys):
    sc = _sc(model, **keys)
    return rope_cache_v4_bytes(resolve_model(model).spec, sc, scenario_profile(sc))


def test_family_release_limits_come_from_the_config_reader():
    assert resolve_model("meta-llama/Llama-2-7b-hf").spec.rope_cache_v4_last == 40
    assert resolve_model("mistral-community/Mistral-7B-v0.2").spec.rope_cache_v4_last == 41
    assert resolve_model("Qwen/Qwen2.5-7B").spec.rope_cache_v4_last == 44
    assert resolve_model("google/gemma-2b").spec.rope_cache_v4_last == 0


def test_layers_times_cos_sin_times_max_positions_in_the_load_dtype():
    # Mistral-7B-v0.2: 32 layers x (cos, sin) x 32,768 positions x 128 x bf16 = 512 MiB
    assert _bytes("mistral-community/Mistral-7B-v0.2", framework_version="transformers-4.40") == 512 * 2**20
    # Llama-2-7B: 4,096 positions, fp32 weights under bf16-mixed (from_pretrained's torch_dtype fp32)
    assert _bytes("meta-llama/Llama-2-7b-hf", framework_version="transformers-4.40", precision="bf16-mixed") == 128 * 2**20
    # gone from transformers 4.41 (Llama), 4.42 (Mistral); Gemma never kept one; not in the newest release
    assert _bytes("meta-llama/Llama-2-7b-hf", framework_version="transformers-4.44") == 0
    assert _bytes("google/gemma-2b", framework_version="transformers-4.40") == 0
    assert _bytes("mistral-community/Mistral-7B-v0.2") == 0


def test_the_cache_is_persistent_allocated_memory():
    base = {"model": "mistral-community/Mistral-7B-v0.2", "method": "lora", "seq_len": 2048,
            "framework_version": "transformers-4.44"}
    a = estimate(base)
    b = estimate({**base, "framework_version": "transformers-4.40"})
    assert b.peak.allocated_bytes - a.peak.allocated_bytes == 512 * 2**20
    assert b.component("rope_cache") == 512 * 2**20


def test_fsdp_qlora_builds_its_quantized_model_without_a_dtype_so_its_caches_are_fp32():
    v = "transformers-4.40+peft-0.11+fsdp-qlora"
    # Answer.AI's QLoRA path (from_config, no torch_dtype): fp32 whatever the weights' bf16, 32 x 2 x 4,096 x 128 x 4 B
    assert _bytes("meta-llama/Llama-2-7b-hf", method="qlora", framework_version=v) == 128 * 2**20
    # its LoRA path loads with torch_dtype: the load dtype
    assert _bytes("meta-llama/Llama-2-7b-hf", framework_version=v) == 64 * 2**20
    # the version alone adds no cache (transformers-4.44 has none)
    assert _bytes("meta-llama/Llama-2-7b-hf", method="qlora", framework_version="transformers-4.44+fsdp-qlora") == 0


def test_mixtral_kept_its_caches_until_transformers_4_48():
    # transformers v4.47.1 models/mixtral/modeling_mixtral.py l. 186-201 and 299 still build a MixtralRotaryEmbedding with
    # cos/sin buffers in every attention layer; v4.48.1 builds one per model
    assert resolve_model("mistralai/Mixtral-8x7B-v0.1").spec.rope_cache_v4_last == 47
    # 32 layers x (cos, sin) x 32,768 positions x 128 x bf16 = 512 MiB under every v4 band up to v4.45 (transformers-4.44
    # is modelled at its newest release, v4.45, where Mistral's and Qwen2's caches are gone)
    assert _bytes("mistralai/Mixtral-8x7B-v0.1", framework_version="transformers-4.40") == 512 * 2**20
    assert _bytes("mistralai/Mixtral-8x7B-v0.1", framework_version="transformers-4.44") == 512 * 2**20
    assert _bytes("mistral-community/Mistral-7B-v0.2", framework_version="transformers-4.44") == 0
    assert _bytes("Qwen/Qwen2.5-7B", framework_version="transformers-4.44") == 0
    # transformers-4.47 (v4.46-v4.48) is modelled at v4.48: none left
    assert _bytes("mistralai/Mixtral-8x7B-v0.1", framework_version="transformers-4.47") == 0
    assert _bytes("mistralai/Mixtral-8x7B-v0.1") == 0
