"""ZeRO's optimizer offload steps with DeepSpeed's own host optimizer: accelerate swaps the Trainer's optimizer for
DeepSpeedCPUAdam (map_pytorch_optim_to_deepspeed). The planner offered 8-bit AdamW with it and counted 8-bit states on
the host, while the run (and the export's DeepSpeed optimizer section) keeps fp32 Adam states: 218 GiB of host RAM
per GPU planned for a 70B full fine-tuning on 4 GPUs, about 296 GiB needed."""

import pytest

from vramfit import estimate
from vramfit.scenario import parse_scenario

BASE = {"model": "meta-llama/Llama-3.1-70B", "method": "full", "num_gpus": 4, "seq_len": 4096}


@pytest.mark.parametrize("optimizer", ["adamw-8bit", "paged-adamw-8bit", "adamw-4bit", "sgd"])
@pytest.mark.parametrize("parallelism", ["zero2", "zero3"])
def test_zero_offload_keeps_cpu_adam_states_whatever_the_optimizer(parallelism, optimizer):
    keys = {**BASE, "parallelism": parallelism, "offload": "optimizer"}
    named = estimate(**keys, optimizer=optimizer)
    adam = estimate(**keys, optimizer="adamw")
    assert named.host_bytes == adam.host_bytes and named.peak.device_bytes == adam.peak.device_bytes
    assert any(a.startswith("Optimizer offload under ZeRO steps with DeepSpeed's CPU Adam: accelerate replaces the "
                            f"Trainer's {optimizer}") for a in named.assumptions)


def test_lion_and_the_gpu_optimizers_keep_their_own_states():
    zero = {**BASE, "parallelism": "zero3", "offload": "optimizer"}
    assert estimate(**zero, optimizer="lion").host_bytes < estimate(**zero, optimizer="adamw").host_bytes
    on_gpu = {**BASE, "parallelism": "zero3"}
    assert estimate(**on_gpu, optimizer="adamw-8bit").peak.device_bytes < estimate(**on_gpu).peak.device_bytes
    fsdp = {**BASE, "parallelism": "fsdp", "offload": "optimizer+params"}
    assert estimate(**fsdp, optimizer="adamw-8bit").host_bytes < estimate(**fsdp).host_bytes


def test_the_planner_names_the_optimizer_zero_offload_runs():
    from vramfit.plan.search import configs_for

    for optimizer in ("adamw", "adamw-8bit"):
        configs = configs_for(4, parse_scenario({**BASE, "optimizer": optimizer}))
        offloaded = [c for c in configs if c.offload != "none" and c.parallelism.startswith("zero")]
        assert offloaded and {c.optimizer for c in offloaded} == {"adamw"}
        assert any(c.optimizer == "adamw-8bit" and c.offload == "none" for c in configs)


def test_no_plan_pairs_zero_offload_with_an_8bit_optimizer():
    from vramfit.plan import plan

    report = plan(parse_scenario(BASE), gpu_ids=["h100-sxm"], max_gpus=8, with_changes=False)
    zero_offload = [p for p in report.plans if p.offload != "none" and p.parallelism.startswith("zero")]
    assert all(p.optimizer in ("adamw", "lion") for p in zero_offload)
