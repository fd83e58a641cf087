"""Files given next to a training config (a second ``--from``): PEFT ``adapter_config.json``, a
``BitsAndBytesConfig`` JSON, an accelerate config YAML, a DeepSpeed JSON. Each may only add to or
agree with the training config; a value that contradicts it is an error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vramfit.config_import import hf_common as hf
from vramfit.config_import import trainer_layout
from vramfit.config_import.loader import fail, load_mapping
from vramfit.config_import.report import Entry, Imported, KeyReader
from vramfit.safe_input import shown

PEFT_SRC = "peft 0.21.2 src/peft/tuners/lora/config.py"
ACCEL_IGNORED = [("compute_environment", "launcher"), ("machine_rank", "launcher"), ("main_training_function", "launcher"),
                 ("rdzv_backend", "launcher"), ("same_network", "launcher"), ("tpu_*", "launcher"), ("use_cpu", "launcher"),
                 ("debug", "logging"), ("gpu_ids", "launcher"), ("main_process_*", "launcher"), ("downcast_bf16", "TPU only"),
                 ("enable_cpu_affinity", "launcher"), ("mixed_precision", "precision comes from the training config"),
                 ("fsdp_config.*", hf.FSDP_CONFIG_IGNORED), ("deepspeed_config.*", hf.DS_NOT_MODELLED),
                 ("dynamo_config.*", "torch.compile settings")]
PEFT_IGNORED = [("*", "PEFT bookkeeping (base model path, task type, init, revision)")]
BNB_IGNORED = [("*", "bitsandbytes compute dtype, thresholds and storage type")]


def _peft(r: KeyReader) -> dict[str, Any]:
    if str(r.get("peft_type")).upper() != "LORA":
        raise r.error(f"peft_type '{r.flat.get('peft_type')}' is not modelled yet (valid values: LORA)")
    out: dict[str, Any] = {"lora_rank": r.get("r", 8, PEFT_SRC), "lora_alpha": r.get("lora_alpha", 8, PEFT_SRC),
                           "lora_dropout": r.get("lora_dropout", 0.0, PEFT_SRC)}
    targets = r.get("target_modules")
    if targets:
        out["lora_targets"] = hf.names(r, "target_modules", targets, "all-linear, or module names such as q_proj, v_proj")
    if r.get("use_dora") is not None and hf.boolean(r, "use_dora", False, PEFT_SRC):
        out["dora"] = True
        r.entries["use_dora"].becomes.append("dora=true")
    hf.saved_modules(r, "modules_to_save")  # LoraConfig(modules_to_save=...): r.out's modules_to_save
    if r.flat.get("use_rslora"):
        r.get("use_rslora")
        r.mark("use_rslora", "rsLoRA: counted as plain LoRA")
    return {**out, **r.out}


def _bnb(r: KeyReader) -> dict[str, Any]:
    if r.get("load_in_8bit"):
        return {"method": "qlora", "quantize": "int8"}
    if not r.get("load_in_4bit"):
        raise r.error("quantizes nothing (load_in_4bit and load_in_8bit are false)")
    kind = r.get("bnb_4bit_quant_type", "fp4", "transformers 5.24.0 BitsAndBytesConfig")
    dq = r.get("bnb_4bit_use_double_quant", False, "transformers 5.24.0 BitsAndBytesConfig")
    return {"method": "qlora", "quantize": f"{kind}{'-dq' if dq else ''}"}


ACCEL_PRECISIONS = ("no", "fp8", "fp16", "bf16")


def _accelerate(r: KeyReader, trainer_gc: Any = None) -> tuple[dict[str, Any], list[Entry]]:
    out: dict[str, Any] = {"num_gpus": hf.whole(r, "num_processes", r.get("num_processes", 1, "accelerate default"))}
    nodes = hf.whole(r, "num_machines", r.get("num_machines", 1, "accelerate default"))
    if nodes > 1:
        out["num_nodes"] = nodes  # num_processes counts every machine's processes (accelerate ClusterConfig)
    # ignored (the training config sets precision), but checked as accelerate's launcher does: PrecisionType
    # (accelerate v1.16.0 utils/dataclasses.py: no, fp8, fp16, bf16, lower-cased); YAML reads an unquoted no as false
    mp = r.flat.get("mixed_precision", "no")
    if (mp is not False and mp is not None) and str(mp).lower() not in ACCEL_PRECISIONS:
        raise r.error(f"mixed_precision: {shown(mp)} is not an accelerate precision "
                      f"(valid values: {', '.join(ACCEL_PRECISIONS)})")
    kind = r.get("distributed_type", "NO", "accelerate default")
    # YAML 1.1 reads an unquoted NO as false (`accelerate config` writes it quoted, 'NO'): the NO the user wrote
    kind = "NO" if kind is False else str(kind).upper()
    extra: list[Entry] = []
    if kind == "DEEPSPEED":
        f = r.get("deepspeed_config.deepspeed_config_file")
        if f:
            ds, extra = hf.read_deepspeed(r, "deepspeed_config_file", hf.resolve_path(r, "deepspeed_config_file", f))
            out.update(ds)
        else:
            key = "deepspeed_config.zero_stage"
            stage = hf.zero_stage(r, key, r.get(key, 2, "accelerate default"), digits=True)
            out["parallelism"] = hf.ZERO_STAGES[stage]
            opt = r.get("deepspeed_config.offload_optimizer_device", "none", "accelerate default")
            par = r.get("deepspeed_config.offload_param_device", "none", "accelerate default")
            # as a DeepSpeed JSON's sections (ds_read._offload): DeepSpeed reads offload_param at stage 3 only, and
            # parameter-only offload has no layout of its own (counted as none, an upper bound)
            if par != "none" and stage < 3:
                e = r.entries["deepspeed_config.offload_param_device"]
                e.kind, e.note = "ignored", f"DeepSpeed reads parameter offload at ZeRO stage 3 only (stage {stage})"
                par = "none"
            elif par != "none" and opt == "none":
                r.mark("deepspeed_config.offload_param_device", "parameter-only offload: counted as no offload (an "
                       "upper bound)")
                par = "none"
            out["offload"] = "optimizer+params" if par != "none" else "optimizer" if opt != "none" else "none"
            # accelerate's DeepSpeedPlugin.__post_init__ (accelerate utils/dataclasses.py) builds the config from
            # these keys alone, so DeepSpeed's own defaults size the buffers (estimate/deepspeed.py)
            zero: dict[str, Any] = {"stage": stage}
            zero.update({k: {"device": v} for k, v in (("offload_optimizer", opt), ("offload_param", par)) if v != "none"})
            if zero["stage"]:
                out["deepspeed_config"] = {"zero_optimization": zero}
    elif kind == "FSDP":
        out.update(hf.fsdp_layout(r, "fsdp_config", [], r.sub("fsdp_config")))
        hf.mark_fsdp(r, "fsdp_config", r.sub("fsdp_config"), out)
        out.update(hf.fsdp_checkpointing(r, "fsdp_config", r.sub("fsdp_config"), trainer_gc))  # one switch with the Trainer's
        _replicas(r, out, nodes)
    elif kind == "NO":  # accelerate starts one process whatever num_processes says
        out.update(num_gpus=1, parallelism="none")
        if "num_processes" in r.entries:
            r.entries["num_processes"].becomes = ["num_gpus=1 (distributed_type NO runs one process)"]
    elif kind == "MULTI_GPU":
        out["parallelism"] = "ddp" if out["num_gpus"] > 1 else "none"
    else:
        raise r.error(f"distributed_type '{kind}' is not modelled yet (valid values: NO, MULTI_GPU, DEEPSPEED, FSDP)")
    r.not_modelled("parallelism_config", "accelerate's sequence/context/tensor parallel layouts")
    if kind != "NO" and "num_processes" in r.entries:  # the processes accelerate launches: one per GPU
        r.entries["num_processes"].becomes = [f"num_gpus={out['num_gpus']}"]
    return out, extra


def _replicas(r: KeyReader, out: dict[str, Any], nodes: int) -> None:
    """FSDP2's hybrid sharding through accelerate's ParallelismConfig: ``parallelism_config_dp_replicate_size`` = the
    node count with ``..._dp_shard_size`` = the GPUs of a node, no tensor/context/sequence parallel (accelerate
    v1.16.0 commands/launch.py copies the mapping onto --parallelism_config_*; parallelism_config.py builds the
    dp_replicate x dp_shard mesh and FSDP2 shards over dp_shard): ``shard_scope: node``. Other layouts stay
    not modelled."""
    sizes = {k.removeprefix("parallelism_config_"): v for k, v in r.sub("parallelism_config").items()}
    rest = {k: v for k, v in sizes.items() if k.endswith("_size") and k not in ("dp_replicate_size", "dp_shard_size")}
    if not sizes or any(v not in (1, None) for v in rest.values()) or not hf.is_fsdp2(out):
        return
    key = "parallelism_config.parallelism_config_dp_replicate_size"
    replicas = hf.whole(r, key, r.get(key, 1, "accelerate default"))
    shards = sizes.get("dp_shard_size", out["num_gpus"] // replicas)
    if replicas > 1 and replicas == nodes and replicas * shards == out["num_gpus"]:
        r.get("parallelism_config.parallelism_config_dp_shard_size")
        for k in ("dp_replicate_size", "dp_shard_size"):
            r.set(f"parallelism_config.parallelism_config_{k}", "shard_scope", "node")
        out["shard_scope"] = "node"
    elif replicas > 1:
        r.mark(key, "replicas other than the node count (dp_replicate_size x dp_shard_size = num_processes, one "
                    "replica per node) are not modelled yet")


def _launcher_precision(imp: Imported, r: KeyReader, merged: dict[str, Any]) -> None:
    """accelerate's ``mixed_precision`` where a TRL/transformers config turns neither bf16 nor fp16 on over fp32
    weights: ``accelerate launch`` exports it as ACCELERATE_MIXED_PRECISION and ``TrainingArguments.__post_init__``
    keeps that value unless bf16 or fp16 is set (transformers v5.24.0 training_args.py), so the run is autocast in it."""
    mp = str(r.flat.get("mixed_precision", "no")).lower()
    if imp.dialect != "trl" or merged.get("precision") != "fp32" or mp not in ("bf16", "fp16"):
        return
    merged["precision"] = f"{mp}-mixed"
    r.entries["mixed_precision"] = Entry("read", "mixed_precision", mp, "", [f"precision={mp}-mixed (the training "
                                         "config sets neither bf16 nor fp16, so the launcher's stays)"])


def hpz_across_nodes(entries: list[Entry], merged: dict[str, Any]) -> None:
    """A DeepSpeed JSON's ZeRO++ ``zero_hpz_partition_size`` equal to the GPUs of a node, once a launcher file (or the
    command line) gives several nodes: the scenario's ``shard_scope: node`` on ZeRO-3 (estimate/deepspeed.py
    ``_hpz_keys``, which the JSON alone, read before the node count is known, leaves not modelled). Where a later
    count no longer matches, the reading is undone (hpZ over another group is not modelled)."""
    from vramfit.config_import.ds_read import DS_NOT_MODELLED

    nodes, gpus = merged.get("num_nodes", 1), merged.get("num_gpus", 1)
    fits = nodes > 1 and not gpus % nodes and merged.get("parallelism") == "zero3"
    for e in entries:
        if not e.key.endswith("zero_optimization.zero_hpz_partition_size"):
            continue
        if fits and e.value == gpus // nodes:
            e.kind, e.note, e.becomes = "read", "", ["shard_scope=node (ZeRO++ hpZ inside each node)"]
            merged["shard_scope"] = "node"
        elif e.kind == "read":  # read for an earlier layout
            e.kind, e.note, e.becomes = "not modelled yet", DS_NOT_MODELLED, []
            if merged.get("shard_scope") == "node":
                merged.pop("shard_scope")


def apply(imp: Imported, path: Path) -> Imported:
    """Add one companion file's keys to an import; a contradicting value is an error naming both files."""
    data = load_mapping(path)
    extra: list[Entry] = []
    if "zero_optimization" in data:
        r = KeyReader(path, "deepspeed", {}, "DeepSpeed")
        out, extra = hf.read_deepspeed(r, path.name, path)
    else:
        r = KeyReader(path, "companion", data, "")
        if "peft_type" in data:
            out = _peft(r)
            out["method"] = imp.overrides.get("method") if imp.overrides.get("method") != "full" else "lora"
            ignored = PEFT_IGNORED
        elif "load_in_4bit" in data or "load_in_8bit" in data:
            out, ignored = _bnb(r), BNB_IGNORED
        elif "distributed_type" in data or "compute_environment" in data:
            r.trainer_checkpointing = imp.trainer_checkpointing and f"{imp.trainer_checkpointing} in {imp.path.name}"
            (out, extra), ignored = _accelerate(r, imp.overrides.get("gradient_checkpointing")), ACCEL_IGNORED
        else:
            raise fail(path, "is not a DeepSpeed, accelerate, PEFT adapter or BitsAndBytesConfig file")
        r.close(ignored)
    merged = dict(imp.overrides)
    for key, value in out.items():
        given = {e.key for e in imp.entries if e.kind == "read" and any(b.startswith(key + "=") for b in e.becomes)}
        # FSDP's activation checkpointing on, the Trainer's off (transformers requires it so, hf_common
        # double_checkpointing): one switch, not a clash; its non-reentrant wrapper replaces the Trainer's use_reentrant
        fsdp_ac = out.get("gradient_checkpointing") in ("full", "offload") and (
            key == "use_reentrant" or (key == "gradient_checkpointing" and merged.get(key) in ("none", "full")))
        if given and key in merged and str(merged[key]) != str(value) and not fsdp_ac:
            raise fail(path, f"sets {key}={value} but {imp.path.name} sets {key}={merged[key]} ({', '.join(sorted(given))})")
        merged[key] = value
    _launcher_precision(imp, r, merged)
    if "num_gpus" in out:  # the training config's "set at launch" default gives way to the launcher file's count
        for e in imp.entries:
            if e.key == "num_gpus" and e.kind == "default":
                e.value, e.becomes = merged["num_gpus"], [f"num_gpus={merged['num_gpus']}"]
                e.note = f"set at launch: {path.name} num_processes"
    if imp.dialect == "trl":  # the launcher's mixed precision stays where the training config turns neither flag on
        mp = str(r.flat.get("mixed_precision", "no")).lower()
        if note := trainer_layout.fsdp_upcast(merged, imp.trainer_mixed or mp in ("bf16", "fp16")):
            head = next((e for e in imp.entries if e.key in ("bf16", "fp16") and e.becomes), None)
            if head is not None:
                head.becomes, head.note = [f"precision={merged['precision']}"], note
    hpz_across_nodes(imp.entries + list(r.entries.values()) + extra, merged)
    if imp.reentrant_off_under_fsdp2 and merged.get("use_reentrant") == "yes" and hf.is_fsdp2(merged):
        merged["use_reentrant"] = "no"
        for e in imp.entries:
            e.becomes = [f"use_reentrant=no (FSDP2 from {path.name})" if b == "use_reentrant=yes" else b
                         for b in e.becomes]
    for e in r.entries.values():
        e.key = f"{path.name}: {e.key}"
    imp.overrides = merged
    imp.entries = imp.entries + list(r.entries.values()) + extra
    imp.companions = (*imp.companions, path)
    try:
        imp.scenario  # noqa: B018
    except ValueError as exc:
        raise fail(path, f"gives an invalid scenario: {exc}") from None
    return imp
