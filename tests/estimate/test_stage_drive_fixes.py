"""Preference and RL stages as TRL runs them, found by driving the product (issue 13 review, 2026-12-07)."""

import pytest
from typer.testing import CliRunner

from vramfit import estimate
from vramfit.cli.main import app
from vramfit.errors import ScenarioError
from vramfit.scenario import parse_scenario

QWEN7 = "Qwen/Qwen2.5-7B"


def _comp(r, name):
    return next((c.bytes for c in r.components if c.name == name), 0)


def _phase(r, name):
    return next(p.allocated_bytes for p in r.phases if p.phase == name)


def _at(r, phase):
    return next(dict(p.breakdown) for p in r.phases if p.phase == phase)


def test_zero3_generation_gathers_every_weight_on_one_gpu_with_parameter_offload():
    """TRL's unwrap_model_for_generation gathers the whole model whenever ZeRO-3 is on (trl/models/utils.py
    GatheredParameters): with offloaded parameters none of it was on the GPU, so all of it is extra; on one GPU
    without offload the partition is the whole model already."""
    keys = {"model": QWEN7, "stage": "grpo", "method": "lora", "seq_len": 2048, "micro_batch_size": 16, "grad_accum": 4,
            "gradient_checkpointing": "full", "parallelism": "zero3", "num_gpus": 1}
    one = estimate(keys)  # the whole partition on one GPU: the bf16 weights and the fp32 adapters ZeRO-3 gathers
    full = _comp(one, "weights") + _comp(one, "adapters")
    assert full == one.model.num_params * 2 + _comp(one, "adapters")
    for more in ({}, {"num_gpus": 8, "grad_accum": 1}):
        off = estimate({**keys, **more, "offload": "optimizer+params"})
        kept = _comp(off, "weights") + _comp(off, "adapters")  # what the persistence threshold keeps on the GPU
        assert kept < 2 * 2**20 and _at(off, "generate")["gathered_weights"] == full - kept
    eight = estimate({**keys, "num_gpus": 8, "grad_accum": 1})
    shard = _comp(eight, "weights") + _comp(eight, "adapters")  # an eighth, and the small tensors kept whole
    assert full // 8 < shard < full // 8 + 2**21
    assert _at(eight, "generate")["gathered_weights"] == full - shard  # beside the resident shard
    assert "gathered_weights" not in _at(one, "generate")


def test_zero3_qlora_rollout_gathers_the_4bit_base_not_a_16bit_copy():
    """A QLoRA model's gathered parameters are its stored ones: the packed 4-bit base, the 16-bit embeddings and head
    and the adapters (drive 2026-12-07: a 16-bit copy of every parameter had made the rollout's need grow with the GPU
    count, 12.69 -> 16.85 GiB from 2 to 64 GPUs on Llama-3.1-8B, above LoRA's)."""
    keys = {"model": "meta-llama/Llama-3.1-8B", "stage": "grpo", "method": "qlora", "parallelism": "zero3",
            "seq_len": 1024, "micro_batch_size": 2, "gradient_checkpointing": "full"}
    one = estimate({**keys, "num_gpus": 1})
    whole = _comp(one, "weights") + _comp(one, "quantized_base") + _comp(one, "adapters")
    assert whole < one.model.num_params  # under 1 byte a parameter: mostly 4-bit
    needs = []
    for n in (2, 8, 64):
        r = estimate({**keys, "num_gpus": n})
        resident = _comp(r, "weights") + _comp(r, "quantized_base") + _comp(r, "adapters")
        assert _at(r, "generate")["gathered_weights"] == whole - resident
        needs.append(r.peak.required_bytes)
    assert needs == sorted(needs, reverse=True)  # more shards never raise the per-GPU need
    lora = estimate({**keys, "method": "lora", "num_gpus": 64})
    assert needs[-1] < lora.peak.required_bytes


def test_vision_rollouts_and_reference_passes_hold_the_image_tokens():
    keys = {"model": "Qwen/Qwen2-VL-2B-Instruct", "stage": "grpo", "method": "lora", "micro_batch_size": 8,
            "grad_accum": 16, "seq_len": 2048, "completion_len": 1024, "gradient_checkpointing": "full",
            "image_height": 896, "image_width": 896}
    text, images = estimate({**keys, "images_per_sample": 0}), estimate({**keys, "images_per_sample": 4})
    kv = [a for a in images.assumptions if a.startswith("Generation with transformers generate: KV cache")]
    assert kv and "KV cache 21.00 GiB" in kv[0]  # 1,024 prompt + 4,096 image + 1,024 completion tokens, 3x text's 7.00
    assert any("5120 prompt + 1024 completion tokens" in a for a in images.assumptions)
    assert _phase(images, "generate") > 2 * _phase(text, "generate")
    dpo = {"model": "Qwen/Qwen2-VL-2B-Instruct", "stage": "dpo", "method": "lora", "micro_batch_size": 2, "seq_len": 512}
    assert _comp(estimate({**dpo, "images_per_sample": 2}), "score_logits") > _comp(estimate(dpo), "score_logits")


