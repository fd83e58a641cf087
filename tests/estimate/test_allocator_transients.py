"""The step's big transients replayed through the caching allocator's segment rules
(pytorch/pytorch@eb42ad6e c10/cuda/CUDACachingAllocator.cpp; shared/design/cuda-memory-facts.md section 1)."""

from vramfit.estimate import estimate, resolve_spec
from vramfit.estimate.allocator import transient_reserved
from vramfit.estimate.step import compute
from vramfit.estimate.transients import length_variation_note, nograd_mlp_bytes, step_transients
from vramfit.scenario import parse_scenario

MiB = 1024**2


def test_a_freed_block_is_split_for_a_smaller_request():
    # 100 MiB freed, 50 MiB requested: best fit splits the cached block (> 1 MiB remains), no new segment
    assert transient_reserved([100 * MiB, -1, 50 * MiB]) == (100 * MiB, 100 * MiB)


def test_a_larger_request_opens_a_new_segment_and_the_old_stays_reserved():
    # no cached block fits 200 MiB: a new segment; the freed 100 MiB is not returned (no empty_cache)
    assert transient_reserved([100 * MiB, -1, 200 * MiB]) == (200 * MiB, 300 * MiB)


def test_segments_round_to_2_mib_and_zero_bytes_allocate_nothing():
    # a 16 MiB segment; under 1 MiB would remain, so the whole block is charged to allocated
    assert transient_reserved([15 * MiB + 1, 0, -2, -1]) == (16 * MiB, 16 * MiB)
    # 12 MiB + 1 B: a 14 MiB segment, split (2 MiB - 512 B remain, more than 1 MiB)
    assert transient_reserved([12 * MiB + 1, -1]) == (12 * MiB + 512, 14 * MiB)


