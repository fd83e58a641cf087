"""The changes that make a run fit keep its effective batch, or say how it changes, as the plan rows do. Before:
a smaller micro-batch of 7 x 1 became 6 x 2 (12) while it read "same effective batch" (and `fit --write-to` wrote it
into the user's file); "more GPUs" gave an effective batch of 1 eight GPUs (8) unsaid, and under tensor parallelism
halved it (it divided by GPUs, not data-parallel ranks); the plan's own header printed the asked effective batch for
a scenario whose GPUs already take more."""

import pytest
from typer.testing import CliRunner

from vramfit import estimate
from vramfit.cli.main import app
from vramfit.plan import changes_to_fit
from vramfit.scenario import parse_scenario

LORA7 = {"model": "meta-llama/Llama-3.1-8B", "method": "lora", "framework": "torchtune",
         "gradient_checkpointing": "full", "micro_batch_size": 7}
TP = {"model": "meta-llama/Llama-3.1-8B", "method": "full", "framework": "torchtitan", "num_gpus": 2,
      "tensor_parallel": 2, "micro_batch_size": 4, "seq_len": 8192}


def _by_name(sc, card, **kw):
    return {c.name: c for c in changes_to_fit(sc, card, **kw)}


def test_a_smaller_micro_batch_keeps_the_effective_batch_exactly():
    c = _by_name(LORA7, "a100-40gb-sxm")["smaller-micro-batch"]
    assert c.changes == {"micro_batch_size": 1, "grad_accum": 7} and c.fits  # 7 is prime: 6 x 2 would be 12
    assert c.description == "micro-batch 1 with 7 accumulation steps (effective batch 7)"
    twelve = _by_name({**LORA7, "micro_batch_size": 12}, "a100-40gb-sxm")["smaller-micro-batch"]
    mb, ga = twelve.changes["micro_batch_size"], twelve.changes["grad_accum"]
    assert mb * ga == 12 and 1 < mb < 12 and twelve.fits


def test_changes_under_tensor_parallelism_count_data_parallel_ranks():
    changes = _by_name(TP, "h100-sxm")
    for c in changes.values():
        assert parse_scenario({**TP, **c.changes}).effective_batch == 4, c.name
    more = changes["more-gpus"]
    assert (more.changes["num_gpus"], more.changes["micro_batch_size"], more.changes["grad_accum"]) == (8, 1, 1)
    assert changes["smaller-micro-batch"].description == "micro-batch 1 with 4 accumulation steps (effective batch 4)"


def test_more_gpus_rounds_up_as_plan_rows_do_and_says_so():
    mistral = {"model": "mistralai/Mistral-7B-v0.1", "method": "full", "precision": "bf16-mixed", "seq_len": 2048}
    more = _by_name(mistral, "h100-sxm", effective_batch=7)["more-gpus"]
    n = more.changes["num_gpus"]
    now = parse_scenario({**mistral, **more.changes}).effective_batch
    assert now > 7 and now % n == 0 and now - n < 7  # the nearest multiple of the ranks at or above 7
    assert more.description.endswith(f"(effective batch {now}: the nearest multiple of {n} ranks at or above 7)")
    # an effective batch of 1 takes one GPU: no more-gpus change, as the planner plans at most 1 GPU for it
    assert "more-gpus" not in _by_name({"model": "meta-llama/Llama-3.1-8B", "method": "full"}, "l40s")


@pytest.mark.parametrize("args, words", [
    (["--effective-batch", "4"], "(effective batch 16, not the 4 asked: its GPUs take more at this micro-batch)"),
    (["--effective-batch", "16"], "(effective batch 16):"),
])
def test_the_plan_header_states_the_scenarios_real_effective_batch(args, words):
    r = CliRunner().invoke(app, ["plan", "--model", "meta-llama/Llama-3.1-8B", "--num-gpus", "8", "--parallelism", "ddp",
                                 "--micro-batch-size", "2", *args], env={"COLUMNS": "250", "VRAMFIT_CALIBRATION": "off"})
    assert r.exit_code in (0, 1), r.output
    assert "your scenario at micro-batch 2 × 1 accumulation × 8 GPU " + words in r.output


def test_host_ram_is_per_node_on_multi_node_plans():
    """``host_ram_bytes`` is labelled "all GPUs of one node": a 16-GPU plan over two nodes summed both nodes' RAM."""
    from vramfit.plan import plan

    rep = plan({"model": "meta-llama/Llama-3.1-70B", "method": "full"}, gpu_ids=["h100-sxm"], effective_batch=64,
               max_gpus=32)
    rows = {(p.num_gpus, p.scenario.get("num_nodes")): p for p in rep.plans if p.host_ram_bytes}
    one, two = rows[(8, 1)], rows[(16, 2)]
    assert one.host_ram_bytes == two.host_ram_bytes > 0


def test_the_plan_header_states_the_fit_figure_the_changes_table_uses():
    """The header printed the device peak (1,392.2 GiB) beside changes whose "needs" column is the fit figure
    (Peak.required_bytes): both are stated now, and the JSON carries the fit figure too."""
    from vramfit.estimate import estimate
    from vramfit.plan import plan

    sc = {"model": "meta-llama/Llama-3.1-8B", "method": "lora", "micro_batch_size": 16, "seq_len": 8192}
    rep = plan(sc, gpu_ids=["rtx4090"], dataset_tokens="10M")
    own = estimate(sc).peak
    assert rep.to_dict()["scenario_required_bytes"] == own.required_bytes < own.device_bytes == rep.scenario_device_bytes
    r = CliRunner().invoke(app, ["plan", "--model", sc["model"], "--method", "lora", "--gpu", "rtx4090",
                                 "--micro-batch-size", "16", "--seq-len", "8192", "--dataset-tokens", "10M"],
                           env={"COLUMNS": "250", "VRAMFIT_CALIBRATION": "off"})
    assert (f"needs {own.required_bytes / 2**30:,.1f} GiB per GPU (device peak {own.device_bytes / 2**30:,.1f})"
            in r.output)


def test_sharding_at_the_same_gpu_count_is_offered_before_offload():
    """8 H100s in DDP, full fine-tuning Llama-3.1-8B: ZeRO-2 or ZeRO-3 at the same count fit with no offload, and rank
    above the offload changes (drive 2026-12-07: only CPU offload had been offered)."""
    sc = {"model": "meta-llama/Llama-3.1-8B", "method": "full", "seq_len": 2048, "micro_batch_size": 1,
          "grad_accum": 8, "num_gpus": 8}
    ch = changes_to_fit(sc, "h100-sxm")
    names = [c.name for c in ch]
    assert names[:2] == ["shard-zero2", "shard-zero3"]
    z2 = ch[0]
    assert z2.fits and z2.changes == {"parallelism": "zero2"} and z2.kind == "free"
    assert z2.required_bytes == estimate({**sc, "parallelism": "zero2", "gpu": "h100-sxm"}).peak.required_bytes
    assert names.index("offload-optimizer") > 1
    # nothing to offer where the run is sharded fully already, or on one GPU
    assert not [n for n in (c.name for c in changes_to_fit({**sc, "parallelism": "zero3", "micro_batch_size": 64,
                                                             "grad_accum": 1}, "h100-sxm")) if n.startswith("shard-")]
    assert not [n for n in (c.name for c in changes_to_fit({**sc, "num_gpus": 1}, "h100-sxm")) if n.startswith("shard-")]
