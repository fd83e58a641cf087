"""FSDP side-stream pools and the wrap residue of a host-resident model (estimate/fsdp_reserved.py)."""

import dataclasses

from vramfit.estimate import estimate
from vramfit.estimate.framework import adapter_bytes
from vramfit.estimate.fsdp2 import allgather_pool_idle, reduce_output_pool
from vramfit.estimate.fsdp_reserved import (
    SYNC_BUCKET_BYTES,
    fsdp_reserved,
    gathered_units,
    gradient_pool,
    host_wrap_floor,
    replay_wrap,
    sync_buckets,
    wrap_residue,
    wrap_units,
)
from vramfit.estimate.step import compute
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario

MiB = 2**20
LLAMA2 = resolve_model("meta-llama/Llama-2-7b-hf").spec  # h 4096, intermediate 11008, 32 layers, vocab 32000


def _sc(**keys):
    return parse_scenario({"model": "meta-llama/Llama-2-7b-hf", "method": "lora", "micro_batch_size": 1,
                           "seq_len": 512, "gradient_checkpointing": "full", "num_gpus": 2,
                           "parallelism": "fsdp", "precision": "bf16-true", "lora_rank": 64,
                           "lora_targets": ["q_proj", "k_proj", "v_proj", "up_proj", "down_proj", "gate_proj"],
                           **keys})


def test_one_unit_leaves_its_flat_parameter_and_originals_cached():
    # two 30 MiB parameters moved (a segment each), the 60 MiB flat parameter (a segment), this rank's
    # 30 MiB shard (no cached block is free yet: a segment); then flat and originals are freed, cached
    assert replay_wrap(((30 * MiB, 30 * MiB),), 2, 2) == (30 * MiB, 150 * MiB)
    # a second such unit reuses the cached originals and flat parameter; only its shard is new
    assert replay_wrap(((30 * MiB, 30 * MiB),) * 2, 2, 2) == (60 * MiB, 180 * MiB)


def test_the_all_gather_pool_cannot_reuse_the_wrap_residue():
    # the 60 MiB flat block cached on the default stream would serve a 60 MiB all-gather on one stream;
    # on the unshard stream it opens a segment of its own
    assert replay_wrap(((30 * MiB, 30 * MiB),), 2, 2, (60 * MiB,)) == (90 * MiB, 210 * MiB)


def test_offloaded_shards_leave_only_the_residue():
    # CPUOffload(offload_params=True): each shard moves to the host once built
    assert replay_wrap(((30 * MiB, 30 * MiB),), 2, 2, (), True) == (0, 150 * MiB)


def test_units_follow_the_wrapping_order_of_lora_leaves_then_block_then_root():
    sc = _sc(framework_version="transformers-4.44+peft-0.11")  # peft < 0.12: bf16 adapters
    r = compute(LLAMA2, sc)
    units = wrap_units(LLAMA2, r.sc, r.adapters, adapter_bytes(r.profile, r.sc.precision))
    h, f = 4096, 11008
    per_block = 6 * 2 + 1  # an A and a B unit per adapted linear, then the block
    assert len(units) == 32 * per_block + 1
    block = units[per_block - 1]
    assert block[-1] == 2 * h * 2  # the two RMSNorm weights (bf16), last in module.parameters() order
    assert block[:-1] == (h * h * 2,) * 4 + (h * f * 2,) * 3  # q k v o, gate up down
    a = [64 * h * 2] * 5 + [64 * f * 2]  # lora_A (r x in): q k v gate up, down
    b = [h * 64 * 2] * 3 + [f * 64 * 2] * 2 + [h * 64 * 2]  # lora_B (out x r)
    assert sorted(u[0] for u in units[:per_block - 1]) == sorted(a + b)
    assert units[-1] == (32000 * h * 2, h * 2, 32000 * h * 2)  # embed_tokens, norm, lm_head
    assert gathered_units(LLAMA2, r.sc, units) == (sum(units[-1]), sum(block), sum(block))


