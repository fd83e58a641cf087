"""framework_version (older releases' tensors) and kbit_prepare (QLoRA's fp32 upcast) as scenario choices."""

import pytest

from vramfit.errors import ScenarioError
from vramfit.estimate.framework import known_versions, scenario_profile
from vramfit.estimate.loss import loss_memory
from vramfit.estimate.step import compute
from vramfit.models import resolve_model
from vramfit.scenario import Framework, parse_scenario

LLAMA = resolve_model("meta-llama/Llama-3.1-8B").spec  # V = 128256, h = 4096, 32 layers, untied


def _sc(**keys):
    return parse_scenario({"model": "meta-llama/Llama-3.1-8B", "method": "lora", "seq_len": 1024, **keys})


def test_versions_are_validated_against_the_profile():
    assert known_versions(Framework.HF) == ["transformers-5.24+peft-0.21", "transformers-4.44", "transformers-4.40", "transformers-4.47", "transformers-4.52", "transformers-4.53",
                                            "peft-0.11", "peft-0.13", "torch-2.2", "bitsandbytes-0.43", "transformers-4.55",
                                            "axolotl-0.12", "deepspeed-0.8",
                                            "deepspeed-0.16", "deepspeed-0.18",
                                            "trl-0.29", "trl-0.21", "trl-1.16", "trl-0.14", "fsdp-qlora", "llamafactory-0.9", "llama-recipes-2023",
                                            "peft-method-comparison"]
    with pytest.raises(ScenarioError, match="valid values: transformers-5.24") as e:
        _sc(framework_version="transformers-4.30")
    assert e.value.key == "framework_version"
    with pytest.raises(ScenarioError, match="valid values: torchtune-0.4"):
        _sc(framework="torchtune", framework_version="peft-0.11")


def test_transformers_before_4_45_makes_fp32_logits_in_the_model():
    TV = 1024 * 128256
    new, old = _sc(), _sc(framework_version="transformers-4.44")
    a, b = (loss_memory(LLAMA, s, scenario_profile(s)) for s in (new, old))
    assert a.forward_peak == (2 + 4 + 4) * TV  # bf16 logits, fp32 upcast, log_softmax
    assert b.forward_peak == (4 + 4) * TV  # fp32 logits, log_softmax: logits[..., :-1, :] of one sequence is contiguous
    assert a.backward_peak == b.backward_peak
    two = _sc(framework_version="transformers-4.44", micro_batch_size=2)
    assert loss_memory(LLAMA, two, scenario_profile(two)).forward_peak == (4 + 4 + 4) * 2 * TV  # + the shifted copy


def test_peft_before_0_12_keeps_adapters_in_the_base_dtype():
    new, old = compute(LLAMA, _sc()).parts, compute(LLAMA, _sc(framework_version="peft-0.11")).parts
    assert new.adapters == 2 * old.adapters  # fp32 vs bf16, same tensors


def test_kbit_prepare_decides_the_fp32_upcast_and_gptq_is_never_cast():
    # embeddings + lm_head + 65 RMSNorm weights of 4096, fp32 vs bf16
    unquantized = 2 * 128256 * 4096 + 65 * 4096
    yes, no = (compute(LLAMA, _sc(method="qlora", kbit_prepare=k)).parts.weights for k in ("yes", "no"))
    assert yes - no == 2 * unquantized
    assert compute(LLAMA, _sc(method="qlora")).parts.weights == yes  # hf's recipe calls it
    assert compute(LLAMA, _sc(method="qlora", framework="torchtune")).parts.weights == no
    gptq = _sc(method="qlora", quantize="gptq-int4", kbit_prepare="yes")
    assert not scenario_profile(gptq).qlora_unquantized_fp32
    with pytest.raises(ScenarioError, match="valid values: auto, yes, no"):
        _sc(kbit_prepare="maybe")


