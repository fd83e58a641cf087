"""A plan written as ready configuration for the engine that runs it (multi-GPU is theirs, not ours).

- ``accelerate``: an Accelerate config YAML (``accelerate launch --config_file``), with the DeepSpeed
  JSON beside it when the plan shards with ZeRO (keys as in huggingface/accelerate
  ``examples/config_yaml_templates``);
- ``deepspeed``: a DeepSpeed config JSON (ZeRO stage, offload, batch sizes, bf16/fp16);
- ``fsdp``: an Accelerate FSDP config YAML (``fsdp_config`` keys; ZeRO-3 -> FULL_SHARD, ZeRO-2 ->
  SHARD_GRAD_OP);
- ``torchtitan``: its TOML job config (``[parallelism]``: FSDP, tensor, pipeline, context degrees and the
  schedule) and a torchrun line or Slurm script (:mod:`vramfit.plan.export_titan`);
- ``trl``: ``train.py`` (TRL ``SFTTrainer``, PEFT LoRA, bitsandbytes 4-bit for QLoRA) and its
  ``train_config.yaml`` (TRL's own ``--config`` file: ``SFTConfig`` and ``ModelConfig`` fields), plus the
  Accelerate file (and DeepSpeed JSON) above.

The tests load every file with the engine's own code (accelerate's launch path, DeepSpeed's config parser,
TRL's argument parser) and run one step of ``train.py`` on a tiny random model on the CPU.

``"auto"`` values in a DeepSpeed file are filled by the Hugging Face Trainer/Accelerate integration.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from vramfit.errors import ScenarioError
from vramfit.plan import export_nodes as nodes
from vramfit.plan.report import Plan
from vramfit.safe_input import shown

ENGINES: tuple[str, ...] = ("accelerate", "deepspeed", "fsdp", "trl", "torchtitan")
OPTIM = {  # vramfit optimizer -> transformers OptimizerNames value (training_args.py)
    "adamw": "adamw_torch_fused", "adamw-8bit": "adamw_bnb_8bit", "paged-adamw": "paged_adamw_32bit",
    "paged-adamw-8bit": "paged_adamw_8bit", "adamw-4bit": "adamw_torch_4bit", "adafactor": "adafactor",
    "adamw-8bit-torchao": "adamw_torch_8bit", "sgd": "sgd", "sgd-momentum": "sgd", "lion": "lion_32bit", "lion-8bit": "lion_8bit",
}


def optim_name(plan: Plan) -> str:
    """The transformers ``optim`` that runs the plan's optimizer: ``adamw_torch`` where its scenario asks for the foreach
    AdamW (``optimizer_impl``; transformers 5.24.0 trainer_optimizer.py passes ``fused=True`` only for
    ``adamw_torch_fused``)."""
    if plan.optimizer == "adamw" and plan.scenario.get("optimizer_impl") == "foreach":
        return "adamw_torch"
    return OPTIM[plan.optimizer]


SCRIPT = "train.py"  # the one script name every export launches
TRL_CONFIG_FILE = "train_config.yaml"
ACCELERATE_FILE = "accelerate.yaml"
DS_FILE = "ds_config.json"


@dataclass(frozen=True)
class Export:
    engine: str
    files: dict[str, str]  # file name -> text
    command: str  # how to launch with these files
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "files": dict(self.files), "command": self.command, "notes": list(self.notes)}


def _engine_of(plan: Plan) -> str:
    p = plan.parallelism
    if p in ("zero1", "zero2", "zero3"):
        return "deepspeed"
    if p in ("fsdp", "fsdp-grad-op", "fsdp-no-shard"):
        return "fsdp"
    return "ddp" if plan.num_gpus > 1 else "single"


def _mixed(sc: dict[str, Any]) -> str:
    prec = sc["precision"]
    return "bf16" if prec.startswith("bf16") else "fp16" if prec.startswith("fp16") else "no"


def fsdp_16bit_full(sc: dict[str, Any]) -> bool:
    """A 16-bit full fine-tuning, which an FSDP export writes with mixed precision off: with it on accelerate keeps
    what trains in fp32 under FSDP (config_import/trainer_layout.py FSDP_UPCAST), 16 B per parameter, not 8."""
    return sc["method"] == "full" and sc["precision"] in ("bf16-true", "fp16-true")


def _zero_stage(plan: Plan) -> int:
    """The ZeRO stage the DeepSpeed file runs: an unsharded 16-bit plan gets stage 1, as stage 0 in bf16/fp16 is
    DeepSpeed's own 16-bit optimizer wrapper with an unsharded fp32 master copy (deepspeed 0.18.7 engine.py
    ``_do_optimizer_sanity_check``: DDP_BFLOAT16 / FP16 -> ``_configure_fp16_optimizer``; 0.16's BF16_Optimizer)."""
    stage = {"zero1": 1, "zero2": 2, "zero3": 3, "fsdp": 3, "fsdp-grad-op": 2}.get(plan.parallelism, 0)
    return 1 if stage == 0 and plan.scenario["precision"] != "fp32" else stage


