"""Documented constants: each a record with value, unit and source.

Sources are pinned where the shared design notes (``shared/design/cuda-memory-facts.md``) pin them.
Figures that vary by machine are defaults a user can override; their spread is in ``note``.
"""

from __future__ import annotations

from dataclasses import dataclass

from vramfit.units import GiB, MiB  # noqa: F401 - the one definition, re-exported for the estimator


@dataclass(frozen=True)
class Constant:
    value: int | float
    unit: str
    source: str
    note: str = ""


# --- PyTorch CUDA caching allocator (pytorch/pytorch@eb42ad6e c10/cuda/CUDACachingAllocator.cpp) ---
K_MIN_BLOCK_SIZE = Constant(512, "bytes", "CUDACachingAllocator.cpp kMinBlockSize: 'all sizes are rounded to at least 512 bytes'")
K_SMALL_SIZE = Constant(1 * MiB, "bytes", "CUDACachingAllocator.cpp kSmallSize: 'largest small allocation is 1 MiB'")
K_SMALL_BUFFER = Constant(2 * MiB, "bytes", "CUDACachingAllocator.cpp kSmallBuffer: small allocations packed in 2 MiB blocks")
K_LARGE_BUFFER = Constant(20 * MiB, "bytes", "CUDACachingAllocator.cpp kLargeBuffer: 1-10 MiB allocations packed in 20 MiB blocks")
K_MIN_LARGE_ALLOC = Constant(10 * MiB, "bytes", "CUDACachingAllocator.cpp kMinLargeAlloc")
K_ROUND_LARGE = Constant(2 * MiB, "bytes", "CUDACachingAllocator.cpp kRoundLarge: 'round up large allocations to 2 MiB'")

# --- CUDA context and library workspaces (outside or inside the allocator) ---
CUDA_CONTEXT = Constant(
    400 * MiB,
    "bytes per process per GPU",
    "ptrblck, pytorch/pytorch#109888: 'around 400MB if CUDA >= 11.7 is used and lazy module loading enabled'",
    "reports span 256 MiB (RTX 3090, torch 2.7.1, InvokeAI#9413) to 555 MiB (RTX PRO 6000, llama.cpp#23604); "
    "it scales with SM count; override with a measured figure (vramfit calibrate)",
)
CUBLAS_WORKSPACE = Constant(
    4096 * 1024 * 2 + 16 * 1024 * 8,
    "bytes per (handle, stream)",
    "pytorch/pytorch@26a39059 aten/src/ATen/cuda/CublasHandlePool.cpp parseChosenWorkspaceSize ':4096:2:16:8' (non-Hopper)",
    "allocated through the caching allocator, so it counts in memory_allocated",
)
CUBLAS_WORKSPACE_HOPPER = Constant(
    4096 * 8 * 1024,
    "bytes per (handle, stream)",
    "pytorch/pytorch@26a39059 CublasHandlePool.cpp: '32MiB for Hopper' (sm90: H100/H200)",
)
CUBLASLT_WORKSPACE = Constant(
    1024 * 1024,
    "bytes per (Lt handle, stream)",
    "pytorch CublasHandlePool.cpp parseCUDABlasLtWorkspaceSize default 1024 KiB",
)
# NCCL: per peer connection, a P2P receive buffer holds all three protocols, aligned to 2 MiB
# (NVIDIA/nccl@5067397c src/init.cc buffSizes, src/transport/p2p.cc ALIGN_SIZE(recvSize, CUDA_IPC_MIN)).
NCCL_SIMPLE_BUFF = Constant(1 << 22, "bytes", "nccl src/include/device.h DEFAULT_BUFFSIZE (1 << 22) /* 4MiB */")
NCCL_LL_BUFF = Constant(8 * 512 * 8 * 16, "bytes", "nccl LL: 8 lines x 512 threads x 8 steps x 16 B")
NCCL_LL128_BUFF = Constant(120 * 640 * 8 * 8, "bytes", "nccl LL128: 120 x 640 x 8 steps x 8 B")
NCCL_CHANNELS = Constant(
    8, "channels", "UNCONFIRMED: NCCL picks 2-32 channels by topology; 8 assumed for one NVLink node",
)

# --- Optimizer state formats ---
BNB_BLOCKSIZE_8BIT = Constant(
    256, "elements", "bitsandbytes@0.49.2 optim/optimizer.py Optimizer2State: blockwise absmax with blocksize = 256"
)
BNB_MIN_8BIT_SIZE = Constant(
    4096, "elements", "bitsandbytes optim/optimizer.py min_8bit_size=4096: smaller tensors keep fp32 state"
)
BNB_PAGED_MIN_NUMEL = Constant(
    100_000, "elements", "bitsandbytes optim/optimizer.py: 'if not self.is_paged or p.numel() < 1e5' -> not paged"
)
TORCHAO_4BIT_BLOCK = Constant(
    128, "elements", "pytorch/ao torchao/optim/adam.py AdamW4bit(block_size=128), subclass_4bit.py OptimState4bit"
)
TORCHAO_MIN_QUANT_SIZE = Constant(
    4096, "elements", "pytorch/ao torchao/optim/adam.py _new_buffer: quantized only if p.numel() >= 4096"
)

# --- Quantized base ---
BNB_4BIT_BLOCK = Constant(64, "elements", "bitsandbytes functional.quantize_4bit blocksize=64 (QLoRA paper, sec. 2)")
BNB_DQ_BLOCK = Constant(
    256, "blocks", "QLoRA paper (Dettmers et al. 2023) sec. 3 'Double Quantization': second-level blocksize 256"
)
GPTQ_GROUP_SIZE = Constant(128, "elements", "AutoGPTQ/optimum default group_size=128")

# --- Distributed buffers ---
DDP_BUCKET_CAP = Constant(25 * MiB, "bytes", "torch.nn.parallel.DistributedDataParallel bucket_cap_mb=25 (default)")
DS_REDUCE_BUCKET_ELEMS = Constant(
    500_000_000, "elements", "DeepSpeed v0.19.5 deepspeed/runtime/zero/config.py reduce_bucket_size = 5e8"
)
FSDP_INFLIGHT_ALLGATHERS = Constant(
    2, "units", "pytorch torch/distributed/fsdp/_limiter_utils.py _max_num_inflight_all_gathers = 2"
)

# --- Loss ---
TORCHTUNE_OUTPUT_CHUNKS = Constant(
    8, "chunks", "pytorch/torchtune torchtune/modules/loss/ce_chunked_output_loss.py num_output_chunks=8"
)
LIGER_FLCE_CHUNKING = Constant(
    1, "rule", "linkedin/Liger-Kernel ops/fused_linear_cross_entropy.py: chunk_size = next_power_of_2(ceil(BT / ceil(V / H)))"
)
