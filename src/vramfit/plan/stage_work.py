"""What a training stage and a vision-language model add to the work of one step (:func:`throughput.step_work`).

The SFT step times ``micro_batch_size x seq_len`` text tokens through the language model. The rest, per the code
that runs it:

- **paired stages** (DPO, ORPO, SimPO) run chosen and rejected as one concatenated batch of twice the pairs
  through the policy (trl 1.16.0 trainer/dpo_trainer.py ``_compute_loss``, the same batch the memory model
  doubles: ``estimate.stages.policy_scenario``); a step's tokens count one sequence per pair, as a dataset's rows
  count them (``plan --dataset`` with ``--field chosen``), so a pair costs both sequences' time;
- **no-grad forwards** before the loss: DPO's reference pass over the same concatenated batch
  (dpo_trainer.py:1364-1382, none when the log-probs are precomputed or the stage is reference-free); KTO's KL
  pass of the policy over the mismatched completions (kto_trainer.py ``_compute_kl_logps``, under
  ``torch.no_grad``) and, with a reference, the reference's pass over both the completions and the KL batch
  (kto_trainer.py:1249-1263): 1 + 2 forwards of the micro-batch (a VLM's tower too: they take the images). Each runs the forward's matmuls
  (``2 N_mm``), its attention (causal kernels skip the masked half, as in training), its memory-bound
  traffic, a de-quantization of 4-bit weights (QLoRA) and its eager dispatch (``kernels.DECODE_LAYER_OVERHEAD_S``
  per layer: one forward's kernels);
- **PPO** (trl v1.9.0, commit 35def3ee, trl/experimental/ppo/ppo_trainer.py): the rollout batch is generated and
  scored once (the policy's log-probs come from ``generate``'s logits, l. 127; the reference pass is timed with
  the rollouts, ``plan/rollout.py``; the value and reward models' forwards, l. 729-733, in chunks of
  ``local_rollout_forward_batch_size`` = 64), then trained ``num_ppo_epochs`` = 4 times (ppo_config.py:232,
  the loop at l. 802-849: an optimizer step per mini-batch). A PPO step here is one rollout batch: its tokens
  are the batch's sequences once, its training four passes of the policy and the value model (the policy's
  architecture trained in full, as the memory model has it: ``stages.rl.value_step``; its gradients' traffic
  is not counted); torchtune 0.4's ppo_full_finetune_single_device trains the batch ``ppo_epochs`` = 2 times and
  forwards 16 sequences at once (its profile's ``StageRecipe``, :func:`ppo_schedule`);
- **images and video**: the language model's sequence holds the image tokens (``vision_inputs.lm_scenario``);
  the tower runs every patch through its blocks (matmuls ``2 x`` its linear weights, attention over the image's
  patches ``4 x patches x d_attn`` per layer), backward through it only where it trains (``trains_vision``:
  LoRA ``4 N``, full ``6 N``, as the language model), again under full recomputation where its layers are
  checkpointed. A step's tokens are the text tokens. Cross-attention layers (Llama 3.2 Vision) are not timed.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from vramfit.choices import Checkpointing, FreezeVision, Method, Parallelism, Quantize, Reference, Stage
from vramfit.plan.kernels import ATTN_BACKWARD_RATIO

if TYPE_CHECKING:
    from vramfit.models.spec import ModelSpec
    from vramfit.plan.throughput import ModelFlops, Work
    from vramfit.scenario import Scenario

#: trl v1.9.0 trl/experimental/ppo/ppo_config.py:232 ``num_ppo_epochs: int = field(default=4)``
PPO_EPOCHS = 4
#: the same file, l. 141 ``local_rollout_forward_batch_size`` (the value and reward forwards' chunk)
PPO_FORWARD_CHUNK = 64


def ppo_schedule(sc: Scenario) -> tuple[int, int, str]:
    """PPO's epochs over each rollout batch, the value and reward forwards' chunk, and whose setting they are: the
    framework's own recipe where it has one (``StageRecipe.ppo_epochs``: torchtune 0.4 trains the batch twice,
    forwards 16 sequences at once), else TRL's trainer's."""
    from vramfit.estimate.framework import scenario_profile, stage_recipe

    recipe = stage_recipe(scenario_profile(sc), Stage.PPO)
    if recipe is not None and recipe.ppo_epochs:
        return recipe.ppo_epochs, recipe.forward_chunk, f"{sc.framework.value} ppo_epochs"
    return PPO_EPOCHS, PPO_FORWARD_CHUNK, "TRL num_ppo_epochs"


def stage_time_note(sc: Scenario) -> str | None:
    """What a stage's time counts, in words for the plan (None for SFT)."""
    from vramfit.estimate.stages import reference

    if sc.stage in (Stage.DPO, Stage.ORPO, Stage.SIMPO):
        out = (f"Stage {sc.stage.value}: a step's tokens count one sequence per pair (a dataset's rows), and each pair "
               "runs its chosen and rejected sequences")
        if reference(sc) is Reference.PRECOMPUTED:
            out += "; the precomputed reference log-probs (one no-grad forward of every pair before training) are not timed"
        return out + "."
    if sc.stage is Stage.PPO:
        epochs, _, whose = ppo_schedule(sc)
        return (f"Stage ppo: a step is one batch of rollouts, trained {epochs} times ({whose}) with its "
                "value model; its tokens count the batch's sequences once.")
    return None


