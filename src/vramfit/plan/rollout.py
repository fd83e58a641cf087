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

Two more parts of TRL 1.16.0's ``_generate_and_score_completions`` wait before training:

- the reference log-probs when ``beta != 0`` (trl/trainer/grpo_trainer.py:2710-2739): one no-grad forward of
  the step's prompt + completion tokens, chunked by ``per_device_train_batch_size`` (:2505, :1440), through
  ``ref_model`` (a copy) or the policy under ``use_adapter`` with the adapters off (PEFT);
- under ZeRO-3 with ``generation: hf``, ``unwrap_model_for_generation`` (trl/models/utils.py:141-150) wraps
  ``generate`` in ``deepspeed.zero.GatheredParameters(model.parameters())`` (``ds3_gather_for_generation``
  defaults to True, trl/trainer/grpo_config.py:498): every GPU receives the whole model once per generation,
  before the first token. FSDP has no such gather: ``summon_full_params(..., recurse=False)``
  (trl/distributed.py:74-91, grpo_trainer.py:1871) materializes only the root's own parameters (a no-op on
  FSDP2), so every forward of ``generate`` (the prefill and each decode step) all-gathers each sharded
  layer again, which FSDP prefetches while the previous layer computes.
"""

from __future__ import annotations

from dataclasses import dataclass

from vramfit.choices import Generation, Method, Parallelism, Quantize
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
    ref_flops: float = 0.0  # forward FLOPs of the reference log-probs (beta != 0), 0: no reference pass
    ref_passes: int = 0  # forward chunks of the reference pass (per_device_train_batch_size sequences each)
    ref_bytes_per_pass: float = 0.0  # memory traffic per chunk besides the matmuls (4-bit de-quantization)
    ref_layers: int = 0  # layers each chunk dispatches from Python (the trained transformers model, eager)
    gather_bytes: float = 0.0  # bytes each GPU receives to hold the full weights (ZeRO-3/FSDP, generation hf)
    gather_per_forward: bool = False  # FSDP: every forward of generate gathers; ZeRO-3: once per generation


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
                   mf.num_layers * mf.kv_width * 2, 2.0 * mf.matmul_params, eager,
                   **_reference_pass(sc, mf, per_gpu), **_generation_gather(sc, mf))


def _reference_pass(sc, mf, sequences: int) -> dict:
    """The reference log-probs' forward (module docstring): ``sequences`` x ``seq_len`` tokens at ``2 N_mm``
    matmul FLOPs plus the attention forward (halved: causal kernels skip the masked half, as in training),
    in chunks of ``micro_batch_size`` sequences, each de-quantizing 4-bit weights once (QLoRA)."""
    from vramfit.estimate.stages import has_reference_pass

    if not has_reference_pass(sc):
        return {}
    attn = mf.attn_flops_per_token_fwd * (1.0 if sc.attention.value == "eager" else 0.5)
    passes = -(-sequences // sc.micro_batch_size)
    dequant = 0.0
    if sc.method is Method.QLORA and sc.quantize is not Quantize.NONE:
        from vramfit.plan.throughput import dequant_bytes_per_weight

        dequant = mf.quantizable_params * dequant_bytes_per_weight(sc)
    return {"ref_flops": float(sequences * sc.seq_len * (2 * mf.matmul_params + attn)), "ref_passes": passes,
            "ref_bytes_per_pass": dequant, "ref_layers": mf.num_layers}


def _generation_gather(sc, mf) -> dict:
    """Bytes each GPU receives to hold the whole model for ``generate`` (module docstring): the other GPUs'
    shards, ``(n - 1) / n`` of the weights (4-bit block weights at half a byte, the rest in 16-bit)."""
    if sc.generation is not Generation.HF or sc.num_gpus < 2 or sc.parallelism not in (Parallelism.ZERO3,
                                                                                       Parallelism.FSDP):
        return {}
    held = mf.num_params * 2.0
    if sc.method is Method.QLORA and sc.quantize is not Quantize.NONE:
        held -= mf.quantizable_params * 1.5
    return {"gather_bytes": held * (sc.num_gpus - 1) / sc.num_gpus,
            "gather_per_forward": sc.parallelism is Parallelism.FSDP}


def rollout_seconds(r: Rollout | None, gemm_flops: float, mem_bytes: float, layer_overhead_s: float,
                    peer_bytes: float = 0.0) -> float:
    """Seconds of one step's generation on a card: prefill at ``gemm_flops``, then per decode step the larger
    of (weights + KV cache) / ``mem_bytes`` and the batch's matmuls / ``gemm_flops``, plus the eager dispatch
    of ``r.eager_layers`` layers at ``layer_overhead_s`` each; then the reference pass
    (:func:`reference_seconds`). ``peer_bytes``: GPU-to-GPU bytes/s of the weight gather (``r.gather_bytes``):
    once before generating (ZeRO-3), or in every forward (FSDP), where it overlaps with that forward's
    compute and the slower of the two counts."""
    if r is None:
        return 0.0
    gather = r.gather_bytes / peer_bytes if r.gather_bytes else 0.0
    per_fwd = gather if r.gather_per_forward else 0.0
    prefill = max(r.sequences * r.prompt_len * r.flops_per_token / gemm_flops, per_fwd)
    # the KV cache read at decode step t holds prompt + t tokens per sequence: summed over the steps
    kv = r.sequences * r.kv_bytes_per_token * (r.steps * r.prompt_len + r.steps * (r.steps - 1) / 2)
    memory = (r.steps * r.weight_bytes + kv) / mem_bytes
    compute = r.steps * r.sequences * r.flops_per_token / gemm_flops
    once = 0.0 if r.gather_per_forward else gather
    return (once + prefill + max(memory, compute, r.steps * per_fwd) + r.steps * r.eager_layers * layer_overhead_s
            + reference_seconds(r, gemm_flops, mem_bytes, layer_overhead_s))


def reference_seconds(r: Rollout, gemm_flops: float, mem_bytes: float, layer_overhead_s: float) -> float:
    """Seconds of the reference log-probs' forward: its FLOPs at ``gemm_flops``, each chunk's de-quantization
    at ``mem_bytes`` and its eager dispatch (one forward of ``r.ref_layers`` layers: the trained transformers
    model runs eager whichever backend generates)."""
    if not r.ref_passes:
        return 0.0
    return (r.ref_flops / gemm_flops + r.ref_passes * r.ref_bytes_per_pass / mem_bytes
            + r.ref_passes * r.ref_layers * layer_overhead_s)
