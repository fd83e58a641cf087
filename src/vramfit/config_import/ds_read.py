"""The DeepSpeed JSON a Hugging Face-family config points to (or a scenario's ``deepspeed_config``): its ZeRO stage and
offload become scenario keys, its buffer sizes the scenario's typed ``deepspeed_config``, and the values the HF Trainer
fills in itself are checked against the training config's, as the Trainer checks them (split off config_import/hf_common.py,
which re-exports these names)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from vramfit.config_import.loader import fail, load_mapping
from vramfit.config_import.report import Entry, KeyReader
from vramfit.config_import.values import ZERO_STAGES, zero_stage
from vramfit.errors import ScenarioError
from vramfit.estimate.deepspeed import (
    LEGACY_OFFLOAD,
    TRAINER_KEYS,
    offload_section_error,
    with_legacy_offload,
)

#: why a key no reader knows is listed, where unknown keys are reported rather than refused (read_deepspeed strict=False)
UNKNOWN_DS_KEY = "unknown to vramfit, check the spelling"
#: DeepSpeed keys that change buffer sizes or speed, not the state vramfit counts.
DS_NOT_MODELLED = "not read by vramfit (it models the stage, offload and the buffer sizes in estimate/deepspeed.py)"
DS_IGNORED = [
    ("train_batch_size", "filled in by the trainer ('auto'); a number is checked by the estimate against micro-batch x "
                         "accumulation x GPUs, the count set at launch"),
    ("train_micro_batch_size_per_gpu", "filled in by the trainer ('auto')"),
    ("gradient_accumulation_steps", "filled in by the trainer ('auto')"),
    ("gradient_clipping", "no memory effect"), ("steps_per_print", "logging"), ("wall_clock_breakdown", "logging"),
    ("scheduler.*", "learning-rate schedule: no memory effect"), ("optimizer.params.*", "optimizer hyperparameters"),
    ("bf16.*", "precision comes from the training config"), ("fp16.*", "precision comes from the training config"),
    ("zero_allow_untested_optimizer", "a permission flag"), ("zero_force_ds_cpu_optimizer", "a permission flag"),
    ("zero_optimization.*.pin_memory", "pinned host memory: no GPU memory effect"),
    ("zero_optimization.stage3_gather_16bit_weights_on_model_save", "checkpoint saving"),
    ("zero_optimization.gather_16bit_weights_on_model_save", "checkpoint saving"),
    ("flops_profiler.*", "logging"), ("comms_config.*", "logging"), ("monitor_config.*", "logging"), ("csv_monitor.*", "logging"),
    ("activation_checkpointing.*", "DeepSpeed's own checkpointing API: unused by the HF Trainer"),
    ("communication_data_type", "collective dtype"), ("prescale_gradients", "no memory effect"),
    ("gradient_predivide_factor", "no memory effect"), ("amp.*", "precision comes from the training config"), ("tensorboard.*", "logging"), ("wandb.*", "logging"), ("comms_logger.*", "logging"),
]


#: Every key DeepSpeed's ZeRO config models accept (deepspeed 0.18.7 runtime/zero/config.py DeepSpeedZeroConfig,
#: field names and their stage3_ aliases; runtime/zero/offload_config.py DeepSpeedZeroOffloadParamConfig and
#: DeepSpeedZeroOffloadOptimizerConfig). DeepSpeedConfigModel sets extra="forbid" (runtime/config_utils.py), so
#: DeepSpeed refuses any other key: a misspelt "offload_optimiser" is an error there, not a silent default.
ZERO_FIELDS = frozenset((
    "stage contiguous_gradients reduce_scatter reduce_bucket_size use_multi_rank_bucket_allreduce allgather_partitions "
    "allgather_bucket_size overlap_comm load_from_fp32_weights elastic_checkpoint offload_param offload_optimizer "
    "zenflow sub_group_size cpu_offload_param cpu_offload_use_pin_memory cpu_offload prefetch_bucket_size "
    "stage3_prefetch_bucket_size param_persistence_threshold stage3_param_persistence_threshold "
    "model_persistence_threshold stage3_model_persistence_threshold max_live_parameters stage3_max_live_parameters "
    "max_reuse_distance stage3_max_reuse_distance gather_16bit_weights_on_model_save "
    "stage3_gather_16bit_weights_on_model_save module_granularity_threshold stage3_module_granularity_threshold "
    "use_all_reduce_for_fetch_params stage3_use_all_reduce_for_fetch_params allgather_sequential "
    "stage3_allgather_sequential stage3_gather_fp16_weights_on_model_save ignore_unused_parameters legacy_stage1 "
    "round_robin_gradients zero_hpz_partition_size zero_quantized_weights zero_quantized_nontrainable_weights "
    "zero_quantized_gradients zeropp_loco_param mics_shard_size mics_hierarchical_params_gather memory_efficient_linear "
    "pipeline_loading_checkpoint override_module_apply log_trace_cache_warnings enable_sanity_checks leaf_module"
).split())
OFFLOAD_FIELDS = {
    "offload_param": frozenset("device nvme_path buffer_count buffer_size max_in_cpu pin_memory".split()),
    "offload_optimizer": frozenset(("device nvme_path buffer_count pin_memory pipeline_read pipeline_write fast_init "
                                    "ratio super_offload cpuadam_cores_perc").split()),
}


NOT_A_ZERO_KEY = "not a DeepSpeed ZeRO key (DeepSpeed would refuse it): check the spelling"


def _unknown_zero_keys(ds: KeyReader) -> list[str]:
    """Flat keys under zero_optimization that DeepSpeed's config models do not have (:data:`ZERO_FIELDS`)."""
    out = []
    for k in ds.flat:
        parts = k.split(".")
        if parts[0] != "zero_optimization" or len(parts) < 2:
            continue
        sub = OFFLOAD_FIELDS.get(parts[1])
        if parts[1] not in ZERO_FIELDS or (sub is not None and len(parts) > 2 and parts[2] not in sub):
            out.append(k)
    return out


