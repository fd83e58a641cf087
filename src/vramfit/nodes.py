"""Nodes and the network between them: the shapes in ``data/interconnects.csv`` (a source per row).

A run of ``num_gpus`` over ``num_nodes`` has ``num_gpus / num_nodes`` GPUs per node. Collectives that
span nodes run as NCCL rings whose inter-node hops use every NIC of the node at once (one channel per
NIC): NCCL's tuning model gives a ring ``busBw = nChannels * speedInter`` (src/graph/tuning.cc,
NVIDIA/nccl@01afd20), i.e. the node's total NIC rate, capped by the GPU-to-GPU link inside the node.
A ring collective of ``S`` bytes per rank then takes ``(n - 1) / n * S / busBw`` (all-gather,
reduce-scatter; all-reduce twice that), the bus-bandwidth definition of nccl-tests
``doc/PERFORMANCE.md``, plus NCCL's latency per inter-node step.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from vramfit.choices import Interconnect


@dataclass(frozen=True)
class Network:
    """One inter-node shape: the node's total NIC rate, RDMA or sockets, latency, its source."""

    interconnect: Interconnect
    name: str
    node_gbit_s: float  # all NICs of one node together, Gb/s (10^9 bits per second)
    rdma: bool
    latency_us: float  # per inter-node ring step (NCCL's NET model)
    gpus: tuple[str, ...]  # cards usually rented in nodes of this shape
    source: str

    @property
    def node_bytes_s(self) -> float:
        """Bytes per second per direction over all NICs of one node."""
        return self.node_gbit_s * 1e9 / 8


@lru_cache(maxsize=1)
def networks() -> dict[Interconnect, Network]:
    """Every row of ``data/interconnects.csv``, by key (a test checks the enum and the file agree)."""
    text = resources.files("vramfit").joinpath("data/interconnects.csv").read_text(encoding="utf-8")
    out = {}
    for row in csv.DictReader(text.splitlines()):
        key = Interconnect(row["interconnect"])
        out[key] = Network(key, row["name"], float(row["node_gbit_s"]), row["rdma"] == "yes",
                           float(row["latency_us"]), tuple(g for g in row["gpus"].split(";") if g), row["source"])
    return out


#: The shape taken for ``auto`` on a card that no row lists: the slowest common one.
FALLBACK = Interconnect.ETH_100


def network_for(choice: Interconnect, gpu_id: str | None) -> Network:
    """The network of a scenario's ``interconnect``; ``auto`` reads the card's usual node shape."""
    table = networks()
    if choice is not Interconnect.AUTO:
        return table[choice]
    for net in table.values():
        if gpu_id and gpu_id in net.gpus:
            return net
    return table[FALLBACK]


def ring_seconds(nbytes: float, ranks: int, nodes: int, bus_bytes_s: float, net: Network, all_reduce: bool = False) -> float:
    """Seconds of one ring all-gather/reduce-scatter (``all_reduce``: twice the steps) of ``nbytes`` per
    rank over ``ranks`` ranks on ``nodes`` nodes: bandwidth term ``(n-1)/n * S / busBw`` (nccl-tests
    doc/PERFORMANCE.md) plus ``latency_us`` per inter-node step (NCCL tuning.cc: ``nInterSteps`` =
    nodes - 1, all-reduce 2 (nodes - 1))."""
    if ranks <= 1:
        return 0.0
    steps = (2 if all_reduce else 1) * (nodes - 1)
    return (2 if all_reduce else 1) * (ranks - 1) / ranks * nbytes / bus_bytes_s + steps * net.latency_us * 1e-6


def loading_copies(parallelism: str, gpus_per_node: int) -> tuple[int, str]:
    """(full model copies in one node's host RAM while loading, which node) as transformers 5.24 loads:

    - ZeRO-3 (``zero.Init``): only global rank 0 reads the checkpoint (``map_location="cpu"`` on rank 0,
      ``"meta"`` elsewhere, modeling_utils.py ``_load_pretrained_model``): one copy on the first node;
    - FSDP with ``fsdp_cpu_ram_efficient_loading`` (as exported): every node's local rank 0 loads
      (``is_local_dist_rank_0``, distributed/utils.py; the others get the weights by broadcast): one per node;
    - otherwise every rank loads the whole model: ``gpus_per_node`` copies per node.
    """
    if parallelism in ("zero3", "zero3-hpz"):
        return 1, "the first node"
    if parallelism in ("fsdp", "fsdp-grad-op", "fsdp-no-shard", "hsdp"):
        return 1, "each node"
    return gpus_per_node, "each node"
