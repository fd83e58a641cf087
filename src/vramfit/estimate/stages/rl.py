"""GRPO and PPO: rollouts (``StepPhase.GENERATE``), their scoring passes (``StepPhase.SCORE``), a
colocated vLLM engine, PPO's value and reward models.

TRL 1.16.0 and transformers 5.24.0 (PPO: TRL v1.9.0, commit 35def3ee000a87f6839e66f4b7749b06274ed1b3,
the last release with it):

* GRPO generates ``generation_batch_size / num_processes`` completions per GPU at once, which is
  ``per_device_train_batch_size × steps_per_generation`` and ``steps_per_generation`` defaults to
  ``gradient_accumulation_steps`` (trl/trainer/grpo_config.py:521-530): micro_batch_size × grad_accum;
* HF ``generate`` keeps a ``DynamicCache`` whose layers grow by ``torch.cat`` (transformers
  cache_utils.py ``DynamicLayer.update``), asks for the last position's logits only
  (``logits_to_keep = 1``, generation/utils.py) and copies them to fp32 before the logits processors
  and ``softmax`` (generation/utils.py ``_sample``);
* vLLM colocated takes ``vllm_gpu_memory_utilization`` of the card (grpo_config.py:656); with sleep
  mode TRL calls ``llm.sleep(level=2)`` after generating (trl/generation/vllm_generation.py:751),
  which frees its weights and KV cache until the next rollout;
* the scoring passes (old-policy log-probs, always with vLLM for importance sampling; the reference
  when beta != 0) run under no_grad in chunks of ``per_device_train_batch_size`` through the fused LM
  head over the completion's tokens (grpo_trainer.py:2505, 2642-2650);
* PPO (trl/experimental/ppo/ppo_trainer.py): rollouts in chunks of ``local_rollout_forward_batch_size``
  (64, ppo_config.py:141); the value model is trained with the policy (``PolicyAndValueWrapper``,
  line 275) and is not wrapped by PEFT; the reward model is frozen.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

from vramfit.choices import Generation, Method, Offload, Parallelism, Quantize, ShardScope, Stage
from vramfit.errors import ScenarioError
from vramfit.estimate.loss import logits_bytes_per_element, vocab_rows
from vramfit.estimate.phases import TRAINING_PHASES, Contribution, StepPhase
from vramfit.estimate.stages.preference import frozen_copy_bytes, no_grad_block, reference_model, scoring_pass

if TYPE_CHECKING:
    from vramfit.estimate.step import Step
    from vramfit.scenario import Scenario

GEN, SCORE = StepPhase.GENERATE, StepPhase.SCORE
TRAINING = TRAINING_PHASES  # the one list the step's own contributors use (estimate/contributions.py)
PPO_ROLLOUT_CHUNK = 64  # PPOConfig.local_rollout_forward_batch_size (trl/experimental/ppo/ppo_config.py:141)


def scores_rollouts(sc: Scenario) -> bool:
    """A no_grad scoring pass after the rollouts: PPO always (reference, value, reward); GRPO with vLLM
    (importance sampling correction, default True, grpo_config.py:925) or with a reference."""
    from vramfit.estimate.stages import has_reference_pass

    if sc.stage is Stage.PPO:
        return True
    return sc.stage is Stage.GRPO and (sc.generation is not Generation.HF or has_reference_pass(sc))


def generation_batch(sc: Scenario) -> int:
    """Completions one GPU generates at once (module docstring)."""
    per_gpu = sc.micro_batch_size * sc.grad_accum
    return min(PPO_ROLLOUT_CHUNK, per_gpu) if sc.stage is Stage.PPO else per_gpu


def kv_cache_bytes(step: Step, sequences: int, tokens: int) -> int:
    """K and V of every layer: 2 × layers × kv_heads × head_dim × tokens × sequences × dtype bytes."""
    s = step.spec
    return 2 * s.num_hidden_layers * s.num_key_value_heads * s.head_dim * tokens * sequences * step.sc.precision.compute_bytes


def _persistent(step: Step, phase: StepPhase) -> Iterator[Contribution]:
    """The model state (weights, adapters, master weights, optimizer state, workspaces) in ``phase``."""
    from vramfit.estimate.contributions import model_state

    for c in model_state(step):
        if c.phase is StepPhase.FORWARD:
            yield Contribution(c.name, phase, c.bytes)


def _zero3_grad_partition(step: Step, phase: StepPhase) -> Iterator[Contribution]:
    """DeepSpeed ZeRO-3's flat 16-bit gradient partition, allocated once at init and kept for the whole run
    (DeepSpeed v0.16.7 runtime/zero/stage3.py ``_setup_for_real_optimizer`` l. 542-557: ``self.grad_partitions_flat_buffer
    = torch.zeros(sum(p.partition_numel() for p in all_params), ...)``; estimate/deepspeed.py ``zero3_grads_resident``):
    held through the rollouts and the scoring passes as through evaluation (estimate/evaluation.py)."""
    from vramfit.estimate.contributions import gradients
    from vramfit.estimate.deepspeed import zero3_grads_resident

    if zero3_grads_resident(step.sc):
        for c in gradients(step):
            if c.phase is StepPhase.FORWARD:
                yield Contribution(c.name, phase, c.bytes)


def vllm_bytes(step: Step) -> int:
    """vLLM's share of the card: gpu_memory_utilization × the memory CUDA reports (vLLM's total)."""
    if step.card is None:
        raise ScenarioError("gpu", "generation=vllm-colocate takes vllm_gpu_memory_utilization × the card's memory: "
                                   "name the card (gpu)")
    return int(step.sc.vllm_gpu_memory_utilization * step.card.usable_bytes)


#: an MXFP4 weight's bytes per parameter: a 4-bit element and one 8-bit shared scale per 32-element block (OCP
#: Microscaling Formats (MX) v1.0, sec. 5.2 and table 1: MXFP4 = E2M1 elements, E8M0 scale, k = 32)
MXFP4_BYTES_PER_PARAM = 0.5 + 1 / 32


def vllm_model_bytes(spec) -> int:
    """vLLM's own copy of the checkpoint, as the checkpoint stores it: 16-bit, bar an MXFP4 checkpoint's experts
    (``spec.experts_mxfp4``: gpt-oss), which vLLM keeps in MXFP4 (vllm v0.10 model_executor/layers/quantization/
    mxfp4.py ``Mxfp4MoEMethod``: the packed uint8 weights and their scales)."""
    if not spec.experts_mxfp4:
        return 2 * spec.num_params
    experts = spec.num_hidden_layers * sum(lin.weight_params for lin in spec.block_linears if lin.group == "expert")
    return 2 * (spec.num_params - experts) + int(experts * MXFP4_BYTES_PER_PARAM)


def vllm_too_small(share: float, usable_bytes: int, spec, seq_len: int) -> tuple[int, int, float] | None:
    """(vLLM's budget, the least it needs, the least share that holds it) where ``share`` of a card with
    ``usable_bytes`` is below that least, else None. vLLM loads its own copy of the model inside the budget
    (:func:`vllm_model_bytes`) and refuses to start unless the KV cache left holds one request of ``max_model_len``
    ("No available memory for the cache blocks" / "... is larger than the available KV cache memory": vllm
    v1/core/kv_cache_utils.py ``check_enough_kv_cache_memory``), which TRL sets to the prompt and completion lengths
    (trl v0.21 grpo_trainer.py ``LLM(..., gpu_memory_utilization=..., max_model_len=...)``), i.e. ``seq_len`` here:
    so the least is the copy and one ``seq_len`` sequence's 16-bit KV cache. vLLM's own profiling run and CUDA graphs
    take more, so the share named is a floor ("at least"). The card verdicts refuse such a card (plan/verdict.py
    card_refusal); drive 2026-12-07: 0.05 of an H100 had been counted as 3.96 GiB beside a 15 GiB model, and the run
    said to fit."""
    from vramfit.estimate.loss import layer_kv_bytes

    budget = int(share * usable_bytes)
    least = vllm_model_bytes(spec) + spec.num_hidden_layers * layer_kv_bytes(spec, seq_len, 2)
    if budget >= least:
        return None
    return budget, least, -(-least * 100 // usable_bytes) / 100


def lm_seq_len(step: Step) -> int:
    """Tokens per sequence as the language model sees them: the text's ``seq_len`` plus a vision-language model's
    image and video tokens (estimate/vision_inputs.py ``lm_scenario``). TRL feeds a rollout's prompt with its pixel
    values and expanded image placeholders (grpo_trainer.py ``_generate_single_turn``: ``generate_inputs``), and the
    scoring and reference passes re-run the same inputs, so their caches and logits rows include them."""
    from vramfit.estimate.vision_inputs import lm_scenario

    return lm_scenario(step.spec, step.sc).seq_len


def hf_generate(step: Step) -> Iterator[Contribution]:
    """transformers generate: the larger of the prefill (prompt cache + one no_grad block over the
    prompts) and the last decode step (full cache, one layer's ``torch.cat`` copy, fp32 logits and
    probabilities of the last position); the prompt holds a vision-language model's image tokens (:func:`lm_seq_len`)."""
    sc, B, total = step.sc, generation_batch(step.sc), lm_seq_len(step)
    prompt = total - sc.completion_len
    block = no_grad_block(step, B * prompt, prompt) + _dora_pass(step, B, prompt)
    prefill = kv_cache_bytes(step, B, prompt) + block
    layer = kv_cache_bytes(step, B, total) // step.spec.num_hidden_layers + _dora_pass(step, B, 1)
    V = vocab_rows(step.spec)
    last = B * V * (logits_bytes_per_element(sc, step.profile) + 4 + 4)
    if prefill > kv_cache_bytes(step, B, total) + layer + last:
        yield Contribution("kv_cache", GEN, kv_cache_bytes(step, B, prompt))
        yield Contribution("generation_transient", GEN, block)
    else:
        yield Contribution("kv_cache", GEN, kv_cache_bytes(step, B, total))
        yield Contribution("generation_transient", GEN, layer + last)
    if sc.parallelism is Parallelism.ZERO3:
        # unwrap_model_for_generation gathers every parameter of the engine's module whenever ZeRO-3 is on, on one GPU
        # too (ds3_gather_for_generation=True, trl/models/utils.py `GatheredParameters(model.parameters())`), onto the
        # GPU: beside the resident shard, or all of it where the parameters live on the host (offload_param); PPO's
        # engine wraps PolicyAndValueWrapper, so the value model is gathered with the policy (TRL v1.9.0
        # experimental/ppo/ppo_trainer.py:492, 683-686; v0.17.0 trainer/ppo_trainer.py:228, 422-423)
        gathered = _gathered(step) + (_gathered(value_step(step)) if sc.stage is Stage.PPO else 0)
        if gathered:
            yield Contribution("gathered_weights", GEN, gathered)


def _gathered(step: Step) -> int:
    """What gathering one model's parameters adds beside its resident partition (:func:`_engine_params`); PPO's value
    model is gathered as it is stored too, in full 16 bits (:func:`value_step`), whatever the policy's method."""
    full, resident = _engine_params(step)
    return max(0, full - resident)


def _engine_params(step: Step) -> tuple[int, int]:
    """(whole, this GPU's) bytes of the parameters ZeRO-3 partitions, as stored: the 16-bit weights, a QLoRA model's
    4-bit base (its quant state kept whole on every GPU) and the adapters. Gathering brings back what they store, not
    a 16-bit copy of every parameter: DeepSpeed's ``GatheredParameters`` all-gathers each partitioned tensor into its
    stored dtype (deepspeed v0.16 runtime/zero/partition_parameters.py ``_all_gather``: ``ds_tensor`` of the param's
    dtype), the packed 4-bit storage of a bitsandbytes ``Params4bit`` included (property sweep 2026-12-07: the 16-bit
    size had made QLoRA's rollout grow with the GPU count, 12.69 -> 16.85 GiB from 2 to 64 GPUs on Llama-3.1-8B)."""
    from vramfit.estimate.core import model_state

    sc = step.sc
    whole, _ = model_state(step.spec, replace(sc, num_gpus=1, num_nodes=1, offload=Offload.NONE), step.profile)
    p = step.parts
    if sc.shard_scope is not ShardScope.ALL:
        # this GPU's own partition only: hpZ's node-local secondary copy (shard_scope node, also in the parts) is not
        # reused for the gather, which fills a fresh whole-size buffer (deepspeed v0.16 partition_parameters.py
        # _all_gather_params); review 2026-12-07: the copy had been subtracted, 14.02 -> 12.15 GiB on 2 x 8 GPUs
        p, _ = model_state(step.spec, replace(sc, shard_scope=ShardScope.ALL), step.profile)
    return whole.weights + whole.quantized_base + whole.adapters, p.weights + p.quantized_base + p.adapters


def _dora_pass(step: Step, rows: int, row: int) -> int:
    """The largest DoRA layer's forward working set in a no_grad pass of ``rows`` sequences of ``row`` tokens
    (estimate/dora.py forward_transients): the generating policy runs its adapters, and PEFT's DoRA layer forms B·A and
    the weight norm on every forward, a decoding step's too (peft v0.21.2 tuners/lora/variants.py DoraLinearVariant
    .forward -> tuners/lora/dora.py DoraLinearLayer.forward, no cache of the norm); 0 without DoRA."""
    from vramfit.estimate.dora import forward_transients

    if not step.sc.dora:
        return 0
    sc = replace(step.sc, micro_batch_size=rows, seq_len=row)
    return forward_transients(step.spec, sc, step.profile, list(step.adapters))[0]


def generate(step: Step) -> Iterator[Contribution]:
    """The rollout phase: the model state plus the generation engine's memory on the training GPU."""
    yield from _persistent(step, GEN)
    yield from _zero3_grad_partition(step, GEN)
    if step.sc.generation is Generation.HF:
        yield from hf_generate(step)
    elif step.sc.generation is Generation.VLLM_COLOCATE:
        yield Contribution("vllm", GEN, vllm_bytes(step))
    # vllm-server: the engine lives on GPUs of its own


def vllm_resident(step: Step) -> Iterator[Contribution]:
    """A colocated vLLM without sleep mode keeps its share through scoring and training."""
    sc = step.sc
    if sc.generation is Generation.VLLM_COLOCATE and not sc.vllm_sleep:
        for phase in (*TRAINING, SCORE):
            yield Contribution("vllm", phase, vllm_bytes(step))


def rl_score(step: Step) -> Iterator[Contribution]:
    """Old-policy / reference / value / reward passes after the rollouts, before training."""
    sc = step.sc
    if not scores_rollouts(sc):
        return
    yield from _persistent(step, SCORE)
    yield from _zero3_grad_partition(step, SCORE)
    total = lm_seq_len(step)
    if sc.stage is Stage.GRPO:
        yield from scoring_pass(step, sc.micro_batch_size, total, sc.micro_batch_size * sc.completion_len)
    else:
        B = generation_batch(sc)
        yield from scoring_pass(step, B, total, B * total)


def value_step(step: Step) -> Step:
    """PPO's value model: the same architecture trained in full (no PEFT), as its own SFT step."""
    from vramfit.estimate.step import compute

    sc = replace(step.sc, stage=Stage.SFT, method=Method.FULL, quantize=Quantize.NONE)
    return compute(step.spec, sc, step.card)


def ppo_models(step: Step) -> Iterator[Contribution]:
    """PPO: the trained value model (state, gradients, saved activations) and the frozen reward model."""
    if step.sc.stage is not Stage.PPO:
        return
    v = value_step(step)
    p = v.parts
    state = p.weights + p.master_weights + p.optimizer_state + p.quantized_base
    for phase in (GEN, SCORE, *TRAINING):
        yield Contribution("value_model", phase, state)
        yield Contribution("reward_model", phase, frozen_copy_bytes(v))
    # under ZeRO-3 the engine's flat gradient buffer holds the value model's partition too, from init on
    # (_zero3_grad_partition): in every phase, not only from the end of backward
    from vramfit.estimate.deepspeed import zero3_grads_resident

    grad_phases = (GEN, SCORE, *TRAINING) if zero3_grads_resident(step.sc) else (
        StepPhase.BACKWARD_END, StepPhase.BACKWARD_END_TIED, StepPhase.OPTIMIZER_STEP)
    for phase in grad_phases:
        yield Contribution("value_gradients", phase, p.gradients)
    # PolicyAndValueWrapper.forward runs the critic before the policy (TRL v0.17.0 trainer/ppo_trainer.py: critic_backbone,
    # then self.policy), so its saved activations are alive at the policy's top-block high point too
    for phase in (StepPhase.FORWARD, StepPhase.FORWARD_ATTENTION, StepPhase.BACKWARD_LOSS, StepPhase.BACKWARD_BLOCK):
        yield Contribution("value_activations", phase, v.acts.blocks)


def ppo_scores_bytes(step: Step) -> int:
    """PPO's kept generation scores: every rollout's fp32 ``completions x completion_len x vocabulary`` rows (below)."""
    sc = step.sc
    return sc.micro_batch_size * sc.grad_accum * sc.completion_len * vocab_rows(step.spec) * 4


def ppo_scores(step: Step) -> Iterator[Contribution]:
    """PPO's generation scores (TRL v1.9.0 experimental/ppo/ppo_trainer.py): ``generate`` asks for ``output_scores``,
    each step's processed logits in fp32 (transformers generation/utils.py ``_sample`` casts them before the
    processors), and stacks them (l. 101-110); ``batch_generation`` pads the chunks into one tensor (l. 115-144); the
    train loop binds it to ``logitss`` (l. 690), which nothing deletes: it lives through scoring and training, and the
    previous step's through the next rollout until ``batch_generation`` returns. Generation's high point is the larger
    of the last chunk's stack (the previous scores, the earlier chunks', the chunk's per-step rows and their stack, its
    KV cache alive in ``output``) and the pad (the previous scores, the chunks and their padded copy, no KV cache)."""
    if step.sc.stage is not Stage.PPO:
        return
    kept, chunk = ppo_scores_bytes(step), generation_batch(step.sc)
    row = kept // (step.sc.micro_batch_size * step.sc.grad_accum)
    cache = kv_cache_bytes(step, chunk, lm_seq_len(step))  # counted by hf_generate at the stack's moment
    yield Contribution("rollout_scores", GEN, max(2 * kept + chunk * row, 3 * kept - cache))
    for phase in (SCORE, *TRAINING):
        yield Contribution("rollout_scores", phase, kept)


CONTRIBUTORS = (reference_model, generate, vllm_resident, rl_score, ppo_models, ppo_scores)


def describe_rl(step: Step) -> list[str]:
    sc = step.sc
    B = generation_batch(sc)
    out = [f"Rollouts: {B} completions per GPU generated at once, {lm_seq_len(step) - sc.completion_len} prompt + "
           f"{sc.completion_len} completion tokens"
           + (f", {sc.num_generations} per prompt" if sc.stage is Stage.GRPO else "") + "."]
    if sc.stage is Stage.GRPO:
        per_step = sc.effective_batch
        out.append(f"Per optimizer step: {per_step} completions = {per_step // sc.num_generations} prompts × "
                   f"{sc.num_generations} generations (the effective batch counts completions, as TRL's does).")
    if sc.generation is Generation.HF:
        out.append(f"Generation with transformers generate: KV cache {kv_cache_bytes(step, B, lm_seq_len(step)) / 2**30:,.2f} GiB "
                   "(2 × layers × kv_heads × head_dim × tokens × dtype, every layer full length).")
    elif sc.generation is Generation.VLLM_COLOCATE:
        out.append(f"vLLM colocated: {sc.vllm_gpu_memory_utilization:g} × {step.card.name} = "
                   f"{vllm_bytes(step) / 2**30:,.2f} GiB "
                   + ("while generating only (sleep mode level 2)" if sc.vllm_sleep else
                      "held through training too (no sleep mode)")
                   + "; on another card it takes that card's fraction (estimate with its gpu).")
    else:
        out.append("vLLM server on GPUs of its own (trl vllm-serve): none of its memory is on these GPUs; "
                   "count those GPUs separately.")
    if sc.stage is Stage.PPO:
        out.append("PPO value model: the policy's architecture trained in full (not PEFT), lm_head counted in place of "
                   "its 1-wide score head; reward model: a frozen copy of the same architecture.")
        out.append(f"PPO keeps its rollouts' generation scores (fp32, completions × completion_len × vocabulary: "
                   f"{ppo_scores_bytes(step) / 2**30:,.2f} GiB) through scoring and training, and the previous step's "
                   "through the next rollout (TRL's logitss).")
    return out