def deepspeed_config(plan: Plan, notes: list[str]) -> dict[str, Any]:
    sc = plan.scenario
    stage = _zero_stage(plan)
    zero: dict[str, Any] = {"stage": stage, "overlap_comm": True, "contiguous_gradients": True}
    if plan.offload != "none":
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if plan.offload == "optimizer+params":
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    if stage:
        zero.update(_zero_buffers(sc, stage))
    if stage == 3:
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    if stage == 3 and nodes.hybrid(plan):
        zero["zero_hpz_partition_size"] = nodes.per_node(plan)  # ZeRO++ hpZ (export_nodes)
    cfg: dict[str, Any] = {
        "train_batch_size": plan.effective_batch,
        "train_micro_batch_size_per_gpu": plan.micro_batch_size,
        "gradient_accumulation_steps": plan.grad_accum,
        "gradient_clipping": 1.0,
        "zero_optimization": zero,
    }
    mp = _mixed(sc)
    if mp == "bf16":
        cfg["bf16"] = {"enabled": True}
    elif mp == "fp16":
        cfg["fp16"] = {"enabled": True, "loss_scale": 0}
    if plan.offload != "none":
        cfg["optimizer"] = {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}}
        notes.append("offload runs DeepSpeed's CPU Adam: the optimizer section replaces the Trainer's optim")
    elif plan.optimizer != "adamw":
        cfg["zero_allow_untested_optimizer"] = True
        notes.append(f"{plan.optimizer} is created by the Trainer (optim={optim_name(plan)!r}) and wrapped by ZeRO")
    return cfg


def _zero_buffers(sc: dict[str, Any], stage: int) -> dict[str, Any]:
    """The ZeRO buffer sizes the plan's estimate used, written out as numbers: the scenario's own DeepSpeed config, else
    the HF docs' template with its "auto" values filled from the hidden size as the HF Trainer does
    (estimate/deepspeed.py resolve). Written as numbers, the file means the same under accelerate, the HF Trainer and
    a plain ``deepspeed`` launch (which does not fill "auto"); left out, DeepSpeed's 5e8-element defaults would apply
    and the run would hold more than the plan says."""
    from vramfit.estimate import deepspeed as ds
    from vramfit.estimate import resolve_spec
    from vramfit.scenario import parse_scenario

    given = sc.get("deepspeed_config")
    z = ds.resolve(ds.from_mapping(given) if given else None, resolve_spec(parse_scenario(sc))[1].hidden_size, stage)
    out: dict[str, Any] = {"overlap_comm": z.overlap_comm, "contiguous_gradients": z.contiguous_gradients,
                           "reduce_bucket_size": z.reduce_bucket_size, "allgather_bucket_size": z.allgather_bucket_size}
    if stage == 3:
        out.update(sub_group_size=z.sub_group_size, stage3_prefetch_bucket_size=z.prefetch_bucket_size,
                   stage3_param_persistence_threshold=z.persistence_threshold,
                   stage3_max_live_parameters=z.max_live_parameters, stage3_max_reuse_distance=z.max_reuse_distance)
    if not z.memory_efficient_linear:
        out["memory_efficient_linear"] = False
    return out


def _fsdp_block(plan: Plan, notes: list[str]) -> dict[str, Any]:
    shard = ("SHARD_GRAD_OP" if plan.parallelism in ("zero2", "fsdp-grad-op", "zero1")
             else "NO_SHARD" if plan.parallelism == "fsdp-no-shard" else "FULL_SHARD")
    if plan.offload == "optimizer":
        notes.append("FSDP offloads parameters together with the optimizer state (CPUOffload(offload_params=True))")
    if str(plan.scenario.get("fsdp_version", "auto")) == "2":
        return _fsdp2_block(plan, shard, notes)
    return {
        "fsdp_activation_checkpointing": plan.gradient_checkpointing != "none",
        "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "fsdp_backward_prefetch": "BACKWARD_PRE",
        "fsdp_cpu_ram_efficient_loading": True,
        "fsdp_forward_prefetch": False,
        "fsdp_offload_params": plan.offload != "none",
        # FSDP1 reads sharding_strategy; accelerate 1.15 ignores reshard_after_forward when fsdp_version is 1
        # (FullyShardedDataParallelPlugin.__post_init__, accelerate/utils/dataclasses.py)
        "fsdp_sharding_strategy": nodes.fsdp_strategy(plan, shard),
        "fsdp_state_dict_type": "SHARDED_STATE_DICT",
        "fsdp_sync_module_states": True,
        "fsdp_use_orig_params": True,
        "fsdp_version": 1,  # the scenario's fsdp_version (auto = 1 for hf); keys as trl/accelerate_configs/fsdp1.yaml
    }


