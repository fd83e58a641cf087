"""How fast a card runs each kind of work in a training step: the constants of the speed model.

Each figure is a published measurement (cited next to it) or, where marked *design*, derived from
the design rows of ``benchmarks/data/throughput/published.jsonl`` (``"design": true``: the Qwen-1
1.8B rows and the torchtune README @30b8519e8 rows); the benchmark reports its score on the other
rows too. Nothing here is fitted to a single row. Rows that ran on a card the catalog lacks name a
benchmark card (``benchmarks/data/throughput/cards.csv``, cited per row).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from vramfit.estimate.constants import Constant
from vramfit.gpus import GPU, Arch

_MAMF = ("stas00/ml-engineering compute/accelerator/README.md (@b9e2972), 'Maximum Achievable Matmul FLOPS "
         "comparison table' (BF16 matmul, best shape, torch + CUDA 12.1-12.5 / ROCm 6.2)")
#: Fraction of the dense BF16 peak the best-shaped BF16 matmul reaches (MAMF / theory), by card.
GEMM_EFFICIENCY: dict[str, Constant] = {
    "a100-80gb-sxm": Constant(0.859, "MAMF / peak", _MAMF + ": A100 SXM 267.9 of 312 TFLOPS"),
    "a100-40gb-sxm": Constant(0.859, "MAMF / peak", _MAMF + ": A100 SXM 267.9 of 312 TFLOPS"),
    "a100-80gb-pcie": Constant(0.822, "MAMF / peak", _MAMF + ": A100 PCIe 256.4 of 312 TFLOPS"),
    "a100-40gb-pcie": Constant(0.822, "MAMF / peak", _MAMF + ": A100 PCIe 256.4 of 312 TFLOPS"),
    "h100-sxm": Constant(0.801, "MAMF / peak", _MAMF + ": H100 SXM 792.1 of 989 TFLOPS"),
    "gh200-96gb": Constant(0.830, "MAMF / peak", _MAMF + ": GH200 SXM 821.0 of 989 TFLOPS"),
    "gh200-144gb": Constant(0.830, "MAMF / peak", _MAMF + ": GH200 SXM 821.0 of 989 TFLOPS"),
    "mi250x": Constant(0.767, "MAMF / peak", _MAMF + ": MI250X 147.0 of 191.5 TFLOPS per GCD"),
    "mi300x": Constant(0.601, "MAMF / peak", _MAMF + ": MI300X 781.9 of 1300 TFLOPS"),
    "mi325x": Constant(0.601, "MAMF / peak", _MAMF + ": MI300X 781.9 of 1300 TFLOPS (MI325X: same CDNA3 compute die)"),
}
_TPT = ("zzc0721/torch-performance-test-data database.md (@0785868), torch matmul TFLOPS, the best of 1024^2 to "
        "10240^2 BF16 (its test.py)")
GEMM_EFFICIENCY.update({
    # GeForce cards boost past the clock their spec sheet's peak is computed at: the measured best reaches it
    "rtx4090": Constant(1.008, "measured / peak", _TPT + ": RTX 4090 24GB rows 170.06, 173.31, 162.39, 163.09 "
                        "(median 166.6) of 165.2 TFLOPS"),
    "rtx3090": Constant(1.079, "measured / peak", _TPT + ": RTX 3090 rows 76.34, 76.68, 76.58 (median 76.58) of 71"),
    "rtx5090": Constant(1.139, "measured / peak", _TPT + ": RTX 5090 32GB rows 236.03, 242.18 (mean 239.1) of 210"),
    "rtxa6000": Constant(0.797, "measured / peak", _TPT + ": RTX A6000 123.34 of 154.8 TFLOPS"),
    "l40s": Constant(0.743, "measured / peak", _TPT + ": L40S 269.15 of 362.05 TFLOPS"),
    "rtx6000ada": Constant(0.743, "measured / peak", _TPT + ": L40S 269.15 of 362.05 TFLOPS",
                           "no row of its own: the L40S is the same AD102 with 142 SMs, at 350 W against its 300 W"),
    "rtxpro6000-blackwell": Constant(0.821, "measured / peak", _TPT + ": RTX PRO 6000 Workstation 417.98, Server "
                                     "Edition 409.42 (mean 413.7) of 504 TFLOPS"),
    "h200-sxm": Constant(0.799, "measured / peak", _TPT + ": H200 790.29 of 989 TFLOPS (MAMF table: no H200 row)"),
    # the 350 W PCIe part reaches a smaller share of its (already lower-clocked) peak than the 700 W SXM one
    "h100-pcie": Constant(0.656, "measured / peak", _TPT + ": H100 PCIe 495.93 of 756 TFLOPS (bare metal, PyTorch 2.7)"),
    # benchmark card (benchmarks/data/throughput/cards.csv): torchtitan's H100 96GB HBM2e capped at 500 W. No
    # measurement of its own: the best BF16 matmul linear in board power between the two measured H100s, 350 W
    # PCIe 495.93 (above) and 700 W SXM 792.1 (_MAMF), = 622.9 TFLOPS at 500 W, of the card's 912.3 peak
    "h100-96gb-hbm2e-500w": Constant(0.683, "interpolated / peak", _TPT + " (H100 PCIe 495.93 at 350 W) and " + _MAMF
                                     + " (H100 SXM 792.1 at 700 W), linear in board power to 500 W: 622.9 of 912.3"),
})
GEMM_EFFICIENCY_DEFAULT = Constant(
    0.801, "MAMF / peak", _MAMF + ": lowest NVIDIA entry (H100 SXM 80.1 %)",
    "cards without a MAMF measurement get the lowest NVIDIA one",
)
#: FlashAttention-2 forward+backward throughput as a fraction of the dense BF16 peak, by the card's
#: architecture (``GPU.arch``, from gpus.csv ``architecture``: a user or benchmark card of that
#: architecture gets it too).
ATTENTION_EFFICIENCY = {
    Arch.HOPPER: Constant(0.35, "of peak", "Shah et al. 2024 (FlashAttention-3, arXiv:2407.08608) abstract: "
                       "FlashAttention-2 reaches only 35 % utilisation on the H100"),
}
ATTENTION_EFFICIENCY_DEFAULT = Constant(
    0.68, "of peak",
    "design, inside the published range: Dao 2023 (FlashAttention-2, arXiv:2307.08691) abstract gives "
    "50-73 % of the theoretical maximum FLOPs/s on A100; 0.676 is the relative least-squares value over "
    "the 12 Qwen-1 1.8B LoRA/Q-LoRA rows (seq 256-8192) with matmuls at MAMF, fitted jointly with "
    "LAYER_OVERHEAD_S['eager']",
)
ATTN_BACKWARD_RATIO = Constant(
    2.5, "backward / forward FLOPs of attention",
    "Dao 2023 (arXiv:2307.08691) sec. 4.1: backward has 5 matmuls against the forward's 2",
)
LAYER_OVERHEAD_S = {
    "eager": Constant(
        3.6e-3, "s per layer per micro-batch (forward + backward + recompute)",
        "design: fitted with ATTENTION_EFFICIENCY_DEFAULT over the Qwen-1 1.8B LoRA/Q-LoRA rows (3.58 ms; at seq 256 "
        "the 1.0 s/it for 8 micro-batches x 24 layers is under 0.1 s of compute): PyTorch eager dispatch of a "
        "PEFT block's few hundred small kernels. Added to the GPU time, not overlapped: a max(CPU, GPU) "
        "reading fits the same rows only with attention below FlashAttention-2's published 50 %",
    ),
    "compiled": Constant(
        0.5e-3, "s per layer per micro-batch",
        "torch.compile fuses the block's elementwise kernels (torchtune README @1814feb17 '+ Compile' row: "
        "+27 % tokens/s at 2 x 4096 tokens); an eighth of eager, an assumption within the design rows' noise",
    ),
}
DECODE_LAYER_OVERHEAD_S = Constant(
    LAYER_OVERHEAD_S["eager"].value / 4, "s per layer per decode step (transformers generate)",
    "a quarter of LAYER_OVERHEAD_S['eager']: a training micro-batch dispatches the block's forward, its "
    "recompute and a backward of about twice the forward's kernels (each linear's input and weight gradients), "
    "about four forwards; a decode step dispatches one",
)
GPTQ_DEQUANT_S_PER_GWEIGHT = Constant(
    0.0126, "s per 10^9 4-bit weights per pass (A100)",
    "design: Qwen-1 1.8B Q-LoRA minus LoRA at seq 256, 512, 1024 (0.4, 0.4, 0.3 s/it; mean 0.367 s over "
    "8 micro-batches x 3 passes x 1.21e9 GPTQ weights): auto-gptq's training path de-quantizes at about "
    "80 G weights/s, a tenth of what the memory bandwidth allows (bitsandbytes NF4 is timed by bytes); "
    "scaled by A100 SXM bandwidth / the card's",
)
ZERO3_LAYER_OVERHEAD_S = Constant(
    5.5e-3, "s per layer per micro-batch, added to the kernels (ZeRO-3 over more than one GPU)",
    "design: Qwen-1 1.8B full-parameter (DeepSpeed ZeRO-3) minus LoRA at seq 256, 512, 1024 "
    "(1.1, 1.2, 1.1 s/it over 8 micro-batches x 24 layers): DeepSpeed's per-module fetch/release hooks "
    "(partitioned_param_coordinator) in forward, backward and recompute",
    "read as additive where the hooks gather over several GPUs: there the host waits on the all-gathers "
    "(fetch_sub_module's __ongoing_fetch_events.popleft().synchronize(), DeepSpeed v0.12.3 "
    "partitioned_param_coordinator.py l. 300-301); the held-out Qwen-1 7B (2 GPUs) and 72B (4 GPUs) ZeRO-3 rows "
    "fit it (1-14 %, 2-6 %) and would run 11-20 % fast with ZERO3_HOST_S_PER_LAYER's overlap",
)
ZERO3_HOST_S_PER_LAYER = Constant(
    11.2e-3, "s of host (CPU) time per layer per micro-batch under DeepSpeed ZeRO-3",
    "design: Qwen-1 1.8B full-parameter (DeepSpeed ZeRO-3, 1 GPU) at seq 256, 512, 1024 (2.1, 2.2, 2.2 s/it, README "
    "@2df8e8a): the mean 2.167 s/it less the 0.025 s optimizer step, over 8 micro-batches x 24 layers, where the "
    "kernels take 0.10-0.16 s of a micro-batch's 0.27 s: the host side of the step (Python dispatch and "
    "DeepSpeed's per-module fetch/release and gradient hooks, partitioned_param_coordinator)",
    "on one GPU it overlaps the kernels, the micro-batch taking the longer of the two: with one partition DeepSpeed "
    "v0.12.3 gathers nothing (partition_parameters.py l. 1109-1110 _no_gather_coalesced), and the handle's "
    "current_stream().synchronize() (l. 80-84) runs inside fetch_sub_module's allgather-stream context "
    "(partitioned_param_coordinator.py l. 297-303), a side stream with no kernels, so the host never waits on the "
    "compute stream inside a micro-batch but for the reduce events that let it run two gradient buckets ahead "
    "(stage3.py l. 1190-1193); each backward ends with reduce_and_partition_stream.synchronize() (stage3.py l. 1079, "
    "from engine.allreduce_gradients)",
)
#: The card the GPTQ rate was read on (A100 SXM 80GB, 2039 GB/s: gpus.csv).
REFERENCE_BANDWIDTH = 2039e9
NO_P2P_NOTE = (
    "GeForce cards without NVLink have peer-to-peer disabled by the driver (tinygrad/open-gpu-kernel-modules "
    "README, 'P2P support for 4090'): GPU-to-GPU traffic goes through host memory (two PCIe hops) and "
    "NCCL does not overlap it with compute"
)


class CpuVendor(str, Enum):
    """The host CPU's vendor, as NCCL's topology detection reads it (``ncclTopoCpuType``)."""

    INTEL = "intel"
    AMD = "amd"


@dataclass(frozen=True)
class PcieHost:
    """Where a node's PCIe cards sit: the host CPU and whether the GPUs share a PCIe switch."""

    cpu_vendor: CpuVendor
    gpus_behind_one_switch: bool  # NCCL path PATH_PXB between them; else PATH_PHB/SYS through the CPU