def test_precomputed_reference_keeps_no_copy_under_fsdp():
    """TRL 1.16.0 dpo_trainer.py l. 1033-1034 / kto_trainer.py l. 1041-1042 drop the reference after the precompute."""
    keys = {"model": "meta-llama/Llama-3.1-8B", "stage": "dpo", "method": "full", "parallelism": "fsdp", "num_gpus": 8,
            "micro_batch_size": 2, "seq_len": 2048, "gradient_checkpointing": "full"}
    pre, copy = estimate({**keys, "reference": "precomputed"}), estimate({**keys, "reference": "copy"})
    assert _comp(pre, "reference_model") == 0 < _comp(copy, "reference_model")
    assert pre.peak.allocated_bytes < copy.peak.allocated_bytes


def test_kto_needs_two_examples_per_gpu_batch():
    """TRL 1.16.0 kto_trainer.py l. 844-847 refuses a per-device batch of 1 (the KL term pairs examples)."""
    with pytest.raises(ScenarioError) as err:
        parse_scenario({"model": QWEN7, "stage": "kto", "micro_batch_size": 1})
    assert str(err.value) == ("micro_batch_size: KTO's KL term needs at least 2 examples per GPU batch (TRL refuses 1) "
                              "(valid values: 2 or more)")
    assert parse_scenario({"model": QWEN7, "stage": "kto"}).micro_batch_size == 2
    r = CliRunner().invoke(app, ["fit", "--model", "meta-llama/Llama-3.1-8B", "--stage", "kto", "--method", "lora",
                                 "--seq-len", "4096", "--gpu", "h100-sxm"], env={"COLUMNS": "200", "VRAMFIT_CALIBRATION": "off"})
    assert "largest micro-batch at seq 4096: none (micro-batch 2 does not fit)" in r.output


def test_ppo_keeps_its_generation_scores():
    """TRL v1.9.0 experimental/ppo/ppo_trainer.py: stacked fp32 scores, padded and kept as ``logitss`` to the next
    rollout; the generation phase grew smaller as completion_len grew."""
    keys = {"model": "meta-llama/Llama-3.2-1B", "method": "lora", "stage": "ppo", "micro_batch_size": 4, "grad_accum": 16,
            "seq_len": 1024, "gradient_checkpointing": "full"}
    short, long = estimate({**keys, "completion_len": 53}), estimate({**keys, "completion_len": 256})
    rows = 64 * 128_256 * 4  # 64 rollouts per GPU (4 x 16), fp32 vocabulary rows
    assert _phase(long, "generate") > _phase(short, "generate")
    for r, n in ((short, 53), (long, 256)):
        assert _at(r, "score")["rollout_scores"] == _at(r, "optimizer-step")["rollout_scores"] == n * rows
        # one chunk of 64: the stack (previous + this chunk's rows + their stack) and the pad both reach 3 x
        assert _at(r, "generate")["rollout_scores"] == 3 * n * rows


def test_num_generations_error_lists_the_group_sizes_that_divide():
    with pytest.raises(ScenarioError) as err:
        parse_scenario({"model": QWEN7, "stage": "grpo", "micro_batch_size": 6, "grad_accum": 1})
    assert str(err.value).endswith("got 8 (valid values: 2, 3, 6)")


def test_a_variant_moving_to_kto_takes_its_least_micro_batch_unless_one_was_given():
    base = parse_scenario({"model": QWEN7})
    assert base.replace(stage="kto").micro_batch_size == 2 and base.replace(stage="dpo").micro_batch_size == 1
    assert parse_scenario({"model": QWEN7, "micro_batch_size": 4}).replace(stage="kto").micro_batch_size == 4
    # a value at its schema default follows, as every key a scenario written out whole states (Scenario._keeps)
    assert parse_scenario({"model": QWEN7, "micro_batch_size": 1}).replace(stage="kto").micro_batch_size == 2


@pytest.mark.parametrize("stage", ["dpo", "kto", "grpo"])
def test_a_loss_the_stage_trainer_has_not_is_counted_nowhere(stage):
    """The assumption says a chunked loss is not what the stage's trainer runs; the figure must agree (drive
    2026-12-07: the output projections' chunked-loss gradients were still added at the loss backward, +0.97 GiB on
    Llama-3.2-1B DPO full at 4 x 2,048)."""
    keys = {"model": "meta-llama/Llama-3.2-1B", "method": "full", "stage": stage, "seq_len": 2048,
            "micro_batch_size": 4 if stage != "grpo" else 1}
    standard, chunked = estimate(keys), estimate({**keys, "loss": "chunked"})
    assert chunked.peak.required_bytes == standard.peak.required_bytes
    assert [dict(p.breakdown) for p in chunked.phases] == [dict(p.breakdown) for p in standard.phases]
    assert any(a.startswith(f"loss chunked: the {stage} trainer") for a in chunked.assumptions)
    assert chunked.scenario.loss.value == "chunked"  # the result still says what was asked


