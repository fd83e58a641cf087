"""Exports of plans that span nodes: what changes in each engine's files, a DeepSpeed hostfile, a Slurm script.

- accelerate: ``num_machines`` = nodes and ``num_processes`` = every GPU of every node (accelerate's
  ``ClusterConfig``); each node passes its own ``--machine_rank`` and the first node's address
  (``--main_process_ip``), which the Slurm script reads from Slurm's variables;
- FSDP sharding inside the node: ``HYBRID_SHARD`` (``_HYBRID_SHARD_ZERO2`` for SHARD_GRAD_OP), the FSDP1
  strategies that shard within a node and replicate across (torch/distributed/fsdp/api.py, v2.13.0);
- DeepSpeed ZeRO-3 sharding inside the node: ZeRO++ hpZ, ``zero_hpz_partition_size`` = GPUs per node
  (deepspeed 0.19.8 runtime/zero/config.py), and a hostfile (``host slots=N`` lines, the format of
  deepspeed/launcher/runner.py ``fetch_hostfile``) for ``deepspeed --hostfile``.
"""

from __future__ import annotations

from vramfit.plan.report import Plan

HOSTFILE = "hostfile"
SLURM_FILE = "launch.slurm"
PORT = 29500  # torch.distributed's usual rendezvous port (torchrun --master-port default)


def nodes_of(plan: Plan) -> int:
    return int(plan.scenario.get("num_nodes", 1) or 1)


def per_node(plan: Plan) -> int:
    return plan.num_gpus // nodes_of(plan)


def hybrid(plan: Plan) -> bool:
    return nodes_of(plan) > 1 and plan.scenario.get("shard_scope") == "node"


def fsdp_strategy(plan: Plan, shard: str) -> str:
    """The FSDP1 ``sharding_strategy`` of a plan: its hybrid form when it shards inside the node."""
    if not hybrid(plan):
        return shard
    return "_HYBRID_SHARD_ZERO2" if shard == "SHARD_GRAD_OP" else "HYBRID_SHARD"


def hostfile(plan: Plan) -> str:
    """One ``host slots=N`` line per node; the names are placeholders for the user's hosts."""
    return "".join(f"node{i + 1} slots={per_node(plan)}\n" for i in range(nodes_of(plan)))


def slurm_script(plan: Plan, accelerate_file: str, args: str) -> str:
    """An sbatch script: one task per node, each running ``accelerate launch`` with its node's rank."""
    return f"""#!/bin/bash
# vramfit plan: {plan.label}
#SBATCH --job-name=vramfit
#SBATCH --nodes={nodes_of(plan)}
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node={per_node(plan)}
#SBATCH --exclusive
set -euo pipefail
export MAIN_HOST=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
srun bash -c 'accelerate launch --config_file {accelerate_file} --machine_rank $SLURM_NODEID \\
  --main_process_ip '"$MAIN_HOST"' --main_process_port {PORT} {args}'
"""
