"""The segments the end of an FSDP2 full fine-tuning backward opens (estimate/fsdp2_end.py)."""

import importlib

from vramfit.estimate import estimate
from vramfit.estimate.allocator import segment_size
from vramfit.estimate.fsdp2_end import _largest_freed, end_of_backward_segments
from vramfit.estimate.step import compute
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario

GPT_OSS = resolve_model("openai/gpt-oss-20b").spec
EMBED = 201_088 * 2880  # gpt-oss-20b's untied embedding and lm_head, 579,133,440 elements each


def _sc(**keys):
    return parse_scenario({"model": "openai/gpt-oss-20b", "method": "full", "precision": "bf16-true",
                           "micro_batch_size": 1, "seq_len": 4096, "gradient_checkpointing": "offload",
                           "attention": "flash", "loss": "fused", "grad_accum": 2, "num_gpus": 2,
                           "parallelism": "fsdp", "offload": "optimizer+params", "optimizer": "adamw",
                           "framework_version": "transformers-4.55+axolotl-0.12", "fsdp_version": "2", **keys})


def test_the_embedding_gradient_and_the_roots_input_open_their_own_segments():
    # AXOLOTL_EX_2508-2: nothing the blocks freed is as large as the bf16 embedding gradient (the largest is the
    # zero-filled 32 x 2880 x 5760 expert bank of the indexed loop's backward, 1,061,683,200 B, with its bias), nor
    # the root's flat reduce-scatter input (embedding + lm_head + final norm, bf16)
    r = compute(GPT_OSS, _sc())
    grad, root = 2 * EMBED, 2 * (2 * EMBED + 2880)
    assert grad > _largest_freed(r) >= 32 * 2880 * 5760 * 2
    assert end_of_backward_segments(r) == segment_size(grad) + segment_size(root) == 3_477_078_016
    text = " ".join(estimate(r.sc).assumptions)
    assert "Reserved includes 3.24 GiB of segments the end of backward opens" in text


def test_a_loss_whose_logits_are_larger_hosts_them():
    # the standard loss's fp32 logits (4096 x 201,088 x 4 B) are freed before the end of backward and hold both
    r = compute(GPT_OSS, _sc(loss="standard"))
    assert _largest_freed(r) >= 4 * 4096 * 201_088 > 2 * (2 * EMBED + 2880)
    assert end_of_backward_segments(r) == 0


def test_only_fsdp2_full_fine_tuning():
    for keys in ({"method": "lora", "lora_rank": 8, "lora_targets": "all-linear"}, {"fsdp_version": "1"},
                 {"num_gpus": 1, "parallelism": "none", "offload": "none"}):
        assert end_of_backward_segments(compute(GPT_OSS, _sc(**keys))) == 0


def test_the_reserved_figure_adds_them_to_the_blocks():
    fr = importlib.import_module("vramfit.estimate.fsdp_reserved")
    f2 = importlib.import_module("vramfit.estimate.fsdp2")
    r = compute(GPT_OSS, _sc())
    phases = {p.phase.value: dict(p.parts) for p in r.phases}
    block = sum(phases["backward-block"].values())  # the peak phase
    # the blocks' figure with 1 GiB of single-stream slack, the opened segments on top, then the side streams' pools
    side = f2.allgather_pool_idle(r) + f2.reduce_output_pool(r)
    assert fr.fsdp_reserved(r, phases, block, block + 2**30) == block + 2**30 + end_of_backward_segments(r) + side


def test_a_tied_embeddings_gradient_is_dropped_before_the_roots_input():
    # Llama-3.2-1B ties lm_head to the embedding: the embedding's backward output is added into the gradient the
    # output layer made and dropped, so the root's input (the one shared weight plus the final norm, bf16) takes its
    # segment when the 2 MiB rounding leaves room, as 128,256 x 2048 x 2 B rounds up by 1 MiB here
    spec = resolve_model("meta-llama/Llama-3.2-1B").spec
    sc = parse_scenario({"model": "meta-llama/Llama-3.2-1B", "method": "full", "precision": "bf16-true",
                         "micro_batch_size": 1, "seq_len": 1024, "gradient_checkpointing": "full", "loss": "fused",
                         "num_gpus": 2, "parallelism": "fsdp", "fsdp_version": "2",
                         "framework_version": "transformers-4.55+axolotl-0.12"})
    r = compute(spec, sc)
    grad = 128_256 * 2048 * 2
    assert spec.tie_word_embeddings and grad > _largest_freed(r)
    assert segment_size(grad) - grad >= 2 * 2048  # the final norm's weight fits the rounding
    assert end_of_backward_segments(r) == segment_size(grad) == 526_385_152
