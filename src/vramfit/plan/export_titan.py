"""A plan written for torchtitan: a TOML job config with its ``[parallelism]`` section, and a torchrun launch
(one node) or an sbatch script running torchrun on every node.

The TOML has the layout of torchtitan's ``--job.config_file`` files (``torchtitan/models/llama3/train_configs/
*.toml`` before v0.3.0: ``[job]``, ``[model]``, ``[training]``, ``[parallelism]``, ``[activation_checkpoint]``),
which the launch line runs; v0.3.0 dropped TOML files and takes the same fields as command-line overrides
(``--parallelism.tensor_parallel_degree 8``: its ``ConfigManager`` builds them with tyro from
``torchtitan/config/configs.py`` ``ParallelismConfig``), given in a note. Field names and schedule names are theirs:

- ``data_parallel_replicate_degree``: HSDP's replicas (the data-parallel ranks over a node's), else 1 (DDP: all);
- ``data_parallel_shard_degree``: FSDP ranks, ``world / (dp_replicate x cp x tp x pp)``
  (``distributed/parallel_dims.py`` ``_validate``: the product must equal the world size);
- ``pipeline_parallel_schedule``: ``1F1B`` or ``Interleaved1F1B`` (torch v2.13.0
  ``distributed/pipelining/schedules.py`` ``get_schedule_class``); ``pipeline_parallel_microbatch_size``:
  the plan's micro-batch;
- ``training.local_batch_size``: sequences per data-parallel rank per forward (the micro-batch; with a pipeline,
  the micro-batches it splits into ``pipeline_parallel_microbatch_size`` pieces); ``global_batch_size``: the
  effective batch, from which torchtitan derives the accumulation steps (``trainer.py``:
  ``global_batch_size // (local_batch_size * batch_degree)``);
- ``activation_checkpoint.mode``: ``none`` / ``full`` / ``selective`` (``ActivationCheckpointingConfig``).
"""

from __future__ import annotations

from typing import Any

from vramfit.layout_keys import hsdp_group
from vramfit.plan import export_nodes as nodes
from vramfit.plan.report import Plan

TOML_FILE = "torchtitan.toml"
SCHEDULES = {"1f1b": "1F1B", "interleaved-1f1b": "Interleaved1F1B"}
AC_MODE = {"none": "none", "full": "full", "selective": "selective", "selective-op": "selective", "offload": "full"}


def parallelism(plan: Plan) -> dict[str, Any]:
    """The ``[parallelism]`` section of a plan (torchtitan's field names)."""
    sc = plan.scenario
    tp, pp, cp = (int(sc.get(k, 1) or 1) for k in ("tensor_parallel", "pipeline_parallel", "context_parallel"))
    hybrid = nodes.hybrid(plan) and sc.get("parallelism") == "fsdp"
    # HSDP: FSDP over a node's data-parallel ranks, the rest replicas (layout_keys.hsdp_group)
    replicate = plan.num_gpus // (tp * pp) // hsdp_group(plan.num_gpus, nodes.nodes_of(plan), tp, pp) if hybrid else 1
    if sc.get("parallelism") == "ddp":
        replicate = plan.num_gpus // (tp * pp * cp)
    out: dict[str, Any] = {
        "data_parallel_replicate_degree": replicate,
        "data_parallel_shard_degree": plan.num_gpus // (replicate * cp * tp * pp),
        "tensor_parallel_degree": tp, "enable_sequence_parallel": True,
        "pipeline_parallel_degree": pp, "context_parallel_degree": cp,
    }
    if sc.get("parallelism") == "fsdp-grad-op":  # v0.2.2 ParallelismConfig.fsdp_reshard_after_forward (the importer's)
        out["fsdp_reshard_after_forward"] = "never"
    ep = int(sc.get("expert_parallel", 1) or 1)
    if ep > 1:  # ParallelismConfig.expert_parallel_degree: borrows from dp_shard x cp x tp (efsdp = that / ep)
        out["expert_parallel_degree"] = ep
    if pp > 1:
        out["pipeline_parallel_schedule"] = SCHEDULES[sc.get("pipeline_schedule", "1f1b")]
        out["pipeline_parallel_microbatch_size"] = plan.micro_batch_size
    return out


def sections(plan: Plan) -> dict[str, dict[str, Any]]:
    """Every section of the TOML job config."""
    sc = plan.scenario
    par = parallelism(plan)
    local = plan.micro_batch_size * (plan.grad_accum if par["pipeline_parallel_degree"] > 1 else 1)
    return {
        "job": {"description": f"vramfit plan: {plan.label}"},
        "model": _model(sc),
        "training": {"local_batch_size": local, "global_batch_size": plan.effective_batch, "seq_len": int(sc["seq_len"]),
                     "mixed_precision_param": "bfloat16", "mixed_precision_reduce": "float32",
                     "enable_cpu_offload": plan.offload != "none"},
        "parallelism": par,
        # selective_ac_option defaults to "2" (every second block, torchtitan v0.2.2 config/job_config.py l. 655):
        # op-level selective AC has to be asked for
        "activation_checkpoint": {"mode": AC_MODE[plan.gradient_checkpointing],
                                  **({"selective_ac_option": "op"} if plan.gradient_checkpointing == "selective-op" else {})},
        "compile": {"enable": bool(sc.get("compile"))},
        # the AdamW step the plan was sized with, written out: torchtitan defaults to "fused" from 6e4988550 (v0.2.2
        # config/job_config.py l. 151, v0.3.0 components/optimizer/optimizer.py ``implementation``); torchtitan-2024
        # (9dec370) steps foreach
        "optimizer": {"name": "AdamW", "implementation": _adamw_impl(sc)},
    }