def scenario_flops(spec: ModelSpec, sc: Scenario) -> ModelFlops:
    """:func:`throughput.model_flops` of the sequence the language model runs (text plus image tokens), with the
    vision tower's work per sequence (module docstring)."""
    from vramfit.estimate.vision_inputs import attended_patches, per_sample
    from vramfit.plan.elementwise import dora_traffic
    from vramfit.plan.throughput import model_flops

    pix = per_sample(spec, sc) if spec.vision is not None else None
    per_call, per_token = dora_traffic(spec, sc)
    copies = _copies(spec, sc)
    extra = {"dora_bytes_per_call": per_call, "dora_bytes_per_token_fwd": per_token, "copy_params": sum(copies.values()),
             "head_copy_params": copies.get("lm_head", 0)}
    if pix is None:
        return dataclasses.replace(model_flops(spec, sc.seq_len), **extra)
    mf = model_flops(spec, sc.seq_len + pix.lm_tokens)
    block = spec.vision.block
    layers = block.num_hidden_layers
    d_attn = block.num_attention_heads * block.head_dim
    # each patch attends within its segment (a tile, a sub-image, a temporal patch or the image; Qwen2.5-VL's
    # windowed layers within a window): vision_inputs.attended_patches, which the memory model's eager scores read too
    return dataclasses.replace(
        mf, **extra, image_lm_tokens=pix.lm_tokens, tower_patches=pix.vision_patches,
        tower_mm_params=layers * sum(lin.weight_params for lin in block.block_linears)
        + sum(lin.weight_params for lin in spec.vision.projector),
        tower_attn_per_patch=4 * d_attn * attended_patches(spec, sc) / pix.vision_patches)


def _copies(spec: ModelSpec, sc: Scenario) -> dict[str, int]:
    """Elements of each trained copy ``modules_to_save`` makes (estimate/saved_modules.py copied_tensors), by name."""
    from vramfit.estimate.params import base_tensors
    from vramfit.estimate.saved_modules import copied_tensors

    return {c.name.split(".")[0]: c.numel * c.count for t in base_tensors(spec) for c in copied_tensors(spec, sc, t)}


def tower_flops_per_sequence(sc: Scenario, mf: ModelFlops) -> tuple[float, float]:
    """(matmul, attention) FLOPs of the vision tower per sequence in one training step; the attention counted
    whole, as :func:`throughput.train_flops_per_token` counts it (the kernels skip no mask in a tower)."""
    if not mf.tower_patches:
        return 0.0, 0.0
    from vramfit.estimate.framework import scenario_profile
    from vramfit.estimate.vision_inputs import trains_vision

    trained = trains_vision(sc, scenario_profile(sc))
    mm = 2 + ((4 if sc.method is Method.FULL else 2) if trained else 0)
    attn = 1 + (ATTN_BACKWARD_RATIO.value if trained else 0.0)
    if trained and sc.gradient_checkpointing in (Checkpointing.FULL, Checkpointing.OFFLOAD):
        mm, attn = mm + 2, attn + 1
    return float(mf.tower_patches * mm * mf.tower_mm_params), float(mf.tower_patches * attn * mf.tower_attn_per_patch)