def _forbid_unknown(data: dict[str, Any], path: Path) -> None:
    """Refuse a zero_optimization key DeepSpeed's config models do not have (:data:`ZERO_FIELDS`), as DeepSpeed does."""
    zero = data.get("zero_optimization")
    if not isinstance(zero, dict):
        return
    for k, v in zero.items():
        if k not in ZERO_FIELDS and v != "auto":  # DeepSpeedConfigModel drops "auto" values first (config_utils.py)
            raise fail(path, f"zero_optimization.{k} is not a DeepSpeed ZeRO key (DeepSpeed refuses unknown keys: "
                             "DeepSpeedZeroConfig, extra='forbid'); check the spelling")
        for sub in sorted(set(v) - OFFLOAD_FIELDS[k]) if k in OFFLOAD_FIELDS and isinstance(v, dict) else ():
            raise fail(path, f"zero_optimization.{k}.{sub} is not a DeepSpeed offload key (valid keys: "
                             f"{', '.join(sorted(OFFLOAD_FIELDS[k]))})")


def read_deepspeed(r: KeyReader | None, key: str, path: Path,
                   data: dict[str, Any] | None = None, strict: bool = True) -> tuple[dict[str, Any], list[Entry]]:
    """Scenario keys from a DeepSpeed JSON (or its mapping ``data``, named ``path``): ZeRO stage and offload
    (other details reported). ``strict`` False (a scenario's ``deepspeed_config``, which sizes buffers only):
    an unknown key or a non-Adam ``optimizer.type`` is reported as not modelled instead of refused."""
    data = load_mapping(path) if data is None else data
    written = data.get("zero_optimization") if isinstance(data.get("zero_optimization"), dict) else {}
    data = _legacy_offload(data, path)
    if strict:
        _forbid_unknown(data, path)
    ds = KeyReader(path, "deepspeed", data, "DeepSpeed")
    for k in [] if strict else _unknown_zero_keys(ds):  # the same keys, reported where they are not refused
        ds.entries[k] = Entry("not modelled yet", k, ds.flat[k], NOT_A_ZERO_KEY)
    for old, new in LEGACY_OFFLOAD.items():  # gone from data, as DeepSpeed deletes them: reported as written
        if old in written:
            ds.entries[f"zero_optimization.{old}"] = Entry(
                "read", f"zero_optimization.{old}", written[old],
                f"deprecated: DeepSpeed reads it as {new} on the CPU when true (runtime/zero/config.py)")
    _offload_shapes(ds, data, path)
    stage = zero_stage(ds, "zero_optimization.stage", ds.get("zero_optimization.stage", 0, "DeepSpeed default: ZeRO stage 0"))
    if stage == 0 and strict and (half := _half_precision(data)):
        raise fail(path, f"ZeRO stage 0 with {half} is DeepSpeed's own 16-bit optimizer wrapper (an unsharded fp32 master "
                         "copy and its gradients: deepspeed 0.18.7 engine.py _do_optimizer_sanity_check -> "
                         "_configure_fp16_optimizer, 0.16 BF16_Optimizer), which vramfit does not model yet; use ZeRO "
                         "stage 1-3, or plain DDP without a DeepSpeed config")
    ds.set("zero_optimization.stage", "parallelism", ZERO_STAGES[stage])
    partial = _offload(ds, path, stage)
    typ = ds.get("optimizer.type")
    if typ is not None:
        if str(typ).lower() in ("adam", "adamw"):
            ds.set("optimizer.type", "optimizer", "adamw")
        elif strict:
            raise fail(path, f"optimizer.type '{typ}' is not modelled yet (vramfit models Adam/AdamW from DeepSpeed)")
        else:
            ds.mark("optimizer.type", "the scenario's optimizer key sets the optimizer")
    if stage or not strict:  # a scenario's deepspeed_config may leave the stage to its parallelism key
        _buffer_sizes(ds, _without_optimizer_offload(data) if partial is not None else data, path)
    _compile_and_comments(ds)
    for pattern, reason in DS_IGNORED:
        ds.ignore(pattern, reason)
    ds.not_modelled("zero_optimization", DS_NOT_MODELLED)
    ds.not_modelled("tensor_parallel", "DeepSpeed AutoTP tensor parallelism")
    ds.not_modelled("aio", "NVMe offload I/O")
    ds.not_modelled("data_types", "the gradient accumulation dtype (grad_accum_dtype)")
    if not strict:
        for k in [k for k in ds.flat if k not in ds.entries]:
            ds.entries[k] = Entry("not modelled yet", k, ds.flat[k], UNKNOWN_DS_KEY)
    ds.close([])
    for e in ds.entries.values():
        e.key = f"{key} → {e.key}"
    return ds.out, list(ds.entries.values())