def _adamw_impl(sc: dict[str, Any]) -> str:
    """The scenario's AdamW implementation as its profile resolves ``optimizer_impl`` (estimate/framework.py)."""
    from vramfit.choices import Framework
    from vramfit.estimate.framework import profile_for

    chosen = sc.get("optimizer_impl", "auto")
    if chosen != "auto":
        return chosen
    return profile_for(Framework(sc.get("framework", "hf")), sc.get("framework_version")).torch_optimizer_impl.value


def _shape(spec) -> tuple:
    """What torchtitan's flavor fixes of a model: every shape that sizes a parameter or an activation."""
    return (spec.model_type, spec.hidden_size, spec.num_hidden_layers, spec.num_attention_heads,
            spec.num_key_value_heads, spec.head_dim, spec.intermediate_size, spec.vocab_size,
            spec.tie_word_embeddings, spec.num_experts, spec.num_experts_per_tok)


def flavor(sc: dict[str, Any]) -> tuple[str, str] | None:
    """torchtitan's own (module, flavor) of the plan's model: the importer's FLAVORS read backwards, by id or, for a
    model of the same shapes (Llama-3.1-8B-Instruct is llama3 8B), by shape; None where torchtitan has none (it
    builds its own model definitions, not transformers': without a flavor v0.2.2 builds llama3 ``debugmodel``)."""
    from vramfit.config_import.torchtitan import FLAVORS
    from vramfit.errors import VramfitError
    from vramfit.models import catalog_spec, resolve_model

    by_id = {v: k for k, v in FLAVORS.items()}
    model = sc.get("model")
    if not model:
        return None
    if model in by_id:
        return by_id[model]
    try:
        shape = _shape(resolve_model(model).spec)
    except VramfitError:
        return None
    return next((named for hf_id, named in by_id.items() if _shape(catalog_spec(hf_id)) == shape), None)


def refusals(sc: dict[str, Any]) -> list[str]:
    """Why torchtitan cannot run the plan at all (the export is refused, not annotated)."""
    from vramfit.config_import.torchtitan import FLAVORS

    out = []
    if sc.get("method", "full") != "full":
        # torchtitan trains every weight from its TOML/CLI fields: no 4-bit bitsandbytes path at all, and v0.3.0's
        # LoRAConverter (components/lora.py) is set only in a config_registry function, not in these files
        out.append(f"torchtitan's files run full fine-tuning only and the plan is {sc.get('method')}: torchtitan has "
                   "no 4-bit path, and its 0.3 LoRAConverter is set in a config_registry function")
    if flavor(sc) is None:
        names = sorted({f"{m} {f}" for m, f in FLAVORS})
        model = str(sc.get("model") or f"params={sc.get('params')}")[:80]
        out.append(f"torchtitan builds its own model definitions and has none for {model} (it has {', '.join(names)})")
    return out


def _model(sc: dict[str, Any]) -> dict[str, str]:
    """``[model]``: torchtitan's own name and flavor of the catalog model (:func:`flavor`), and the checkpoint
    folder."""
    hf_id = sc.get("model") or ""
    named = flavor(sc)
    return {**({"name": named[0], "flavor": named[1]} if named else {}), "hf_assets_path": hf_id or "<your model folder>"}


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def toml_text(plan: Plan) -> str:
    out = [f"# vramfit plan: {plan.label}"]
    for name, body in sections(plan).items():
        out.append(f"\n[{name}]")
        out += [f"{k} = {_toml_value(v)}" for k, v in body.items()]
    return "\n".join(out) + "\n"


def overrides(plan: Plan) -> list[str]:
    """The ``[parallelism]`` and batch fields as torchtitan v0.3.0 command-line overrides: tyro's flags,
    dashed names, booleans as ``--x`` / ``--no-x`` (tyro's defaults, which its ConfigManager keeps)."""
    s = sections(plan)
    keys = [("parallelism", k) for k in s["parallelism"]] + [("training", k) for k in ("local_batch_size", "global_batch_size", "seq_len")]
    keys.append(("optimizer", "implementation"))
    out = []
    for sec, k in keys:
        v, flag = s[sec][k], k.replace("_", "-")
        out.append(f"--{sec}.{'' if v else 'no-'}{flag}" if isinstance(v, bool) else f"--{sec}.{flag} {v}")
    return out