#: The node a PCIe card runs in: its GPUs on the CPU's own root ports (no PCIe switch between them) of an Intel
#: host. The scenario cannot say which host a run had; with this one NCCL copies through host memory in every release
#: (:func:`nccl_pcie_p2p`), as it does on any host of more than two such GPUs since NCCL 2.23.4.
PCIE_HOST = PcieHost(CpuVendor.INTEL, gpus_behind_one_switch=False)


def nccl_pcie_p2p(host: PcieHost, gpus: int, nccl_before_2_23_4: bool = False) -> bool:
    """Whether NCCL moves GPU-to-GPU traffic between PCIe-linked GPUs by CUDA peer-to-peer (else its SHM transport
    stages it through host memory: NVIDIA/nccl src/transport/shm.cc).

    NVIDIA/nccl src/graph/paths.cc ``ncclTopoCheckP2p``: P2P when the path type is at most ``p2pLevel``.
    v2.19.3-1 .. v2.22.3-1 (@v2.20.5-1 l. 277-300): ``p2pLevel = PATH_SYS``, lowered to ``PATH_PXB`` on Intel (and
    ARM, Zhaoxin) CPUs. v2.23.4-1 (l. 277-295): ``PATH_PXB`` by default, ``PATH_SYS`` only on AMD hosts with at most
    two GPUs. ``PATH_PXB``: both GPUs behind PCIe switches, not crossing the CPU's host bridge.
    """
    if host.gpus_behind_one_switch:
        return True
    if host.cpu_vendor is CpuVendor.AMD:
        return nccl_before_2_23_4 or gpus <= 2
    return False


