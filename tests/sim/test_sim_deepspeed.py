"""HF Trainer + DeepSpeed ZeRO in the simulator (issue 13): DeepSpeed's own engine (``deepspeed.initialize``) on fake
tensors over a fake process group of 2 ranks, a tiny Llama (hidden 256, 4 layers, vocab 4096), seq 512, batch 2.

Measured here (rank 0, allocated at the peak, the loss's backward of the second step):

| stage | precision | simulator | estimator | estimator − simulator |
|---|---|---|---|---|
| ZeRO-2 | bf16-mixed | 139,981,824 | 152,164,352 | +8.70 % |
| ZeRO-3 | bf16-mixed | 147,444,224 | 162,265,600 | +10.05 % |

What differs, each traced to the code that runs:

- Autocast (+13.1 MB of activations in both rows): the estimator runs ``bf16-mixed`` activations under autocast
  (fp32 norm outputs and residuals); under DeepSpeed accelerate leaves ``native_amp`` off (accelerate 1.15.0
  accelerator.py: ``mixed_precision == "bf16" and distributed_type not in (DEEPSPEED, ...)``) and the engine
  holds the module in bf16, so the activations are the 16-bit ones the estimator gives ``bf16-true``. With its
  activations taken from ``bf16-true`` the estimate is within 1 % of the engine for ZeRO-2 (-0.7 %).
- ZeRO-3 on top (+1.2 % left): the estimator holds the fp32 gradient buffer of the largest optimizer sub-group
  through backward (+6.8 MB: ``estimate/deepspeed.py subgroup_grad_buffer``), but DeepSpeed frees it at the
  end of ``initialize_optimizer_states`` when the optimizer is not offloaded (DeepSpeed 0.19.8
  runtime/zero/stage3.py: ``if not self.offload_optimizer: for group in self.fp32_partitioned_groups_flat:
  group.grad = None``; the fp32 sub-group gradient exists only inside the step,
  ``_prepare_fp32_grad_for_sub_group``); and it does not hold the persistent 16-bit partitioned-gradient
  buffer (-3.4 MB: stage3.py ``grad_partitions_flat_buffer = torch.zeros(sum(p.partition_numel() ...))``).
  Hence 2 % for ZeRO-3 against 1 % for ZeRO-2.
"""

from __future__ import annotations

import json

import pytest
from simconfigs import tiny

from vramfit.errors import ScenarioError
from vramfit.estimate import estimate
from vramfit.scenario import parse_scenario
from vramfit.sim import simulate
from vramfit.sim.deepspeed_zero import ds_config

LAYERS = 4
HIDDEN = 256


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("ds") / "config.json"
    path.write_text(json.dumps(tiny("meta-llama/Llama-3.2-1B", layers=LAYERS, hidden=HIDDEN, vocab=4096)))
    return str(path)


def _scenario(path: str, stage: str, precision: str = "bf16-mixed") -> dict:
    return {"model": path, "method": "full", "precision": precision, "seq_len": 512, "micro_batch_size": 2,
            "attention": "flash", "num_gpus": 2, "parallelism": stage}


@pytest.fixture(scope="module")
def runs(model_path) -> dict:
    return {stage: simulate(_scenario(model_path, stage), layers=LAYERS).result for stage in ("zero2", "zero3")}


def _autocast_activations(path: str, stage: str) -> int:
    """The activation bytes the estimator adds for autocast (bf16-mixed minus bf16-true, same ZeRO stage)."""
    mixed = dict(estimate(_scenario(path, stage)).peak.breakdown)["activations"]
    true = dict(estimate(_scenario(path, stage, "bf16-true")).peak.breakdown)["activations"]
    return mixed - true


@pytest.mark.parametrize(("stage", "rel"), [("zero2", 0.01), ("zero3", 0.02)])
def test_estimator_within_tolerance_of_the_deepspeed_engine(runs, model_path, stage, rel):
    """See the module docstring for each byte that differs and why ZeRO-3 gets 2 %."""
    sim = runs[stage].peak.allocated_bytes
    est = estimate(_scenario(model_path, stage)).peak.allocated_bytes
    autocast = _autocast_activations(model_path, stage)
    assert 12_000_000 < autocast < 14_000_000  # 13.1 MB: fp32 norm outputs and residuals of 4 layers
    assert est - autocast == pytest.approx(sim, rel=rel)
    assert est > sim * 1.08  # the bf16-mixed estimate as it stands: 8.7 % / 10.1 % high


