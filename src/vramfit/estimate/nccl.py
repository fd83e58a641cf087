"""NCCL's device memory: outside PyTorch's allocator, in nvidia-smi's figure (never in ``memory_reserved``).

Two parts per communicator, and the number of communicators each GPU holds:

1. Ring buffers: a receive buffer from each of two ring neighbours per channel, every protocol in it, aligned to
   ``CUDA_IPC_MIN`` (NVIDIA/nccl@5067397c src/init.cc buffSizes, src/transport/p2p.cc ``ALIGN_SIZE(recvSize,
   CUDA_IPC_MIN)``); the channel count is an assumption (constants.NCCL_CHANNELS).
2. NVLS (NVLink SHARP) buffers. NCCL 2.18-2.20 (the wheels of torch 2.1-2.4 pin nvidia-nccl-cu12 2.18.1, 2.19.3,
   2.20.5) set them up eagerly when the communicator is made (NVIDIA/nccl v2.19.3-1 src/init.cc initTransportsRank
   -> ``ncclNvlsSetup``), on GPUs that support multicast, more than 2 of them in the node (src/transport/nvls.cc
   ``ncclNvlsInit``: ``if (!ncclParamNvlsEnable() || gpuCount <= 2) return``, NVLS_ENABLE default 2, then
   ``CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED``) behind an NVSwitch on sm90 or later (src/graph/search.cc
   ``ncclTopoCompute``: ``if (graph->pattern == NCCL_TOPO_PATTERN_NVLS && (system->nodes[NVS].count == 0 ||
   ccMin < 90)) return``). One node: the NICs are trimmed (src/graph/paths.cc ``ncclTopoTrimSystem``: ``if
   (system->nodes[GPU].count == comm->nRanks)`` removes every NET) and the NVLS graph has one head per GPU
   (search.cc: ``graph->minChannels = graph->maxChannels = system->nodes[GPU].count``; src/graph/connect.cc
   ``connectNvls``: ``nHeads = nvlsGraph->nChannels``). ``ncclNvlsSetup`` then allocates, with ``cuMemCreate`` on
   this GPU ("Alloc local physical mem for this NVLS group"), ``nvlsTotalSize = nHeads * nChannels * 2 * (buffSize
   + memSize)``: nChannels NVLS_NCHANNELS (16), buffSize the SIMPLE protocol's (4 MiB), memSize
   ``NVLS_MEM_ALIGN_SIZE`` (2 MiB): 1.5 GiB on 8 GPUs (the INFO line of this allocation on 8 H200s, "nHeads 8
   buffSize 4194304 memSize 2097152 nvlsPerRankSize 301989888 nvlsTotalSize 2415919104", with 24 channels there:
   https://github.com/vllm-project/vllm/issues/9699). NCCL 2.21 keeps the eager setup with a 1 MiB buffSize
   (v2.21.5-1 nvls.cc: ``buffSize = nvlsStepSize * NCCL_STEPS``); from 2.22 (torch >= 2.7) the buffers are made
   only when an NVLS algorithm first runs (v2.22.3-1 src/init.cc ``NCCL_PARAM(RuntimeConnect, "RUNTIME_CONNECT",
   1)``), which the tuner decides at run time: not counted. Which release a profile runs is profile data
   (``FrameworkProfile.nccl_nvls``). Not modelled: NVLS across nodes (2.18/2.19 NVLS trees; 2.20 turns NVLS off
   for ``comm->nNodes > 1``) and the driver's multicast granularity (``cuMulticastGetGranularity``, RECOMMENDED),
   which may round a head count's total up; 1.5 GiB on 8 GPUs is a whole number of 512 MiB.
3. Communicators: PyTorch's ProcessGroupNCCL keeps one NCCL communicator per process group and device, and each
   has its own buffers ("More communicators = more memory used", sjeaugey, https://github.com/NVIDIA/nccl/issues/986;
   ``ncclNvlsSetup`` shares NVLS buffers only with a ``splitShare`` parent). DeepSpeed ZeRO-3 uses two groups over
   the same ranks in every step: zero.Init gathers parameters on the world group (deepspeedai/DeepSpeed v0.14.0
   runtime/zero/partition_parameters.py ``self.ds_process_group = dist.get_world_group()`` when no group is given,
   as transformers' ``deepspeed.zero.Init(config_dict_or_path=...)`` calls it) and the engine reduce-scatters
   gradients on a clone of it (utils/groups.py ``_get_data_parallel_group`` -> ``_clone_world_group``:
   ``dist.new_group(ranks=range(dist.get_world_size()))``; runtime/engine.py passes
   ``dp_process_group=self.seq_data_parallel_group``; stage3.py ``reduce_scatter_coalesced(full_grads_for_rank,
   self.dp_process_group)``). The clone is the same at v0.19.x (groups.py ``_clone_world_group``).
"""