def _peer_over_pcie(g: GPU, peer_gbs: float) -> bool:
    """An NVIDIA PCIe card whose GPU-to-GPU traffic takes the PCIe link (no NVLink bridge or fabric in use)."""
    return g.vendor == "NVIDIA" and g.form_factor.startswith("PCIe card") and peer_gbs <= g.host_link_gbs


HOST_DRAM_BYTES_PER_GPU = Constant(
    51.2e9, "bytes/s of host DRAM bandwidth per GPU (CPU optimizer step)",
    "NVIDIA DGX A100 User Guide, 'Hardware Overview': 2 x AMD EPYC 7742, 8 DDR4-3200 channels per socket "
    "(25.6 GB/s each, JEDEC DDR4-3200) = 409.6 GB/s for 8 GPUs; DGX H100 (2 x Xeon 8480C, 8 DDR5-4800 "
    "channels each, 614 GB/s for 8 GPUs) is within 1.5x",
    "an offloaded optimizer step (DeepSpeed CPU-Adam, FSDP CPU offload with torch's fused CPU AdamW) is "
    "memory-bound: it reads weight, gradient and two moments and writes three of them per parameter",
)
#: One CPU thread's torch AdamW(fused=True) step, parameters per second, by the bytes of the parameter/state dtype:
#: measured with benchmarks/cpu_adam_thread.py (torch 2.13.0 CPU, torch.set_num_threads(1), 10^8 parameters, best of 5)
#: on one core of an Intel Xeon with AVX-512 BF16 (2026-12-02): bf16 1.06e9/s, fp32 0.84e9/s; a DGX A100's Zen 2 core
#: (EPYC 7742, no AVX-512) is not faster. Read where the framework's launcher leaves each rank one thread
#: (profile ranks_single_threaded) and several ranks share the node.
CPU_ADAM_PARAMS_PER_S_ONE_THREAD = {
    2: Constant(1.06e9, "parameters/s, bf16 params/grads/moments", "measured: benchmarks/cpu_adam_thread.py (above)"),
    4: Constant(0.84e9, "parameters/s, fp32 params/grads/moments", "measured: benchmarks/cpu_adam_thread.py (above)"),
}