def test_colocated_vllm_share_must_hold_its_own_model_copy():
    """vLLM loads a 16-bit copy of the checkpoint inside its gpu_memory_utilization budget and refuses to start with
    no KV-cache block left: the card verdict says the run cannot start there, and which share does (drive 2026-12-07:
    0.05 of an H100 was counted as 3.96 GiB beside a 15 GiB model, and the run said to fit)."""
    from vramfit.plan.verdict import estimate_fits

    keys = {"model": "meta-llama/Llama-3.1-8B", "method": "lora", "stage": "grpo", "generation": "vllm-colocate",
            "gpu": "h100-sxm", "seq_len": 1024}
    small = estimate_fits({**keys, "vllm_gpu_memory_utilization": 0.05}).fits[0]
    assert small.gpu_id == "h100-sxm" and not small.fits and not small.runs
    # the copy (14.96 GiB) and one 1,024-token sequence's 16-bit KV cache (32 layers x 2 x 8 heads x 128 x 2 B a token)
    assert small.verdict == ("cannot run: vLLM's 0.05 share (3.96 GiB) is less than its model copy and one sequence's "
                             "KV cache (15.08 GiB) (--vllm-gpu-memory-utilization 0.20 or more runs)")
    ok = estimate_fits({**keys, "vllm_gpu_memory_utilization": 0.20}).fits[0]
    assert ok.runs and ok.fits
    by_card = {f.gpu_id: f for f in estimate_fits(keys).fits}  # the default 0.3: not on a 24 GB card
    assert by_card["h100-sxm"].runs and not by_card["rtx4090"].runs
    assert "--vllm-gpu-memory-utilization 0.63 or more runs" in by_card["rtx4090"].verdict
    # an MXFP4 checkpoint's experts stay MXFP4 in vLLM (gpt-oss-20b: 12.1 GiB, not 38.96 in 16 bits): 0.3 starts
    oss = estimate_fits({**keys, "model": "openai/gpt-oss-20b", "method": "lora"}).fits[0]
    assert oss.runs
    res = CliRunner().invoke(app, ["estimate", "--model", keys["model"], "--method", "lora", "--stage", "grpo",
                                   "--generation", "vllm-colocate", "--vllm-gpu-memory-utilization", "0.05",
                                   "--gpu", "h100-sxm", "--seq-len", "1024"], env={"COLUMNS": "200"})
    assert res.exit_code == 0 and "is less than its model copy and one sequence's KV cache" in " ".join(res.output.split())


def test_ppo_gathers_its_full_value_model_beside_a_qlora_policy_and_hpz_keeps_its_copy():
    """PPO's value model is trained in full 16 bits whatever the policy's method, so ZeRO-3 gathers it whole beside the
    QLoRA policy's 4-bit base; hpZ's node-local weight copy is not reused by the gather (review 2026-12-07)."""
    keys = {"model": "meta-llama/Llama-3.1-8B", "gpu": "h100-sxm", "stage": "ppo", "method": "qlora", "num_gpus": 8,
            "parallelism": "zero3"}
    ppo = _at(estimate(keys), "generate")["gathered_weights"]
    grpo = _at(estimate({**keys, "stage": "grpo"}), "generate")["gathered_weights"]
    full = _at(estimate({**keys, "stage": "grpo", "method": "full"}), "generate")["gathered_weights"]
    assert ppo == grpo + full  # the policy's stored base and the 16-bit value model, each less its shard
    assert 4.5 * 2**30 < grpo < 4.7 * 2**30 and 13.0 * 2**30 < full < 13.2 * 2**30
    nodes = {"model": "meta-llama/Llama-3.1-8B", "stage": "grpo", "method": "full", "num_gpus": 16, "num_nodes": 2,
             "parallelism": "zero3"}
    assert (_at(estimate({**nodes, "shard_scope": "node"}), "generate")["gathered_weights"]
            == _at(estimate(nodes), "generate")["gathered_weights"])


def test_kto_default_batch_follows_the_release_it_runs():
    """KTO's default micro-batch is the least its trainer runs (TRL 2, LLaMA-Factory 1): it follows a change of
    framework_version unless given (review 2026-12-07: the replace kept 1 and then refused it under TRL)."""
    lf = parse_scenario({"model": "meta-llama/Llama-3.1-8B", "stage": "kto", "framework_version": "llamafactory-0.9"})
    assert lf.micro_batch_size == 1 and lf.replace(framework_version=None).micro_batch_size == 2
    trl = parse_scenario({"model": "meta-llama/Llama-3.1-8B", "stage": "kto"})
    assert trl.micro_batch_size == 2 and trl.replace(framework_version="llamafactory-0.9").micro_batch_size == 1
    given = parse_scenario({"model": "meta-llama/Llama-3.1-8B", "stage": "kto", "micro_batch_size": 4})
    assert given.replace(framework_version="llamafactory-0.9").micro_batch_size == 4
