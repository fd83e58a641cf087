"""Per-rank memory under tensor/pipeline/context parallelism: published formulas and figures reproduced.

- Korthikanti et al. 2022 (arXiv:2205.05198) eq. 5: with 1F1B the first stage holds ``L/p`` layers for ``p``
  micro-batches in flight, i.e. ``L`` layers' worth whatever ``p``; interleaved: times ``1 + (p-1)/(p m)``;
- Rajbhandari et al. 2020, ZeRO (arXiv:1910.02054) Table 1: 7.5B parameters, mixed-precision Adam
  (2 + 2 + K = 16 bytes per parameter), 64 devices, P_os+g+p: 1.88 GB per device;
- torchtitan's tensor-parallel layout (sequence parallel on): block tensors derived by hand below.
"""

import pytest

from vramfit import estimate
from vramfit.errors import ScenarioError
from vramfit.scenario import parse_scenario

TITAN = {"method": "full", "framework": "torchtitan", "parallelism": "fsdp"}


def _est(**kw):
    return estimate({**TITAN, **kw})


@pytest.mark.parametrize("keys,key,words", [
    ({"model": "meta-llama/Llama-3.1-70B", "num_gpus": 16, "tensor_parallel": 16}, "tensor_parallel", "64 attention and 8"),
    ({"params": "7B", "num_gpus": 12, "tensor_parallel": 8}, "num_gpus", "multiple of tensor_parallel"),
    ({"params": "7B", "num_gpus": 8, "pipeline_parallel": 1, "pipeline_schedule": "interleaved-1f1b"},
     "pipeline_schedule", "needs pipeline_parallel of 2"),
    ({"params": "7B", "num_gpus": 8, "pipeline_parallel": 2, "pipeline_virtual_stages": 2}, "pipeline_virtual_stages",
     "interleaved-1f1b"),
    ({"params": "7B", "num_gpus": 8, "context_parallel": 4, "seq_len": 1004}, "context_parallel", "2 × context_parallel = 8"),
    ({"params": "7B", "num_gpus": 8, "tensor_parallel": 2, "framework": "hf"}, "framework", "torchtitan"),
    ({"params": "7B", "num_gpus": 8, "tensor_parallel": 2, "method": "lora"}, "method", "method=full"),
    ({"params": "7B", "num_gpus": 8, "tensor_parallel": 2, "parallelism": "zero3"}, "parallelism", "fsdp"),
    ({"params": "7B", "num_gpus": 8, "pipeline_parallel": 4, "grad_accum": 2}, "grad_accum", "at least pipeline_parallel"),
    ({"params": "7B", "num_gpus": 8, "pipeline_parallel": 4, "grad_accum": 9, "pipeline_schedule": "interleaved-1f1b",
      "pipeline_virtual_stages": 2}, "grad_accum", "multiple of its rounds"),
    ({"model": "meta-llama/Llama-3.1-8B", "num_gpus": 64, "pipeline_parallel": 16, "grad_accum": 16, "pipeline_schedule": "interleaved-1f1b",
      "pipeline_virtual_stages": 4}, "pipeline_parallel", "more than the model's 32 layers"),
])
def test_impossible_layouts_get_one_line_naming_the_key(keys, key, words):
    with pytest.raises(ScenarioError) as e:
        estimate({**TITAN, **keys}) if "model" in keys else parse_scenario({**TITAN, **keys})
    assert e.value.key == key and words in str(e.value) and "\n" not in str(e.value)


def _rank(r, role):
    return next(x for x in r.ranks if x.role == role)