def host_optimizer_seconds(opt_bytes: float, one_thread_params: float = 0.0) -> float:
    """Seconds of an offloaded optimizer step per rank: its memory traffic (``opt_bytes``, 7 x the state dtype's bytes
    per parameter) at the host DRAM's share per GPU or, where each rank has one CPU thread (``one_thread_params`` > 0:
    the parameters it updates), the slower of that and one thread's AdamW rate for that dtype."""
    dram = opt_bytes / HOST_DRAM_BYTES_PER_GPU.value
    if not one_thread_params:
        return dram
    fp32 = opt_bytes / one_thread_params >= 7 * 4
    return max(dram, one_thread_params / CPU_ADAM_PARAMS_PER_S_ONE_THREAD[4 if fp32 else 2].value)


PAGED_NOTE = (
    "bitsandbytes paged optimizers keep their state in CUDA managed memory (bitsandbytes "
    "optim/optimizer.py get_state_buffer -> F.get_paged; QLoRA, Dettmers et al. 2023, sec. 2 'Paged "
    "Optimizers'): what does not fit the card is evicted to host RAM and paged back for its update, so "
    "each optimizer step moves the paged-out bytes in and out over the host link"
)


@dataclass(frozen=True)
class CardSpeed:
    """The rates of one card the speed model reads."""

    gemm_flops: float  # sustained matmul FLOP/s in training
    attn_flops: float  # FlashAttention-2 FLOP/s
    mem_bytes: float  # memory bandwidth, bytes/s
    peer_bytes: float  # GPU-to-GPU bytes/s per direction
    host_bytes: float  # host link bytes/s per direction
    p2p: bool  # GPU-to-GPU copies overlap with compute


