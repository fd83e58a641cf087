"""ZeRO-3's reserved figure against DeepSpeed 0.19.8's engine (`vramfit simulate --full-depth`, its trace replayed
through sim/cuda_allocator.py), full fine-tuning, bf16-true, micro-batch 1, 2 GPUs; estimate/zero3_reserved.py.

| case | engine (simulator) | replay as simulated | replay on a GPU | estimate before | estimate now |
|---|---|---|---|---|---|
| Qwen2.5-0.5B seq 256, no offload | 7,562,330,112 (7,212 MiB) | 7,210 MiB (-0.03 %) | 6,382 MiB | 6,103 MiB | 6,382 MiB |
| same, offload_optimizer | 3,200,253,952 (3,052 MiB) | 3,050 MiB (-0.07 %) | 2,072 MiB | 2,805 MiB | 2,805 MiB |
| same, + offload_param | 2,705,326,080 (2,580 MiB) | 2,578 MiB (-0.08 %) | 1,838 MiB | 2,334 MiB | 2,334 MiB |
| TinyLlama-1.1B seq 512, no offload | 14,474,543,104 (13,804 MiB) | 13,804 MiB (0 %) | 11,550 MiB | 11,970 MiB | 11,970 MiB |

The engine's default stream: the load's segments, then 150 + 150 MiB (the fp32 log-softmax output and its gradient),
260 + 260 (the tied weight's two gradients) and, at the boundary with the optimizer offloaded, 520 (the embedding
partition's float64 norm copy); without offload the step opens 520 (the same copy, for the norm), 944 (the flat
gradients cast to fp32) and 944 + 944 (the first step's AdamW states).

"As simulated" is the simulator's run as it was when these engine figures were taken: the whole model built on the GPU
before ``deepspeed.initialize`` partitions it, and ``empty_cache`` a no-op (its CPU accelerator), so every whole
parameter's segment stayed cached. The simulator now traces ``empty_cache`` and its replay honours it (6,774 / 3,080 /
2,582 / 13,088 MiB for the four cases: test_sim_deepspeed_empty_cache.py); it still builds the model whole. On a GPU the HF
Trainer builds the model under ``deepspeed.zero.Init`` one parameter at a time (transformers 5.24.0 modeling_utils.py l.
1435-1446) and ``defragment`` (DeepSpeed 0.19.8 runtime/zero/utils.py l. 215-241) empties the cache before the flat
partition comes back: the estimate replays that, a simulator gap of 828 MiB (Qwen2.5-0.5B) the engine figures keep.
"""

from __future__ import annotations

import importlib

import pytest

from vramfit.estimate import estimate, resolve_spec
from vramfit.estimate.allocator import transient_reserved
from vramfit.scenario import parse_scenario

MiB = 1024**2
zero3 = importlib.import_module("vramfit.estimate.zero3_reserved")
SC = {"model": "Qwen/Qwen2.5-0.5B", "method": "full", "precision": "bf16-true", "seq_len": 256, "num_gpus": 2,
      "framework": "hf", "parallelism": "zero3"}
TINYLLAMA = {**SC, "model": "TinyLlama/TinyLlama-1.1B-Chat-v1.0", "seq_len": 512}


def _step(sc: dict):
    parsed = parse_scenario(sc)
    return importlib.import_module("vramfit.estimate").compute(resolve_spec(parsed)[1], parsed, None)


@pytest.mark.parametrize(("sc", "engine"), [
    ({**SC, "offload": "none"}, 7_562_330_112),
    ({**SC, "offload": "optimizer"}, 3_200_253_952),
    ({**SC, "offload": "optimizer+params"}, 2_705_326_080),
    ({**TINYLLAMA, "offload": "none"}, 14_474_543_104)])
def test_the_replay_of_the_simulated_run_reserves_what_the_engine_does(sc, engine):
    assert zero3.zero3_reserved_floor(_step(sc), as_simulated=True) == pytest.approx(engine, rel=0.001)


