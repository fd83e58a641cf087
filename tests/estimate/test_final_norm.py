"""The final norm keeps for backward what transformers v5.24.0's ``LlamaRMSNorm`` makes autograd save (plain
ops, the same on CUDA as here: ``pow`` saves the fp32 input, ``rsqrt`` its fp32 result, ``weight * x.to(bf16)``
the bf16 normalised tensor when the weight trains), counted with autograd's saved-tensor hooks."""

import pytest

from vramfit.estimate.block_extras import model_extra_saved
from vramfit.estimate.framework import profile_for
from vramfit.models import resolve_model
from vramfit.scenario import Framework, parse_scenario

torch = pytest.importorskip("torch")
llama = pytest.importorskip("transformers.models.llama.modeling_llama")

SPEC = resolve_model("meta-llama/Llama-3.1-8B").spec
SEQ = 32


def _autograd_saved(weight_trains: bool) -> int:
    norm = llama.LlamaRMSNorm(SPEC.hidden_size).to(torch.bfloat16)
    norm.weight.requires_grad_(weight_trains)
    x = torch.randn(1, SEQ, SPEC.hidden_size, dtype=torch.bfloat16, requires_grad=True)
    seen = {}

    def pack(t):
        if t.untyped_storage().data_ptr() != norm.weight.untyped_storage().data_ptr():  # a parameter, not saved
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        norm(x)
    return sum(seen.values())


@pytest.mark.parametrize("method,trains", [("full", True), ("lora", False)])
def test_final_norm_saves_what_autograd_saves(method, trains):
    sc = parse_scenario({"model": "meta-llama/Llama-3.1-8B", "method": method, "precision": "bf16-true",
                         "seq_len": SEQ})
    got = model_extra_saved(SPEC, sc, profile_for(Framework.HF), lm_head_trainable=False)
    T, h = SEQ, SPEC.hidden_size
    assert got == _autograd_saved(trains) == 4 * T * h + 4 * T + (2 * T * h if trains else 0)