from __future__ import annotations

from dataclasses import dataclass

from vramfit.estimate.constants import (
    NCCL_CHANNELS,
    NCCL_CUDA_IPC_MIN,
    NCCL_LL128_BUFF,
    NCCL_LL_BUFF,
    NCCL_NVLS_CHANNELS,
    NCCL_NVLS_MEM_ALIGN,
    NCCL_SIMPLE_BUFF,
)
from vramfit.scenario import Parallelism, Scenario


@dataclass(frozen=True)
class NvlsBuffers:
    """An NCCL release that sets NVLS buffers up with the communicator: per head and channel, two buffers of
    ``buff_bytes + mem_bytes`` (nvls.cc ``nvlsPerRankSize = nChannels * 2 * (buffSize + memSize)``)."""

    release: str  # the NCCL releases and the torch wheels that pin them (display only)
    buff_bytes: int
    channels: int = NCCL_NVLS_CHANNELS.value
    mem_bytes: int = NCCL_NVLS_MEM_ALIGN.value

    def per_communicator(self, heads: int) -> int:
        return heads * self.channels * 2 * (self.buff_bytes + self.mem_bytes)


#: NVIDIA/nccl v2.18.1-1, v2.19.3-1, v2.20.5-1 src/transport/nvls.cc ncclNvlsSetup: ``buffSize =
#: comm->buffSizes[NCCL_PROTO_SIMPLE]`` (DEFAULT_BUFFSIZE 4 MiB); the torch 2.1.x / 2.2.x / 2.3-2.4 wheels pin
#: nvidia-nccl-cu12 2.18.1 / 2.19.3 / 2.20.5 (their requires_dist on PyPI)
NCCL_2_18_TO_2_20 = NvlsBuffers("NCCL 2.18-2.20 (torch 2.1-2.4)", NCCL_SIMPLE_BUFF.value)


def nvls_card(sc: Scenario) -> bool:
    """The scenario's card sits behind an NVSwitch and is sm90 or later (Hopper, Blackwell): the catalog's
    interconnect and architecture columns (data/gpus.csv: "NVLink 4 via NVSwitch (HGX)"). No card named: no."""
    if not sc.gpu:
        return False
    from vramfit.gpus import Arch, get_gpu

    card = get_gpu(sc.gpu)
    return card.arch in (Arch.HOPPER, Arch.BLACKWELL) and "nvswitch" in card.interconnect.lower()


def communicators(sc: Scenario) -> int:
    """NCCL communicators each GPU holds over the data-parallel ranks (module docstring, 3)."""
    return 2 if sc.parallelism is Parallelism.ZERO3 else 1


def nvls_bytes(sc: Scenario, rule: NvlsBuffers | None) -> int:
    """Eager NVLS buffers of one communicator on one GPU (module docstring, 2); 0 where NCCL makes none."""
    from vramfit.gpus import GPUS_PER_NODE

    heads = sc.gpus_per_node  # more than a node holds: several nodes really, whose NVLS is not modelled
    if rule is None or sc.num_nodes > 1 or not 2 < heads <= GPUS_PER_NODE or not nvls_card(sc):
        return 0
    return rule.per_communicator(heads)


def nvls_note(sc: Scenario, rule: NvlsBuffers | None) -> str:
    """One sentence on the NVLS buffers in the device figure, or "" when there are none."""
    per = nvls_bytes(sc, rule)
    if not per:
        return ""
    n = communicators(sc)
    return (f" It includes {n} x {per / 2**20:,.0f} MiB of NVLS buffers ({rule.release} makes them with each of the "
            f"{n} communicator{'s' if n > 1 else ''} on an NVSwitch node of {sc.gpus_per_node} GPUs).")


def nccl_bytes(sc: Scenario, rule: NvlsBuffers | None) -> int:
    """NCCL's device bytes per GPU: ring buffers and NVLS buffers of each communicator."""
    if sc.num_gpus <= 1:
        return 0
    per_peer = NCCL_SIMPLE_BUFF.value + NCCL_LL_BUFF.value + NCCL_LL128_BUFF.value
    ipc_min = NCCL_CUDA_IPC_MIN.value
    aligned = -(-per_peer // ipc_min) * ipc_min  # ALIGN_SIZE(recvSize, CUDA_IPC_MIN)
    ring = NCCL_CHANNELS.value * 2 * aligned  # ring: a receive buffer from each of 2 neighbours
    return communicators(sc) * (ring + nvls_bytes(sc, rule))
