"""torchtitan exports of tensor/pipeline plans, loaded with torchtitan v0.3.0's own config code: its
ParallelismConfig and TrainingConfig dataclasses (tyro parses the launch line's overrides into them),
ParallelDims (which refuses degrees whose product is not the world size) and torch's pipeline schedules."""

import dataclasses

import pytest
import tomllib

from vramfit.plan import plan
from vramfit.plan.export import export_plan
from vramfit.plan.export_titan import TOML_FILE, overrides

titan = pytest.importorskip("torchtitan.config")
tyro = pytest.importorskip("tyro")
pytest.importorskip("spmd_types")


@pytest.fixture(scope="module")
def plans():
    r = plan({"model": "meta-llama/Llama-3.1-70B", "method": "full", "seq_len": 4096, "framework": "torchtitan"},
             effective_batch=64, max_gpus=64, gpu_ids="a100-80gb-sxm", with_changes=False)
    return r.plans


def _with_layout(p, tp, pp, cp=1, vpp=1):
    sc = {**p.scenario, "tensor_parallel": tp, "pipeline_parallel": pp, "context_parallel": cp,
          "pipeline_virtual_stages": vpp, "pipeline_schedule": "interleaved-1f1b" if vpp > 1 else "1f1b"}
    dp = p.num_gpus // (tp * pp * cp)
    return dataclasses.replace(p, scenario=sc, grad_accum=p.effective_batch // (p.micro_batch_size * dp))


def _check_with_torchtitan(p):
    from torch.distributed.pipelining.schedules import get_schedule_class
    from torchtitan.distributed.parallel_dims import ParallelDims

    ex = export_plan(p, "torchtitan")
    doc = tomllib.loads(ex.files[TOML_FILE])
    par = titan.ParallelismConfig(**doc["parallelism"])  # unknown or mistyped keys raise here
    training = titan.TrainingConfig(**doc["training"])
    dims = ParallelDims(dp_replicate=par.data_parallel_replicate_degree, dp_shard=par.data_parallel_shard_degree,
                        cp=par.context_parallel_degree, tp=par.tensor_parallel_degree, pp=par.pipeline_parallel_degree,
                        ep=1, world_size=p.num_gpus)  # asserts the product is the world size
    dp = dims.dp_replicate * dims.dp_shard
    # torchtitan trainer.py: accumulation = global // (local x dp); with a pipeline, local // microbatch size
    accum = training.global_batch_size // (training.local_batch_size * dp)
    micro = training.local_batch_size // par.pipeline_parallel_microbatch_size if dims.pp > 1 else 1
    assert training.global_batch_size == p.effective_batch
    assert accum * micro == p.grad_accum  # the plan's micro-batches per data-parallel rank per step
    if dims.pp > 1:
        get_schedule_class(par.pipeline_parallel_schedule)
    # the launch line's overrides, parsed by tyro into torchtitan's dataclasses as v0.3.0's ConfigManager does
    from torchtitan.components.optimizer.optimizer import OptimizersContainer

    Job = dataclasses.make_dataclass("Job", [("parallelism", titan.ParallelismConfig, dataclasses.field(
        default_factory=titan.ParallelismConfig)), ("training", titan.TrainingConfig, dataclasses.field(
            default_factory=titan.TrainingConfig)), ("optimizer", OptimizersContainer.Config, dataclasses.field(
                default_factory=OptimizersContainer.Config))])
    args = [a for o in overrides(p) for a in o.split(" ")]
    job = tyro.cli(Job, args=args)
    assert job.parallelism == par and job.training.local_batch_size == training.local_batch_size
    # the AdamW step the plan was sized with: the profile's, torchtitan's own default "fused" (v0.2.2 and 0.3.0)
    assert job.optimizer.implementation == doc["optimizer"]["implementation"] == "fused"
    assert job.optimizer.implementation == OptimizersContainer.Config().implementation
    return ex, dims


def test_tensor_parallel_plan_loads_in_torchtitan(plans):
    p = next(x for x in plans if x.scenario["tensor_parallel"] > 1)
    ex, dims = _check_with_torchtitan(p)
    assert dims.tp == p.scenario["tensor_parallel"] and dims.tp * dims.dp_shard == p.num_gpus
    assert ex.command == "sbatch launch.slurm" and "--nnodes 8 --nproc_per_node 8" in ex.files["launch.slurm"]


@pytest.mark.parametrize("tp,pp,cp,vpp", [(8, 2, 1, 1), (4, 4, 1, 1), (2, 1, 1, 1), (2, 2, 4, 1), (1, 4, 8, 2)])
def test_layouts_written_for_torchtitan(plans, tp, pp, cp, vpp):
    p = _with_layout(next(x for x in plans if x.num_gpus == 64), tp, pp, cp, vpp)
    ex, dims = _check_with_torchtitan(p)
    assert (dims.tp, dims.pp, dims.cp, dims.dp_shard) == (tp, pp, cp, 64 // (tp * pp * cp))
    if pp > 1:  # interleaved: torchtitan's default of 2 stages per rank (pipeline_parallel.py), the plan's vpp
        assert f"pipeline_parallel_schedule = \"{'Interleaved1F1B' if vpp > 1 else '1F1B'}\"" in ex.files[TOML_FILE]


def test_wrong_degrees_are_refused_by_torchtitan(plans):
    from torchtitan.distributed.parallel_dims import ParallelDims

    with pytest.raises(AssertionError, match="WORLD_SIZE"):
        ParallelDims(dp_replicate=1, dp_shard=7, cp=1, tp=8, pp=1, ep=1, world_size=64)
    with pytest.raises(TypeError):
        titan.ParallelismConfig(tensor_parallel=8)  # vramfit's key name is not torchtitan's


def test_cli_writes_the_torchtitan_files(tmp_path):
    from typer.testing import CliRunner

    from vramfit.cli.main import app

    out = CliRunner().invoke(app, ["plan", "--model", "meta-llama/Llama-3.1-70B", "--method", "full", "--framework",
                                   "torchtitan", "--seq-len", "4096", "--effective-batch", "64", "--max-gpus", "64",
                                   "--cards", "a100-80gb-sxm", "--export", "torchtitan", "--export-dir", str(tmp_path)])
    assert out.exit_code == 0, out.output
    doc = tomllib.loads((tmp_path / TOML_FILE).read_text())
    titan.ParallelismConfig(**doc["parallelism"])
    assert "run: " in out.output
