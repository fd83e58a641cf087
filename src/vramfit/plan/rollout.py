"""Rollout generation time of GRPO/PPO steps: decoding the step's completions before it trains on them.

TRL generates one batch of completions per optimizer step (trl@f2cd577 trainer/grpo_config.py
``generation_batch_size = per_device_train_batch_size * num_processes * steps_per_generation``, one
generation batch per optimization step). With ``generation: hf`` each GPU runs
``unwrapped_model.generate`` on its share with the full weights (grpo_trainer.py: ``unwrap_model_for_generation``
gathers ZeRO-3 weights, ``summon_full_params`` FSDP's); ``vllm-colocate`` runs vLLM on each training GPU on
the same share; ``vllm-server`` sends every completion of the step to one ``trl vllm-serve`` GPU
(trl/scripts/vllm_serve.py ``tensor_parallel_size = 1``, ``data_parallel_size = 1``). The trainer waits for
the completions, so the time adds to the step.

Timing (Pope et al. 2022, "Efficiently Scaling Transformer Inference", arXiv:2211.05102, sec. 2: a decode
step at small batch is bound by loading the weights and the KV cache from memory): the prompts are
prefilled at the card's matmul rate; each of the ``completion_len`` decode steps reads the weights once
and the batch's KV cache, at the memory bandwidth, or multiplies at the matmul rate if that is slower.
transformers ``generate`` dispatches every layer's kernels from Python each step; vLLM replays CUDA graphs
for decode (vLLM docs, "CUDA Graphs": ``enforce_eager=False`` by default), whose dispatch is not counted.
"""

from __future__ import annotations

from dataclasses import dataclass

from vramfit.choices import Generation, Method, Quantize
from vramfit.stage_keys import GENERATES


@dataclass(frozen=True)
class Rollout:
    """The generation of one optimizer step on the GPU that generates the most (card-independent)."""

    sequences: int  # completions decoded together
    prompt_len: int
    steps: int  # completion_len: decode steps, one token per sequence each
    weight_bytes: float  # weights read per decode step
    kv_bytes_per_token: int  # key + value bytes of one token over all layers
    flops_per_token: float  # forward matmul FLOPs per token (2 N_mm)
    eager_layers: int  # layers dispatched from Python per decode step (0: CUDA graphs)


#: bytes the matmul reads per de-quantized weight under transformers generate: bitsandbytes MatMul4Bit
#: de-quantizes (throughput.dequant_bytes_per_weight) for any input of more than one token row
#: (bitsandbytes autograd/_functions.py matmul_4bit: the fused gemv only when ``A.numel() == A.shape[-1]``),
#: then the matmul reads the 2-byte copy
_DEQUANTIZED_READ_BYTES = 2.0


def rollout_work(sc, mf) -> Rollout | None:
    """The :class:`Rollout` of ``sc`` (None: a stage without rollouts). ``mf``: :class:`throughput.ModelFlops`."""
    if sc.stage not in GENERATES or not sc.completion_len:
        return None
    per_gpu = sc.micro_batch_size * sc.grad_accum
    server = sc.generation is Generation.VLLM_SERVER
    seqs = per_gpu * sc.num_gpus if server else per_gpu
    # MoE: a batch reaches every expert; all weights but the embedding rows are read
    dense = mf.routed_elems_per_token == 0
    read = mf.matmul_params if dense else mf.num_params
    if sc.method is Method.QLORA and sc.generation is Generation.HF and sc.quantize is not Quantize.NONE:
        from vramfit.plan.throughput import dequant_bytes_per_weight  # throughput imports this module

        per = dequant_bytes_per_weight(sc) + _DEQUANTIZED_READ_BYTES
        weights = mf.quantizable_params * per + (read - mf.quantizable_params) * 2
    else:  # bf16 weights (TRL merges LoRA adapters into the weights it loads into vLLM)
        weights = read * 2
    eager = mf.num_layers if sc.generation is Generation.HF else 0
    return Rollout(seqs, max(0, sc.seq_len - sc.completion_len), sc.completion_len, float(weights),
                   mf.num_layers * mf.kv_width * 2, 2.0 * mf.matmul_params, eager)


def rollout_seconds(r: Rollout | None, gemm_flops: float, mem_bytes: float, layer_overhead_s: float) -> float:
    """Seconds of one step's generation on a card: prefill at ``gemm_flops``, then per decode step the larger
    of (weights + KV cache) / ``mem_bytes`` and the batch's matmuls / ``gemm_flops``, plus the eager dispatch
    of ``r.eager_layers`` layers at ``layer_overhead_s`` each."""
    if r is None:
        return 0.0
    prefill = r.sequences * r.prompt_len * r.flops_per_token / gemm_flops
    # the KV cache read at decode step t holds prompt + t tokens per sequence: summed over the steps
    kv = r.sequences * r.kv_bytes_per_token * (r.steps * r.prompt_len + r.steps * (r.steps - 1) / 2)
    memory = (r.steps * r.weight_bytes + kv) / mem_bytes
    compute = r.steps * r.sequences * r.flops_per_token / gemm_flops
    return prefill + max(memory, compute) + r.steps * r.eager_layers * layer_overhead_s