def _fsdp2_block(plan: Plan, shard: str, notes: list[str]) -> dict[str, Any]:
    """The scenario's ``fsdp_version: 2``: accelerate 1.15's FSDP2 keys (as trl/accelerate_configs/fsdp2.yaml); FSDP2
    takes ``reshard_after_forward`` as a bool and drops the FSDP1-only keys (FullyShardedDataParallelPlugin
    .__post_init__, accelerate/utils/dataclasses.py: sync_module_states, use_orig_params, prefetch)."""
    return {
        "fsdp_activation_checkpointing": plan.gradient_checkpointing != "none",
        "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "fsdp_cpu_ram_efficient_loading": True,
        "fsdp_offload_params": plan.offload != "none",
        "fsdp_reshard_after_forward": shard == "FULL_SHARD",
        "fsdp_state_dict_type": "SHARDED_STATE_DICT",
        "fsdp_version": 2,
    }


def _yaml(data: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


def _accelerate(plan: Plan, engine: str, notes: list[str]) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": {"deepspeed": "DEEPSPEED", "fsdp": "FSDP", "ddp": "MULTI_GPU", "single": "NO"}[engine],
        "mixed_precision": _mixed(plan.scenario),
        "num_machines": nodes.nodes_of(plan),
        "machine_rank": 0,
        "num_processes": plan.num_gpus,
        "gpu_ids": "all",
        "rdzv_backend": "static",
        "same_network": True,
        "use_cpu": False,
    }
    if engine == "deepspeed":
        # With a deepspeed_config_file, precision comes from the JSON's bf16/fp16 block: accelerate 1.x refuses
        # mixed_precision beside it (DeepSpeedPlugin._deepspeed_config_checks, accelerate/utils/dataclasses.py).
        del cfg["mixed_precision"]
        cfg["deepspeed_config"] = {"deepspeed_config_file": DS_FILE,
                                   "zero3_init_flag": plan.parallelism == "zero3" and plan.scenario["method"] == "full"}
        if nodes.nodes_of(plan) > 1:  # each node's `accelerate launch` starts its own ranks (the Slurm script): without
            # it accelerate falls back to pdsh (v1.16.0 utils/launch.py l. 420-432), and DeepSpeed's runner, with no
            # hostfile, starts a one-node job on every node
            cfg["deepspeed_config"]["deepspeed_multinode_launcher"] = "standard"
    if engine == "fsdp":
        cfg["fsdp_config"] = _fsdp_block(plan, notes)
        if fsdp_16bit_full(plan.scenario):
            # with mixed precision on, accelerate keeps what trains in fp32 under FSDP (config_import/
            # trainer_layout.py FSDP_UPCAST): the plan's 16-bit weights need it off, the model loaded in 16 bits
            cfg["mixed_precision"] = "no"
            notes.append(f"mixed_precision no: the plan trains {plan.scenario['precision']} weights as loaded; with "
                         "bf16/fp16 on, accelerate keeps the trained weights in fp32 under FSDP (16 B per parameter, "
                         "not 8)")
        if nodes.hybrid(plan) and cfg["fsdp_config"]["fsdp_version"] == 2:
            # FSDP2 shards inside the node through accelerate's ParallelismConfig: `accelerate launch` copies this
            # mapping's keys onto its --parallelism_config_* arguments and sets use_parallelism_config (accelerate
            # v1.16.0 commands/launch.py l. 1298-1325, utils/launch.py prepare_extend_env_parallelism_config)
            cfg["parallelism_config"] = {"parallelism_config_dp_replicate_size": nodes.nodes_of(plan),
                                         "parallelism_config_dp_shard_size": nodes.per_node(plan)}
    return cfg