def test_trl_0_21_casts_a_bf16_4bit_models_embeddings_and_head_back_to_bf16():
    # trl v0.7.6-v0.21.x SFTTrainer: prepare_model_for_kbit_training, then (args.bf16, unsharded 4-bit model)
    # peft_module_casting_to_bf16 puts embed_tokens and lm_head back to bf16; the 65 norm weights stay fp32
    trl = "transformers-4.47+trl-0.21"
    prepared = compute(LLAMA, _sc(method="qlora", kbit_prepare="yes")).parts.weights
    cast = compute(LLAMA, _sc(method="qlora", kbit_prepare="yes", framework_version=trl)).parts.weights
    assert prepared - cast == 2 * (2 * 128256 * 4096)  # two V x h tensors, 4 -> 2 bytes
    no = compute(LLAMA, _sc(method="qlora", kbit_prepare="no")).parts.weights
    assert cast - no == 2 * 65 * 4096  # only the norms are still fp32
    # no cast without args.bf16, and nothing to cast back without the fp32 upcast (a sharded QLoRA skips both)
    fp16 = dict(method="qlora", kbit_prepare="yes", precision="fp16-mixed")
    assert compute(LLAMA, _sc(**fp16, framework_version=trl)).parts.weights == compute(LLAMA, _sc(**fp16)).parts.weights
    assert compute(LLAMA, _sc(method="qlora", kbit_prepare="no", framework_version=trl)).parts.weights == no
    assert compute(LLAMA, _sc(method="lora", framework_version=trl)).parts.weights == compute(LLAMA, _sc()).parts.weights


def test_trl_1_16_trainers_neither_prepare_nor_keep_fp32_adapters():
    # trl 1.16.0 SFT/DPO/KTO/GRPO trainers: no prepare_model_for_kbit_training, trainable parameters cast to bf16
    trl = "trl-1.16"
    base = compute(LLAMA, _sc(method="qlora"))  # the HF profile's default: prepared, fp32 adapters
    t = compute(LLAMA, _sc(method="qlora", framework_version=trl))
    no = compute(LLAMA, _sc(method="qlora", kbit_prepare="no"))
    assert t.parts.weights == no.parts.weights < base.parts.weights  # embeddings, norms and head stay 16-bit
    assert 2 * t.parts.adapters == base.parts.adapters  # 2 bytes an adapter weight, not 4
    assert scenario_profile(_sc(method="qlora", framework_version=trl)).lora_casts_input is False
    # an explicit kbit_prepare still wins, and LoRA on a 16-bit base keeps peft's fp32 adapters
    assert compute(LLAMA, _sc(method="qlora", framework_version=trl, kbit_prepare="yes")).parts.weights == base.parts.weights
    assert compute(LLAMA, _sc(method="lora", framework_version=trl)).parts.adapters == compute(LLAMA, _sc()).parts.adapters


def test_gptq_training_path_keeps_the_layer_in_16_bits_for_backward():
    # q, o 4096^2; k, v 4096 x 1024; gate, up, down 4096 x 14336: 218,103,808 weights per block
    layer = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336
    gptq = compute(LLAMA, _sc(method="qlora", quantize="gptq-int4", gradient_checkpointing="full"))
    nf4 = compute(LLAMA, _sc(method="qlora", gradient_checkpointing="full", kbit_prepare="no"))
    assert gptq.acts.saved.items["gptq.dequantized_weights"] == 2 * layer
    assert "gptq.dequantized_weights" not in nf4.acts.saved.items
    # recomputed under checkpointing: the whole layer in 16 bits during its backward
    assert gptq.acts.recompute == gptq.acts.per_layer >= 2 * layer


