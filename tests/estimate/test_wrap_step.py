"""The FSDP1 wrap residue and the step in one caching allocator (estimate/wrap_step.py)."""

from vramfit.estimate import estimate
from vramfit.estimate.block_extras import block_input_bytes
from vramfit.estimate.fsdp_reserved import host_wrap_floor, wrap_residue
from vramfit.estimate.step import compute
from vramfit.estimate.wrap_step import step_program, unreused_residue
from vramfit.models import resolve_model
from vramfit.scenario import parse_scenario

MiB = 2**20
LLAMA2 = resolve_model("meta-llama/Llama-2-7b-hf").spec
# one unit of two 30 MiB parameters on 2 ranks (bf16): after the wrap its 60 MiB flat parameter and the two
# 30 MiB moved originals are cached and free, its 30 MiB shard is allocated (test_fsdp_reserved.py)
UNIT = (((30 * MiB, 30 * MiB),), 2, 2, (), False, 0, False)  # no empty_cache after the wrap


def _aai(**keys):
    """An Answer.AI fsdp_qlora train.py @4cd6923 run (benchmarks/data/measured/found.jsonl, AAI_FSDPQLORA_2403)."""
    return parse_scenario({"model": "meta-llama/Llama-2-7b-hf", "method": "lora", "precision": "bf16-true",
                           "lora_rank": 64, "lora_alpha": 16, "lora_dropout": 0.1,
                           "lora_targets": ["k_proj", "q_proj", "v_proj", "up_proj", "down_proj", "gate_proj"],
                           "gradient_checkpointing": "full", "attention": "sdpa", "num_gpus": 2,
                           "parallelism": "fsdp", "framework": "hf", "keeps_outputs": True,
                           "framework_version": "transformers-4.44+peft-0.11", **keys})


def test_torchtune_01_empties_the_cache_after_the_wrap():
    from vramfit.estimate.fsdp_reserved import replay_wrap

    # the flat parameter and both moved originals sit alone in their segments: empty_cache returns them all
    assert replay_wrap(*UNIT) == (30 * MiB, 150 * MiB)
    assert replay_wrap(*UNIT[:-1], True) == (30 * MiB, 30 * MiB)
    keys = {"model": "meta-llama/Llama-2-7b-hf", "method": "full", "micro_batch_size": 2, "seq_len": 512,
            "gradient_checkpointing": "full", "num_gpus": 4, "parallelism": "fsdp", "framework": "torchtune"}
    old = compute(LLAMA2, parse_scenario({**keys, "framework_version": "torchtune-0.1"}))
    assert old.profile.fsdp1_empty_cache_after_wrap
    # without utils.cleanup_before_training() the same wrap leaves more cached
    from dataclasses import replace

    kept = compute(LLAMA2, parse_scenario({**keys, "framework_version": "torchtune-0.1"}))
    kept = replace(kept, profile=replace(kept.profile, fsdp1_empty_cache_after_wrap=False))
    assert host_wrap_floor(old) < host_wrap_floor(kept)


def test_a_tensor_that_fits_a_cached_block_reuses_it():
    # a 60 MiB tensor takes the cached flat parameter: only the two 30 MiB originals stay unused
    assert unreused_residue(*UNIT, (60 * MiB, -1)) == 60 * MiB
    # two 30 MiB tensors alive together take the originals (best fit); the flat parameter stays unused
    assert unreused_residue(*UNIT, (30 * MiB, 30 * MiB, -1, -2)) == 60 * MiB


def test_a_tensor_larger_than_every_cached_block_opens_a_segment_beside_the_residue():
    assert unreused_residue(*UNIT, (100 * MiB, -1)) == 120 * MiB


def test_small_pool_tensors_cannot_use_the_large_pool_residue():
    # 1 MiB and under: the small pool's 2 MiB segments (get_pool), never a cached large block
    assert unreused_residue(*UNIT, tuple([MiB] * 50) + tuple(-k for k in range(1, 51))) == 120 * MiB


def test_the_program_keeps_every_block_input_through_the_forward():
    r = compute(LLAMA2, _aai(micro_batch_size=2, seq_len=1024))
    program = step_program(r)
    block_in = block_input_bytes(LLAMA2, r.sc, r.profile)
    assert block_in == 2 * 1024 * 4096 * 2  # bf16 hidden states
    # the embedding output and each block's output; 31 of them are checkpointed inputs, freed in backward
    live, peak_inputs, sizes = set(), 0, []
    for ev in program:
        if ev >= 0:
            sizes.append(ev)
            if ev == block_in:
                live.add(len(sizes))
        else:
            live.discard(-ev)
        peak_inputs = max(peak_inputs, len(live))
    assert peak_inputs >= LLAMA2.num_hidden_layers + 1
    assert not live  # everything the program makes it frees


def test_the_answer_ai_512_token_run_leaves_most_of_the_residue_unused():
    # batch 1 x 512 tokens: 4 MiB hidden states, most tensors in the small pool or smaller than the residue's
    # blocks, so the residue stays beside the step (AAI_FSDPQLORA_2403-3: measured 10.24 GiB reserved)
    sc = _aai(micro_batch_size=1, seq_len=512)
    r = compute(LLAMA2, sc)
    residue = wrap_residue(r)
    assert 1.0 * 2**30 < residue < 1.5 * 2**30
    e = estimate(sc)
    assert e.peak.reserved_bytes > host_wrap_floor(r)
    # at batch 6 x 2048 the step's own tensors take more of it
    assert wrap_residue(compute(LLAMA2, _aai(micro_batch_size=6, seq_len=2048))) < residue


def test_no_residue_where_fsdp1_does_not_wrap_from_the_host():
    assert wrap_residue(compute(LLAMA2, _aai(parallelism="ddp"))) == 0
    assert wrap_residue(compute(LLAMA2, _aai(framework="torchtune", framework_version="torchtune-0.4"))) == 0


def test_a_clone_of_the_allocator_replays_like_the_original():
    from vramfit.sim.cuda_allocator import CachingAllocatorModel

    a = CachingAllocatorModel()
    kept = a.malloc(30 * MiB)
    for n in (60 * MiB, 30 * MiB, 3 * MiB, 100):  # the 30 and 3 MiB split the cached 60 MiB block; 100 B: a
        a.free(a.malloc(n))  # 2 MiB small-pool segment
    b = a.clone()
    assert vars(b.stats) == vars(a.stats)
    for m in (a, b):  # the same requests: 50 MiB splits the cached 60 MiB block, 70 MiB opens a segment
        m.malloc(50 * MiB)
        m.malloc(70 * MiB)
    assert vars(b.stats) == vars(a.stats) and a.stats.reserved == (30 + 60 + 2 + 70) * MiB
    a.free(kept)  # the clone does not share the original's blocks
    assert b.stats.allocated == a.stats.allocated + 30 * MiB


def test_the_figure_still_grows_with_the_micro_batch():
    # the planner's search assumes it (plan/fit.py bisect_largest); the residue term shrinks as the step grows,
    # counted so that the sum does not (step_alone)
    for method, seq in (("lora", 512), ("qlora", 512), ("lora", 2048), ("qlora", 2048)):
        keys = {"method": method, "seq_len": seq} | ({"quantize": "nf4-dq"} if method == "qlora" else {})
        figures = [estimate(_aai(micro_batch_size=b, **keys)).peak.device_bytes for b in range(1, 9)]
        assert figures == sorted(figures), (method, seq)
