"""torchtitan job config TOML (``--job.config_file``) -> scenario keys (framework ``torchtitan``).

Three layouts are read: the one of pytorch/torchtitan@9dec370 (``train_configs/llama3_8b.toml``:
``training.batch_size``, the parallel degrees under ``[training]`` and ``[experimental]``, ``training.compile``,
``[float8]``; framework_version torchtitan-2024), the one of March-August 2025 (v0.1.0: ``[parallelism]`` with
``training.compile``, ``training.batch_size`` then ``local_batch_size``; torchtitan-0.2.1) and the one of v0.2.2
(``torchtitan/models/llama3/train_configs/*.toml``: ``training.local_batch_size`` / ``global_batch_size``,
``[parallelism]``, ``[compile]``, ``model.converters``; torchtitan-0.2.2). v0.3.0 reads no TOML (its recipes are
Python, ``config_registry.py``), so every file read here is a release before the profile's own. Defaults: 9dec370 ``torchtitan/config_manager.py`` and
v0.2.2 (73a0e69) ``torchtitan/config/job_config.py``, cited per key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vramfit.config_import.hf_common import boolean
from vramfit.config_import.report import Imported, KeyReader

OLD = "pytorch/torchtitan@9dec370 torchtitan/config_manager.py"
NEW = "pytorch/torchtitan v0.2.2 torchtitan/config/job_config.py"
SOURCE = f"{OLD}; {NEW}"
#: run_llama_train.sh at 9dec370 l. 13 (run_train.sh at v0.2.2 the same): ``NGPU=${NGPU:-"8"}`` -> torchrun
LAUNCH = "pytorch/torchtitan@9dec370 run_llama_train.sh l. 13: NGPU defaults to 8 (set NGPU / pass --num-gpus)"

#: (model.name, model.flavor) -> the catalog's Hugging Face id. torchtitan's llama3 flavors are Llama 3.1's shapes
#: (9dec370 torchtitan/models/llama/__init__.py llama3_configs: 8B dim 4096, 32 layers, 8 KV heads, ffn multiplier 1.3;
#: 70B dim 8192, 80 layers; 405B dim 16384, 126 layers; the tiktoken vocabulary of 128256)
FLAVORS = {("llama3", "8B"): "meta-llama/Llama-3.1-8B", ("llama3", "70B"): "meta-llama/Llama-3.1-70B",
           ("llama3", "405B"): "meta-llama/Llama-3.1-405B",
           # v0.2.2 torchtitan/models/qwen3/__init__.py qwen3_args: Qwen3's config.json shapes (vocab 151936, head_dim
           # 128, tied embeddings up to 4B), dense and MoE
           **{("qwen3", f): f"Qwen/Qwen3-{f}" for f in ("0.6B", "1.7B", "4B", "8B", "14B", "32B", "30B-A3B", "235B-A22B")}}
OPTIMIZERS = {"adamw": "adamw", "adam": "adamw"}

WRITE_KEYS = {"seq_len": "training.seq_len", "gradient_checkpointing": "activation_checkpoint.mode"}

IGNORED = [("job.*", "paths and labels"), ("profiling.*", "profiling"), ("metrics.*", "logging"),
           ("checkpoint.*", "checkpoint saving"), ("comm.*", "timeouts"), ("memory_estimation.*", "estimation mode"),
           ("lr_scheduler.*", "schedule"), ("optimizer.lr", "schedule"), ("optimizer.eps", "optimizer hyperparameter"),
           ("optimizer.weight_decay", "optimizer hyperparameter"), ("optimizer.beta*", "optimizer hyperparameter"),
           ("training.dataset", "data"), ("training.dataset_path", "data"), ("training.steps", "schedule"),
           ("training.warmup_steps", "schedule"), ("training.max_norm", "no memory effect"), ("training.seed", "randomness"),
           ("training.deterministic", "determinism"), ("training.gc_freq", "host garbage collection"),
           ("model.tokenizer_path", "path"), ("model.hf_assets_path", "path"), ("model.norm_type", "rmsnorm is modelled"),
           ("quantize.*", "read with model.converters"), ("float8.*", "read with enable_float8_linear"),
           ("validation.*", "validation is off"), ("dataloader.*", "data loading"), ("fault_tolerance.*", "off"),
           ("experimental.*", "experimental switches off"), ("debug.*", "debugging"),
           ("compile.components", "read with compile.enable"), ("*.pipeline_parallel_split_points", "stage boundaries"),
           ("*.pipeline_parallel_schedule_csv", "schedule file"), ("*.context_parallel_rotate_method", "communication"),
           ("*.enable_async_tensor_parallel", "communication overlap"),
           ("parallelism.enable_sequence_parallel", "sequence sharding under TP, as modelled"), ("*.disable_loss_parallel", "loss layout")]

#: the releases that read a TOML apply FSDP, and the CPU offload it carries, only over more than one shard:
#: 9dec370 torchtitan/parallelisms/parallelize_llama.py l. 80 ``if parallel_dims.dp_shard_enabled or
#: parallel_dims.cp_enabled`` (parallel_dims.py l. 103-104: ``dp_shard > 1``), v0.2.2 models/llama3/infra/parallelize.py
#: l. 125 ``if parallel_dims.fsdp_enabled`` (distributed/parallel_dims.py l. 322-335); v0.3.0, which reads no TOML,
#: always applies it (models/llama3/parallelize.py ``apply_fsdp_to_decoder``, shard degree 1 included)
ONE_SHARD = ("no effect here: at data_parallel_shard_degree x context_parallel_degree = 1 torchtitan before 0.3 "
             "applies no FSDP, so nothing is offloaded (0.3, which reads no TOML, offloads at every degree)")

UNKNOWN = "not read by vramfit: no memory effect it models in torchtitan's job config (check the spelling)"


def _new(r: KeyReader) -> bool:
    return r.has("parallelism") or r.has("compile") or r.has("training.local_batch_size")


def _model(r: KeyReader, new: bool) -> None:
    name = str(r.get("model.name", "llama3", f"{NEW} Model.name") if new else r.get("model.name", "llama", f"{OLD} l. 161"))
    flavor = str(r.get("model.flavor", "debugmodel", f"{NEW} Model.flavor" if new else f"{OLD} l. 167"))
    assets = r.flat.get("model.hf_assets_path")  # v0.2.x: the Hugging Face checkpoint folder (vramfit's exports: its id)
    if (name, flavor) in FLAVORS:
        r.set("model.flavor", "model", FLAVORS[(name, flavor)])
    elif isinstance(assets, str) and _catalog_id(assets):
        r.get("model.hf_assets_path")
        r.set("model.hf_assets_path", "model", _catalog_id(assets))
    else:
        r.mark("model.flavor", f"{name} {flavor}: no Hugging Face id in vramfit's table (llama3 8B/70B/405B, qwen3 0.6B-235B-A22B); "
                               "pass --model")
    converters = r.get("model.converters") or []
    if not isinstance(converters, list) or not all(isinstance(c, str) for c in converters):
        raise r.error(f"model.converters must be a list of converter names (float8, mx, ...), got {converters!r}")
    if r.get("float8.enable_float8_linear") or "float8" in converters:
        key = "model.converters" if "float8" in converters else "float8.enable_float8_linear"
        r.mark(key, "float8 linears (torchao): estimated with bf16 matmuls and activations")


def _catalog_id(path: str) -> str | None:
    """The catalog id a checkpoint folder names (``meta-llama/Llama-3.1-8B``, ``./assets/hf/Llama-3.1-8B``), or None."""
    from vramfit.models import catalog

    parts = path.rstrip("/").split("/")
    entry = catalog._index().get("/".join(parts[-2:]).lower()) or catalog._match_by_name(parts[-1])  # noqa: SLF001
    return entry["id"] if entry else None


def _whole(r: KeyReader, key: str, v: Any, least: int = 1) -> int:
    """``v`` when it is a whole number ≥ ``least`` (TOML gives ints, but a string or a float parses as well), else
    one line naming ``key``."""
    if not isinstance(v, int) or isinstance(v, bool) or v < least:
        raise r.error(f"{key} must be a whole number ≥ {least}, got {v!r}")
    return v


def _degree(r: KeyReader, key: str, new: bool) -> int:
    """A parallel degree: ``parallelism.X`` (new) or ``training.X`` / ``experimental.X`` (9dec370)."""
    if new:
        full, src = f"parallelism.{key}", f"{NEW} Parallelism.{key}"
    else:
        table = "experimental" if key.startswith(("pipeline", "context")) else "training"
        full, src = f"{table}.{key}", f"{OLD} --{table}.{key}"
    v = r.get(full, -1 if key == "data_parallel_shard_degree" else 1, src)
    if not isinstance(v, int) or isinstance(v, bool) or (v < 1 and not (v == -1 and "shard" in key)):
        raise r.error(f"{full} must be a whole number ≥ 1{' or -1' if 'shard' in key else ''}, got {v!r}")
    return v


def _layout(r: KeyReader, new: bool) -> dict[str, int]:
    """Degrees and the world: ``data_parallel_shard_degree = -1`` takes the GPUs the others leave
    (9dec370 torchtitan/parallelisms/parallel_dims.py ``_validate``: dp_shard = world // (dp_replicate * cp * tp * pp))."""
    keys = ["data_parallel_replicate_degree", "data_parallel_shard_degree", "tensor_parallel_degree",
            "pipeline_parallel_degree", "context_parallel_degree"] + (["expert_parallel_degree"] if new else [])
    d = {k.removesuffix("_degree"): _degree(r, k, new) for k in keys}
    others = d["data_parallel_replicate"] * d["tensor_parallel"] * d["pipeline_parallel"] * d["context_parallel"]
    if d["data_parallel_shard"] == -1:
        from vramfit.config_import.report import Entry

        world = 8
        r.entries["num_gpus"] = Entry("default", "num_gpus", world, LAUNCH, [f"num_gpus={world}"])
        if world % others:
            raise r.error(f"the other degrees multiply to {others}, which does not divide {world} GPUs; "
                          "set data_parallel_shard_degree")
        d["data_parallel_shard"] = world // others
        key = "parallelism.data_parallel_shard_degree" if new else "training.data_parallel_shard_degree"
        r.entries[key].note = (f"-1: {world // others} = the launcher's {world} GPUs / {others} for the other degrees; "
                               "write the degree for another count (--num-gpus does not re-derive it)")
    d["world"] = d["data_parallel_shard"] * others
    return d


def _degrees(r: KeyReader, d: dict[str, int], new: bool) -> None:
    """The model-parallel degrees as scenario keys; a degree the file gives is reported as setting its key."""
    r.out["num_gpus"] = d["world"]
    for name in ("tensor_parallel", "pipeline_parallel", "context_parallel", "expert_parallel"):
        table = "parallelism" if new else "experimental" if name.startswith(("pipeline", "context")) else "training"
        key = f"{table}.{name}_degree"
        if name in d and (d[name] > 1 or name != "expert_parallel"):
            if key in r.entries and r.entries[key].kind == "read":
                r.set(key, name, d[name])
            else:
                r.out[name] = d[name]


def _parallelism(r: KeyReader, d: dict[str, int], new: bool) -> None:
    shard, rep = d["data_parallel_shard"], d["data_parallel_replicate"]
    _degrees(r, d, new)
    # v0.3.0 ParallelismConfig.enable_sequence_parallel (v0.2.x always shards the sequence under TP)
    if d["tensor_parallel"] > 1 and r.flat.get("parallelism.enable_sequence_parallel") is False:
        r.get("parallelism.enable_sequence_parallel")
        r.mark("parallelism.enable_sequence_parallel", "tensor parallelism without sequence parallelism: counted "
                                                       "with it (norm and dropout activations sharded)")
    key = "parallelism.data_parallel_shard_degree" if new else "training.data_parallel_shard_degree"
    # FSDP over dp_shard x cp (parallel_dims: the "dp_shard_cp" mesh); DDP only over replicas without sharding
    if shard * d["context_parallel"] > 1:
        reshard = r.get("parallelism.fsdp_reshard_after_forward", "default", f"{NEW} l. 336") if new else "default"
        if reshard not in ("default", "always", "never"):
            raise r.error(f"fsdp_reshard_after_forward '{reshard}' is unknown (valid values: default, always, never)")
        r.set(key, "parallelism", "fsdp-grad-op" if reshard == "never" else "fsdp")
        if rep > 1:  # HSDP: FSDP inside each replica group, the replicas DDP
            r.set(key, "shard_scope", "node")
            r.set(key, "num_nodes", rep)
            r.mark(key, "HSDP: each of the data_parallel_replicate_degree replicas counted as one node's shard group")
    elif rep > 1:  # DDP over replicas (beside tensor/pipeline parallel torchtitan raises: framework.check_ddp_layout)
        r.set(key, "parallelism", "ddp")
    elif d["world"] > 1:
        # tensor/pipeline parallel over every GPU: torchtitan before 0.3 applies neither FSDP nor DDP (9dec370
        # parallelisms/parallelize_llama.py l. 79-108), counted as ddp over that one data-parallel rank (without it
        # the scenario would get torchtitan's default, FSDP)
        r.set(key, "parallelism", "ddp")
    off = boolean(r, "training.enable_cpu_offload", False, f"{OLD} --training.enable_cpu_offload")
    if off and shard * d["context_parallel"] == 1:
        from vramfit.config_import.report import Entry

        r.entries["training.enable_cpu_offload"] = Entry("ignored", "training.enable_cpu_offload", off, ONE_SHARD)
    elif off:
        r.set("training.enable_cpu_offload", "offload", "optimizer+params")


def _precision(r: KeyReader, d: dict[str, int], new: bool) -> None:
    """FSDP2's MixedPrecisionPolicy(param_dtype) over fp32 weights. Without FSDP: none at 9dec370 (config_manager.py
    l. 378-386, "only takes effect when data_parallel_shard_degree > 1"); torch.autocast under DDP or one GPU with no
    other parallelism at v0.2.2 (job_config.py l. 282-288). ``training.dtype`` bfloat16 (v0.2.2 l. 275-280): bf16
    weights, gradients and states, no fp32 copy."""
    fsdp = r.out.get("parallelism") in ("fsdp", "fsdp-grad-op")
    alone = d["tensor_parallel"] * d["pipeline_parallel"] * d["context_parallel"] == 1
    param = r.get("training.mixed_precision_param", "bfloat16", f"{OLD} l. 378-386")
    if param not in ("bfloat16", "float32"):
        raise r.error(f"training.mixed_precision_param '{param}' is unknown (valid values: bfloat16, float32)")
    mixed = param == "bfloat16" and (fsdp or (new and alone))
    precision = "bf16-mixed" if mixed else "fp32"
    if new and r.get("training.dtype", "float32", f"{NEW} l. 275") == "bfloat16":
        precision = "bf16-true"
        r.set("training.dtype", "precision", precision)
    r.set("training.mixed_precision_param", "precision", precision)
    # 9dec370 models/llama/model.py Attention: F.scaled_dot_product_attention(xq, xk, xv, is_causal=True); torch
    # picks its flash kernel for 16-bit inputs without a mask, the memory-efficient one (SDPA) for fp32
    r.set("training.mixed_precision_param", "attention", "sdpa" if precision == "fp32" else "flash")
    reduce = r.get("training.mixed_precision_reduce", "float32", f"{OLD} l. 388-396")
    if reduce != "float32":
        r.mark("training.mixed_precision_reduce", "a reduce dtype other than float32: gradients counted in float32")


def _batch(r: KeyReader, d: dict[str, int], new: bool) -> None:
    # the March-June 2025 files ([parallelism], 775a486ed) still say training.batch_size; local_batch_size came later
    key = "training.local_batch_size" if new and not (r.has("training.batch_size") and
                                                      not r.has("training.local_batch_size")) else "training.batch_size"
    local = _whole(r, key, r.get(key, 8, f"{NEW} Training.local_batch_size" if new else f"{OLD} --training.batch_size"))
    seq = r.get("training.seq_len", 2048, f"{OLD} --training.seq_len")
    r.set("training.seq_len", "seq_len", seq)
    accum, micro = 1, local
    # v0.2.2 Training.global_batch_size: -1 (any value ≤ 0) is local_batch_size x the data-parallel degree
    gbs = "training.global_batch_size"
    total = _whole(r, gbs, r.get(gbs), -(2**63)) if new and r.has(gbs) else -1
    if total > 0:
        dp = d["data_parallel_replicate"] * d["data_parallel_shard"]
        if total % (local * dp):  # v0.2.2 train.py l. 202-214: batch degree dp_replicate x dp_shard
            raise r.error(f"training.global_batch_size {total} is not a multiple of local_batch_size x data-parallel "
                          f"degree ({local} x {dp})")
        accum = total // (local * dp)
        r.set("training.global_batch_size", "grad_accum", accum)
    if d["pipeline_parallel"] > 1:  # the local batch splits into pipeline micro-batches
        if new:
            micro = _whole(r, "parallelism.pipeline_parallel_microbatch_size",
                           r.get("parallelism.pipeline_parallel_microbatch_size", 1, f"{NEW} l. 412"))
        else:
            n = r.get("experimental.pipeline_parallel_microbatches") or d["pipeline_parallel"]
            micro = local // _whole(r, "experimental.pipeline_parallel_microbatches", n)
        if micro < 1 or local % micro:
            raise r.error(f"{key} {local} does not split into pipeline micro-batches of {micro}")
        accum *= local // micro
        sched = str(r.get(f"{'parallelism' if new else 'experimental'}.pipeline_parallel_schedule", "1F1B"))
        if sched.lower() not in ("1f1b", "interleaved1f1b"):
            raise r.error(f"pipeline_parallel_schedule '{sched}' is not modelled yet (valid values: 1F1B, Interleaved1F1B)")
        r.out["pipeline_schedule"] = "1f1b" if sched.lower() == "1f1b" else "interleaved-1f1b"
        if sched.lower() != "1f1b":  # a looped schedule: 2 stages per rank unless the layers per stage say otherwise
            r.out["pipeline_virtual_stages"] = 2  # (9dec370 parallelisms/pipelining_utils.py l. 27, v0.2.2
            for k in ("parallelism.pipeline_parallel_layers_per_stage", "experimental.pipeline_parallel_split_points"):
                if r.flat.get(k):  # distributed/pipeline_parallel.py l. 114)
                    r.get(k)
                    r.mark(k, "stage boundaries given: counted as 2 stages per rank")
    r.set(key, "micro_batch_size", micro)
    r.out["grad_accum"] = accum


def _checkpointing(r: KeyReader) -> None:
    mode = str(r.get("activation_checkpoint.mode", "selective", f"{OLD} l. 515")).lower()
    option = str(r.get("activation_checkpoint.selective_ac_option", "2", f"{OLD} l. 521: every second block")
                 if mode == "selective" else "")
    if mode not in ("none", "full", "selective"):
        raise r.error(f"activation_checkpoint.mode '{mode}' is not modelled yet (valid values: none, full, selective)")
    value = {"none": "none", "full": "full"}.get(mode) or ("selective-op" if option == "op" else
                                                          "full" if option == "1" else "none")
    r.set("activation_checkpoint.mode", "gradient_checkpointing", value)
    if mode == "selective" and option not in ("op", "1"):
        r.mark("activation_checkpoint.selective_ac_option", f"every {option}-th block checkpointed: counted as no "
                                                            "checkpointing (an upper bound)")


#: the release a TOML layout is counted as (estimate/framework_profiles.py, torchtitan's versions): 9dec370's layout is
#: torchtitan-2024 (foreach AdamW, the loss eager under compile, repeat_kv); the [compile] layout is v0.2.2's
#: (grouped-k/v SDPA, fused AdamW and compiled loss on the whole logits, the root unit gathered)
OLD_RELEASE = "torchtitan-2024"
#: the last release that reads a TOML (v0.3.0 dropped them): its whole-logits loss and root unit
TOML_RELEASE = "torchtitan-0.2.2"


#: the layout of March-August 2025 (785c34c99 [parallelism], 2025-03-18, to 08b8b244f [compile], 2025-08-20: v0.1.0,
#: 775a486ed, 6fc499f6f): training.compile, and from bbb1b616e (2025-04-02) the loss compiled with it; k and v repeated
MIDDLE_RELEASE = "torchtitan-0.2.1"


def _step(r: KeyReader, new: bool) -> None:
    # the March-August 2025 layout says its compile and batch under [training]; a later file may say neither
    middle = new and not r.has("compile") and (r.has("training.compile") or r.has("training.batch_size"))
    compile_key = "compile.enable" if new and not middle else "training.compile"
    if boolean(r, compile_key, False, f"{NEW} Compile.enable" if compile_key == "compile.enable"
               else f"{OLD} --training.compile"):
        r.set(compile_key, "compile", True)
        if compile_key == "compile.enable":
            _components(r)
    if not new:
        r.out["framework_version"] = OLD_RELEASE  # the 9dec370 layout: its release's loss, optimizer and attention
    elif middle:
        r.out["framework_version"] = MIDDLE_RELEASE
    else:
        r.out["framework_version"] = TOML_RELEASE
    name = str(r.get("optimizer.name", "AdamW", f"{OLD} --optimizer.name"))
    if name.lower() not in OPTIMIZERS:
        raise r.error(f"optimizer.name '{name}' is not modelled yet (valid values: AdamW, Adam)")
    r.set("optimizer.name", "optimizer", OPTIMIZERS[name.lower()])
    _implementation(r)
    if r.get("optimizer.early_step_in_backward"):
        r.set("optimizer.early_step_in_backward", "optimizer_in_backward", True)


def _components(r: KeyReader) -> None:
    """v0.2.2 components/loss.py l. 33: the loss is compiled where "loss" is among compile.components (default
    ["model", "loss"], config/job_config.py); without "model" no block is compiled."""
    parts = r.get("compile.components", ["model", "loss"], f"{NEW} Compile.components")
    parts = [str(p).lower() for p in parts] if isinstance(parts, list) else [str(parts).lower()]
    if "model" not in parts:
        r.set("compile.components", "compile", False)
        r.mark("compile.components", "no model component: nothing of the blocks compiled, counted uncompiled"
               + (" (the compiled loss not counted)" if "loss" in parts else ""))
    elif "loss" not in parts:
        r.mark("compile.components", "the loss left eager: counted compiled, as torchtitan's default; "
               f"framework_version {OLD_RELEASE} counts it eager (with 9dec370's foreach AdamW and repeat_kv)")


def read(path: Path, data: dict[str, Any]) -> Imported:
    r = KeyReader(path, "torchtitan", data, SOURCE)
    new = _new(r)
    _model(r, new)
    d = _layout(r, new)
    _parallelism(r, d, new)
    _precision(r, d, new)
    _batch(r, d, new)
    _checkpointing(r)
    _step(r, new)
    if r.flat.get("validation.enable"):
        r.mark("validation.enable", "validation passes between steps: not counted")
    r.out.update(framework="torchtitan", method="full")  # pre-training: every weight trains, no adapters
    for pattern, reason in IGNORED:
        r.ignore(pattern, reason)
    r.ignore("*", UNKNOWN)
    return r.finish([], WRITE_KEYS)


#: torchtitan's optimizer ``implementation`` (v0.3.0 components/optimizer/optimizer.py: for-loop, foreach, fused,
#: fused_opt_states_bf16) -> optimizer_impl: a for-loop step makes one parameter's temporaries at a time, none the
#: size of the model, as the fused kernel (its bf16 states are not modelled: said)
TITAN_IMPL = {"foreach": "foreach", "fused": "fused", "for-loop": "fused", "fused_opt_states_bf16": "fused"}


def _implementation(r: KeyReader) -> None:
    """``optimizer.implementation`` (or the older ``optimizer.fused`` switch: ``foreach = not fused``) as the
    scenario's optimizer_impl; neither given: the profile's release (auto)."""
    if r.has("optimizer.implementation"):
        impl = str(r.get("optimizer.implementation"))
        if impl not in TITAN_IMPL:
            raise r.error(f"optimizer.implementation '{impl}' is not one of {', '.join(TITAN_IMPL)}")
        r.set("optimizer.implementation", "optimizer_impl", TITAN_IMPL[impl])
        if impl in ("for-loop", "fused_opt_states_bf16"):
            r.mark("optimizer.implementation", "counted as the fused step (no model-sized temporaries)"
                   + (", its fp32 states" if impl == "fused_opt_states_bf16" else ""))
    elif r.has("optimizer.fused"):
        fused = boolean(r, "optimizer.fused")
        r.set("optimizer.fused", "optimizer_impl", "fused" if fused else "foreach")