def test_litgpt_2024_unties_the_head_and_computes_unchunked_logits():
    gemma = resolve_model("meta-llama/Llama-3.2-1B").spec  # tied V = 128256, h = 2048
    keys = {"model": "meta-llama/Llama-3.2-1B", "method": "full", "framework": "litgpt", "seq_len": 512}
    old, new = (compute(gemma, parse_scenario({**keys, **v})) for v in ({}, {"framework_version": "litgpt-2024"}))
    assert new.spec.lm_head_params == gemma.embedding_params and old.spec.lm_head_params == 0
    assert new.parts.num_trainable - old.parts.num_trainable == 128256 * 2048
    # the logits as Fabric returns them, fp32: saved logits + fp32 log_softmax, then the whole fp32 logits gradient
    # (SplitBackward's cat / SliceBackward's zeros; the 128-row chunks' gradients never on top: estimate/loss.py,
    # tests/estimate/test_litgpt_shift_copy.py)
    TV = 512 * 128256
    assert new.loss.detail.startswith("litgpt full.py") and new.loss.backward_peak == 8 * TV + 4 * TV
    fsdp = {**keys, "num_gpus": 4, "parallelism": "fsdp", "grad_accum": 2}
    a, b = (compute(gemma, parse_scenario({**fsdp, **v})) for v in ({}, {"framework_version": "litgpt-2024"}))
    # both releases accumulate under no_backward_sync (lit-gpt@8641822 finetune/full.py l. 168 already does)
    assert b.held_grads == 4 * b.parts.gradients and a.held_grads == 4 * a.parts.gradients


def test_older_releases_compose_with_plus():
    """A run on transformers 4.39 with peft 0.10 (the PEFT docs' FSDP/DeepSpeed runs) has both older behaviours."""
    both = compute(LLAMA, _sc(framework_version="transformers-4.44+peft-0.11"))
    assert both.profile.standard_loss is scenario_profile(_sc(framework_version="transformers-4.44")).standard_loss
    assert both.parts.adapters == compute(LLAMA, _sc(framework_version="peft-0.11")).parts.adapters
    assert both.loss == compute(LLAMA, _sc(framework_version="transformers-4.44")).loss
    with pytest.raises(ScenarioError, match="framework_version"):
        _sc(framework_version="transformers-4.44+peft-0.99")


def test_transformers_4_49_to_4_53_keep_the_new_loss_with_foreach_adamw():
    """transformers v4.49-v4.53 (the ms-swift and axolotl rows pinned there): ForCausalLMLoss without the shifted
    copy, but the Trainer's default optim is still adamw_torch (foreach), whose _foreach_sqrt copies every bf16 second
    moment during the step; the newest profile (adamw_torch_fused) has no such copy."""
    keys = {"method": "full", "precision": "bf16-true", "seq_len": 1024, "micro_batch_size": 2}
    new, old = _sc(**keys), _sc(**keys, framework_version="transformers-4.53")
    assert loss_memory(LLAMA, new, scenario_profile(new)) == loss_memory(LLAMA, old, scenario_profile(old))
    step = [{p.phase.value: dict(p.parts) for p in compute(LLAMA, s).phases}["optimizer-step"] for s in (new, old)]
    assert "temporaries" not in step[0]
    assert step[1]["temporaries"] == 2 * LLAMA.num_params == 16_060_522_496  # one bf16 copy of exp_avg_sq


def test_bitsandbytes_before_0_43_2_keeps_the_4bit_matmul_input():
    """bitsandbytes <= 0.43.1 MatMul4Bit `ctx.tensors = (A, B)` (removed by PR #1270, 0.43.2): without checkpointing
    every 4-bit linear's input stays: per token and layer the q/k/v input, the gate/up input and down_proj's (4096 +
    4096 + 14336 wide) in bf16. o_proj's is SDPA's output, saved anyway; adapters with dropout save their own input."""
    keys = {"method": "qlora", "seq_len": 1024, "lora_dropout": 0.1, "gradient_checkpointing": "none", "kbit_prepare": "no"}
    new, old = (compute(LLAMA, _sc(**keys, **x)).parts.activations for x in ({}, {"framework_version": "bitsandbytes-0.43"}))
    assert old - new == 32 * 1024 * 2 * (4096 + 4096 + 14336) == 1_476_395_008


def _notes(**keys):
    from vramfit import estimate

    return [n for n in estimate(_sc(**keys)).assumptions if "ignored" in n or "casts nothing" in n]