def launch_line(plan: Plan, rendezvous: str) -> str:
    """torchrun over the node's GPUs running torchtitan's trainer on the TOML (releases before 0.3; the
    0.3 form is in the export's notes)."""
    return (f"torchrun --nnodes {nodes.nodes_of(plan)} --nproc_per_node {nodes.per_node(plan)} {rendezvous}"
            f"-m torchtitan.train --job.config_file {TOML_FILE}")


def slurm_script(plan: Plan) -> str:
    """An sbatch script: one task per node, each running torchrun with a c10d rendezvous on the first node."""
    rdzv = f"--rdzv_backend c10d --rdzv_endpoint $MAIN_HOST:{nodes.PORT} --rdzv_id $SLURM_JOB_ID "
    return f"""#!/bin/bash
# vramfit plan: {plan.label}
#SBATCH --job-name=vramfit
#SBATCH --nodes={nodes.nodes_of(plan)}
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node={nodes.per_node(plan)}
#SBATCH --exclusive
set -euo pipefail
export MAIN_HOST=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
srun {launch_line(plan, rdzv)}
"""


def unwritable(plan: Plan) -> list[str]:
    """What the plan was sized with that torchtitan cannot be told (its TOML has no such field): said, so the files
    are not taken for the plan. torchtitan v0.3.0 builds Adam/AdamW/DistMuon only (components/optimizer/optimizer.py)
    and its own cross-entropy (components/loss.py ChunkedLossWrapper; v0.2.2 on the whole logits)."""
    sc, out = plan.scenario, []
    if plan.optimizer not in ("adamw", "adam"):
        out.append(f"the plan was sized with optimizer {plan.optimizer}, which torchtitan does not build: it runs AdamW "
                   "(fp32 states), which holds more; estimate again with --framework torchtitan")
    if plan.loss != "standard":
        out.append(f"the plan was sized with the {plan.loss} loss; torchtitan computes its own cross-entropy, which "
                   "holds more; estimate again with --framework torchtitan")
    if _sized_with_chunked_loss(sc):
        out.append("the plan was sized as torchtitan 0.3 runs it (lm_head and the loss over 8 sequence chunks); the "
                   "releases that read this TOML compute the loss on the whole logits, which holds more: estimate "
                   "again with --framework-version torchtitan-0.2.2 before running the TOML")
    lay = parallelism(plan)
    one_shard = lay["data_parallel_shard_degree"] * lay["context_parallel_degree"] == 1
    if plan.offload != "none" and one_shard:
        # torchtitan before 0.3 applies FSDP only over more than one shard (config_import/torchtitan.py ONE_SHARD)
        out.append("at data_parallel_shard_degree x context_parallel_degree = 1, torchtitan before 0.3 (the releases "
                   "that read this TOML) applies no FSDP, so enable_cpu_offload offloads nothing there and the run "
                   "holds its whole state on the GPU: the plan's offload holds under torchtitan 0.3 only (the "
                   "command line above)")
    elif one_shard and plan.num_gpus > 1:
        # v0.2.2 distributed/utils.py maybe_enable_amp: autocast without FSDP, none at all under TP/PP
        out.append("at data_parallel_shard_degree x context_parallel_degree = 1, torchtitan before 0.3 (the releases "
                   "that read this TOML) applies no FSDP, so no bf16 parameter cast: autocast, or fp32 under tensor or "
                   "pipeline parallelism; the plan, sized as torchtitan 0.3 runs it, holds under 0.3's command line")
    if sc.get("framework", "hf") != "torchtitan":
        out.append(f"the plan was sized for {sc.get('framework', 'hf')}; torchtitan's memory differs (estimate again "
                   "with --framework torchtitan)")
    return out


def _sized_with_chunked_loss(sc: dict[str, Any]) -> bool:
    """Whether the plan's torchtitan release runs 0.3.0's chunked loss (its profile's standard loss), which no TOML
    release runs (config_import/torchtitan.py TOML_RELEASE)."""
    from vramfit.choices import Framework
    from vramfit.estimate.framework import LossLayout, profile_for

    if sc.get("framework", "hf") != "torchtitan" or sc.get("loss", "standard") != "standard":
        return False
    return profile_for(Framework.TORCHTITAN, sc.get("framework_version")).standard_loss is LossLayout.TORCHTITAN_CHUNKED_LOSS


def titan_files(plan: Plan) -> tuple[dict[str, str], str, list[str]]:
    """(files, command, notes) of the torchtitan export."""
    files = {TOML_FILE: toml_text(plan)}
    notes = ["model.hf_assets_path: the folder of the Hugging Face checkpoint and tokenizer torchtitan loads",
             f"torchtitan 0.3 reads no TOML: run -m torchtitan.train --module {_model(plan.scenario).get('name', 'llama3')} "
             "--config <config_registry_function> "
             + " ".join(overrides(plan))] + unwritable(plan)
    if nodes.nodes_of(plan) > 1:
        files[nodes.SLURM_FILE] = slurm_script(plan)
        return files, f"sbatch {nodes.SLURM_FILE}", notes
    return files, launch_line(plan, "--standalone "), notes