def test_engine_holds_deepspeeds_buffers(runs, model_path):
    """ZeRO-2: the whole model in one flat bf16 buffer, this rank's fp32 master partition and its two Adam
    states (DeepSpeed 0.19.8 stage_1_and_2.py ``single_partition_of_fp32_groups``); ZeRO-3: only this
    rank's bf16 partition of the parameters, the same fp32 state, parameters gathered while in use."""
    n = estimate(_scenario(model_path, "zero2")).model.num_params
    z2, z3 = (dict(runs[s].peak.breakdown) for s in ("zero2", "zero3"))
    pad = 4096  # DeepSpeed aligns flat partitions (nccl_start_alignment_factor); a few elements per rank
    assert z2["weights"] == pytest.approx(2 * n, abs=pad)
    assert z3["weights"] == pytest.approx(2 * n // 2, abs=pad)
    for z in (z2, z3):
        assert z["optimizer_state"] == pytest.approx(3 * 4 * n // 2, abs=3 * pad)  # master + exp_avg + exp_avg_sq
    assert runs["zero2"].peak.phase == runs["zero3"].peak.phase == "backward"


def test_auto_buckets_resolved_as_the_hf_trainer_does(model_path):
    """transformers 5.24.0 integrations/deepspeed.py trainer_config_finalize: reduce_bucket_size = h*h,
    stage3_prefetch_bucket_size = int(0.9*h*h), stage3_param_persistence_threshold = 10*h."""
    z = ds_config(parse_scenario(_scenario(model_path, "zero3")), HIDDEN)["zero_optimization"]
    assert (z["stage"], z["reduce_bucket_size"], z["stage3_prefetch_bucket_size"]) == (3, 65_536, 58_982)
    assert z["stage3_param_persistence_threshold"] == 2_560 and z["overlap_comm"] is True


def test_offload_is_refused_in_one_line(model_path):
    with pytest.raises(ScenarioError) as exc:
        simulate({**_scenario(model_path, "zero3"), "offload": "optimizer"})
    assert exc.value.key == "offload" and "DeepSpeedCPUAdam" in str(exc.value)


def test_cli_simulates_a_zero_scenario(model_path):
    from typer.testing import CliRunner

    from vramfit.cli.main import app

    args = ["simulate", "--model", model_path, "--method", "full", "--precision", "bf16-mixed", "--seq-len", "64",
            "--num-gpus", "2", "--parallelism", "zero2", "--full-depth", "--json"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["simulation"]["layers_traced"] == [LAYERS]
    assert any("DeepSpeed ZeRO-2 engine" in a for a in data["assumptions"])
    res = CliRunner().invoke(app, [*args[:-1], "--offload", "optimizer"])
    assert res.exit_code == 2
    assert res.output.strip().splitlines()[-1].startswith("error: offload: ZeRO CPU offload steps DeepSpeedCPUAdam")


def _bucket_scenario(path: str, stage: str, bucket: int) -> dict:
    cfg = {"zero_optimization": {"stage": int(stage[-1]), "reduce_bucket_size": bucket, "overlap_comm": True,
                                 "contiguous_gradients": True, "stage3_prefetch_bucket_size": "auto",
                                 "stage3_param_persistence_threshold": "auto"}}
    return {**_scenario(path, stage), "deepspeed_config": cfg}


BUCKET = 20_000_000  # elements; HF's "auto" is h*h = 65,536 here


def test_zero3_reduce_bucket_moves_both_alike(runs, model_path):
    """ZeRO-3's IPG bucket: one 16-bit buffer of reduce_bucket_size elements allocated at init (DeepSpeed 0.19.8
    stage3.py ``ipg_buckets``); simulator and estimator move by the same bytes."""
    sc = _bucket_scenario(model_path, "zero3", BUCKET)
    sim = simulate(sc, layers=LAYERS).result.peak.allocated_bytes - runs["zero3"].peak.allocated_bytes
    est = estimate(sc).peak.allocated_bytes - estimate(_scenario(model_path, "zero3")).peak.allocated_bytes
    assert sim == pytest.approx(2 * (BUCKET - HIDDEN * HIDDEN), rel=0.01)
    assert est == pytest.approx(sim, rel=0.01)


def test_zero2_reduce_buckets_live_after_the_loss(runs, model_path):
    """ZeRO-1/2 allocate their two IPG buffers (overlap_comm) at the first parameter-gradient hook
    (DeepSpeed 0.19.8 stage_1_and_2.py ``process_gradients`` -> ``setup_buckets``: buf_0, buf_1) and release
    them after the step (``_release_ipg_buffers``): not live during the loss's backward, where the estimator
    puts them. With 20M-element buckets the simulated peak moves past the loss (no logits gradient left) and
    holds both buffers; the estimator adds 80 MB, the simulator 37 MB (open for the estimator: issue 13)."""
    run = simulate(_bucket_scenario(model_path, "zero2", BUCKET), layers=LAYERS)
    res = run.result
    buffers = [t for t in run.top_tensors if t.shape == (BUCKET,) and t.dtype == "bfloat16"]
    assert len(buffers) == 2
    assert dict(res.peak.breakdown).get("logits_loss", 0) < 1024
    sim = res.peak.allocated_bytes - runs["zero2"].peak.allocated_bytes
    est = estimate(_bucket_scenario(model_path, "zero2", BUCKET)).peak.allocated_bytes \
        - estimate(_scenario(model_path, "zero2")).peak.allocated_bytes
    assert est == 2 * 2 * (BUCKET - HIDDEN * HIDDEN) and 0.45 * est < sim < 0.5 * est


def test_fp32_zero2_still_clones_the_master_partition(model_path):
    """fp32 ZeRO-2: DeepSpeed copies this rank's partition for the optimizer whatever the dtype (DeepSpeed 0.19.8
    stage_1_and_2.py: ``weights_partition = ...[partition_id].detach().clone().to(dtype=master_weights_and_grads_dtype)``),
    so the engine holds the flat fp32 weights, their partition copy and two Adam states. The estimator has no
    master copy without 16-bit weights (``core._ds_mixed``) and is 8 % low here by that partition (open: issue 13)."""
    sc = {**_scenario(model_path, "zero2", "fp32"), "seq_len": 256, "micro_batch_size": 1, "attention": "sdpa"}
    sim = simulate(sc, layers=LAYERS).result.peak
    est = estimate(sc).peak
    partition = 4 * estimate(sc).model.num_params // 2
    assert dict(sim.breakdown)["optimizer_state"] == pytest.approx(3 * partition, abs=3 * 4096)
    assert sim.allocated_bytes - est.allocated_bytes == pytest.approx(partition, rel=0.15)
