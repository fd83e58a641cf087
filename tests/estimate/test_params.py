"""The parameter inventory and LoRA adapters, on real catalog models."""

import pytest

from vramfit.errors import ScenarioError
from vramfit.estimate.params import adapter_tensors, base_tensors, resolve_adapters, valid_target_names
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario

LLAMA = resolve_model("meta-llama/Llama-3.1-8B").spec
NEOX = resolve_model("stabilityai/stablelm-base-alpha-3b").spec  # fused query_key_value, 16 layers


def _lora(targets, spec=LLAMA, fuse=False, rank=16):
    sc = parse_scenario({"params": "1B", "method": "lora", "lora_targets": targets, "lora_rank": rank})
    return resolve_adapters(spec, sc, fuse)


def test_base_tensors_count_every_parameter_once():
    tensors = base_tensors(LLAMA)
    assert sum(t.total for t in tensors) == LLAMA.num_params == 8_030_261_248
    by_name = {t.name: t for t in tensors}
    assert by_name["embed_tokens"].shape == (128256, 4096) and by_name["lm_head"].shape == (128256, 4096)
    assert by_name["q_proj"].shape == (4096, 4096) and by_name["q_proj"].count == 32
    assert by_name["block_norms"].count == 64  # two RMSNorms x 32 layers


def test_tied_embeddings_are_counted_once():
    gemma2 = resolve_model("google/gemma-2-9b").spec
    names = [t.name for t in base_tensors(gemma2)]
    assert "lm_head" not in names and sum(t.total for t in base_tensors(gemma2)) == gemma2.num_params


def test_all_linear_adapts_every_block_linear():
    adapters = _lora("all-linear")
    assert [a.target for a in adapters] == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    a, b = adapter_tensors(adapters, 16, 32)[:2]
    assert (a.shape, b.shape, a.count) == ((16, 4096), (4096, 16), 32)
    # rank 16: 16 x (in + out) per linear and layer
    total = sum(t.total for t in adapter_tensors(adapters, 16, 32))
    assert total == 32 * 16 * (2 * (4096 + 4096) + 2 * (4096 + 1024) + 2 * (4096 + 14336) + (14336 + 4096))
    assert total == 41_943_040


def test_llama_names_select_slices_of_a_fused_projection():
    split = _lora("q_proj,v_proj", spec=NEOX)
    assert [(a.target, a.out_features, a.slices) for a in split] == [("query_key_value", 4096, 1)] * 2
    fused = _lora("q_proj,v_proj", spec=NEOX, fuse=True)  # lit-gpt LoRAQKVLinear: one stacked A
    assert [(a.target, a.out_features, a.slices) for a in fused] == [("query_key_value", 8192, 2)]
    assert adapter_tensors(fused, 8, 16)[0].shape == (16, 4096)


def test_lm_head_and_embedding_adapters_exist_once():
    adapters = _lora("q_proj,lm_head,embed_tokens")
    head, emb = adapters[-2], adapters[-1]
    assert (head.target, head.in_features, head.out_features, head.per_layer) == ("lm_head", 4096, 128256, 0)
    assert (emb.target, emb.in_features, emb.out_features) == ("embed_tokens", 128256, 4096)
    assert adapter_tensors([head], 16, 32)[0].count == 1


def test_unknown_target_names_the_valid_ones():
    with pytest.raises(ScenarioError) as err:
        _lora("q_proj,query_key_value")
    assert err.value.key == "lora_targets" and "query_key_value" in str(err.value)
    assert "q_proj" in valid_target_names(NEOX) and "all-linear" in valid_target_names(LLAMA)


def test_full_finetuning_has_no_adapters():
    sc = parse_scenario({"params": "1B", "method": "full"})
    assert resolve_adapters(LLAMA, sc, False) == []