def _half_precision(data: dict[str, Any]) -> str | None:
    """"bf16" or "fp16" where the file turns it on (``enabled`` true, or "auto", which the HF Trainer fills from its own
    bf16/fp16 flag: 16-bit in every LLM recipe we import), else None."""
    for name in ("bf16", "bfloat16", "fp16"):  # "bfloat16": the older name DeepSpeed still reads (runtime/constants.py)
        sec = data.get(name)
        if isinstance(sec, dict) and sec.get("enabled") in (True, "auto"):
            return f"{name}.enabled {sec['enabled']!r}".replace("True", "true")
    return None


def _compile_and_comments(ds: KeyReader) -> None:
    """Top-level keys DeepSpeed's own configs carry that vramfit reports rather than refuses: a ``_comment`` (DeepSpeed
    reads its top level with ``dict.get``, runtime/config.py, so an unknown key is skipped), the ``compile`` section,
    whose fields changed between releases (0.18.7 runtime/config.py l. 869 reads it as deepspeed/compile/config.py
    ``CompileConfig``: ``deepcompile``, ``free_activation``, ... with extra="forbid", which refuses the older
    ``disable``/``backend`` of Axolotl's deepspeed_configs/zero1_torch_compile.json), and Ulysses' collective dtype."""
    for k in [k for k in ds.flat if k.split(".", 1)[0].startswith("_")]:
        ds.entries[k] = Entry("ignored", k, ds.flat[k], "a comment (DeepSpeed skips keys it does not read)")
    for k in [k for k in ds.flat if k == "compile" or k.startswith("compile.")]:  # "disable": false is not "off"
        ds.entries[k] = Entry("not modelled yet", k, ds.flat[k], "DeepSpeed's compile section (DeepCompile in 0.18: "
                              "deepcompile, free_activation, ...; 0.18 refuses the older disable/backend fields): not "
                              "modelled")
    ds.not_modelled("seq_parallel_communication_data_type", "Ulysses sequence parallelism's collective dtype")