HGX_GPUS_PER_HOST_UPLINK = Constant(
    2, "GPUs behind one PCIe x16 uplink to the CPU on an SXM (HGX) baseboard",
    "NVIDIA DGX A100 (developer.nvidia.com/blog/defining-ai-innovation-with-dgx-a100, 'System architecture'): "
    "four PCIe Gen4 switches for eight A100s, two GPUs and their NICs per switch, one x16 link from each switch "
    "to the CPU; HGX B200 `nvidia-smi topo -m` shows GPU0/GPU1 PIX to the same NICs (the-dsvolk.github.io "
    "ai-perf B200 explorer)",
    "when every GPU of the node moves offloaded or paged state at once, each gets half of the uplink",
)


def card_speed(g: GPU, peer_gbs: float | None = None, gpus: int = 1) -> CardSpeed | None:
    """:class:`CardSpeed` of a catalog card; None without a BF16 peak or a memory bandwidth (a user card
    may omit them: the planner then times it with the utilisation rule, ``throughput.MFU_DEFAULT``).
    ``gpus``: GPUs of the run on the node; on SXM baseboards pairs of them share a host uplink
    (:data:`HGX_GPUS_PER_HOST_UPLINK`), which halves what each moves to and from the host at once."""
    if not g.bf16_tflops or not g.mem_bandwidth_gbs:
        return None
    peak = g.bf16_tflops * 1e12
    gemm = GEMM_EFFICIENCY.get(g.gpu_id, GEMM_EFFICIENCY_DEFAULT).value
    attn = ATTENTION_EFFICIENCY.get(g.arch, ATTENTION_EFFICIENCY_DEFAULT).value
    link = peer_gbs if peer_gbs is not None else g.peer_gbs
    # gpus.csv column peer_to_peer (see NO_P2P_NOTE); over PCIe, NCCL's own rule for the node (PCIE_HOST)
    p2p = g.peer_to_peer and not (_peer_over_pcie(g, link) and not nccl_pcie_p2p(PCIE_HOST, gpus))
    peer = link if p2p else g.host_link_gbs / 2
    bw = g.mem_bandwidth_gbs * 1e9
    share = min(gpus, int(HGX_GPUS_PER_HOST_UPLINK.value)) if "SXM" in g.form_factor else 1  # gpus.csv form_factor
    return CardSpeed(peak * gemm, peak * attn, bw, peer * 1e9, g.host_link_gbs * 1e9 / max(1, share), p2p)


#: How far measured tokens/s lie from this model (absolute relative error over the 128 rows of
#: benchmarks/data/throughput/published.jsonl, the 9 H200 and 14 H100 runs of benchmarks/gpu_grid.py among them (the
#: H200's short steps took p90 from 0.22 to 0.28; the H100's 8-bit-AdamW and DoRA runs to 0.31);
#: ``python benchmarks/speed_accuracy.py``; pinned by a test).
SPEED_ROWS = 128
SPEED_ERROR_MEDIAN = 0.08
SPEED_ERROR_P90 = 0.31
SPEED_SOURCE = ("mechanism model (src/vramfit/plan/kernels.py): measured matmul rates, FlashAttention-2, memory-bound "
                "ops, de-quantization, launch overheads (ZeRO-3 host time beside the kernels), links (NCCL's PCIe peer-to-peer rule), ZeRO-3 prefetch, FSDP1 "
                "rate limiter, CPU optimizer, paging, rollout generation; scored by benchmarks/speed_accuracy.py")