def test_a_choice_with_nothing_to_act_on_is_said_not_dropped():
    """kbit_prepare, use_reentrant, quantize_experts and quantize_vision set where the run gives them no effect: the
    estimate says so (their contract in vramfit/choices.py), and the bytes are those of auto."""
    from vramfit import estimate

    assert _notes(kbit_prepare="yes") == ["kbit_prepare=yes is ignored: only a quantized base (method qlora) is "
                                          "prepared for k-bit training, and this run is lora."]
    assert estimate(_sc(kbit_prepare="yes")).peak.allocated_bytes == estimate(_sc()).peak.allocated_bytes
    assert _notes(use_reentrant="no", gradient_checkpointing="none") == [
        "use_reentrant=no is ignored: gradient checkpointing is off."]
    assert _notes(method="qlora", quantize_experts="yes", quantize_vision="no") == [
        "quantize_experts=yes is ignored: the model has no experts.",
        "quantize_vision=no is ignored: the model has no vision tower."]
    mixtral = {"model": "mistralai/Mixtral-8x7B-v0.1", "method": "lora", "quantize_experts": "no"}
    assert [n for n in estimate(mixtral).assumptions if "ignored" in n] == [
        "quantize_experts=no is ignored: this run is lora, not qlora."]
    gptq = _notes(method="qlora", quantize="gptq-int4", kbit_prepare="yes")
    assert len(gptq) == 1 and gptq[0].startswith("kbit_prepare=yes casts nothing here")
    # where the choice acts, no such note
    assert _notes(method="qlora", kbit_prepare="no") == []
    assert _notes(use_reentrant="yes", gradient_checkpointing="full") == []


def test_images_on_a_text_model_are_said_to_be_ignored():
    from vramfit import estimate

    got = estimate(_sc(images_per_sample=256, image_height=16384, image_width=16384))
    assert estimate(_sc()).peak.device_bytes == got.peak.device_bytes
    assert [n for n in got.assumptions if n.startswith("images_per_sample")] == [
        "images_per_sample is ignored: the model has no vision tower, so its sequences hold text tokens only."]

    video = estimate(_sc(frames_per_sample=3))  # video frames on it are ignored too, and said so
    assert video.peak.device_bytes == estimate(_sc()).peak.device_bytes
    assert [n for n in video.assumptions if n.startswith("frames_per_sample")] == [
        "frames_per_sample is ignored: the model has no vision tower, so its sequences hold text tokens only."]
    from vramfit.web.translate import untranslated

    frozen = estimate(_sc(freeze_vision="no"))  # was dropped without a word (a review)
    said = [n for n in frozen.assumptions if n.startswith("freeze_vision")]
    assert said == ["freeze_vision=no is ignored: the model has no vision tower."] and untranslated(said) == []
    assert frozen.peak.device_bytes == estimate(_sc()).peak.device_bytes


def test_a_release_with_nothing_on_the_run_s_path_is_said():
    """framework_version parts whose release changes none of this run's figures (vramfit.estimate._version_note):
    unsloth-2024.11 models its Llama 3.2 Vision tower only, trl-0.21 casts a 4-bit model's embeddings back (no 4-bit
    base here), peft-0.11's bf16 adapters do not exist under full fine-tuning; transformers-4.44's do act."""
    from vramfit import estimate

    def said(sc):
        return [a for a in estimate(sc).assumptions if a.startswith("framework_version")]

    text = {"model": "meta-llama/Llama-3.1-8B", "method": "qlora", "framework": "unsloth",
            "gradient_checkpointing": "full"}
    assert said({**text, "framework_version": "unsloth-2024.11"}) == [
        "framework_version unsloth-2024.11: what this release does differently is not on this run's path (the figures "
        "are the same without it)."]
    assert said({**text, "framework_version": "unsloth-2024.12"}) == []
    assert said({"model": "meta-llama/Llama-3.1-8B", "method": "lora", "framework_version": "trl-0.21"})
    full = said({"model": "meta-llama/Llama-3.1-8B", "method": "full", "framework_version": "transformers-4.44+peft-0.11"})
    assert len(full) == 1 and full[0].startswith("framework_version peft-0.11: what this release")
    # the framework's own default release is what runs without a version: never inert
    assert said({"model": "meta-llama/Llama-3.1-8B", "method": "lora", "framework": "torchtune",
                 "framework_version": "torchtune-0.4"}) == []
