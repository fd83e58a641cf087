"""The scenario keys of a training stage (``stage``, ``reference``, GRPO's generation keys) and their
rules, kept apart from :mod:`vramfit.scenario` so that its table stays a table.

Defaults are TRL 1.16.0's: ``GRPOConfig.num_generations = 8`` (trl/trainer/grpo_config.py:480),
``max_completion_length = 512`` (:494), ``vllm_gpu_memory_utilization = 0.3`` (:656), ``beta = 0.0``
(:681). PPO left TRL after v1.9.0; its ``PPOConfig.response_length = 53`` is read at v1.9.0
(commit 35def3ee000a87f6839e66f4b7749b06274ed1b3, trl/experimental/ppo/ppo_config.py:151).
"""

from __future__ import annotations

from typing import Any

from vramfit.choices import Generation, Method, Reference, Stage
from vramfit.errors import ScenarioError

#: TRL's defaults (module docstring for the source).
GRPO_NUM_GENERATIONS = 8
GRPO_COMPLETION_LEN = 512
PPO_COMPLETION_LEN = 53
VLLM_GPU_MEMORY_UTILIZATION = 0.3
CPO_ALPHA = 1.0  # trl 1.16.0 experimental/cpo/cpo_config.py:132 `cpo_alpha: float = field(default=1.0)`

#: stage -> TRL 1.16.0's config class for it (trl/trainer/*_config.py; SimPO is CPOConfig(loss_type="simpo"),
#: trl/experimental/cpo): what ``plan --export trl``'s train.py parses and what ``--from`` reads a TRL file's
#: ``stage`` as (PPO left TRL after v1.9.0: none)
TRL_CONFIG_CLASS = {"sft": "SFTConfig", "dpo": "DPOConfig", "kto": "KTOConfig", "orpo": "ORPOConfig",
                    "simpo": "CPOConfig", "grpo": "GRPOConfig"}
PREFERENCE = (Stage.DPO, Stage.KTO, Stage.ORPO, Stage.SIMPO)
REFERENCE_FREE = (Stage.SFT, Stage.ORPO, Stage.SIMPO)
GENERATES = (Stage.GRPO, Stage.PPO)
#: Stages whose rules read the batch keys (GRPO: num_generations must divide micro_batch_size x num_gpus x grad_accum;
#: KTO: at least 2 per GPU batch, :func:`check_stage_keys`): a variant that changes one is re-checked whole.
BATCH_RULE_STAGES = (Stage.GRPO, Stage.KTO)


def STAGE_FIELDS(Field, CH, INT, NUM, BOOL) -> tuple:  # noqa: N802, N803 - rows of the scenario table
    """The stage's rows of :data:`vramfit.scenario.FIELDS` (same row builder as the others)."""
    return (
        Field("stage", CH, "Training stage: sft, a preference loss (dpo, kto, orpo, simpo: micro_batch_size counts "
              "pairs for dpo/orpo/simpo) or RL with rollouts (grpo, ppo: micro_batch_size counts completions).",
              ("Training stage", "Etapa de treino"), choices=Stage),
        Field("reference", CH, "Reference log-probs: auto (TRL: a frozen copy for full fine-tuning, the adapters "
              "disabled for LoRA, none for orpo/simpo and grpo with beta 0), copy, adapters-off, precomputed, none.",
              ("Reference model", "Modelo de referência"), choices=Reference),
        Field("num_generations", INT, "GRPO: completions sampled per prompt.", ("Generations per prompt",
              "Gerações por prompt"), unit="completions", limits=(2, 1_000_000),
              default_note=f"{GRPO_NUM_GENERATIONS} for grpo (TRL GRPOConfig), else none"),
        Field("completion_len", INT, "GRPO/PPO: generated tokens per completion; the prompt is seq_len minus this.",
              ("Completion length", "Comprimento da completação"), unit="tokens", limits=(1, 9_999_999),
              default_note=f"{GRPO_COMPLETION_LEN} for grpo, {PPO_COMPLETION_LEN} for ppo (TRL), else none"),
        Field("generation", CH, "GRPO rollouts: transformers generate (hf), vLLM in the training process "
              "(vllm-colocate) or a vLLM server on other GPUs (vllm-server).", ("Generation engine",
              "Motor de geração"), choices=Generation),
        Field("vllm_gpu_memory_utilization", NUM, "vllm-colocate: fraction of each card's memory vLLM takes.",
              ("vLLM memory fraction", "Fração de memória do vLLM"), range_note="0 < f ≤ 1",
              default_note=f"{VLLM_GPU_MEMORY_UTILIZATION} with vllm-colocate (TRL), else none"),
        Field("vllm_sleep", BOOL, "vllm-colocate: sleep mode, vLLM frees its memory while the model trains.",
              ("vLLM sleep mode", "Modo sleep do vLLM")),
        Field("cpo_alpha", NUM, "simpo: weight of the NLL (cross-entropy) on the chosen completions; 0 = pure SimPO, "
              "no cross-entropy over the chosen half's logits.", ("CPO alpha (chosen NLL)", "Alfa do CPO (NLL do "
              "escolhido)"), range_note="≥ 0", default_note=f"{CPO_ALPHA} for simpo (TRL CPOConfig), else none"),
        Field("rpo_alpha", NUM, "dpo: weight of the RPO NLL on the chosen completions (TRL DPOConfig rpo_alpha, "
              "loss_type sft); a cross-entropy over the chosen half's logits where the DPO trainer builds them "
              "(TRL < 1.0).", ("RPO alpha (chosen NLL)", "Alfa do RPO (NLL do escolhido)"), range_note="≥ 0",
              default_note="none (no NLL term)"),
    )


