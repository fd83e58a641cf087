"""What each training framework does differently: the profile a scenario runs (the profiles themselves are data in
estimate/framework_profiles.py).

The same scenario costs different memory under transformers+PEFT, torchtune and litgpt because their
code keeps different tensors. Each field below names the code (file and version) it models; every
choice with more than two values is an enum, and code never compares the display ``name``.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from vramfit.choices import BNB_4BIT, FSDP_FAMILY, ZERO_FAMILY, Reference
from vramfit.errors import ScenarioError
from vramfit.estimate.framework_profiles import _FSDP2_UNITS, PROFILES  # noqa: F401  (re-exported)
from vramfit.estimate.profile_fields import (  # noqa: F401  (re-exported: the profiles' public names)
    BNB_OPTIMIZERS,
    CompileScope,
    ForcedFp32,
    FrameworkProfile,
    FrameworkVersion,
    LoopCarry,
    LossLayout,
    OptimizerImpl,
    StageRecipe,
)
from vramfit.scenario import (
    AdamwImpl,
    Framework,
    FsdpVersion,
    KbitPrepare,
    Loss,
    Method,
    Offload,
    Optimizer,
    Parallelism,
    Precision,
    Quantize,
    ShardScope,
    Stage,
    UseReentrant,
)


def profile_for(framework: Framework, version: str | None = None) -> FrameworkProfile:
    """The profile with the changes of the older release(s) ``version`` names (``+`` joins several)."""
    profile = PROFILES[framework]
    named = {old.name: old for old in profile.older_versions}
    parts = [] if version is None or version == profile.version else version.split("+")
    if not parts or any(p not in named for p in parts):
        return profile
    changes = {k: v for p in parts for k, v in named[p].changes}
    return replace(profile, version=version, **changes)


def known_versions(framework: Framework) -> list[str]:
    profile = PROFILES[framework]
    return [v for v in (profile.version, *(old.name for old in profile.older_versions)) if v]


def check_version(framework: Framework, value: Any) -> str:
    """A framework_version the profile knows (older releases joinable by ``+``), else one ScenarioError."""
    valid = known_versions(framework)
    text = value.strip() if isinstance(value, str) else value
    older = valid[1:] if PROFILES[framework].version else valid
    if text not in valid and not (isinstance(text, str) and all(p in older for p in text.split("+"))):
        raise ScenarioError("framework_version", f"{framework.value} has no modelled release {value!r}", valid)
    libraries: dict[str, str] = {}
    for part in text.split("+"):  # one release per library: a later part would silently replace an earlier one's changes
        m = re.fullmatch(r"(.+)-(\d[\w.]*)", part)
        lib = m.group(1) if m else part
        if lib in libraries:
            raise ScenarioError("framework_version", f"{value!r} names {lib} twice ({libraries[lib]!r} and {part!r}); "
                                "join at most one release of each library with '+'", valid)
        libraries[lib] = part
    return text


#: the scenario keys :func:`scenario_profile` reads (tests/estimate/test_profile_cache.py checks the list against its
#: code): the key of its memo, so an estimate's five or so calls cost one lookup after the first
PROFILE_KEYS = ("framework", "framework_version", "fsdp_version", "parallelism", "use_reentrant", "optimizer_impl",
                "method", "kbit_prepare", "quantize", "precision")
_PROFILES_SEEN: dict[tuple, tuple[FrameworkProfile, FrameworkProfile]] = {}


def scenario_profile(sc) -> FrameworkProfile:
    """The profile a scenario runs (:func:`resolve_profile`), memoised on :data:`PROFILE_KEYS` and the framework's
    profile object (a test that swaps a profile in PROFILES gets its own)."""
    key = tuple(getattr(sc, k) for k in PROFILE_KEYS)
    base = PROFILES[sc.framework]
    hit = _PROFILES_SEEN.get(key)
    if hit is not None and hit[0] is base:
        return hit[1]
    profile = resolve_profile(sc)
    if len(_PROFILES_SEEN) < 4096:  # bounded: a long-running server sees few distinct keys
        _PROFILES_SEEN[key] = (base, profile)
    return profile


def resolve_profile(sc) -> FrameworkProfile:
    """The profile a scenario runs: its framework at its framework_version, with its kbit_prepare, use_reentrant and
    optimizer_impl choices (and no fp32 upcast under DeepSpeed's 16-bit engine).

    ``kbit_prepare`` overrides ``qlora_unquantized_fp32``; peft's prepare_model_for_kbit_training never
    casts a GPTQ model (peft v0.21.2 src/peft/utils/other.py: the fp32 cast is skipped when
    ``is_gptq_quantized``)."""
    profile = with_fsdp_version(profile_for(sc.framework, sc.framework_version), sc)
    if sc.use_reentrant is not UseReentrant.AUTO:  # the Trainer's gradient_checkpointing_kwargs, as the user set it
        profile = replace(profile, ckpt_reentrant=sc.use_reentrant is UseReentrant.YES)
    if sc.optimizer_impl is not AdamwImpl.AUTO:  # the AdamW implementation the user's config asks for
        profile = replace(profile, torch_optimizer_impl=OptimizerImpl(sc.optimizer_impl.value))
    if sc.method in profile.fsdp_root_unit_methods:
        profile = replace(profile, fsdp_root_gathered=True)  # that recipe's root unit (profile_fields.py)
    # 16-bit adapters, so peft casts no input to fp32: TRL's cast of a quantized model's (profile_fields.py), or the
    # DeepSpeed engine's cast of every floating parameter whatever dtype the model was loaded in (-true or -mixed
    # alike; see the upcast below)
    if (profile.qlora_adapters_16bit and sc.method is Method.QLORA) or (
            profile.ds_mixed_is_engine_cast and sc.parallelism in ZERO_FAMILY and sc.precision is not Precision.FP32):
        profile = replace(profile, adapters_fp32=False, lora_casts_input=False)
    upcast = profile.qlora_unquantized_fp32
    if sc.kbit_prepare is not KbitPrepare.AUTO:
        upcast = sc.kbit_prepare is KbitPrepare.YES
    if sc.quantize is Quantize.GPTQ_INT4:
        upcast = False
    if sc.parallelism in ZERO_FAMILY and sc.precision is not Precision.FP32:
        # the DeepSpeed engine casts every floating parameter to its 16-bit dtype (deepspeedai/DeepSpeed v0.19.6
        # runtime/engine.py _cast_module_mixed_precision; zero.Init partitions in that dtype already), and the HF
        # Trainer runs no autocast under DeepSpeed: the fp32 upcast is undone
        upcast = False
    return profile if upcast == profile.qlora_unquantized_fp32 else replace(profile, qlora_unquantized_fp32=upcast)


def with_fsdp_version(profile: FrameworkProfile, sc) -> FrameworkProfile:
    """The profile with its FSDP2 variant's changes where the scenario picks ``fsdp_version: 2`` under FSDP."""
    variant = profile.fsdp2_variant
    if variant is None or sc.fsdp_version is not FsdpVersion.V2 or sc.parallelism not in FSDP_FAMILY:
        return profile
    return replace(profile, **dict(variant.changes))


def check_fsdp_version(kw: dict[str, Any]) -> None:
    """An explicit ``fsdp_version`` the framework can run under the scenario's parallelism, else one ScenarioError."""
    framework = kw.get("framework", Framework.HF)
    profile = profile_for(framework, kw.get("framework_version"))
    wanted, own = kw["fsdp_version"], FsdpVersion.V2 if profile.fsdp2 else FsdpVersion.V1
    if wanted is not own and profile.fsdp2_variant is None:
        raise ScenarioError("fsdp_version", f"{framework.value} runs FSDP{own.value} only", ["auto", own.value])
    if wanted is FsdpVersion.V2 and kw.get("parallelism") is Parallelism.FSDP_NO_SHARD:
        raise ScenarioError("fsdp_version", "FSDP2 has no NO_SHARD strategy (fsdp-no-shard is FSDP1's)", ["auto", "1"])


def multi_gpu_default(kw: dict[str, Any]) -> Parallelism:
    """The parallelism several GPUs get when none is given: the profile's ``default_parallelism`` (torchtitan: FSDP over
    the ranks left, its data_parallel_shard_degree -1), else DDP, or FSDP where the framework runs no DDP (profile
    ``parallelisms``: torchtune's distributed recipes, litgpt's scripts)."""
    profile = profile_for(kw.get("framework", Framework.HF), kw.get("framework_version"))
    if profile.default_parallelism is not None:
        return profile.default_parallelism
    runs = profile.parallelisms
    return Parallelism.DDP if not runs or Parallelism.DDP in runs else Parallelism.FSDP


def check_parallelism(kw: dict[str, Any]) -> None:
    """A ``parallelism`` the framework's recipes can run (profile ``parallelisms``; empty: any), else one ScenarioError."""
    framework = kw.get("framework", Framework.HF)
    profile = profile_for(framework, kw.get("framework_version"))
    if profile.parallelisms and kw["parallelism"] not in profile.parallelisms:
        raise ScenarioError("parallelism", f"{framework.value} does not run {kw['parallelism'].value}",
                            [p.value for p in profile.parallelisms])
    if not profile.runs_hybrid_shard and kw.get("shard_scope") is ShardScope.NODE:
        raise ScenarioError("shard_scope", f"{framework.value} shards over every rank (its fine-tuning scripts have no "
                            "hybrid sharding)", ["all"])
    if profile.methods and kw.get("method", Method.LORA) not in profile.methods:
        raise ScenarioError("method", f"{framework.value} does not train {kw['method'].value} (no 4-bit base)",
                            [m.value for m in profile.methods])
    if profile.quantized_on_one_device and kw.get("method") is Method.QLORA and kw.get("num_gpus", 1) > 1:
        raise ScenarioError("num_gpus", f"{framework.value} trains a quantized base on one GPU only (its scripts "
                            "refuse --quantize on more devices)", ["1"])
    check_ddp_layout(kw, profile)
    check_runs(kw, profile)


def check_loss_chunks(kw: dict[str, Any], profile: FrameworkProfile) -> None:
    """A ``seq_len`` the profile's chunked standard loss can split (estimate/titan_loss.py ``loss_seq_multiple``), else
    one ScenarioError: the run raises at its first loss."""
    from vramfit.estimate.titan_loss import loss_seq_multiple

    c = kw.get("context_parallel", 1) or 1
    step = loss_seq_multiple(profile, kw.get("loss", Loss.STANDARD), c)
    seq = kw.get("seq_len", 2048)
    if step > 1 and seq % step:
        name = kw.get("framework", Framework.HF).value
        per = f" on each context-parallel rank ({seq} / {c} tokens)" if c > 1 else ""
        raise ScenarioError("seq_len", f"{name}'s chunked loss splits the sequence{per} into {step // c} equal chunks "
                            f"and raises otherwise: seq_len must be a multiple of {step}, got {seq}",
                            [str(v) for v in sorted({max(step, seq // step * step), -(-seq // step) * step})])


def check_ddp_layout(kw: dict[str, Any], profile: FrameworkProfile) -> None:
    """DDP beside tensor/pipeline/context parallelism only where the profile runs it (``ddp_beside_model_parallel``):
    torchtitan raises for DDP replicas beside another mesh dimension and shards with FSDP under context parallel.
    ddp with tensor/pipeline parallel over every GPU (no data-parallel ranks) is the layout it runs without either."""
    if profile.ddp_beside_model_parallel or kw["parallelism"] is not Parallelism.DDP:
        return
    t, p, c = (kw.get(k, 1) for k in ("tensor_parallel", "pipeline_parallel", "context_parallel"))
    if c > 1 or (t * p > 1 and kw.get("num_gpus", 1) > t * p):
        name = kw.get("framework", Framework.HF).value
        raise ScenarioError("parallelism", f"{name} runs no DDP beside tensor, pipeline or context parallelism (it "
                            "shards the remaining ranks with FSDP)", [Parallelism.FSDP.value])


#: the bitsandbytes quantizations (litgpt's --quantize bnb.nf4 / nf4-dq / fp4 / fp4-dq / int8-training)
_BNB_QUANTS = (*BNB_4BIT, Quantize.INT8)


def check_runs(kw: dict[str, Any], profile: FrameworkProfile) -> None:
    """An optimizer, loss, offload and stage the framework's recipes can be told to run (profile
    ``runs_bnb_optimizers``, ``runs_fused_loss``, ``runs_offload``, ``stages``), else one ScenarioError naming the key
    and the values it accepts."""
    name = kw.get("framework", Framework.HF).value
    optimizer = kw.get("optimizer", Optimizer.ADAMW)
    if not profile.runs_bnb_optimizers and optimizer in BNB_OPTIMIZERS:
        raise ScenarioError("optimizer", f"{name} runs no bitsandbytes optimizer ({optimizer.value} is one)",
                            [v.value for v in Optimizer if v not in BNB_OPTIMIZERS])
    losses = [v.value for v in Loss if (v is not Loss.FUSED or profile.runs_fused_loss)
              and (v is not Loss.CHUNKED or profile.runs_chunked_loss)]  # what the recipes can be told to run
    if not profile.runs_fused_loss and kw.get("loss") is Loss.FUSED:
        raise ScenarioError("loss", f"{name} does not call a fused linear + cross-entropy loss", losses)
    if not profile.runs_chunked_loss and kw.get("loss") is Loss.CHUNKED:
        raise ScenarioError("loss", f"{name} has no chunked-loss switch (its own loss is what loss: standard runs)",
                            losses)
    if kw.get("dora"):
        _check_dora(kw, profile, name)
    precision, quantize = kw.get("precision"), kw.get("quantize", Quantize.NONE)
    if profile.quantized_refuses_mixed and precision is not None and precision.mixed and quantize in _BNB_QUANTS:
        raise ScenarioError("precision", f"{name}'s scripts refuse {precision.value} with a bitsandbytes-quantized base: "
                            "a -true precision runs it",
                            [p.value for p in Precision if not p.mixed])
    from vramfit.estimate.saved_modules import check_copied_targets, check_saved_modules

    check_copied_targets(kw, profile, name)
    if kw.get("modules_to_save"):
        check_saved_modules(kw, profile, name)
    if not profile.runs_offload and kw.get("offload", Offload.NONE) is not Offload.NONE:
        raise ScenarioError("offload", f"{name} does not offload model state to the host (its FSDP is built with CPU "
                            "offload off)", [Offload.NONE.value])
    if not profile.runs_compile and kw.get("compile"):
        raise ScenarioError("compile", f"{name}'s training code has no torch.compile switch that is modelled "
                            "(profile runs_compile)", ["false"])
    if kw.get("optimizer_in_backward") and kw.get("grad_accum", 1) > 1:
        # each parameter is stepped and its gradient freed as backward makes it: nothing is left to accumulate
        # (torchtune v0.4.0 recipes/full_finetune_single_device.py l. 155, full_finetune_distributed.py l. 165,
        # ppo_full_finetune_single_device.py l. 317: "Gradient accumulation is not supported with optimizer in bwd")
        raise ScenarioError("optimizer_in_backward", "steps each parameter during backward, so no gradient is left to "
                            f"accumulate over {kw['grad_accum']} micro-batches; set grad_accum to 1", ["false"])
    stage = kw.get("stage", Stage.SFT)
    if profile.stages and stage not in profile.stages:
        raise ScenarioError("stage", f"{name} has no trainer for {stage.value}", [v.value for v in profile.stages])
    check_stage_recipe(kw, profile)


def _check_dora(kw: dict[str, Any], profile: FrameworkProfile, name: str) -> None:
    """DoRA adapts LoRA's update, so it needs adapters, and a framework whose DoRA is modelled (profile ``runs_dora``)."""
    if kw.get("method", Method.LORA) is Method.FULL:
        raise ScenarioError("dora", "is a LoRA variant: full fine-tuning has no adapters to decompose", ["false"])
    if not profile.runs_dora:
        release = f" ({kw['framework_version']})" if kw.get("framework_version") else ""
        raise ScenarioError("dora", f"{name}{release} runs no DoRA that is modelled (PEFT's, framework hf, and "
                            "torchtune's from v0.3.0 are)", ["false"])


#: the scenario keys :func:`check_runs` reads
_RUN_KEYS = ("framework", "precision", "quantize", "optimizer", "loss", "offload", "stage", "method", "num_gpus", "reference",
             "optimizer_in_backward", "grad_accum", "dora", "modules_to_save", "lora_targets", "parallelism", "compile")


def check_free_keys(sc, free: dict[str, Any]) -> None:  # noqa: ANN001
    """:func:`check_runs` of ``sc`` with ``free`` set: the planner's variants set their free keys (plan/evaluate.py
    ``_FREE_KEYS``: micro-batch, accumulation, checkpointing, optimizer, loss) without parsing the scenario again, so the
    framework's refusals of an optimizer, a loss or accumulation beside an in-backward step are checked here."""
    kw = {k: getattr(sc, k) for k in _RUN_KEYS}
    kw.update(free)
    check_runs(kw, scenario_profile(sc))


def stage_recipe(profile: FrameworkProfile, stage: Stage) -> StageRecipe | None:
    """The framework's own recipe for ``stage`` (profile ``stage_recipes``), None where TRL's trainer runs it."""
    return next((r for r in profile.stage_recipes if r.stage is stage), None)


def check_stage_recipe(kw: dict[str, Any], profile: FrameworkProfile) -> None:
    """A method and GPU count the framework's recipe for the stage runs (profile ``stage_recipes``: torchtune 0.4
    trains DPO/SimPO as LoRA or QLoRA only, PPO in full on one GPU only), else one ScenarioError naming the key and the
    values the recipe runs."""
    recipe = stage_recipe(profile, kw.get("stage", Stage.SFT))
    if recipe is None:
        return
    name, stage, files = kw.get("framework", Framework.HF).value, recipe.stage.value, ", ".join(recipe.recipes)
    method = kw.get("method", Method.LORA)
    if method not in recipe.methods:
        raise ScenarioError("method", f"{name} has no {stage} recipe that trains {method.value} (its {stage} "
                            f"recipes: {files})", [m.value for m in recipe.methods])
    if not recipe.distributed and kw.get("num_gpus", 1) > 1:
        raise ScenarioError("num_gpus", f"{name}'s {stage} recipes run on one GPU only ({files})", ["1"])
    if kw.get("reference") is Reference.PRECOMPUTED and not recipe.precomputes_reference:
        raise ScenarioError("reference", f"{name}'s {stage} recipes run the reference forward every step, none "
                            f"precomputes it ({files})",
                            [Reference.AUTO.value, (Reference.COPY if method is Method.FULL else Reference.ADAPTERS_OFF).value])


def adapter_bytes(profile: FrameworkProfile, precision: Precision) -> int:
    """Bytes per element of LoRA adapter weights (and their grads and torch optimizer states)."""
    if profile.adapters_fp32:
        return 4
    return precision.param_bytes


def casts_params(scenario, profile: FrameworkProfile) -> bool:
    """``-mixed`` runs on 16-bit copies of the parameters (FSDP MixedPrecision), not fp32 ones under autocast; so
    does HF's QLoRA recipe under FSDP (:func:`_qlora_recipe_autocast`): the Trainer's bf16/fp16 that turns autocast on
    also makes accelerate's FSDP policy cast every parameter, the fp32 norms, embeddings and adapters included
    (accelerate v1.15.0 utils/fsdp_utils.py fsdp2_prepare_model l. 779 ``mp_policy``; FSDP1's MixedPrecision
    alike). The simulator's accelerate FSDP2 of a 3-layer Gemma-2-2B QLoRA holds 214 MB fewer activations than one
    GPU's autocast run: its norms' outputs are bf16."""
    fsdp = scenario.parallelism in FSDP_FAMILY
    mixed = scenario.precision.mixed or (fsdp and _qlora_recipe_autocast(scenario, profile))
    return mixed and (profile.mixed_casts_params or (profile.fsdp_mixed_casts_params and fsdp)
                      or ds_engine_cast(scenario, profile))


def ds_engine_cast(scenario, profile: FrameworkProfile) -> bool:
    """``-mixed`` under DeepSpeed ZeRO is the engine's 16-bit cast with autocast off (``ds_mixed_is_engine_cast``)."""
    return profile.ds_mixed_is_engine_cast and scenario.parallelism in ZERO_FAMILY


def runs_under_autocast(scenario, profile: FrameworkProfile) -> bool:
    """Autocast is on for ``-mixed`` precision, and for HF QLoRA in 16 bits: the recipe
    (prepare_model_for_kbit_training + Trainer bf16=True/fp16=True) runs it under autocast; without
    it the fp32 norms would make every activation fp32."""
    if scenario.precision.mixed:
        return not (profile.mixed_casts_params or ds_engine_cast(scenario, profile))
    return _qlora_recipe_autocast(scenario, profile)


def _qlora_recipe_autocast(scenario, profile: FrameworkProfile) -> bool:
    """HF QLoRA in 16 bits with its fp32 non-quantized weights: the Trainer's bf16=True/fp16=True runs it under
    autocast (:func:`runs_under_autocast`)."""
    return (
        scenario.method is Method.QLORA
        and profile.qlora_unquantized_fp32
        and scenario.precision.compute_bytes == 2
    )


def fsdp_gathers_16bit(sc, profile: FrameworkProfile) -> bool:
    """FSDP's mixed precision casts every parameter to the 16-bit compute dtype for its all-gather: the profile's
    wrapper casts under mixed precision (``fsdp_mixed_casts_params``) and the step runs under it (-mixed, or HF's
    QLoRA recipe under the Trainer's bf16, :func:`runs_under_autocast`)."""
    return (profile.fsdp_mixed_casts_params and sc.precision.compute_bytes == 2
            and (sc.precision.mixed or runs_under_autocast(sc, profile)))