def add_tower(w: Work, sc: Scenario, flops: tuple[float, float], passes: int = 1) -> Work:
    """``w`` plus ``passes`` runs of the vision tower over each micro-batch's sequences (module docstring); ``flops``:
    one sequence's (matmul, attention) FLOPs in a run (:func:`tower_flops_per_sequence`)."""
    if not sum(flops):
        return w
    seqs = passes * sc.micro_batch_size / _rank_share(sc)
    return dataclasses.replace(w, flops=w.flops + w.n_micro * seqs * sum(flops),
                               mm_flops_mb=w.mm_flops_mb + seqs * flops[0], attn_flops_mb=w.attn_flops_mb + seqs * flops[1])


def _rank_share(sc: Scenario) -> int:
    """Ranks one micro-batch's work is split over: tensor x pipeline x context parallel (plan/layouts.py)."""
    return sc.tensor_parallel * sc.pipeline_parallel * sc.context_parallel


def no_grad_forwards(sc: Scenario) -> int:
    """No-grad forwards of each micro-batch's sequences besides the trained one (module docstring)."""
    from vramfit.estimate.stages import has_reference_pass, reference

    ref = has_reference_pass(sc) and reference(sc) is not Reference.PRECOMPUTED
    if sc.stage is Stage.DPO:
        return 1 if ref else 0
    if sc.stage is Stage.KTO:
        return 1 + (2 if ref else 0)
    return 0