#: Keys that follow ``stage``: a scenario's ``replace(stage=...)`` drops them unless given.
STAGE_FOLLOWERS = ("reference", "num_generations", "completion_len", "generation", "vllm_gpu_memory_utilization",
                   "vllm_sleep", "cpo_alpha", "rpo_alpha")


def _only_with(kw: dict, raw: dict, key: str, stages: tuple[Stage, ...], given: bool) -> None:
    if given and kw["stage"] not in stages:
        raise ScenarioError(key, f"is a key of stage {' or '.join(s.value for s in stages)}, not "
                                 f"{kw['stage'].value}; set stage or remove {key}", [s.value for s in stages])


def _check_reference(kw: dict) -> None:
    stage, ref, method = kw["stage"], kw.get("reference", Reference.AUTO), kw.get("method", Method.LORA)
    if ref is Reference.AUTO:
        return
    if stage in REFERENCE_FREE and ref is not Reference.NONE:
        raise ScenarioError("reference", f"stage {stage.value} has no reference model (its loss is reference-free)",
                            ["auto", "none"])
    if ref is Reference.ADAPTERS_OFF and method is Method.FULL:
        raise ScenarioError("reference", "adapters-off needs LoRA adapters (method lora or qlora); full fine-tuning "
                                         "keeps a frozen copy", ["auto", "copy", "precomputed", "none"])
    if ref is Reference.PRECOMPUTED and stage in GENERATES:
        raise ScenarioError("reference", f"{stage.value} scores its own fresh rollouts, so reference log-probs cannot "
                                         "be precomputed", ["auto", "copy", "adapters-off", "none"])
    if ref is Reference.NONE and stage is Stage.PPO:
        raise ScenarioError("reference", "ppo's KL penalty always needs a reference", ["auto", "copy", "adapters-off"])
    if ref is Reference.NONE and stage in (Stage.DPO, Stage.KTO):
        raise ScenarioError("reference", f"{stage.value}'s loss needs reference log-probs (orpo and simpo do not)",
                            ["auto", "copy", "adapters-off", "precomputed"])


def _set_nll_weights(kw: dict, raw: dict) -> None:
    """``cpo_alpha`` (simpo; TRL's 1.0 when not given) and ``rpo_alpha`` (dpo): numbers >= 0 of their own stage."""
    from vramfit.safe_input import shown
    from vramfit.scenario import finite_number

    for key, stage in (("cpo_alpha", Stage.SIMPO), ("rpo_alpha", Stage.DPO)):
        _only_with(kw, raw, key, (stage,), key in raw)
        if key in raw:
            value = finite_number(key, raw[key], "a number ≥ 0")
            if value < 0:
                raise ScenarioError(key, f"must be a number ≥ 0, got {shown(raw[key])}")
            kw[key] = value
    if kw["stage"] is Stage.SIMPO:
        kw.setdefault("cpo_alpha", CPO_ALPHA)


def kto_min_batch(framework: Any, version: str | None) -> int:
    """The least per-device KTO batch of the trainer the framework at ``version`` runs, also KTO's default batch here
    (vramfit's is 1): its profile's ``kto_min_micro_batch``, TRL's KTOTrainer 2 (TRL 1.16.0 kto_trainer.py
    l. 844-847), LLaMA-Factory's own CustomKTOTrainer 1."""
    from vramfit.scenario import framework_profile

    return framework_profile(framework, version).kto_min_micro_batch


