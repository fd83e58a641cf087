"""The DeepSpeed config as an input: typed parsing, HF's "auto" values, and the ZeRO buffers it sizes."""

import json

import pytest

from vramfit.errors import ScenarioError
from vramfit.estimate import deepspeed as ds
from vramfit.estimate.core import comm_buffers
from vramfit.estimate.framework import scenario_profile
from vramfit.estimate.step import compute
from vramfit.estimate.zero12_partition import zero1_step_grads
from vramfit.models import resolve_model
from vramfit.scenario import Offload, Parallelism, parse_scenario

LLAMA = resolve_model("meta-llama/Llama-3.1-8B").spec  # h = 4096
BLOOM = resolve_model("bigscience/bloomz-7b1").spec  # h = 4096, tied V = 250880


def _sc(**keys):
    base = {"model": "meta-llama/Llama-3.1-8B", "method": "full", "precision": "bf16-mixed", "num_gpus": 4}
    return parse_scenario({**base, **keys})


def _comm(spec, sc):
    return comm_buffers(spec, sc, scenario_profile(sc), compute(spec, sc).parts)


def test_auto_is_filled_from_the_hidden_size_and_missing_keys_take_deepspeeds_defaults():
    z = ds.resolve(ds.from_mapping({"zero_optimization": {"stage": 3, "reduce_bucket_size": "auto",
                                                          "stage3_prefetch_bucket_size": "auto",
                                                          "stage3_param_persistence_threshold": "auto"}}), 4096, 3)
    assert (z.reduce_bucket_size, z.prefetch_bucket_size, z.persistence_threshold) == (4096**2, int(0.9 * 4096**2), 40960)
    assert z.max_live_parameters == 1_000_000_000 and z.overlap_comm  # overlap_comm defaults on at stage 3
    plain = ds.resolve(ds.DeepSpeedConfig(), 4096, 2)
    assert (plain.reduce_bucket_size, plain.overlap_comm, plain.contiguous_gradients) == (500_000_000, False, True)


def test_zero2_reduce_buckets_come_from_the_config_not_the_hidden_size():
    one = {"stage": 2, "reduce_bucket_size": 1e8, "overlap_comm": False}
    assert _comm(LLAMA, _sc(deepspeed_config={"zero_optimization": one})) == 100_000_000 * 2
    two = {**one, "overlap_comm": True}  # stage_1_and_2.py setup_buckets: buf_0 and buf_1
    assert _comm(LLAMA, _sc(deepspeed_config={"zero_optimization": two})) == 2 * 100_000_000 * 2
    none = {**one, "contiguous_gradients": False}
    assert _comm(LLAMA, _sc(deepspeed_config={"zero_optimization": none})) == 0
    # the HF docs template: reduce_bucket_size "auto" = h*h, overlap_comm true, bf16 buckets
    assert _comm(LLAMA, _sc(parallelism="zero2")) == 2 * 4096 * 4096 * 2


def test_zero3_keeps_max_live_parameters_gathered_plus_the_tied_head():
    # PEFT_README-117's setup: bloomz-7b1 fp32, DeepSpeed defaults (accelerate's generated config)
    sc = parse_scenario({"model": "bigscience/bloomz-7b1", "method": "lora", "precision": "fp32",
                         "lora_targets": ["query_key_value"], "micro_batch_size": 8, "seq_len": 64,
                         "deepspeed_config": {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                                                                    "offload_param": {"device": "cpu"}}}})
    assert (sc.parallelism, sc.offload) == (Parallelism.ZERO3, Offload.OPTIMIZER_PARAMS)
    ipg = 500_000_000 * 4
    gathered = 1_000_000_000 * 4 + 250880 * 4096 * 4
    assert _comm(BLOOM, sc) == ipg + gathered
    fewer = sc.replace(deepspeed_config={"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                                                               "offload_param": {"device": "cpu"},
                                                               "stage3_max_live_parameters": 1e8}})
    assert _comm(BLOOM, sc) - _comm(BLOOM, fewer) == 900_000_000 * 4


def test_a_config_file_is_read_and_round_trips(tmp_path):
    p = tmp_path / "ds.json"
    p.write_text(json.dumps({"zero_optimization": {"stage": 2, "reduce_bucket_size": "auto", "overlap_comm": True}}))
    sc = _sc(deepspeed_config=str(p))
    assert sc.parallelism is Parallelism.ZERO2 and sc.deepspeed_config.reduce_bucket_size == "auto"
    assert parse_scenario(sc.to_dict()) == sc


