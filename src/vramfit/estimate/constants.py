"""Documented constants: each a record with value, unit and source.

Every constant is used by the estimator and its ``source`` names the library file at a pinned
version or commit (tests/estimate/test_constants.py checks both). Figures that vary by machine are
defaults a user can override; their spread is in ``note``.
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
K_MIN_BLOCK_SIZE = Constant(512, "bytes", "pytorch/pytorch@eb42ad6e c10/cuda/CUDACachingAllocator.cpp kMinBlockSize: 'all sizes are rounded to at least 512 bytes'")
K_SMALL_SIZE = Constant(1 * MiB, "bytes", "pytorch/pytorch@eb42ad6e c10/cuda/CUDACachingAllocator.cpp kSmallSize: 'largest small allocation is 1 MiB'")
K_SMALL_BUFFER = Constant(2 * MiB, "bytes", "pytorch/pytorch@eb42ad6e c10/cuda/CUDACachingAllocator.cpp kSmallBuffer: small allocations packed in 2 MiB blocks")
K_LARGE_BUFFER = Constant(20 * MiB, "bytes", "pytorch/pytorch@eb42ad6e c10/cuda/CUDACachingAllocator.cpp kLargeBuffer: 1-10 MiB allocations packed in 20 MiB blocks")
K_MIN_LARGE_ALLOC = Constant(10 * MiB, "bytes", "pytorch/pytorch@eb42ad6e c10/cuda/CUDACachingAllocator.cpp kMinLargeAlloc")
K_ROUND_LARGE = Constant(2 * MiB, "bytes", "pytorch/pytorch@eb42ad6e c10/cuda/CUDACachingAllocator.cpp kRoundLarge: 'round up large allocations to 2 MiB'")

# --- CUDA context and library workspaces (outside or inside the allocator) ---
# What a training process holds on the card outside PyTorch's allocator (nvidia-smi minus max_memory_reserved): the
# CUDA context plus the kernel modules a training step loads lazily and the libraries' own handles. Modelled per
# architecture where it was measured, else from PyTorch's out-of-memory texts of single-GPU training processes.
CUDA_CONTEXT = Constant(
    522 * MiB,
    "bytes per process per GPU",
    "PyTorch OOM texts of single-GPU training processes ('Including non-PyTorch memory, this process has P GiB' minus "
    "allocated and reserved-but-unallocated): RTX 4090 0.41 GiB (eosphoros-ai/DB-GPT-Hub#248), L40S 0.50 and 0.51 "
    "(UKPLab sentence-transformers#3214, bmaltais/kohya_ss#2724), a 48 GB card 0.515 (mila-iqia/milabench#315), "
    "A800 0.51 (hahnyuan/PB-LLM#3), an 80 GB card 0.51 (modelscope/ms-swift#2536), RTX 5090 0.60 "
    "(hiyouga/LlamaFactory#7798): median 0.51 GiB",
    "ptrblck's 'around 400MB' with lazy loading (pytorch/pytorch#109888) is a small workload's context; V100s read "
    "0.29-0.30 GiB (LlamaFactory#4652); override with your own runs (vramfit calibrate)",
)
CUDA_CONTEXT_HOPPER = Constant(
    794_820_608,
    "bytes per process per GPU (sm90)",
    "measured: NVML per-process usage minus torch.cuda.max_memory_reserved(), the same 794,820,608 B (758 MiB) on 8 "
    "of 9 runs of benchmarks/gpu_grid.py on one H200 (torch 2.11.0+cu130, driver 580.159.04, 2026-12-04; "
    "benchmarks/data/measured/vramfit_h200.jsonl), LoRA, QLoRA and full fine-tuning alike; 778,043,392 B with eager "
    "attention only (Gemma-2: no SDPA kernels loaded)",
    "the same 794,820,608 B on all 14 runs on one H100 80GB HBM3 (2026-12-05, vramfit_h100.jsonl), which shares the "
    "chip; older CUDA/torch builds load different kernel images (vramfit calibrate)",
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
    "pytorch/pytorch@26a39059 CublasHandlePool.cpp parseCUDABlasLtWorkspaceSize default 1024 KiB",
)
# NCCL: per peer connection, a P2P receive buffer holds all three protocols, aligned to 2 MiB
# (NVIDIA/nccl@5067397c src/init.cc buffSizes, src/transport/p2p.cc ALIGN_SIZE(recvSize, CUDA_IPC_MIN)).
NCCL_SIMPLE_BUFF = Constant(
    1 << 22, "bytes", "NVIDIA/nccl@5067397c src/include/device.h DEFAULT_BUFFSIZE (1 << 22) /* 4MiB */"
)
NCCL_LL_BUFF = Constant(
    8 * 512 * 8 * 16, "bytes", "NVIDIA/nccl@5067397c src/include/device.h LL: 8 lines x 512 threads x 8 steps x 16 B"
)
NCCL_LL128_BUFF = Constant(
    120 * 640 * 8 * 8, "bytes", "NVIDIA/nccl@5067397c src/include/device.h LL128: 120 x 640 x 8 steps x 8 B"
)
NCCL_CUDA_IPC_MIN = Constant(
    2 * MiB, "bytes", "NVIDIA/nccl@5067397c src/transport/p2p.cc CUDA_IPC_MIN 2097152: receive buffers aligned to it"
)
NCCL_NVLS_CHANNELS = Constant(
    16, "channels",
    "NVIDIA/nccl v2.19.3-1 src/transport/nvls.cc NCCL_PARAM(NvlsChannels, \"NVLS_NCHANNELS\", 16) (same in v2.18.1-1 to v2.21.5-1)",
)
NCCL_NVLS_MEM_ALIGN = Constant(
    2 * MiB, "bytes",
    "NVIDIA/nccl v2.19.3-1 src/transport/nvls.cc NVLS_MEM_ALIGN_SIZE (1 << 21): each NVLS buffer's head/tail area",
)
NCCL_CHANNELS = Constant(
    8, "channels",
    "UNCONFIRMED: NVIDIA/nccl@5067397c src/graph/search.cc picks 2-32 channels by topology; 8 assumed for one NVLink node",
)

# --- Optimizer state formats ---
BNB_BLOCKSIZE_8BIT = Constant(
    256, "elements", "bitsandbytes@0.49.2 optim/optimizer.py Optimizer2State: blockwise absmax with blocksize = 256"
)
BNB_MIN_8BIT_SIZE = Constant(
    4096, "elements", "bitsandbytes@0.49.2 optim/optimizer.py min_8bit_size=4096: smaller tensors keep fp32 state"
)
BNB_PAGED_MIN_NUMEL = Constant(
    100_000, "elements",
    "bitsandbytes@0.49.2 optim/optimizer.py get_state_buffer: 'if not self.is_paged or p.numel() < 1e5' -> not paged",
)
TORCHAO_4BIT_BLOCK = Constant(
    128, "elements", "pytorch/ao v0.11.0 torchao/optim/adam.py AdamW4bit(block_size=128), subclass_4bit.py OptimState4bit"
)
TORCHAO_8BIT_BLOCK = Constant(
    256, "elements", "pytorch/ao v0.6.1 torchao/prototype/low_bit_optim/adam.py AdamW8bit(block_size=256), "
    "subclass_8bit.py OptimState8bit.zeros: uint8 codes, fp32 scale per block, a 256-entry fp32 qmap"
)
TORCHAO_MIN_QUANT_SIZE = Constant(
    4096, "elements", "pytorch/ao v0.11.0 torchao/optim/adam.py _new_buffer: quantized only if p.numel() >= 4096"
)

# --- Quantized base ---
BNB_4BIT_BLOCK = Constant(
    64, "elements", "bitsandbytes@0.50.2 functional.py quantize_4bit: blocksize None -> 64 (QLoRA paper, sec. 2)"
)
BNB_DQ_BLOCK = Constant(
    256, "blocks",
    "QLoRA paper (Dettmers et al. 2023, arXiv 2305.14314v1) sec. 3 'Double Quantization': second-level blocksize 256",
)
GPTQ_GROUP_SIZE = Constant(
    128, "elements", "transformers v5.24.0 utils/quantization_config.py GPTQConfig(group_size=128)"
)
BNB_GEMM_4BIT_FUSED_MAX_TOKENS = Constant(
    512, "tokens per micro-batch",
    "bitsandbytes@0.50.2 backends/cuda/ops.py _gemm_4bit_use_custom_cuda: 'custom wins up to M=512; "
    "dequant+F.linear wins above that'",
    "up to this many tokens the 4-bit matmul runs a fused kernel and de-quantizes no weight",
)

# --- Distributed buffers ---
# (DDP's 25 MiB bucket_cap_mb is not a constant here: with gradient_as_bucket_view=False the buckets
# together copy every gradient, whatever their cap. DeepSpeed's buckets come from its config:
# estimate/deepspeed.py.)
FSDP_INFLIGHT_ALLGATHERS = Constant(
    2, "units",
    "torch v2.13.0 torch/distributed/fsdp/_limiter_utils.py _max_num_inflight_all_gathers = 2; "
    "docs/source/notes/fsdp.rst: 'forward currently requires 2x all-gather buffer size'",
)

# --- Loss ---
TORCHTUNE_OUTPUT_CHUNKS = Constant(
    8, "chunks", "pytorch/torchtune v0.4.0 torchtune/modules/loss/ce_chunked_output_loss.py num_output_chunks=8"
)
TORCHTITAN_LOSS_CHUNKS = Constant(
    8, "chunks", "torchtitan v0.3.0 components/loss.py ChunkedLossWrapper.Config num_chunks: int = 8"
)
LITGPT_LM_HEAD_CHUNK = Constant(
    128, "tokens", "Lightning-AI/lit-gpt@8641822 finetune/lora.py: model(input_ids, lm_head_chunk_size=128)"
)

# --- Unsloth 2024.12 (the release of its published long-context tables) ---
UNSLOTH_ROPE_INITIAL_ROWS = Constant(
    4 * 8192, "positions",
    "unslothai/unsloth@0e0d8fc (2024.12.3) unsloth/models/llama.py LlamaExtendedRotaryEmbedding.__init__: "
    "'Dynamic RoPE we first set it to a max of 4 * 8192 tokens', current_rope_size = min(4 * 8192, "
    "max_position_embeddings)",
)
UNSLOTH_ROPE_GROWTH = Constant(
    8192, "positions",
    "unslothai/unsloth@0e0d8fc (2024.12.3) unsloth/models/llama.py extend_rope_embedding: 'Iteratively grow by "
    "increments of 8192'",
)
# (Liger's fused linear+CE chunk rule is code, not a number: estimate/loss.py cites
# linkedin/Liger-Kernel v0.5.2 ops/fused_linear_cross_entropy.py next to it.)
