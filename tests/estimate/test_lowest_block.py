"""The block backward's high point at the lowest block: every gradient but the embedding's made, one block input left.

Found by the simulator (Qwen2.5-0.5B, full fine-tuning, full checkpointing, fused loss, 8 x 1024 tokens, traced at
all 24 layers): its backward peaks inside layer 0's backward with 966,986,752 B of gradients (all but layer 0's
gate/up/attention ones), layer 0's input and its recomputed tensors; the estimator, which held only the top block's
position, was 6.0 % under the traced 4,636,210,176 B peak.
"""

from vramfit import estimate
from vramfit.estimate.allocator import round_allocation
from vramfit.estimate.step import compute
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario

QWEN = {"model": "Qwen/Qwen2.5-0.5B", "method": "full", "gradient_checkpointing": "full", "loss": "fused",
        "micro_batch_size": 8, "seq_len": 1024}
SIMULATED_PEAK = 4_636_210_176  # vramfit simulate --full-depth of QWEN (allocated, it2.mb1.backward, layer 0)


def _block_phase(sc: dict) -> dict[str, int]:
    return dict(next(p for p in estimate(sc).phases if p.phase == "backward-block").breakdown)


def test_tied_lowest_block_holds_every_gradient_its_input_and_its_recompute():
    bb = _block_phase(QWEN)
    # tied embeddings: the shared weight's gradient exists (the fused loss made it in forward); of layer 0's own,
    # only down_proj's (896 x 4864) is made: q (896x896 + bias), k, v (128x896 + bias), o, gate, up are not
    all_grads = compute(resolve_model(QWEN["model"]).spec, parse_scenario(QWEN)).parts.gradients
    later = [2 * (896 * 896 + 896), 2 * (128 * 896 + 128), 2 * (128 * 896 + 128), 2 * 896 * 896,
             2 * 4864 * 896, 2 * 4864 * 896]
    assert bb["gradients"] == all_grads - sum(round_allocation(x) for x in later) == 966_990_848
    # the simulator's 966,986,752 B: the same but for layer 0's two RMSNorm weights' gradients (2 x 2 KiB)
    # layer 0's input (8 x 1024 x 896 bf16) + the recomputed block (470,286,336 B, the no-checkpointing block)
    assert bb["activations"] == 8 * 1024 * 896 * 2 + 470_286_336
    peak = estimate(QWEN).peak
    assert peak.phase == "backward-block"
    assert peak.allocated_bytes == 4_674_458_624
    assert abs(peak.allocated_bytes - SIMULATED_PEAK) / SIMULATED_PEAK < 0.01


def test_untied_lowest_block_leaves_out_the_input_embedding_gradient():
    sc = {**QWEN, "model": "Qwen/Qwen2.5-7B", "micro_batch_size": 1}
    step = compute(resolve_model(sc["model"]).spec, parse_scenario(sc))
    embedding = round_allocation(544_997_376 * 2)  # 152,064 x 3,584 bf16, made after layer 0's backward
    h, kv, i = 3584, 512, 18944
    layer0 = [2 * (h * h + h), 2 * (kv * h + kv), 2 * (kv * h + kv), 2 * h * h, 2 * i * h, 2 * i * h]  # all but down
    later = embedding + sum(round_allocation(x) for x in layer0)
    assert step.lowest_grads == step.parts.gradients - later
    assert _block_phase(sc)["gradients"] == step.parts.gradients - later


def test_top_block_when_its_kept_tensors_outweigh_the_gradients():
    # without checkpointing at 8 x 1024 tokens a Qwen2.5-0.5B block keeps 470 MB and has 30 MB of gradients
    sc = {**QWEN, "gradient_checkpointing": "none"}
    step = compute(resolve_model(sc["model"]).spec, parse_scenario(sc))
    bb = _block_phase(sc)
    assert bb["gradients"] == step.head_grad + step.layer_grads
    assert bb["activations"] == step.acts.blocks + step.acts.recompute


def test_no_lowest_position_when_gradients_are_held_or_stepped_in_backward():
    for keys in ({"grad_accum": 2}, {"optimizer_in_backward": True}):
        step = compute(resolve_model(QWEN["model"]).spec, parse_scenario({**QWEN, **keys}))
        assert step.lowest_grads == 0
        assert _block_phase({**QWEN, **keys})["activations"] == step.acts.blocks + step.acts.recompute


def test_autocast_keeps_only_the_lowest_blocks_weight_copies():
    sc = {**QWEN, "precision": "bf16-mixed", "gradient_checkpointing": "none", "micro_batch_size": 1, "seq_len": 128}
    spec = resolve_model(sc["model"]).spec
    step = compute(spec, parse_scenario(sc))
    one_block = 2 * (3 * 896 * 4864 + 2 * 896 * 896 + 2 * 128 * 896)  # q, o, k, v, gate, up, down in bf16
    assert step.lowest_autocast == one_block
    bb = _block_phase(sc)
    assert bb["autocast_copies"] == one_block
    assert bb["gradients"] == step.lowest_grads