def check_stage_keys(kw: dict[str, Any], raw: dict[str, Any]) -> None:
    """Fill the stage keys' defaults into ``kw`` and reject keys of another stage and bad combinations."""
    kw.setdefault("stage", Stage.SFT)
    stage = kw["stage"]
    _only_with(kw, raw, "num_generations", (Stage.GRPO,), "num_generations" in raw)
    _only_with(kw, raw, "completion_len", GENERATES, "completion_len" in raw)
    _only_with(kw, raw, "generation", (Stage.GRPO,), kw.get("generation", Generation.HF) is not Generation.HF)
    _check_reference(kw)
    _set_nll_weights(kw, raw)
    colocate = kw.get("generation") is Generation.VLLM_COLOCATE
    for key in ("vllm_gpu_memory_utilization", "vllm_sleep"):
        if key in raw and raw[key] not in (False, "false") and not colocate:
            raise ScenarioError(key, "applies to generation=vllm-colocate only", ["vllm-colocate"])
    if "vllm_gpu_memory_utilization" in raw:
        from vramfit.scenario import fraction

        kw["vllm_gpu_memory_utilization"] = fraction("vllm_gpu_memory_utilization", raw["vllm_gpu_memory_utilization"],
                                                     lo_open=True)
    elif colocate:
        kw["vllm_gpu_memory_utilization"] = VLLM_GPU_MEMORY_UTILIZATION  # the card is needed to estimate (rl.py)
    if stage in GENERATES:
        kw.setdefault("completion_len", GRPO_COMPLETION_LEN if stage is Stage.GRPO else PPO_COMPLETION_LEN)
        seq = kw.get("seq_len", 2048)
        if kw["completion_len"] >= seq:
            raise ScenarioError("completion_len", f"must be shorter than seq_len ({seq}), which holds the prompt "
                                                  "and the completion")
    if stage is Stage.KTO:
        # the KL term pairs each example with another of its batch: TRL 1.16.0 kto_trainer.py l. 844-847 refuses a
        # per-device batch of 1 ("Actual (not effective) batch size must be > 1") for every loss that computes it;
        # a trainer that builds its KL inputs in preprocessing runs 1 (its profile says: kto_min_batch)
        least = kto_min_batch(kw.get("framework"), kw.get("framework_version"))
        if "micro_batch_size" not in raw:
            kw["micro_batch_size"] = least
        if kw.get("micro_batch_size", least) < least:
            raise ScenarioError("micro_batch_size", "KTO's KL term needs at least 2 examples per GPU batch (TRL "
                                "refuses 1)", [f"{least} or more"])
    if stage is Stage.GRPO:
        n = kw.setdefault("num_generations", GRPO_NUM_GENERATIONS)
        gpus = kw.get("num_gpus", 1)
        if "grad_accum" not in raw:
            # no accumulation given: the least that makes a step hold whole groups of num_generations completions,
            # which TRL requires (one prompt's group per step at micro-batch 1 on one GPU: num_generations steps)
            from math import gcd

            kw["grad_accum"] = n // gcd(n, kw.get("micro_batch_size", 1) * gpus)
            if kw["grad_accum"] > 1 and kw.get("optimizer_in_backward"):
                # nothing accumulates under an in-backward step (framework.check_runs), so one micro-batch on every
                # GPU must hold whole groups
                per_step = kw.get("micro_batch_size", 1) * gpus
                raise ScenarioError("micro_batch_size", f"with optimizer_in_backward nothing accumulates, so "
                                    f"micro_batch_size × num_gpus ({per_step}) must hold whole groups of "
                                    f"num_generations ({n}) completions: use a multiple of {n // gcd(n, gpus)}")
        batch = kw.get("micro_batch_size", 1) * kw.get("num_gpus", 1) * kw.get("grad_accum", 1)
        if batch % n:
            raise ScenarioError("num_generations", f"must divide the completions per step (micro_batch_size × "
                                                   f"num_gpus × grad_accum = {batch}), as TRL requires; got {n}",
                                [str(d) for d in range(2, batch + 1) if batch % d == 0] or ["a larger batch"])


def micro_batch_step(sc: Any) -> int:
    """The step between the micro-batch sizes the scenario's stage accepts with its other batch keys fixed: GRPO's
    ``num_generations`` must divide ``micro_batch_size x num_gpus x grad_accum`` (:func:`check_stage_keys`), so the
    valid sizes are the multiples of ``num_generations / gcd(num_generations, num_gpus x grad_accum)``; else 1."""
    from math import gcd

    if sc.stage is not Stage.GRPO:
        return 1
    n = sc.num_generations
    return n // gcd(n, sc.num_gpus * sc.grad_accum)


def seq_len_step(sc: Any) -> int:
    """The step between the ``seq_len`` values the scenario accepts (:func:`vramfit.layout_keys.seq_len_multiple`),
    and a multiple of what the framework's chunked loss splits the sequence into (estimate/titan_loss.py
    ``loss_seq_multiple``)."""
    from math import lcm

    from vramfit.choices import Loss
    from vramfit.layout_keys import seq_len_multiple
    from vramfit.scenario import framework_profile

    c = getattr(sc, "context_parallel", 1) or 1
    profile = framework_profile(getattr(sc, "framework", None), getattr(sc, "framework_version", None))
    return lcm(seq_len_multiple(c), profile.loss_seq_multiple(getattr(sc, "loss", Loss.STANDARD), c))


def min_micro_batch(sc: Any) -> int:
    """The smallest micro-batch the scenario's stage accepts with its other batch keys fixed (:func:`check_stage_keys`):
    KTO's least (:func:`kto_min_batch`: TRL's 2), GRPO's :func:`micro_batch_step`; else 1."""
    return kto_min_batch(sc.framework, sc.framework_version) if sc.stage is Stage.KTO else micro_batch_step(sc)


def min_seq_len(sc: Any) -> int:
    """The shortest ``seq_len`` the scenario's stage accepts: a generating stage's ``seq_len`` holds the prompt and
    the ``completion_len`` completion, so it must be longer (:func:`check_stage_keys`); else 1."""
    return sc.completion_len + 1 if sc.stage in GENERATES else 1
