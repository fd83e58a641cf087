"""ZeRO-3 keeps a tied embedding gathered from the embedding's forward to the output layer's when the blocks between
lie within stage3_max_reuse_distance (estimate/deepspeed.py ``tied_head_inside``): it then counts inside
stage3_max_live_parameters at the loss, and one block parameter overshoots the cap."""

from __future__ import annotations

from vramfit import estimate
from vramfit.estimate.deepspeed import resolve, tied_head_inside
from vramfit.models.catalog import resolve_model

_SC = {"model": "meta-llama/Llama-3.2-1B", "method": "full", "precision": "bf16-mixed", "seq_len": 1024,
       "micro_batch_size": 1, "attention": "flash", "num_gpus": 8, "parallelism": "zero3",
       "gradient_checkpointing": "full"}


def _blocks(model: str) -> tuple[int, int, int]:
    spec = resolve_model(model).spec
    elems = sum(lin.weight_params + lin.bias_params for lin in spec.block_linears) + spec.block_norm_params
    return spec.num_hidden_layers, elems, spec.final_norm_params


def test_llama_1b_blocks_lie_within_the_reuse_distance_and_3b_past_it():
    z = resolve(None, 2048, 3)
    layers, elems, norm = _blocks("meta-llama/Llama-3.2-1B")
    assert layers * elems + norm == 973_146_112 < z.max_reuse_distance == 1_000_000_000
    assert tied_head_inside(z, layers, elems, norm)
    assert not tied_head_inside(z, *_blocks("meta-llama/Llama-3.2-3B"))


def test_a_shorter_reuse_distance_puts_the_head_back_on_top():
    """The same run with stage3_max_reuse_distance 9e8: the embedding is released after its forward and gathered again
    at the head, on top of the 1e9 live elements; the whole model (1.24e9 elements) then bounds what is gathered."""
    inside = estimate(_SC).peak.allocated_bytes
    zero = {"stage": 3, "stage3_max_reuse_distance": 900_000_000}
    on_top = estimate({**_SC, "deepspeed_config": {"zero_optimization": zero}}).peak.allocated_bytes
    assert inside == 6_192_726_528  # the whole-depth simulation: 6,183,384,576 (tests/sim/test_sim_deepspeed.py)
    assert on_top - inside > 400 * 2**20  # about the 525 MB head less one 33.5 MB block parameter
