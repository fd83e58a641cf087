"""Logits and cross-entropy per framework layout, on Llama 3.1 8B (V = 128256, h = 4096) with
T = 1024 tokens in bf16: TV = 131,334,144 logits elements."""

from dataclasses import replace

import pytest

from vramfit.estimate.framework import LossLayout, profile_for
from vramfit.estimate.loss import head_calls, loss_memory, vocab_rows
from vramfit.models import resolve_model
from vramfit.scenario import Framework, parse_scenario

LLAMA = resolve_model("meta-llama/Llama-3.1-8B").spec
TV = 1024 * 128256


def _loss(framework="hf", spec=LLAMA, **keys):
    sc = parse_scenario({"params": "1B", "method": "lora", "seq_len": 1024, "framework": framework, **keys})
    return loss_memory(spec, sc, profile_for(Framework(framework)))


def test_vocab_rows_from_lm_head_or_tied_embeddings():
    assert vocab_rows(LLAMA) == 128256
    gemma2 = resolve_model("google/gemma-2-9b").spec
    assert gemma2.lm_head_params == 0 and vocab_rows(gemma2) == 256000


def test_hf_upcasts_in_the_loss():
    m = _loss("hf")
    # saved: fp32 log_softmax; forward: bf16 logits + fp32 upcast + log_softmax; backward: + 2 fp32 grads
    assert (m.saved, m.forward_peak, m.backward_peak, m.held) == (4 * TV, 10 * TV, 12 * TV, 0)
    assert m.saved == 525_336_576


def test_torchtune_upcasts_in_the_model():
    m = _loss("torchtune")
    assert (m.saved, m.forward_peak, m.backward_peak) == (4 * TV, 8 * TV, 12 * TV)


def test_torchtune_01_keeps_the_shifted_fp32_logits_through_backward():
    # torchtune@c69fba18b recipes: `logits = logits[..., :-1, :].contiguous()`, transposed into CrossEntropyLoss,
    # never deleted; log_softmax over dim 1 copies the transpose contiguous (CUDA host_softmax)
    sc = parse_scenario({"params": "1B", "method": "lora", "seq_len": 1024, "framework": "torchtune",
                         "framework_version": "torchtune-0.1"})
    m = loss_memory(LLAMA, sc, profile_for(Framework.TORCHTUNE, "torchtune-0.1"))
    assert (m.saved, m.kept, m.forward_peak, m.backward_peak) == (4 * TV, 4 * TV, 12 * TV, 16 * TV)
    # torchtune 0.4 deletes them (PR #1046): nothing kept, 4 TV less at the loss backward
    assert _loss("torchtune").kept == 0 and _loss("torchtune").backward_peak == 12 * TV


def test_torchtune_01_loss_moves_the_estimate_by_the_kept_copy():
    from vramfit import estimate

    base = {"model": "meta-llama/Llama-2-7b-hf", "method": "lora", "micro_batch_size": 2, "seq_len": 512,
            "framework": "torchtune", "gradient_checkpointing": "full"}

    def logits_in_step(sc):
        phase = next(p for p in estimate(sc).phases if p.phase == "optimizer-step")
        return dict(phase.breakdown).get("logits_loss", 0)

    # the kept copy, 4 B x (2 x 512 tokens) x 32000, is still alive in torchtune 0.1's optimizer step
    assert logits_in_step({**base, "framework_version": "torchtune-0.1"}) == 4 * 1024 * 32000
    assert logits_in_step(base) == 0


def test_litgpt_keeps_its_chunked_logits_through_backward():
    m = _loss("litgpt")
    chunk = 128 * 128256  # lm_head_chunk_size=128 tokens
    # Fabric converts the returned chunks to fp32 (held), cross_entropy saves fp32 log_softmax; backward: the fp32
    # gradients of nll_loss and log_softmax of one chunk and its cast back to bf16
    assert (m.saved, m.forward_peak, m.backward_peak, m.held) == (8 * TV, 8 * TV, 8 * TV + 10 * chunk, 4 * TV)
    assert m.saved == 1_050_673_152