def _shard(plan: Plan, engine: str, notes: list[str]) -> str:
    """How the exported files shard the model: deepspeed, fsdp, ddp or single."""
    own = _engine_of(plan)
    if engine == "deepspeed":
        if own == "fsdp":
            notes.append(f"the plan was sized for {plan.parallelism}; written as the matching ZeRO stage, whose buffers "
                         f"differ (estimate again with parallelism zero{_zero_stage(plan)} for its figure)")
        if own in ("ddp", "single") and _zero_stage(plan):
            notes.append("the plan needs no sharding, but DeepSpeed's stage 0 in 16-bit keeps an unsharded fp32 master "
                         "copy: written as ZeRO stage 1, whose memory differs (estimate again with parallelism zero1 "
                         "for its figure, or export accelerate for the plan's own)")
        elif own in ("ddp", "single"):
            notes.append("the plan needs no sharding: ZeRO stage 0 is plain data parallelism")
        return "deepspeed"
    if engine == "fsdp":
        if own in ("ddp", "single"):
            notes.append("the plan needs no sharding: FULL_SHARD written anyway (uses less memory, more traffic)")
        if own == "deepspeed":
            match = "fsdp-grad-op" if plan.parallelism in ("zero1", "zero2") else "fsdp"
            notes.append(f"the plan was sized for {plan.parallelism}; written as the matching FSDP sharding, whose "
                         f"memory differs (estimate again with parallelism {match} for its figure)")
        if own == "deepspeed" and nodes.hybrid(plan):
            notes.append("sized for ZeRO++ hpZ; HYBRID_SHARD keeps the whole model state on each node, which needs "
                         "more memory: estimate it with parallelism=fsdp, shard_scope=node")
        return "fsdp"
    return own


def check_engine(engine: str) -> None:
    """Refuse an ``engine`` that is not one of :data:`ENGINES`."""
    if engine not in ENGINES:
        raise ScenarioError("export", f"unknown engine {shown(engine)}", ENGINES)


def export_plan(plan: Plan, engine: str, *, epochs: float = 1.0, batching: dict | None = None) -> Export:
    """Configuration files for ``engine`` (one of :data:`ENGINES`) that run ``plan``.

    Every engine launches the same script name, :data:`SCRIPT`; ``trl`` writes it (with its settings file),
    the others expect the user's own. ``batching``: the dataset's batching policy the plan was sized and timed for
    (``DatasetReport.policy``), which ``trl`` writes into its SFT settings; without one, rows packed to ``seq_len``.
    """
    check_engine(engine)
    notes: list[str] = []
    stage = plan.scenario.get("stage", "sft")
    if stage == "ppo":  # PPO left TRL after v1.9.0 (export_stages.py)
        notes.append(f"the plan is sized for stage {stage}, but these files run the supervised step (SFTTrainer): "
                     f"write the {stage.upper()}Config yourself with the same batch, length and sharding")
    if engine == "torchtitan":
        from vramfit.plan.export_titan import refusals, titan_files

        if why := refusals(plan.scenario):
            raise ScenarioError("export", "; ".join(why), [e for e in ENGINES if e != engine])
        files, command, more = titan_files(plan)
        return Export(engine, files, command, tuple(notes + more))
    shard = _shard(plan, engine, notes)
    files: dict[str, str] = {}
    if shard == "deepspeed":
        files[DS_FILE] = json.dumps(deepspeed_config(plan, notes), indent=2) + "\n"
    if engine != "deepspeed":
        files[ACCELERATE_FILE] = f"# vramfit plan: {plan.label}\n" + _yaml(_accelerate(plan, shard, notes))
    if engine == "trl":
        from vramfit.plan.export_trl import trl_files

        files.update(trl_files(plan, shard, epochs, notes, batching))
        args = f"{SCRIPT} --config {TRL_CONFIG_FILE} --dataset_path data.jsonl"
    else:
        args = SCRIPT
        notes.append(f"{SCRIPT} is your training script; --export trl writes one that runs these settings")
        if plan.scenario.get("framework", "hf") != "hf":  # these files launch a script under accelerate/DeepSpeed
            notes.append(f"the plan was sized for {plan.scenario['framework']}; these files launch your script under "
                         f"{'DeepSpeed' if shard == 'deepspeed' else 'accelerate'}, whose memory differs (estimate "
                         "again with framework hf)")
    if engine == "deepspeed" and nodes.nodes_of(plan) > 1:
        files[nodes.HOSTFILE] = nodes.hostfile(plan)
        notes.append(f"{nodes.HOSTFILE}: replace node1... with your hosts (passwordless ssh between them)")
        command = f"deepspeed --hostfile {nodes.HOSTFILE} {args} --deepspeed {DS_FILE}"
    elif engine == "deepspeed":
        command = f"deepspeed --num_gpus {plan.num_gpus} {args} --deepspeed {DS_FILE}"
    elif nodes.nodes_of(plan) > 1:
        files[nodes.SLURM_FILE] = nodes.slurm_script(plan, ACCELERATE_FILE, args)
        command = f"sbatch {nodes.SLURM_FILE}"
    else:
        command = f"accelerate launch --config_file {ACCELERATE_FILE} {args}"
    return Export(engine, files, command, tuple(notes))