def test_the_4bit_block_flattens_packed_codes_only():
    r = compute(LLAMA2, _sc(method="qlora", quantize="nf4-dq"))
    units = wrap_units(LLAMA2, r.sc, r.adapters, adapter_bytes(r.profile, r.sc.precision))
    assert sum(units[12][:-1]) == (4 * 4096 * 4096 + 3 * 4096 * 11008) // 2  # Params4bit: two codes a byte


def test_sync_module_states_buckets_close_at_250_mib_and_copy_only_multi_tensor_buckets():
    h, f = 4096 * 4096 * 2, 4096 * 11008 * 2  # bf16 q/k/v/o and gate/up/down of Llama-2-7B
    # q k v o gate up = 128 + 172 MiB reaches 250 MiB: one 300 MiB copy; down + norms: an 86 MiB copy
    assert sync_buckets((h,) * 4 + (f,) * 3 + (16384,), SYNC_BUCKET_BYTES) == [4 * h + 2 * f, f + 16384]
    # the root: embed_tokens alone reaches 250 MiB (a view, nothing allocated); norm + lm_head are copied
    emb = 32000 * 4096 * 2
    assert sync_buckets((emb, 8192, emb), SYNC_BUCKET_BYTES) == [0, 8192 + emb]
    # a 4-bit block (96.5 MiB) is one bucket the size of its flat parameter
    assert sync_buckets((h // 4,) * 4 + (f // 4,) * 3, SYNC_BUCKET_BYTES) == [h + 3 * f // 4]


def test_broadcast_buckets_leave_segments_a_larger_flat_parameter_cannot_reuse():
    # two 20 MiB tensors under a 16 MiB limit: buckets [20] (a view) and [20]: no copy, nothing added
    assert replay_wrap(((20 * MiB, 20 * MiB),), 2, 2, (), False, 16 * MiB) == replay_wrap(((20 * MiB, 20 * MiB),), 2, 2)
    # three 20 MiB tensors under a 32 MiB limit: a 40 MiB copy (two tensors) then [20] (a view); the 60 MiB
    # flat parameter cannot use the cached 40 MiB block (a segment of its own), the 30 MiB shard then splits
    # it: originals 60 + bucket 40 + flat 60 = 160 MiB reserved, against 150 without the broadcast
    units = ((20 * MiB,) * 3,)
    assert replay_wrap(units, 2, 2)[1] == 150 * MiB
    assert replay_wrap(units, 2, 2, (), False, 32 * MiB)[1] == 160 * MiB


def test_an_offloaded_unshard_copies_the_shard_in_on_a_third_stream():
    # gathering a 60 MiB unit whose 30 MiB shard is on the host: the shard copy (pre-unshard stream) and
    # the 60 MiB unsharded parameter (unshard stream) open segments the wrap residue cannot serve
    assert replay_wrap(((30 * MiB, 30 * MiB),), 2, 2, (60 * MiB,), True) == (60 * MiB, 240 * MiB)


def test_the_profile_says_which_wrap_broadcasts():
    sc = _sc(framework="hf", framework_version="transformers-4.44+peft-0.11")  # the Answer.AI LoRA rows
    r = compute(LLAMA2, sc)
    assert r.profile.fsdp1_sync_module_states
    quiet = dataclasses.replace(r, profile=dataclasses.replace(r.profile, fsdp1_sync_module_states=False))
    # the 16-bit blocks' 300 MiB buckets stay cached beside the flat parameters
    assert host_wrap_floor(r) > host_wrap_floor(quiet)


def test_the_estimate_never_reserves_less_than_the_floor_and_only_where_fsdp1_wraps_from_host():
    sc = _sc(framework="hf")
    r = compute(LLAMA2, sc)
    floor = host_wrap_floor(r)
    assert floor > 0
    assert estimate(sc).peak.reserved_bytes >= floor
    no_wrap = dataclasses.replace(r, profile=dataclasses.replace(r.profile, fsdp1_host_wrap=False))
    assert host_wrap_floor(no_wrap) == 0
    assert host_wrap_floor(compute(LLAMA2, _sc(parallelism="ddp"))) == 0
    assert host_wrap_floor(compute(LLAMA2, _sc(framework="torchtune"))) == 0


PHASES = {"forward": {"activations": 10 * MiB, "weights": 2 * MiB},
          "optimizer-step": {"gradients": 4 * MiB, "optimizer_state": 3 * MiB, "weights": 2 * MiB}}


# torchtitan's FSDP2 on Llama-2-7B, 8 GPUs: the all-gather copy-in stream's idle segments (estimate/fsdp2.py, 7).
# Forward holds the root's output (embedding + lm_head + norm in bf16: 524,296,192 B, a 251 x 2 MiB segment) beside
# the lowest block's (404,766,720 B, a 194 x 2 MiB segment); the step's communication buffers count one block's.
AG_IDLE = 251 * 2 * MiB + 194 * 2 * MiB - 404_766_720


def test_sharded_gradients_stay_cached_on_the_reduce_scatter_stream():
    # the forward's 12 MiB cannot reuse the 4 MiB of gradients freed by zero_grad on the reduce-scatter
    # stream: default-stream high-water 12 + single-stream slack (13 - 12) + gradient pool 4, plus FSDP2's
    # all-gather stream (8192 tokens: the fp32 logits freed before the end of backward host its embedding gradient and
    # root input, estimate/fsdp2_end.py, so no segment opens there)
    r = compute(LLAMA2, _sc(method="full", framework="torchtitan", framework_version="torchtitan-0.2.2", num_gpus=8, seq_len=8192))
    assert gradient_pool(r, PHASES) == 4 * MiB
    assert allgather_pool_idle(r) == AG_IDLE == 528_465_920
    assert fsdp_reserved(r, PHASES, 12 * MiB, 13 * MiB) == 17 * MiB + AG_IDLE
    # a gradient-heavy phase: 9 MiB without gradients is under the forward's 12
    heavy = {**PHASES, "optimizer-step": {"gradients": 8 * MiB, "optimizer_state": 7 * MiB, "weights": 2 * MiB}}
    assert fsdp_reserved(r, heavy, 17 * MiB, 18 * MiB) == 12 * MiB + 1 * MiB + 8 * MiB + AG_IDLE


def test_offloaded_shards_are_copied_in_on_the_all_gather_stream():
    # CPUOffloadPolicy: each unit's host shards come to the GPU on the copy-in stream first (the root's 1/8:
    # 65,537,024 B, a 32 x 2 MiB segment, which every block's 1/8 then reuses), beside the root's and a block's outputs
    r = compute(LLAMA2, _sc(method="full", framework="torchtitan", framework_version="torchtitan-0.2.2", num_gpus=8, offload="optimizer+params"))
    assert allgather_pool_idle(r) == AG_IDLE + 32 * 2 * MiB == 595_574_784


def test_allgather_pool_is_fsdp2s_alone():
    # FSDP1 all-gathers into flat parameters on its unshard stream, modelled with the host wrap (mechanism 3)
    assert allgather_pool_idle(compute(LLAMA2, _sc(method="full", num_gpus=8))) == 0
    assert allgather_pool_idle(compute(LLAMA2, _sc(method="full", framework="torchtitan", framework_version="torchtitan-0.2.2", num_gpus=1,
                                                    parallelism="none"))) == 0


def test_no_gradient_pool_without_a_reduce_scatter_stream():
    for keys in ({"parallelism": "ddp"}, {"num_gpus": 1, "parallelism": "none"}):
        r = compute(LLAMA2, _sc(method="full", framework="torchtitan", framework_version="torchtitan-0.2.2", **keys))
        assert gradient_pool(r, PHASES) == 0
        assert fsdp_reserved(r, PHASES, 12 * MiB, 13 * MiB) == 13 * MiB


def test_the_estimate_states_the_pools_it_adds():
    # the Answer.AI LoRA 512-token row: the wrap residue, all-gather and gradient pools bind
    e = estimate(_sc(micro_batch_size=1, framework="hf", framework_version="transformers-4.44+peft-0.11",
                     keeps_outputs=True))
    r = compute(LLAMA2, e.scenario)
    pool = gradient_pool(r, {p.phase: dict(p.breakdown) for p in e.phases})
    assert pool == sum(v for k, v in dict(e.phases[-1].breakdown).items() if k == "gradients") > 0
    # the step's own figure plus the residue it cannot reuse (estimate/wrap_step.py) is above the floor
    residue = wrap_residue(r)
    assert e.peak.reserved_bytes > host_wrap_floor(r) + pool
    assert residue > 0 and 100 * residue >= e.peak.reserved_bytes
    text = " ".join(e.assumptions)
    assert f"Reserved includes {residue / 2**30:,.2f} GiB that FSDP1 leaves cached wrapping a model" in text
    assert 100 * pool >= e.peak.reserved_bytes  # 0.13 GiB of LoRA gradients: over the 1 % note threshold
    assert "0.13 GiB of sharded gradients cached on FSDP's reduce-scatter stream" in text
    assert not any("reduce-scatter stream" in a for a in estimate(_sc(parallelism="ddp")).assumptions)


# axolotl@ba3dba3e4's gpt-oss-20b FSDP2 full fine-tune (AXOLOTL_EX_2508-2/3): a decoder block's reduce-scatter input is
# 823,186,976 elements (attention with biases and sinks, router, the 32-expert gate_up and down banks with biases,
# two norms), the root's (embedding + lm_head + final norm) 1,158,269,760; each unit's bf16 output is 1/N of it
GPT_OSS = resolve_model("openai/gpt-oss-20b").spec
GPT_OSS_BLOCK, GPT_OSS_ROOT = 823_186_976, 2 * 579_133_440 + 2880


def _gpt_oss(**keys):
    return parse_scenario({"model": "openai/gpt-oss-20b", "method": "full", "precision": "bf16-true",
                           "micro_batch_size": 1, "seq_len": 4096, "gradient_checkpointing": "offload",
                           "attention": "flash", "loss": "fused", "grad_accum": 2, "parallelism": "fsdp",
                           "framework_version": "transformers-4.55+axolotl-0.12", "fsdp_version": "2", **keys})


def _segment(n: int) -> int:
    return -(-n // (2 * MiB)) * 2 * MiB  # a > 10 MiB request: a segment of its own, rounded to 2 MiB


def test_offloaded_fsdp2_caches_reduce_scatter_outputs_not_gradients():
    # CPUOffloadPolicy on 2 GPUs: every output goes to the host and is dropped; the stream caches a block's (bf16,
    # 823,186,976 B) and the root's, which the block's segment cannot take (estimate/fsdp2.py, 8)
    r = compute(GPT_OSS, _gpt_oss(num_gpus=2, offload="optimizer+params", optimizer="adamw"))
    assert reduce_output_pool(r) == _segment(GPT_OSS_BLOCK) + _segment(GPT_OSS_ROOT) == 1_983_905_792
    # the whole gradients autograd makes are the default stream's: no sharded gradient pool
    assert gradient_pool(r, {p.phase.value: dict(p.parts) for p in r.phases}) == 0
    e = estimate(r.sc)
    text = " ".join(e.assumptions)
    assert "1.85 GiB of FSDP2 reduce-scatter outputs cached on its reduce-scatter stream" in text
    assert "sharded gradients cached" not in text


def test_accumulated_micro_batches_add_outputs_beside_the_held_shards():
    # no offload, 8 GPUs: the first micro-batch's outputs are the held shards; the second's are added into them and
    # dropped, one block's 1/8 and the root's 1/8 beside the shards; one micro-batch keeps every output
    two = compute(GPT_OSS, _gpt_oss(num_gpus=8, optimizer="adamw-8bit-torchao"))
    assert reduce_output_pool(two) == _segment(GPT_OSS_BLOCK // 8 * 2) + _segment(GPT_OSS_ROOT // 8 * 2) == 499_122_176
    assert reduce_output_pool(compute(GPT_OSS, _gpt_oss(num_gpus=8, grad_accum=1))) == 0
    # FSDP1 (flat parameters, its own streams) is not this path
    assert reduce_output_pool(compute(GPT_OSS, _gpt_oss(num_gpus=8, fsdp_version="1"))) == 0