@pytest.mark.parametrize("keys, words", [
    ({"deepspeed_config": {"zero_optimization": {"stage": 3}}, "parallelism": "zero2"}, "stage 3 means parallelism zero3"),
    ({"deepspeed_config": {"zero_optimization": {"stage": 2, "allgather_bucket_size": "auto"}}}, "'auto' is filled"),
    ({"deepspeed_config": {"zero_optimization": {"stage": 2, "reduce_bucket_size": -1}}}, "whole number"),
    ({"deepspeed_config": {"zero_optimization": {"stage": 5}}}, "0, 1, 2 or 3"),
    ({"deepspeed_config": {"zero_optimization": {"stage": 2}}, "offload": "optimizer"}, "offload none"),
    ({"deepspeed_config": {"zero_optimization": {}}, "parallelism": "fsdp"}, "applies to DeepSpeed ZeRO"),
    ({"deepspeed_config": "/no/such/ds.json"}, "file not found"),
    ({"deepspeed_config": 3}, "path to its JSON file"),
])
def test_bad_configs_get_one_line_naming_the_key(keys, words):
    with pytest.raises(ScenarioError, match=words) as e:
        _sc(**keys)
    assert e.value.key == "deepspeed_config" and "\n" not in str(e.value)


def test_zero3_makes_one_subgroups_fp32_gradients_in_the_step_and_takes_the_norm_in_float64():
    """The fp32 sub-group gradient exists only inside the step (DeepSpeed 0.19.8 stage3.py
    _prepare_fp32_grad_for_sub_group / _release_sub_group); the init-time buffer is let go
    (initialize_optimizer_states: ``group.grad = None`` without offload): nothing of it between steps."""
    sc = _sc(num_gpus=8, parallelism="zero3")
    base = compute(LLAMA, sc)
    small = compute(LLAMA, sc.replace(deepspeed_config={"zero_optimization": {"stage": 3, "sub_group_size": 5e7}}))
    assert base.parts.master_weights == small.parts.master_weights  # the fp32 master partition only
    # the 8B model's per-GPU partition (1.0e9 elements) is above both sub_group_size values
    assert base.opt_temp == (2 + 4) * 1_000_000_000  # the flat bf16 sub-group gradient and its fp32 cast
    # with 5e7-element sub-groups (6 x 5e7 = 300 MB) the float64 copy of the largest gradient partition is larger (the 128256 x 4096
    # output layer over 8 GPUs)
    assert small.opt_temp == 8 * (-(-128256 * 4096 // 8))
    off = compute(LLAMA, sc.replace(offload="optimizer"))
    assert off.parts.master_weights == 0 and off.opt_temp == 0  # offloaded: the step runs on the host


def test_zero3_holds_its_flat_gradient_partitions_from_init():
    """stage3.py ``grad_partitions_flat_buffer`` (16-bit, this rank's partitions) is allocated at init and kept:
    held at the loss's backward with or without gradient accumulation."""
    sc = _sc(num_gpus=8, parallelism="zero3")
    for s in (sc, sc.replace(grad_accum=4)):
        step = compute(LLAMA, s)
        assert step.held_grads == step.parts.gradients == 2 * 8_030_261_248 // 8  # bf16, Llama-3.1-8B over 8 GPUs
        bl = dict(next(p for p in step.phases if p.phase.value == "backward-loss").parts)
        assert bl["gradients"] == step.parts.gradients


def test_qlora_under_deepspeed_has_no_fp32_upcast():
    # the engine casts every floating parameter to bf16 (engine.py _cast_module_mixed_precision)
    keys = {"model": "meta-llama/Llama-3.1-8B", "method": "qlora", "num_gpus": 2}
    ddp = compute(LLAMA, parse_scenario({**keys, "parallelism": "ddp"}))
    z2 = compute(LLAMA, parse_scenario({**keys, "parallelism": "zero2"}))
    assert ddp.profile.qlora_unquantized_fp32 and not z2.profile.qlora_unquantized_fp32
    # embeddings + lm_head + 65 norms in bf16 instead of fp32 (ZeRO-2 does not shard weights)
    assert ddp.parts.weights - z2.parts.weights == 2 * (2 * 128256 * 4096 + 65 * 4096)


def test_zero3_keeps_parameters_under_the_persistence_threshold_whole_on_every_gpu():
    def adapters(n, threshold):
        ds_cfg = {"zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": threshold}}
        sc = parse_scenario({"model": "meta-llama/Llama-3.1-8B", "method": "lora", "num_gpus": n,
                             "deepspeed_config": ds_cfg})
        return compute(LLAMA, sc).parts.adapters

    whole = adapters(1, 0)
    assert adapters(8, 10**12) == whole  # every adapter persists: not sharded
    assert adapters(8, 0) == pytest.approx(whole / 8, abs=8 * 512)  # none persists: 1/8 each (+ rounding)
    assert adapters(8, 0) < adapters(8, 100_000) < whole  # r x 4096 adapters persist, r x 14336 ones do not


def test_zero2_step_copies_its_gradient_partition_to_fp32():
    step = compute(LLAMA, _sc(parallelism="zero2"))  # 4 GPUs, full fine-tuning, no offload
    assert step.opt_temp == (2 + 4) * -(-step.parts.num_trainable // 4)  # the flat bf16 partition and its fp32 cast
    assert compute(LLAMA, _sc(parallelism="zero2", offload="optimizer")).opt_temp == 0  # the step runs on the CPU


def test_zero1_step_keeps_rank0s_partition_parameters_whole():
    """ZeRO-1 builds the same ``grads_in_partition`` buffer as ZeRO-2 (DeepSpeed 0.19.8 stage_1_and_2.py
    ``reduce_ipg_grads``, "zero stage 1": ``copy_grads_in_partition`` for ``is_param_in_current_partition``), sized
    by rank 0's parameters whole: on Qwen2.5-0.5B with 8 GPUs the 136,134,656-element embedding plus one 9,728-element
    norm, 272,288,768 B at the step, not the partition's share of all (123,512,064 B). `vramfit simulate --full-depth`
    (bf16-true, seq 256): the engine's second step peaks at 2,516,259,328 B allocated; the estimate's step
    2,514,603,712 B (-0.07 %; 2,365,827,008, -6.0 %, before)."""
    sc = parse_scenario({"model": "Qwen/Qwen2.5-0.5B", "method": "full", "precision": "bf16-true", "seq_len": 256,
                         "num_gpus": 8, "parallelism": "zero1", "framework": "hf"})
    qwen = resolve_model("Qwen/Qwen2.5-0.5B").spec
    all_grads = 2 * 494_032_768
    assert zero1_step_grads(qwen, sc, all_grads, True) == 272_288_768
    lora = parse_scenario({"model": "Qwen/Qwen2.5-0.5B", "num_gpus": 8, "parallelism": "zero1"})
    assert zero1_step_grads(qwen, lora, 1_000, True) == 125  # adapters: the partition stands for them
    assert zero1_step_grads(qwen, parse_scenario({**sc.to_dict(), "offload": "optimizer"}), all_grads, True) == 0


def _offloaded_zero1(model, bucket, **keys):
    zero = {"stage": 1, "reduce_bucket_size": bucket, "offload_optimizer": {"device": "cpu"}}
    return parse_scenario({"model": model, "precision": "bf16-true", "seq_len": 256, "num_gpus": 2, "framework": "hf",
                           "parallelism": "zero1", "offload": "optimizer", "deepspeed_config": {"zero_optimization": zero},
                           **keys})


def test_zero1_offload_keeps_each_large_outside_gradient_in_its_own_allocation(tmp_path):
    """ZeRO-1 with the optimizer offloaded keeps, until the end of backward, each gradient outside rank 0's partition
    larger than ``reduce_bucket_size`` (``reduce_independent_p_g_buckets_and_remove_grads``), each its own allocation:
    an MLP weight of 896 x 4865 (8,718,080 B) takes 8,718,336 B (512-byte rounding), 49 of them 12,544 B above the
    plain sum. LoRA's adapters tensor by tensor: Qwen2.5-0.5B r 16, bucket 50,000: only the 77,824-element gate/up B
    and down A of layers 12-23 (36 tensors, 5,603,328 B), not every gradient outside (8,798,208 B)."""
    from vramfit.estimate.ds_offload import zero1_gpu_grads

    odd = tmp_path / "config.json"
    odd.write_text(json.dumps({**resolve_model("Qwen/Qwen2.5-0.5B").config, "intermediate_size": 4865}))
    full = _offloaded_zero1(str(odd), 802_816, method="full")
    assert zero1_gpu_grads(resolve_model(str(odd)).spec, full, 0, [], True) == 427_198_464
    lora = _offloaded_zero1("Qwen/Qwen2.5-0.5B", 50_000, method="lora", lora_rank=16)
    assert compute(resolve_model("Qwen/Qwen2.5-0.5B").spec, lora).parts.gradients == 5_603_328


def test_offload_reserved_takes_the_steps_peak_phase_and_one_gpu_too():
    """ZeRO-2 with the optimizer offloaded (Qwen2.5-0.5B, bf16-true, seq 256): one GPU opens the boundary's norm copies
    on the reduction stream as two do (``reduce_ipg_grads`` never looks at the world size); `vramfit simulate
    --full-depth` reserves 4,271,898,624 B (3,261,057,536 estimated without them, -23.7 %; 4,232,052,736, -0.93 %,
    before the replay took the saved activations and the originals in module order: 4,261,412,864, -0.25 %). With an evaluation pass
    as the allocated peak (eval batch 4) the step's own norm copy at its peak (backward-end-tied) still comes off the
    step's reserved figure: 5,775,556,608 B (5,968,480,768 when the evaluation phase, which has none, was taken;
    5,316,280,320 before the step's replay counted the loss backward's 150 MiB and the tied embedding gradient's
    260 MiB segments, estimate/ds_offload.py offload_step_replay: the pass's 594 MiB fp32 logits blocks fit in
    neither)."""
    from vramfit.estimate import estimate

    base = {"model": "Qwen/Qwen2.5-0.5B", "method": "full", "precision": "bf16-true", "seq_len": 256,
            "framework": "hf", "parallelism": "zero2", "offload": "optimizer"}
    assert estimate({**base, "num_gpus": 1}).peak.reserved_bytes == 4_261_412_864
    evaluated = estimate({**base, "num_gpus": 2, "eval_batch_size": 4}).peak
    assert (evaluated.phase, evaluated.reserved_bytes) == ("evaluate", 5_775_556_608)


def test_keys_a_deepspeed_config_sets_that_the_estimate_does_not_model_are_named(tmp_path):
    """--deepspeed-config reads the buffer sizes; every other key is classified as the config importer does
    (config_import/hf_common.py read_deepspeed) and the ones not modelled are said, grouped by why; nothing is
    refused that was accepted before, and the config's JSON layout keeps only what it sizes."""
    from vramfit import estimate

    cfg = {"zero_optimization": {"stage": 3, "reduce_bucket_size": "auto", "zero_quantized_weights": True,
                                 "reduce_bucket_sise": 5e8, "offload_param": {"device": "none", "pin_memory": True}},
           "bf16": {"enabled": "auto"}, "optimizer": {"type": "Lamb", "params": {"lr": 1e-4}},
           "data_types": {"grad_accum_dtype": "fp32"}, "steps_per_print": 10}
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(cfg))
    sc = _sc(deepspeed_config=str(path))
    assert sc.deepspeed_config.unread == (
        # a misspelt ZeRO key is named as such (DeepSpeed's config model refuses it): ds_read.ZERO_FIELDS
        "zero_optimization.reduce_bucket_sise: not a DeepSpeed ZeRO key (DeepSpeed would refuse it): check the spelling",
        "optimizer.type: the scenario's optimizer key sets the optimizer",
        "zero_optimization.zero_quantized_weights: not read by vramfit (it "
        "models the stage, offload and the buffer sizes in estimate/deepspeed.py)",
        "data_types.grad_accum_dtype: the gradient accumulation dtype (grad_accum_dtype)")  # a real DeepSpeed key
    note = [a for a in estimate(sc).assumptions if a.startswith("DeepSpeed config keys not modelled")]
    assert len(note) == 1 and "zero_quantized_weights" in note[0] and "steps_per_print" not in note[0]
    assert sc.deepspeed_config.to_dict() == {"zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"}}
    # the same keys as a mapping, or only the zero_optimization section: the same classification
    assert _sc(deepspeed_config=cfg).deepspeed_config.unread == sc.deepspeed_config.unread
    section = _sc(parallelism="zero3", deepspeed_config={"reduce_bucket_size": 10**6, "stage3_max_live_parameters": 10**8})
    assert section.deepspeed_config.unread == ()
    # a config whose keys are all read or known to be memory-neutral says nothing
    hf = {"bf16": {"enabled": "auto"}, "optimizer": {"type": "AdamW", "params": {"lr": "auto"}},
          "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": "auto"}}, "gradient_clipping": "auto",
          "zero_optimization": {"stage": 3, "overlap_comm": True, "stage3_gather_16bit_weights_on_model_save": True,
                                "offload_optimizer": {"device": "cpu", "pin_memory": True}}}
    assert not [a for a in estimate(_sc(deepspeed_config=hf)).assumptions if "DeepSpeed config keys" in a]
