"""Model construction for real runs, on the CPU with the tiny config (the same code runs on CUDA)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from vramfit import estimate  # noqa: E402
from vramfit.errors import ScenarioError  # noqa: E402
from vramfit.measure.build import build_run, check_measurable, count_parameters, model_config  # noqa: E402
from vramfit.scenario import parse_scenario  # noqa: E402


def _build(sc: dict, weights=None):
    scenario = parse_scenario(sc)
    return scenario, build_run(scenario, model_config(scenario), "cpu", weights)


@pytest.mark.parametrize("keys", [
    {"method": "full"},
    {"method": "lora"},
    {"method": "lora", "lora_targets": "q_proj,v_proj", "lora_rank": 4},
    {"method": "qlora"},
    {"method": "full", "precision": "bf16-mixed"},
], ids=["full", "lora", "lora-qv-r4", "qlora", "full-mixed"])
def test_parameter_counts_match_the_estimator(tiny, keys):
    scenario, built = _build(tiny(**keys))
    est = estimate(scenario)
    adapters = built.num_trainable_params if scenario.method.value != "full" else 0
    assert built.num_params - adapters == est.model.num_params  # the estimator counts the base model
    assert built.num_trainable_params == est.model.num_trainable_params


def test_random_weights_are_initialised_not_garbage(tiny):
    _, built = _build(tiny(method="full"))
    for name, p in built.model.named_parameters():
        assert torch.isfinite(p).all(), name
    inv = built.causal_lm.model.rotary_emb.inv_freq
    assert inv[0].item() == pytest.approx(1.0)  # rebuilt by _init_weights after to_empty
    assert not any(p.is_meta for p in built.model.parameters())
    assert not any(b.is_meta for b in built.model.buffers())


def test_full_precision_dtypes(tiny):
    _, built = _build(tiny(method="full", precision="bf16-true"))
    assert {p.dtype for p in built.model.parameters()} == {torch.bfloat16}
    assert built.autocast_dtype is None
    _, mixed = _build(tiny(method="full", precision="bf16-mixed"))
    assert {p.dtype for p in mixed.model.parameters()} == {torch.float32}
    assert mixed.autocast_dtype is torch.bfloat16


def test_tied_embeddings_are_retied(tiny_config, tiny):
    cfg = json.loads(tiny_config.read_text())
    cfg["tie_word_embeddings"] = True
    tiny_config.write_text(json.dumps(cfg))
    _, built = _build(tiny(method="full"))
    lm = built.causal_lm
    assert lm.get_output_embeddings().weight is lm.get_input_embeddings().weight


def test_qlora_quantizes_block_linears_for_real(tiny):
    import bitsandbytes as bnb

    _, built = _build(tiny(method="qlora", quantize="nf4-dq"))
    lm = built.causal_lm
    linears4 = [m for m in lm.modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert len(linears4) == 2 * 7  # q, k, v, o, gate, up, down per layer
    for m in linears4:
        w = m.weight
        assert type(w).__name__ == "Params4bit" and w.bnb_quantized and w.dtype == torch.uint8
        assert w.quant_state.quant_type == "nf4" and w.quant_state.nested  # double quantization
    assert not isinstance(lm.get_output_embeddings(), bnb.nn.Linear4bit)
    # prepare_model_for_kbit_training casts every non-4-bit parameter to fp32
    others = [p for p in built.model.parameters() if type(p).__name__ != "Params4bit"]
    assert others and all(p.dtype == torch.float32 for p in others)


def test_dora_and_modules_to_save_are_built_as_the_estimator_counts_them(tiny):
    """The harness builds what the scenario names (it used to drop both keys and measure plain LoRA)."""
    scenario, built = _build(tiny(method="lora", dora=True, modules_to_save="embed_tokens,lm_head"))
    names = [n for n, p in built.model.named_parameters() if p.requires_grad]
    magnitudes = [n for n in names if "lora_magnitude_vector" in n]
    assert len(magnitudes) == 2 * 7  # one DoRA magnitude per adapted linear
    copies = [n for n in names if ".modules_to_save." in n]
    assert sorted(n.split(".modules_to_save.")[0].rsplit(".", 1)[-1] for n in copies) == ["embed_tokens", "lm_head"]
    vocab_hidden = 256 * 64
    est = estimate(scenario)
    assert built.num_trainable_params == est.model.num_trainable_params
    assert built.num_trainable_params > 2 * vocab_hidden  # both whole copies are trained
    assert any("use_dora" in a and "modules_to_save=embed_tokens,lm_head" in a for a in built.assumptions)


def test_gradient_checkpointing_is_enabled(tiny):
    _, built = _build(tiny(method="lora", gradient_checkpointing="full"))
    assert built.causal_lm.is_activation_checkpointing
    assert any("checkpointing" in a for a in built.assumptions)


def test_local_weights_are_loaded(tiny, tmp_path):
    scenario, built = _build(tiny(method="full"))
    weights = tmp_path / "weights"
    built.causal_lm.save_pretrained(weights)
    _, loaded = _build(tiny(method="lora"), weights=weights)
    src = built.causal_lm.model.layers[0].mlp.up_proj.weight
    dst = loaded.causal_lm.model.layers[0].mlp.up_proj.base_layer.weight
    assert torch.equal(src, dst)
    assert any("Weights loaded" in a for a in loaded.assumptions)


def test_missing_weights_directory_is_a_user_error(tiny, tmp_path):
    with pytest.raises(ScenarioError, match="weights"):
        _build(tiny(method="lora"), weights=tmp_path / "nope")


@pytest.mark.parametrize("keys,key", [
    ({"parallelism": "zero3", "num_gpus": 2}, "parallelism"),
    ({"method": "qlora", "quantize": "int8"}, "quantize"),
    ({"loss": "chunked"}, "loss"),
    ({"framework": "torchtune"}, "framework"),
    ({"method": "qlora", "num_gpus": 2, "parallelism": "fsdp"}, "parallelism"),
    ({"num_gpus": 2, "parallelism": "fsdp", "offload": "optimizer"}, "offload"),
    ({"num_gpus": 2, "parallelism": "fsdp-no-shard"}, "parallelism"),
    ({"compile": True}, "compile"),  # the harness runs eagerly: a compiled run's record would hold an eager one's
], ids=["zero3", "int8", "chunked-loss", "torchtune", "qlora-fsdp", "optimizer-offload", "fsdp-no-shard", "compile"])
def test_unmeasurable_values_name_the_key(tiny, keys, key):
    with pytest.raises(ScenarioError) as err:
        check_measurable(parse_scenario(tiny(**keys)))
    assert err.value.key == key


def test_count_parameters_counts_tied_weights_once():
    m = torch.nn.Module()
    m.a = torch.nn.Linear(4, 4, bias=False)
    m.b = torch.nn.Linear(4, 4, bias=False)
    m.b.weight = m.a.weight
    assert count_parameters(m) == (16, 16)


def test_adamw_4bit_needs_torchao(tiny):
    import importlib.util

    if importlib.util.find_spec("torchao") is not None:
        pytest.skip("torchao is installed")
    with pytest.raises(ScenarioError, match="torchao"):
        check_measurable(parse_scenario(tiny(optimizer="adamw-4bit")))


class _OlderTransformersModel:
    """A model of transformers < 5.24 (5.17 on the H200 of benchmarks/gpu_grid.py): gradient_checkpointing_enable only."""

    def __init__(self):
        self.calls = []

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None):
        self.calls.append(gradient_checkpointing_kwargs)


class _NewerTransformersModel(_OlderTransformersModel):
    def activation_checkpointing_enable(self, activation_checkpointing_kwargs=None, offload=False):
        self.calls.append(("activation", activation_checkpointing_kwargs, offload))


def test_checkpointing_on_transformers_without_activation_checkpointing_enable():
    from vramfit.sim.hf_calls import enable_hf_checkpointing

    old = _OlderTransformersModel()
    enable_hf_checkpointing(old)
    assert old.calls == [{"use_reentrant": False}]  # what 5.24's kwargs None resolves to
    with pytest.raises(ScenarioError) as err:
        enable_hf_checkpointing(_OlderTransformersModel(), offload=True)
    assert err.value.key == "gradient_checkpointing" and "5.24" in str(err.value)
    new = _NewerTransformersModel()
    enable_hf_checkpointing(new, offload=True)
    assert new.calls == [("activation", None, True)]


def test_a_model_without_sdpa_runs_eager_with_a_note(tmp_path):
    """Gemma-2 has no SDPA in transformers 5 (from_config raises ValueError): the harness builds it eager, as
    from_pretrained picks without an attn_implementation and as the simulator does; before, `vramfit measure
    --model google/gemma-2-2b` stopped at 'building the model failed'."""
    from vramfit.models import resolve_model

    cfg = dict(resolve_model("google/gemma-2-2b").config, num_hidden_layers=1, vocab_size=1024, intermediate_size=256,
               layer_types=["sliding_attention"])
    path = tmp_path / "gemma2.json"
    path.write_text(json.dumps(cfg))
    sc = parse_scenario({"model": str(path), "method": "lora", "seq_len": 16})
    built = build_run(sc, cfg, "cpu")
    assert built.causal_lm.config._attn_implementation == "eager"
    assert any("no SDPA attention" in a and "eager ran instead" in a for a in built.assumptions)