@pytest.mark.parametrize("p", [2, 4, 8])
def test_first_stage_holds_all_layers_worth_with_1f1b(p):
    # eq. 5: L/p layers x p micro-batches in flight = L layers' worth, the same as without a pipeline
    base = _est(model="meta-llama/Llama-3.1-70B", num_gpus=64, tensor_parallel=8, seq_len=4096, grad_accum=16)
    piped = _est(model="meta-llama/Llama-3.1-70B", num_gpus=64, tensor_parallel=8, pipeline_parallel=p, seq_len=4096,
                 grad_accum=16)
    first, last = _rank(piped, "first stage"), _rank(piped, "last stage")
    assert (first.layers, first.in_flight, last.in_flight) == (80 // p, p, 1)
    whole = base.ranks[0].activations_bytes
    assert first.activations_bytes == pytest.approx(whole, rel=0.01)
    outside = whole - first.activations_bytes  # final norm and the output layer's input: the last stage's
    assert 0 < outside < whole / 50
    assert last.activations_bytes == pytest.approx(first.activations_bytes / p + outside, rel=1e-6)  # 1 micro-batch
    assert piped.peak.allocated_bytes == max(x.allocated_bytes for x in piped.ranks)


def test_interleaved_first_stage_is_korthikanti_factor_more():
    # L = 80, p = 4, m = 2 chunks: L (1 + (p-1)/(p m)) = 110 layer micro-batches (eq. 5, interleaved)
    r = _est(model="meta-llama/Llama-3.1-70B", num_gpus=32, tensor_parallel=8, pipeline_parallel=4, seq_len=4096,
             grad_accum=32, pipeline_schedule="interleaved-1f1b", pipeline_virtual_stages=2)
    first = _rank(r, "first stage")
    assert first.layers * first.in_flight == pytest.approx(80 * (1 + 3 / 8))
    assert _rank(r, "last stage").in_flight == pytest.approx(((2 - 1) * 4 + 1) / 2)  # (v-1) p + 1 chunks, / v
    one = _est(model="meta-llama/Llama-3.1-70B", num_gpus=32, tensor_parallel=8, pipeline_parallel=4, seq_len=4096,
               grad_accum=32)
    ratio = first.activations_bytes / _rank(one, "first stage").activations_bytes
    assert ratio == pytest.approx(1 + 3 / 8, rel=0.01)


def test_tensor_parallel_block_is_torchtitans_sequence_parallel_layout():
    # Llama-3.1-8B, T = 4096 tokens, h = 4096, 32 heads and 8 key/value heads of 128 (torchtitan v0.2.2 passes the
    # grouped k and v to SDPA with enable_gqa), MLP 14336, t = 8.
    # Shard(1) under SequenceParallel (/t): two norms' fp32 input (4Th) and bf16 normed (2Th), fp32 rstd (4T);
    # heads (/t): q and the attention output (2Th each), k and v (2 T x 1024 each), fp32 logsumexp (4 T x 32); MLP
    # inner (/t): w2's input and gate, act, up outputs (2 T x 14336 each); whole on every rank: the all-gathered
    # inputs of wq/wk/wv and of w1/w3 (2Th each).
    T, h, f, t = 4096, 4096, 14336, 8
    split = 2 * (4 * T * h + 2 * T * h + 4 * T) + 2 * 2 * T * h + 2 * 2 * T * 1024 + 4 * T * 32 + 4 * 2 * T * f
    expected = split / t + 2 * 2 * T * h
    one = _est(model="meta-llama/Llama-3.1-8B", num_gpus=8, seq_len=4096)
    tp = _est(model="meta-llama/Llama-3.1-8B", num_gpus=8, tensor_parallel=8, seq_len=4096)
    per_layer_one = (split + 2 * 2 * T * h)
    blocks_tp = tp.ranks[0].activations_bytes
    # outside the blocks: the final norm's as a block norm's (fp32 input 4Th, fp32 rstd 4T, bf16 normed 2Th;
    # Shard(1): /t) and the output layer's all-gathered bf16 input (2Th, whole)
    final_norm = 4 * T * h + 4 * T + 2 * T * h
    assert one.component("activations") - 32 * per_layer_one == final_norm + 2 * T * h
    assert blocks_tp == pytest.approx(32 * expected + final_norm / t + 2 * T * h, rel=0.002)
    # Megatron-LM's sequence parallel keeps the sharded inputs (eq. 4: all /t): torchtitan holds 2 x 2Th more
    assert expected - (split + 4 * T * h) / t == pytest.approx(4 * T * h * (1 - 1 / t))


def test_context_parallel_splits_the_tokens():
    a = _est(model="meta-llama/Llama-3.1-8B", num_gpus=8, tensor_parallel=4, seq_len=32768, gradient_checkpointing="full")
    b = _est(model="meta-llama/Llama-3.1-8B", num_gpus=8, tensor_parallel=4, context_parallel=2, seq_len=32768,
             gradient_checkpointing="full")
    acts = [x.ranks[0].activations_bytes for x in (a, b)]
    assert acts[1] == pytest.approx(acts[0] / 2, rel=0.01)


def test_model_state_per_rank_is_zero_papers_table_1():
    # ZeRO Table 1: Psi = 7.5B, K = 12, Nd = 64, P_os+g+p -> (2 + 2 + 12) x 7.5e9 / 64 = 1.875 GB ("1.88 GB");
    # torchtitan bf16-mixed keeps fp32 parameters (4) + fp32 gradients (4) + Adam (8): 16 bytes too, and
    # tensor parallel 8 x FSDP 8 divides them over the same 64 ranks
    r = _est(params="7.5B", num_gpus=64, tensor_parallel=8, seq_len=1024)
    state = sum(dict(r.phases[-1].breakdown).get(k, 0) for k in ("master_weights", "gradients", "optimizer_state"))
    assert r.phases[-1].phase == "optimizer-step"
    n = r.model.num_params
    assert state == pytest.approx(16 * n / 64, rel=0.01)
    assert 16 * 7.5e9 / 64 / 1e9 == pytest.approx(1.88, abs=0.01)


def test_result_lists_each_rank_and_the_peak_is_the_most_loaded():
    r = _est(model="meta-llama/Llama-3.1-70B", num_gpus=32, tensor_parallel=8, pipeline_parallel=4, seq_len=4096,
             grad_accum=8)
    d = r.to_dict()
    assert [x["role"] for x in d["ranks"]] == ["first stage", "last stage"]
    assert d["peak"]["allocated_bytes"] == max(x["allocated_bytes"] for x in d["ranks"])
    first, last = d["ranks"]
    assert first["params"] > last["params"] - 128256 * 8192 // 8 * 2  # embeddings on the first, head on the last
    assert "logits_loss" not in first["breakdown"]
    assert any("torchtitan v0.3.0" in a and "the peak is the" in a for a in d["assumptions"])
    assert estimate(model="meta-llama/Llama-3.1-8B", method="lora").to_dict()["ranks"] == []


def test_tied_embeddings_are_held_once_per_stage_end():
    # Llama-3.2-1B ties its output layer to the embeddings: one rank holds them once; with a pipeline the first
    # stage holds the embedding and the last a copy as its output layer (Megatron-LM keeps the shared word
    # embedding on both ends and all-reduces its gradient: Narayanan et al. 2021, sec. 3 / initialize_word_embeddings)
    one = _est(model="meta-llama/Llama-3.2-1B", num_gpus=8, tensor_parallel=2)
    n, emb = one.model.num_params, 128256 * 2048
    assert one.ranks[0].params == pytest.approx(n / 2, rel=0.001)
    two = _est(model="meta-llama/Llama-3.2-1B", num_gpus=8, tensor_parallel=2, pipeline_parallel=2, grad_accum=4)
    first, last = _rank(two, "first stage"), _rank(two, "last stage")
    assert first.params + last.params == pytest.approx((n + emb) / 2, rel=0.001)