def test_litgpt_chunks_hold_the_whole_micro_batch():
    # x.split(128, dim=1): a chunk is micro_batch_size x 128 tokens
    one, four = _loss("litgpt"), _loss("litgpt", micro_batch_size=4)
    assert four.backward_peak - four.saved == 4 * (one.backward_peak - one.saved) == 4 * 10 * 128 * 128256


def test_litgpt_runs_its_head_once_per_128_token_chunk():
    sc = parse_scenario({"params": "1B", "method": "lora", "seq_len": 1034, "framework": "litgpt"})
    assert head_calls(sc, profile_for(Framework.LITGPT)) == 9  # ceil(1034 / 128)
    assert head_calls(sc, profile_for(Framework.HF)) == 1
    full = parse_scenario({"params": "1B", "method": "full", "seq_len": 1034, "framework": "litgpt",
                           "framework_version": "litgpt-2024"})
    assert head_calls(full, profile_for(Framework.LITGPT, "litgpt-2024")) == 1  # full.py: unchunked logits


def test_chunked_loss_over_eight_chunks():
    m = _loss("torchtune", loss="chunked")
    per = TV // 8
    assert (m.saved, m.forward_peak, m.backward_peak) == (4 * TV, 6 * TV + 4 * per, 4 * TV + 10 * per)


def test_fused_linear_cross_entropy_chunks():
    m = _loss("hf", loss="fused")
    # Liger: chunk = next_power_of_2(ceil(1024 / ceil(128256 / 4096) = 32)) = 32 tokens
    grad_in = 2 * 1024 * 4096
    assert (m.saved, m.forward_peak, m.backward_peak) == (grad_in, grad_in + 32 * 128256 * 10, grad_in)
    assert "chunks of 32 tokens" in m.detail


def test_fp32_logits_need_no_upcast():
    m = _loss("hf", precision="fp32")
    assert m.forward_peak == 4 * TV + 0 + 4 * TV


def test_final_logit_softcapping_keeps_the_tanh_output():
    capped = _loss("hf", spec=replace(LLAMA, final_logit_softcapping=30.0))
    assert capped.saved - _loss("hf").saved == 2 * TV
    assert capped.forward_peak - _loss("hf").forward_peak == 4 * TV
    assert "soft-capping" in capped.detail


def test_an_unknown_loss_layout_is_an_error_not_a_fallback():
    profile = replace(profile_for(Framework.HF), standard_loss="megatron-vocab-parallel")
    sc = parse_scenario({"params": "1B", "method": "lora"})
    with pytest.raises(ValueError, match="hf-upcast-in-loss"):
        loss_memory(LLAMA, sc, profile)
    used = {p.standard_loss for p in map(profile_for, Framework)}
    used |= {v for p in map(profile_for, Framework) for old in p.older_versions for k, v in old.changes
             if k == "standard_loss"}
    assert used == set(LossLayout)


def test_torchtune_01_compiles_the_model_not_the_loss():
    from vramfit.estimate.loss import compiles_loss

    # torchtune@0217d44c2 lora_finetune_single_device.py: compile: True is utils.wrap_compile(model) only;
    # v0.4.0 assigns training.compile_loss(self._loss_fn)
    keys = {"params": "1B", "method": "qlora", "quantize": "nf4", "seq_len": 1024, "framework": "torchtune",
            "compile": True}
    old = parse_scenario({**keys, "framework_version": "torchtune-0.1"})
    assert not compiles_loss(old, profile_for(Framework.TORCHTUNE, "torchtune-0.1"))
    assert compiles_loss(parse_scenario(keys), profile_for(Framework.TORCHTUNE))
    m = loss_memory(LLAMA, old, profile_for(Framework.TORCHTUNE, "torchtune-0.1"))
    assert m.backward_peak == 16 * TV  # the eager loop's loss, as without compile