def test_an_unsplit_block_is_charged_whole():
    # 0.5 MiB would remain: the large pool does not split (remaining must exceed kSmallSize, 1 MiB)
    assert transient_reserved([100 * MiB, -1, 100 * MiB - MiB // 2]) == (100 * MiB, 100 * MiB)


def _step(**keys):
    sc = parse_scenario(keys)
    _, spec, _, _ = resolve_spec(sc)
    return compute(spec, sc)


LORA = {"model": "meta-llama/Llama-3.1-8B", "method": "lora", "seq_len": 2048}


def test_standard_loss_leaves_the_bf16_logits_segment_cached():
    # one fp32 logits block is 4 x 2048 tokens x 128256 rows = 1002 MiB exactly. Forward: saved fp32
    # log-probs (1002) + working set 1002 + 501 (bf16 logits); backward: two 1002 MiB gradients: the
    # first reuses the cached 1002 MiB block, the second cannot use the 501 MiB one -> new segment
    ev = step_transients(_step(**LORA))
    assert transient_reserved(ev) == (3 * 1002 * MiB, 3 * 1002 * MiB + 502 * MiB)
    r = estimate(LORA).peak
    assert r.reserved_bytes - r.allocated_bytes >= 502 * MiB


def _concat(*runs: list[int]) -> list[int]:
    out: list[int] = []
    base = 0
    for ev in runs:
        out += [e if e >= 0 else e - base for e in ev]
        base += sum(1 for e in ev if e >= 0)
    return out


def test_growing_batch_lengths_reserve_more_than_fixed_ones():
    short, long = step_transients(_step(**{**LORA, "seq_len": 1024})), step_transients(_step(**LORA))
    fixed = transient_reserved(_concat(long, long))[1]
    assert fixed == transient_reserved(long)[1]  # the same sizes every step: served from the cache
    assert transient_reserved(_concat(long, short))[1] == fixed  # shorter ones split cached blocks
    growing = transient_reserved(_concat(short, long))[1]
    # the short batch's segments stay reserved: its 501 MiB blocks serve only the long batch's bf16
    # logits (501 MiB), its fp32 ones (1002 MiB) each need a new segment
    assert fixed + 1024 * MiB < growing < fixed + transient_reserved(short)[1]


def test_length_variation_is_stated_when_loss_tensors_dominate():
    r = _step(**LORA)
    assert length_variation_note(r, 40 * 1024 * MiB).startswith("Reserved memory assumes every micro-batch is 2048")
    assert any(a.startswith("Reserved memory assumes") for a in estimate(LORA).assumptions)
    # Liger's fused loss keeps only chunk-sized tensors: not stated
    assert not any(a.startswith("Reserved memory assumes") for a in estimate({**LORA, "loss": "fused"}).assumptions)


def test_the_checkpointed_no_grad_mlp_leaves_segments_the_loss_cannot_reuse():
    # Llama-3.1-8B, 2048 tokens, full checkpointing: act_fn(gate), up and their product are 2048 x 14336
    # bf16 = 56 MiB each, live at once in the no-grad forward; cached, none can serve a 1002 MiB fp32 loss
    # tensor, so their 3 x 56 MiB stay reserved beside the loss's segments
    assert nograd_mlp_bytes(_step(**LORA)) == 0  # no checkpointing: those tensors are saved activations
    ckpt = _step(**LORA, gradient_checkpointing="full")
    assert nograd_mlp_bytes(ckpt) == 2048 * 14336 * 2 == 56 * MiB
    ev = step_transients(ckpt)
    assert ev[:6] == [56 * MiB] * 3 + [-1, -2, -3]
    assert transient_reserved(ev) == (3 * 1002 * MiB, 3 * 1002 * MiB + 502 * MiB + 3 * 56 * MiB)
    # a micro-batch of 2: the working set doubles (3 x 112 MiB), still under one loss tensor; with the
    # 1002 MiB bf16 logits segment (2 x 501, already a 2 MiB multiple) it is what stays cached
    two = step_transients(_step(**LORA, gradient_checkpointing="full", micro_batch_size=2))
    peak, reserved = transient_reserved(two)
    assert reserved - peak == (1002 + 3 * 112) * MiB


def test_hf_qlora_no_grad_mlp_working_set_is_fp32():
    # HF QLoRA: prepare_model_for_kbit_training leaves the norms fp32 and bitsandbytes' Linear4bit returns its
    # input's dtype, so the checkpointed MLP's intermediates are fp32: 2048 x 14336 x 4 = 112 MiB each
    # (`vramfit simulate` on this model shows 448 MiB fp32 `_to_copy`/`add` blocks at 8192 tokens); plain
    # LoRA stays in bf16, and so does a recipe that skips the upcast (kbit_prepare: no)
    qlora = _step(**{**LORA, "method": "qlora"}, gradient_checkpointing="full")
    assert nograd_mlp_bytes(qlora) == 2048 * 14336 * 4 == 112 * MiB
    # op by op: gate_proj's bf16 matmul_4bit output, its fp32 .to(inp_dtype), PEFT's clone, lora_B's output and
    # its scaled copy (bf16 under autocast), their fp32 sum; silu; up_proj the same; the product; down_proj's cast
    gate = [56, 112, -1, 112, -2, 56, 56, -4, 112, -3, -5]
    up = [56, 112, -8, 112, -9, 56, 56, -11, 112, -10, -12]
    mlp = gate + [112, -6] + up + [112, -7, -13, 56, -14, -15]
    events = step_transients(qlora)
    assert events[:len(mlp)] == [e * MiB if e > 0 else e for e in mlp]
    # high point in up_proj's sum: silu's output, the clone, the scaled copy and the sum; cached as in `vramfit
    # simulate`: four fp32 segments and one bf16 (the scaled copy splits the freed fp32 .to copy's block)
    assert transient_reserved(events[:len(mlp)]) == ((3 * 112 + 56) * MiB, (4 * 112 + 56) * MiB)
    # adapters on attention only: no clone, no adapter sum: the bf16 output and its fp32 copy per linear
    attn_only = _step(**{**LORA, "method": "qlora"}, gradient_checkpointing="full",
                      lora_targets=["q_proj", "k_proj", "v_proj", "o_proj"])
    assert step_transients(attn_only)[:13] == [e * MiB if e > 0 else e for e in
                                                [56, 112, -1, 112, -2, 56, 112, -4, 112, -3, -5, 56, -6]]
    no_upcast = _step(**{**LORA, "method": "qlora"}, gradient_checkpointing="full", kbit_prepare="no")
    assert nograd_mlp_bytes(no_upcast) == 56 * MiB