def stage_work(sc: Scenario, mf: ModelFlops, trainable: int, sft_work: Callable) -> Work:
    """``sft_work`` (the SFT step's work) of the sequences the stage trains, plus its other passes."""
    from vramfit.estimate.stages import policy_scenario

    psc = policy_scenario(sc)
    w = add_tower(sft_work(psc, mf, trainable), psc, tower_flops_per_sequence(psc, mf))
    # a step's tokens: one sequence per example (a pair's chosen sequence), as a dataset's rows count them
    w = dataclasses.replace(w, tokens_per_step=w.tokens_per_step * sc.micro_batch_size // psc.micro_batch_size)
    if sc.stage is Stage.PPO:
        w = _ppo(psc, mf, w)
    extra = no_grad_forwards(sc)
    w = add_forwards(w, psc, mf, extra * psc.micro_batch_size * psc.grad_accum, extra * psc.grad_accum)
    if extra:  # the no-grad forwards take the images too (pixel_values): the tower's forward
        frozen = tower_flops_per_sequence(dataclasses.replace(psc, freeze_vision=FreezeVision.YES), mf)
        w = add_tower(w, psc, frozen, extra)
    return w


def add_forwards(w: Work, sc: Scenario, mf: ModelFlops, sequences: int, passes: int,
                 params: int | None = None) -> Work:
    """``w`` plus ``sequences`` no-grad forwards of ``sc.seq_len`` tokens per GPU and step, in ``passes``
    chunks (each de-quantizes 4-bit weights once and dispatches its layers), through a model of ``params``
    matmul parameters (default: the policy's, ``mf.matmul_params``); split like the step over
    tensor/pipeline/context-parallel ranks."""
    if not sequences:
        return w
    from vramfit.plan.throughput import causal_share, dequant_bytes_per_weight, held_param_bytes
    from vramfit.plan.traffic import whole_gathers, zero3_exposed_share

    tokens = sequences * (sc.seq_len + mf.image_lm_tokens) / _rank_share(sc)
    mm = tokens * 2 * (mf.matmul_params if params is None else params)
    attn = tokens * mf.attn_flops_per_token_fwd
    n = max(1, w.n_micro)
    dequant = gptq = 0.0  # each forward de-quantizes the 4-bit weights once more, as the step's own (throughput.sft_work)
    if sc.method is Method.QLORA and sc.quantize is not Quantize.NONE and params is None:
        if sc.quantize is Quantize.GPTQ_INT4:
            gptq = passes * mf.quantizable_params / n
        else:
            dequant = passes * mf.quantizable_params * dequant_bytes_per_weight(sc)
    # each forward of a sharded model gathers its weights again, the reference copy too (TRL prepare_deepspeed keeps
    # stage 3, prepare_fsdp wraps it: trl 1.16.0 trainer/utils.py)
    peer, net = whole_gathers(sc, passes, held_param_bytes(sc, mf) if params is None else 2 * params)
    exposed = 0.0
    if sc.parallelism is Parallelism.ZERO3:  # its gathers past the prefetch bucket wait, as the step's own
        exposed = zero3_exposed_share(sc, mf.hidden_size, mf.quantizable_params / max(1, mf.num_layers))
    return dataclasses.replace(
        w, flops=w.flops + mm + attn, dequant_bytes=w.dequant_bytes + dequant, gptq_weights_mb=w.gptq_weights_mb + gptq,
        peer_bytes=w.peer_bytes + peer, net_bytes=w.net_bytes + net,
        exposed_peer_bytes=w.exposed_peer_bytes + exposed * peer, exposed_net_bytes=w.exposed_net_bytes + exposed * net,
        mm_flops_mb=w.mm_flops_mb + mm / n, attn_flops_mb=w.attn_flops_mb + attn * causal_share(sc) / n,
        elem_bytes_mb=w.elem_bytes_mb + tokens * mf.elem_bytes_per_token_fwd / n,
        forward_passes=w.forward_passes + passes)


def _ppo(sc: Scenario, mf: ModelFlops, w: Work) -> Work:
    """A PPO rollout batch (module docstring): the value model's training beside the policy's, both
    :func:`ppo_schedule`'s epochs times, then the value and reward forwards over the batch once."""
    from vramfit.plan.throughput import mechanisms, recompute_flops_per_token, train_flops_per_token

    n_value = mf.matmul_params - mf.lm_head_params  # the 1-wide score head in place of lm_head
    value_mf = dataclasses.replace(mf, matmul_params=n_value, lm_head_params=0)
    # the value model's step as the policy's full fine-tuning step would be timed (throughput.mechanisms): its matmuls,
    # attention, memory-bound passes and optimizer step over the same tokens
    vsc = dataclasses.replace(sc, method=Method.FULL, quantize=Quantize.NONE)
    model = train_flops_per_token(value_mf, Method.FULL)
    hw = model + recompute_flops_per_token(value_mf, sc.gradient_checkpointing)
    tokens_mb = sc.micro_batch_size * (sc.seq_len + mf.image_lm_tokens) / _rank_share(sc)
    m = mechanisms(vsc, value_mf, model, hw, 0, n_value, tokens_mb)
    value = dataclasses.replace(
        w, flops=w.flops + w.n_micro * tokens_mb * hw, mm_flops_mb=w.mm_flops_mb + m["mm_flops_mb"],
        attn_flops_mb=w.attn_flops_mb + m["attn_flops_mb"], elem_bytes_mb=w.elem_bytes_mb + m["elem_bytes_mb"],
        opt_bytes=w.opt_bytes + m["opt_bytes"], opt_host_params=w.opt_host_params + m["opt_host_params"],
        layers=2 * w.layers)  # the value model's blocks dispatch their kernels (and ZeRO-3 hooks) as the policy's
    epochs, chunk, _ = ppo_schedule(sc)
    trained = repeat(value, epochs)
    seqs = sc.micro_batch_size * sc.grad_accum
    chunks = math.ceil(seqs / chunk)
    # two models' forwards in `chunks` chunks each: the passes dispatch the doubled layer count (value + reward)
    return add_forwards(trained, sc, mf, 2 * seqs, chunks, params=n_value)


def repeat(w: Work, k: int) -> Work:
    """``w`` run ``k`` times over the same tokens (the rollouts, timed once, are not repeated)."""
    return dataclasses.replace(
        w, flops=w.flops * k, dequant_bytes=w.dequant_bytes * k, peer_bytes=w.peer_bytes * k,
        host_bytes=w.host_bytes * k, stream_bytes=w.stream_bytes * k, n_micro=w.n_micro * k,
        opt_bytes=w.opt_bytes * k, opt_host_params=w.opt_host_params * k, net_bytes=w.net_bytes * k,
        net_hops=w.net_hops * k, exposed_peer_bytes=w.exposed_peer_bytes * k,
        exposed_net_bytes=w.exposed_net_bytes * k, tp_bytes=w.tp_bytes * k, pp_bytes=w.pp_bytes * k,
        ep_bytes=w.ep_bytes * k, forward_passes=w.forward_passes * k)