def _legacy_offload(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """``data`` with the deprecated ``cpu_offload`` / ``cpu_offload_param`` as the offload sections DeepSpeed makes of
    them (estimate/deepspeed.py ``with_legacy_offload``); a refusal names the file."""
    zero = data.get("zero_optimization")
    if not isinstance(zero, dict) or not any(k in zero for k in LEGACY_OFFLOAD):
        return data
    try:
        return {**data, "zero_optimization": with_legacy_offload(zero)}
    except ScenarioError as exc:
        raise fail(path, exc.message) from None


def _offload(ds: KeyReader, path: Path, stage: int) -> float | None:
    """The ``offload`` scenario key from the two offload sections, each classified; the partial optimizer offload's
    ratio (ZeRO-3, below 1) where one is counted as none, else None."""
    opt_dev = ds.get("zero_optimization.offload_optimizer.device", "none", "DeepSpeed default: none")
    par_dev = ds.get("zero_optimization.offload_param.device", "none", "DeepSpeed default: none")
    partial = _partial_offload(ds, path) if opt_dev not in ("none", None) and stage == 3 else None
    if partial is not None:  # the rest of the optimizer state stays on the GPU: counted as not offloaded
        opt_dev = "none"
    params_only = par_dev not in ("none", None) and opt_dev in ("none", None)
    # below stage 3 DeepSpeed never reads offload_param: _configure_zero_optimizer builds DeepSpeedZeroOptimizer with
    # offload_optimizer_config only (deepspeedai/DeepSpeed@edaa722, v0.19.5+, runtime/engine.py l. 2382-2416)
    unused_param = par_dev not in ("none", None) and stage < 3
    if params_only or unused_param:  # optimizer state stays on the GPU; vramfit has no params-only layout
        par_dev = "none"
    offload = "optimizer+params" if par_dev not in ("none", None) else "optimizer" if opt_dev not in ("none", None) else "none"
    ds.set("zero_optimization.offload_param.device", "offload", offload)
    ds.set("zero_optimization.offload_optimizer.device", "offload", offload)
    if unused_param:
        e = ds.entries["zero_optimization.offload_param.device"]
        e.kind, e.becomes = "ignored", []
        e.note = f"DeepSpeed reads parameter offload at ZeRO stage 3 only; at stage {stage} the parameters stay on the GPU"
    elif params_only:
        ds.entries["zero_optimization.offload_param.device"].becomes = ["offload=none"]
        ds.mark("zero_optimization.offload_param.device", "parameter-only offload: counted as no offload (an upper bound)")
    if stage < 3 and ds.has("zero_optimization.offload_optimizer.ratio"):
        ds.ignore("zero_optimization.offload_optimizer.ratio", f"DeepSpeed reads the ratio at ZeRO stage 3 only; at stage "
                  f"{stage} the whole optimizer state is offloaded")
    if partial is not None:
        ds.mark("zero_optimization.offload_optimizer.ratio", f"partial optimizer offload (ratio {partial:g}: the rest "
                "of the optimizer state stays on the GPU): counted as no optimizer offload (an upper bound)")
    if "nvme" in (opt_dev, par_dev):
        ds.mark("zero_optimization.offload_optimizer.device", "NVMe offload: counted as CPU offload")
    return partial


def _offload_shapes(ds: KeyReader, data: dict[str, Any], path: Path) -> None:
    """An offload section that is not a mapping (``"offload_param": "cpu"``) refused, as DeepSpeed's config model does."""
    for key in ("offload_optimizer", "offload_param"):  # before the stage is read: a stage-0 file never reaches the estimator
        if (why := offload_section_error(data.get("zero_optimization"), key)) is not None:
            raise fail(path, why)


def _partial_offload(ds: KeyReader, path: Path) -> float | None:
    """``offload_optimizer.ratio`` below 1 (DeepSpeed's DeepSpeedZeroOffloadOptimizerConfig ``ratio``, default 1.0: the
    share of the optimizer states the CPU updates, ZeRO-3 only), else None."""
    ratio = ds.get("zero_optimization.offload_optimizer.ratio", 1.0, "DeepSpeed default: 1.0")
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio <= 1:
        raise fail(path, f"zero_optimization.offload_optimizer.ratio must be a number from 0 to 1, got {ratio!r}")
    return float(ratio) if ratio < 1 else None


def _without_optimizer_offload(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with its optimizer offload section dropped (a partial offload counted as none)."""
    zero = {k: v for k, v in data["zero_optimization"].items() if k != "offload_optimizer"}
    return {**data, "zero_optimization": zero}


#: DeepSpeed keys the HF Trainer fills from its own arguments and refuses when set otherwise (transformers 5.24.0
#: integrations/deepspeed.py HfTrainerDeepSpeedConfig.trainer_config_process ``fill_match``, then
#: ``trainer_config_finalize``: "Please correct the following DeepSpeed config values that mismatch
#: TrainingArguments values"), with the scenario value each is checked against.
# the whole batch (train_batch_size) is matched by the estimate only (trainer_note): it counts the GPUs, which a config
# leaves to its launcher, so the import cannot check it
DS_TRAINER_MATCH = {k: v for k, v in TRAINER_KEYS.items() if k != "train_batch_size"}  # bf16.enabled / fp16.enabled are matched against the Trainer's own bf16 / fp16 arguments, which a recipe may leave
# off while it loads 16-bit weights (LLaMA-Factory's pure bf16): the scenario's precision cannot stand for them


def check_trainer_match(r: KeyReader, entries: list[Entry]) -> None:
    """Refuse, as the HF Trainer does, a DeepSpeed value (not ``auto``) that contradicts the training config's own
    (:data:`DS_TRAINER_MATCH`), naming both."""
    from vramfit.scenario import parse_scenario

    if not any(" → " in e.key and e.key.rsplit(" → ", 1)[-1] in DS_TRAINER_MATCH for e in entries):
        return
    sc = parse_scenario(r.out if r.out.get("model") or r.out.get("params") else {**r.out, "model": "placeholder"})
    message = trainer_mismatch(entries, sc)
    if message:
        raise r.error(message)


def trainer_mismatch(entries: list[Entry], sc: Any) -> str | None:
    """The first DeepSpeed value of ``entries`` (not ``auto``) that contradicts scenario ``sc``
    (:data:`DS_TRAINER_MATCH`), as one sentence; None where all agree."""
    for e in entries:
        k = e.key.rsplit(" → ", 1)[-1] if " → " in e.key else None
        if k not in DS_TRAINER_MATCH or e.value == "auto":
            continue
        key = DS_TRAINER_MATCH[k]
        own = getattr(sc, key)
        if e.value != own:
            return (f"{e.key}: {e.value!r} contradicts the training config's {key} ({own}); the HF Trainer refuses "
                    f"the mismatch (trainer_config_finalize): set it to \"auto\" or to {own!r}")
    return None


def _buffer_sizes(ds: KeyReader, data: dict[str, Any], path: Path) -> None:
    """The zero_optimization keys that size ZeRO's buffers become the scenario's deepspeed_config
    (vramfit.estimate.deepspeed types them; keys left out keep DeepSpeed's defaults)."""
    from vramfit.estimate import deepspeed

    try:  # with the Trainer-filled batch values, which the estimate checks once the flags are on (trainer_note)
        cfg = replace(deepspeed.from_mapping(data), trainer_values=deepspeed.trainer_values(data))
    except ScenarioError as exc:
        raise fail(path, exc.message.removeprefix("deepspeed_config: ")) from None
    # ZeRO++ hpZ stays "not modelled yet" here: the import does not know the nodes yet (a --deepspeed-config with it
    # on several nodes is the scenario's shard_scope node, estimate/deepspeed.py _hpz_keys)
    ds.out["deepspeed_config"] = replace(cfg, zero_hpz_partition_size=None).to_dict()
    for key in (*deepspeed.SIZING_KEYS, *deepspeed.FIELD_NAMES):  # DeepSpeed's field names read as their stage3_ alias
        if ds.has(f"zero_optimization.{key}"):
            ds.get(f"zero_optimization.{key}")
            ds.entries[f"zero_optimization.{key}"].becomes.append(
                f"deepspeed_config ({deepspeed.FIELD_NAMES.get(key, key)})")
