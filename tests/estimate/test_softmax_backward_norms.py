"""The norms after a sequential block's attention run backward before its eager softmax backward, so what they kept
is freed by then (activations.Saved.after_attention, block_extras._fp32_softmax_backward); a parallel block's
(Falcon) second norm reads the block input beside the attention and is not counted as freed."""

import importlib

from vramfit.estimate.framework import scenario_profile
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario

act = importlib.import_module("vramfit.estimate.activations")


def _saved(model: str):
    sc = parse_scenario({"model": model, "method": "lora", "micro_batch_size": 1, "seq_len": 1024,
                         "precision": "bf16-true", "attention": "eager"})
    return act.block_saved(resolve_model(model).spec, sc, scenario_profile(sc), [], False)


def test_the_norms_after_the_attention_are_freed_by_its_softmax_backward():
    llama = _saved("meta-llama/Llama-3.1-8B")  # hidden 4096: the pre-MLP norm's fp32 input and rstd
    assert llama.after_attention == ("norm2.fp32_in", "norm2.rstd")
    gemma = _saved("google/gemma-2-9b")  # hidden 3584: post-attention, pre-MLP and post-MLP norms
    assert gemma.after_attention == ("post_attn_norm.fp32_in", "post_attn_norm.rstd", "norm2.fp32_in", "norm2.rstd",
                                     "post_mlp_norm.fp32_in", "post_mlp_norm.rstd")
    assert sum(gemma.items[k] for k in gemma.after_attention) == 3 * (4 * 1024 * 3584 + 4 * 1024)
    assert _saved("tiiuae/falcon-7b").after_attention == ()