def test_the_boundary_micro_batch_opens_the_engines_segments():
    """After the load (the replay's 1,710 / 1,238 MiB against the engine's 1,632 / 1,122: the 1-10 MiB originals packed
    differently, about what the activations' small-pool segments, not replayed, take in the engine, 76 / 118 MiB) the
    replay opens what the engine opens: 150 + 150 + 260 + 260 + 520 MiB (module docstring)."""
    for offload, load_mib in (("optimizer", 1_710), ("optimizer+params", 1_238)):
        r = _step({**SC, "offload": offload})
        events, empty = zero3.zero3_load_events(r, as_simulated=True)
        assert empty is None and transient_reserved(events)[1] == load_mib * MiB
        opened = zero3.zero3_reserved_floor(r, as_simulated=True) - load_mib * MiB
        assert opened == (150 + 150 + 260 + 260 + 520) * MiB


def test_on_a_gpu_defragment_empties_the_cache_before_the_flat_partition():
    """zero.Init's load leaves one whole parameter's segments at a time and ``defragment``'s ``empty_cache`` gives them
    back: the estimate without offload is 6,382 MiB, 828 MiB under the simulated run's 7,210 (the usual figure,
    estimate/reserved.py, was 6,103: neither the step's float64, fp32 gradient nor AdamW state segments beside the
    cached ones); with offload_param the partitions live on the host: no defragment, no empty_cache."""
    r = _step({**SC, "offload": "none"})
    events, empty = zero3.zero3_load_events(r)
    assert events[empty] == 2 * 247_016_384 and all(e < 0 for e in events[empty - 10:empty])  # partitions freed first
    assert zero3.zero3_reserved_floor(r, as_simulated=True) - zero3.zero3_reserved_floor(r) == 828 * MiB
    assert estimate({**SC, "offload": "none"}).peak.reserved_bytes == 6_382 * MiB == zero3.zero3_reserved_floor(r)
    assert zero3.zero3_load_events(_step({**SC, "offload": "optimizer+params"}))[1] is None


@pytest.mark.parametrize(("sc", "usual"), [({**SC, "offload": "optimizer"}, 2_941_236_736),
                                           ({**SC, "offload": "optimizer+params"}, 2_447_275_520),
                                           ({**TINYLLAMA, "offload": "none"}, 12_551_405_568)])
def test_the_usual_figure_stands_above_the_floor(sc, usual):
    assert zero3.zero3_reserved_floor(_step(sc)) < usual == estimate(sc).peak.reserved_bytes


def test_sub_groups_close_once_their_partitions_reach_sub_group_size():
    """``_create_fp16_sub_groups``: Llama-3.1-70B on 16 GPUs (4,409,606,656 partition elements) steps in five sub-groups
    of at least 1e9 elements each but the last; Qwen2.5-0.5B's whole partition is one."""
    r = _step({"model": "meta-llama/Llama-3.1-70B", "method": "full", "seq_len": 4096, "num_gpus": 16,
               "framework": "hf", "parallelism": "zero3"})
    groups = zero3.sub_groups(r)
    assert sum(groups) == 4_409_606_656 and len(groups) == 5 and min(groups[:-1]) >= 1_000_000_000
    assert zero3.sub_groups(_step({**SC, "offload": "none"})) == [247_016_384]


def test_the_load_frees_each_whole_parameter_once_partitioned():
    """Each whole parameter, its partition (``ceil(numel / 2)``), the whole one freed; the partitions freed; the flat
    partition on the GPU only without offload_param: nothing else stays live."""
    for as_simulated in (False, True):
        ev = zero3.zero3_load_events(_step({**SC, "offload": "optimizer"}), as_simulated)[0]
        sizes = [e for e in ev if e >= 0]
        assert sum(sizes) - sum(sizes[-e - 1] for e in ev if e < 0) == 2 * 247_016_384  # the engine's flat partition
        params = zero3.zero3_load_events(_step({**SC, "offload": "optimizer+params"}), as_simulated)[0]
        assert sum(e for e in params if e >= 0) == sum(sizes) - 2 * 247_016_384


def test_zero3_replays_only_full_fine_tuning():
    assert zero3.zero3_reserved_floor(_step({**SC, "method": "lora", "offload": "none"})) == 0
