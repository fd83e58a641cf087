"""What the Hugging Face family (Trainer/TRL, Axolotl, LLaMA-Factory) shares: ``optim`` names, precision
flags, FSDP settings and the DeepSpeed JSON / accelerate YAML a config points to."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vramfit.choices import FSDP_FAMILY
from vramfit.config_import.ds_read import (  # noqa: F401  (re-exported: the readers call hf.read_deepspeed, ...)
    DS_IGNORED,
    DS_NOT_MODELLED,
    DS_TRAINER_MATCH,
    UNKNOWN_DS_KEY,
    check_trainer_match,
    read_deepspeed,
    trainer_mismatch,
)
from vramfit.config_import.loader import PASTED
from vramfit.config_import.report import Entry, KeyReader
from vramfit.config_import.values import (  # noqa: F401  (re-exported: the readers call hf.boolean, hf.whole, ...)
    ACCELERATE_BOOL,
    ARGPARSE_BOOL,
    PYDANTIC_BOOL,
    ZERO_STAGES,
    boolean,
    names,
    nonnegative,
    scalar,
    switch_value,
    whole,
    zero_stage,
)
from vramfit.errors import ScenarioError
from vramfit.safe_input import path_kind, shown, user_path

#: transformers ``OptimizerNames`` (src/transformers/training_args.py, transformers 5.24.0) and the
#: Axolotl/torchao names (axolotl src/axolotl/utils/schemas/enums.py @ e45ed55) -> vramfit optimizer.
HF_OPTIMIZERS: dict[str, str] = {
    "adamw_torch": "adamw", "adamw_torch_fused": "adamw", "adamw_hf": "adamw", "adamw_apex_fused": "adamw",
    # adamw_torch_8bit: torchao's AdamW8bit (transformers 5.24.0 trainer_optimizer.py:460-467)
    "adamw_bnb_8bit": "adamw-8bit", "adamw_8bit": "adamw-8bit", "adamw_torch_8bit": "adamw-8bit-torchao",
    "ao_adamw_8bit": "adamw-8bit-torchao", "paged_adamw_32bit": "paged-adamw", "paged_adamw": "paged-adamw",
    "paged_adamw_8bit": "paged-adamw-8bit", "adamw_torch_4bit": "adamw-4bit", "ao_adamw_4bit": "adamw-4bit",
    "adafactor": "adafactor", "sgd": "sgd", "lion_32bit": "lion", "lion_8bit": "lion-8bit",
}

#: The torch AdamW implementation an HF ``optim`` name runs (transformers 5.24.0 trainer_optimizer.py: ``adamw_torch_fused``
#: passes ``fused=True``, ``adamw_torch`` nothing, so torch/optim/adamw.py picks foreach on CUDA; apex's FusedAdam is one
#: multi-tensor kernel with no parameter-sized temporaries) -> the scenario's optimizer_impl.
HF_ADAMW_IMPL: dict[str, str] = {"adamw_torch": "foreach", "adamw_torch_fused": "fused", "adamw_apex_fused": "fused"}

#: The optimizer each vramfit value is written back as (the plainest HF name for it).
HF_OPTIMIZER_NAMES: dict[str, str] = {
    "adamw": "adamw_torch_fused", "adamw-8bit": "adamw_bnb_8bit", "paged-adamw": "paged_adamw_32bit",
    "paged-adamw-8bit": "paged_adamw_8bit", "adamw-4bit": "adamw_torch_4bit", "adafactor": "adafactor",
    "adamw-8bit-torchao": "adamw_torch_8bit", "sgd": "sgd", "lion": "lion_32bit", "lion-8bit": "lion_8bit",
}

#: Where the TrainingArguments defaults the HF-Trainer readers fill in come from.
TRAINING_ARGS_SRC = "transformers 5.24.0 src/transformers/training_args.py"


def optimizer(r: KeyReader, key: str, value: Any) -> None:
    """The optimizer, and where the config names it, the AdamW implementation (:data:`HF_ADAMW_IMPL`)."""
    name = str(value).strip().lower()
    if name not in HF_OPTIMIZERS:
        raise r.error(f"{key} '{value}' is not modelled yet; vramfit models {', '.join(sorted(HF_OPTIMIZERS))}")
    r.set(key, "optimizer", HF_OPTIMIZERS[name])
    if r.has(key) and name in HF_ADAMW_IMPL:  # a default leaves it to the framework release (optimizer_impl auto)
        r.set(key, "optimizer_impl", HF_ADAMW_IMPL[name])


def resolve_path(r: KeyReader, key: str, value: Any) -> Path:
    """A path named in the config: relative to the config's folder, else to the working directory."""
    if not isinstance(value, str) or not value.strip():
        raise r.error(f"{key} must be a path to a file, got {value!r}")
    if r.path.name == PASTED:  # a pasted config (web) never opens files on the server
        raise r.error(f"{key} names a file ({value}); a pasted config cannot, paste without it or use the CLI's --from")
    try:  # ~nosuchuser, a name too long for the file system: one line, not an OSError
        p = user_path(key, value)
        for cand in ([p] if p.is_absolute() else [r.path.parent / p, Path.cwd() / p]):
            if path_kind(key, cand) == "file":
                return cand
    except ScenarioError as exc:
        raise r.error(exc.message) from None
    raise r.error(f"{key}: file '{value}' not found (looked next to the config and in the working directory)")


#: accelerate's FSDP_SHARDING_STRATEGY (accelerate v1.16.0 utils/constants.py), in torch's ShardingStrategy order
SHARDING_STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2")


def fsdp_layout(r: KeyReader, key: str, words: Any, options: dict[str, Any]) -> dict[str, Any]:
    """parallelism/offload from HF ``fsdp`` words (``full_shard auto_wrap offload``) and ``fsdp_config``;
    hybrid sharding (HYBRID_SHARD, _HYBRID_SHARD_ZERO2) adds ``shard_scope=node``."""
    if isinstance(words, str):
        words = words.split()
    if words is not None and words is not False and not isinstance(words, list):  # TrainingArguments.fsdp: str or list
        raise r.error(f"{key} must be FSDP words such as 'full_shard auto_wrap' (or a list of them), got {shown(words)}")
    words = [str(w).lower() for w in (words or [])]
    opts = {k.removeprefix("fsdp_"): v for k, v in options.items()}
    strategy = str(opts.get("sharding_strategy", "")).upper()
    # torch ShardingStrategy values (v2.13.0 distributed/fsdp/api.py: FULL_SHARD = 1 ... _HYBRID_SHARD_ZERO2 = 5), which
    # accelerate also takes by number
    strategy = {str(i): s for i, s in enumerate(SHARDING_STRATEGIES, 1)}.get(strategy.lstrip("0"), strategy)
    if strategy not in ("", *SHARDING_STRATEGIES, "_HYBRID_SHARD_ZERO2"):
        name = next((k for k in options if k.removeprefix("fsdp_") == "sharding_strategy"), "sharding_strategy")
        raise r.error(f"{key}.{name}: {shown(opts['sharding_strategy'])} is not an FSDP sharding strategy "
                      f"(valid values: {', '.join(SHARDING_STRATEGIES)}, or 1-5)")
    reshard = opts.get("reshard_after_forward")
    grad_op = "shard_grad_op" in words or strategy == "SHARD_GRAD_OP" or reshard is False
    # hybrid sharding shards within each node and replicates across nodes (torch v2.13.0 distributed/fsdp/api.py
    # ShardingStrategy.HYBRID_SHARD): shard_scope node, which on one node (the count the launcher sets, --num-nodes)
    # shards over all its GPUs as FULL_SHARD does (Scenario.shard_group)
    hybrid = "hybrid_shard" in words or "HYBRID" in strategy
    if hybrid:
        grad_op = grad_op or "ZERO2" in strategy
    name = next((k for k in options if k.removeprefix("fsdp_") == "offload_params"), "offload_params")
    offload = "offload" in words or switch_value(r, f"{key}.{name}", opts.get("offload_params"), ACCELERATE_BOOL)
    if "no_shard" in words or strategy == "NO_SHARD":  # FSDP1 wrapping, nothing sharded
        if offload:
            raise r.error(f"{key}: CPU offload with NO_SHARD is not modelled; use FULL_SHARD with offload")
        return {"parallelism": "fsdp-no-shard", "offload": "none"}
    if offload and grad_op:
        raise r.error(f"{key}: parameter offload needs full sharding (FULL_SHARD), not SHARD_GRAD_OP")
    out = {"parallelism": "fsdp-grad-op" if grad_op else "fsdp", "offload": "optimizer+params" if offload else "none"}
    out.update(fsdp_version(r, key, opts.get("version")))
    return {**out, "shard_scope": "node"} if hybrid else out


def fsdp_version(r: KeyReader, key: str, value: Any) -> dict[str, Any]:
    """``fsdp_version`` from accelerate's ``fsdp_config.fsdp_version``, the Trainer's ``fsdp_config.version`` or
    Axolotl's top-level ``fsdp_version`` (accelerate v1.15.0 FullyShardedDataParallelPlugin: 1 or 2); none given:
    nothing (the framework's, FSDP1)."""
    if value is None:
        return {}
    if str(value).strip() not in ("1", "2"):
        raise r.error(f"{key}: fsdp_version {value!r} is not an FSDP version (valid values: 1, 2)")
    return {"fsdp_version": str(value).strip()}


FSDP_CONFIG_IGNORED = "FSDP wrapping, prefetch and state-dict details: vramfit models the sharding and offload only"

#: ``TrainingArguments`` keys with no effect on a training step's memory (transformers 5.24.0
#: src/transformers/training_args.py; ``overwrite_output_dir`` and ``group_by_length`` are 4.x fields that
#: configs still carry), ignored by the readers of HF-Trainer configs (TRL, LLaMA-Factory). A reader's own
#: list goes first, so its reason wins for a key both name.
TRAINING_ARGS_IGNORED = [
    ("output_dir", "path"), ("overwrite_output_dir", "path"), ("run_name", "logging"), ("report_to", "logging"),
    ("logging_*", "logging"), ("log_*", "logging"), ("disable_tqdm", "logging"), ("save_*", "checkpoint saving"),
    ("eval_*", "evaluation"), ("per_device_eval_batch_size", "evaluation"), ("do_eval", "evaluation"), ("do_train", "mode"),
    ("do_predict", "inference"), ("load_best_model_at_end", "evaluation"), ("metric_for_best_model", "evaluation"),
    ("push_to_hub", "upload"), ("hub_*", "upload"), ("learning_rate", "schedule"), ("lr_scheduler_*", "schedule"),
    ("warmup_*", "schedule"), ("num_train_epochs", "schedule"), ("max_steps", "schedule"),
    ("weight_decay", "optimizer hyperparameter"), ("adam_*", "optimizer hyperparameter"),
    ("optim_args", "optimizer hyperparameter"), ("max_grad_norm", "no memory effect"), ("seed", "randomness"),
    ("data_seed", "randomness"), ("dataloader_*", "data loading"), ("remove_unused_columns", "data"),
    ("ddp_*", "launcher"), ("tf32", "matmul precision: no memory effect"),
    ("gradient_checkpointing_kwargs.*", "checkpoint function options"), ("fsdp_config.*", FSDP_CONFIG_IGNORED),
    ("resume_from_checkpoint", "path"), ("group_by_length", "data order"),
]


def use_reentrant(r: KeyReader, json_string: bool = True, kwargs_key: str = "gradient_checkpointing_kwargs") -> None:
    """``gradient_checkpointing_kwargs.use_reentrant`` -> ``use_reentrant`` (the Trainer passes the kwargs to the model's
    gradient_checkpointing_enable, transformers v4.45.2 trainer.py l. 2182; estimate/reentrant_fsdp1.py). Unset: the
    release's default (scenario ``auto``).

    ``json_string``: the config reaches ``TrainingArguments`` as is, whose ``__post_init__`` parses a string starting
    with ``{`` as JSON and turns its "true"/"false" strings into booleans (transformers v4.40.0 and v5.24.0
    training_args.py ``_VALID_DICT_FIELDS``, ``_convert_str_dict``). Axolotl validates the key as a mapping first
    (``json_string=False``): a string there is refused."""
    key = f"{kwargs_key}.use_reentrant"  # kwargs_key: transformers 5.24's activation_checkpointing_kwargs in TRL files
    value = r.flat.get(kwargs_key)
    if value is not None:
        options = _kwargs_mapping(r, kwargs_key, value, json_string)
        if options.get("use_reentrant") is not None:  # _convert_str_dict's "true"/"false" (any case) are booleans
            flag = switch_value(r, key, options["use_reentrant"], {"true": True, "false": False})
            r.set(kwargs_key, "use_reentrant", "yes" if flag else "no")
        elif "use_reentrant" in options:
            raise r.error(f"{key}: None is not a boolean (valid values: true, false)")
        return
    if r.has(key):
        r.set(key, "use_reentrant", "yes" if boolean(r, key) else "no")


def _kwargs_mapping(r: KeyReader, kwargs_key: str, value: Any, json_string: bool) -> dict[str, Any]:
    """``gradient_checkpointing_kwargs`` given as one value rather than nested keys: a JSON object string where the
    Trainer parses one (:func:`use_reentrant`), recorded as read; anything else refused in one line."""
    valid = "a mapping such as {use_reentrant: false}" + (", or that mapping as a JSON string" if json_string else "")
    if not (json_string and isinstance(value, str) and value.startswith("{")):
        raise r.error(f"{kwargs_key}: {shown(value)} is not a mapping (valid values: {valid})")
    try:
        options = json.loads(value)
    except ValueError as exc:  # JSONDecodeError, or an integer past sys.get_int_max_str_digits
        raise r.error(f"{kwargs_key}: {shown(value)} is not valid JSON ({getattr(exc, 'msg', 'a number too large')}; "
                      f"valid values: {valid})") from None
    except RecursionError:
        raise r.error(f"{kwargs_key}: {shown(value)} is nested too deeply (valid values: {valid})") from None
    if not isinstance(options, dict):
        raise r.error(f"{kwargs_key}: {shown(value)} is not a mapping (valid values: {valid})")
    r.get(kwargs_key)
    return options


def is_fsdp2(keys: dict[str, Any]) -> bool:
    """Scenario keys (as imported so far) that run FSDP2: an FSDP layout with ``fsdp_version`` 2."""
    return keys.get("parallelism") in {p.value for p in FSDP_FAMILY} and str(keys.get("fsdp_version")) == "2"


def mark_fsdp(r: KeyReader, prefix: str, options: dict[str, Any], layout: dict[str, Any]) -> None:
    """Record the fsdp_config keys that decided the layout as read."""
    for k in options:
        if k.removeprefix("fsdp_") in ("offload_params", "sharding_strategy", "reshard_after_forward"):
            r.get(f"{prefix}.{k}")
            r.set(f"{prefix}.{k}", "parallelism", layout["parallelism"])
            r.set(f"{prefix}.{k}", "offload", layout["offload"])
        elif k.removeprefix("fsdp_") == "version" and "fsdp_version" in layout:
            r.get(f"{prefix}.{k}")
            r.set(f"{prefix}.{k}", "fsdp_version", layout["fsdp_version"])


def fsdp_checkpointing(r: KeyReader, prefix: str, options: dict[str, Any], trainer_gc: Any) -> dict[str, str]:
    """FSDP's own activation checkpointing (``[fsdp_]activation_checkpointing`` true), as scenario keys: accelerate
    v1.16.0 accelerator.py l. 1944-1957 (FSDP1) and l. 1668 ``fsdp2_apply_ac`` (FSDP2) wrap every transformer layer in
    ``checkpoint_wrapper(CheckpointImpl.NO_REENTRANT)`` inside its FSDP unit, and transformers wants the Trainer's own
    checkpointing off then (training_args.py ``fsdp_config`` ``activation_checkpointing``): one switch, refused with
    ``trainer_gc`` (the Trainer's checkpointing as read so far) on where ``r.trainer_checkpointing`` names the file key
    that reaches TrainingArguments (:func:`double_checkpointing`). Off: nothing."""
    name = next((k for k in options if k.removeprefix("fsdp_") == "activation_checkpointing"), None)
    if name is None or not switch_value(r, f"{prefix}.{name}", r.get(f"{prefix}.{name}"), ACCELERATE_BOOL):
        return {}
    clash = double_checkpointing(r.trainer_checkpointing, f"{prefix}.{name}")
    if clash:
        raise r.error(clash)
    # with TRL's activation_offloading on (the Trainer's checkpointing off), the wrapper's saved block inputs go to
    # the host: checkpointing with offload (what the trl export writes for an offload plan under FSDP)
    ckpt = "offload" if trainer_gc == "offload" else "full"
    r.set(f"{prefix}.{name}", "gradient_checkpointing", ckpt)
    r.set(f"{prefix}.{name}", "use_reentrant", "no")
    return {"gradient_checkpointing": ckpt, "use_reentrant": "no"}


def double_checkpointing(trainer_key: str, fsdp_key: str) -> str:
    """The refusal when FSDP's activation checkpointing (``fsdp_key``) and the Trainer's own are both on: transformers
    raises (v5.24.0 trainer.py l. 879-884: ValueError, 'can't both be set to True'). ``trainer_key``: the file key
    that turned the Trainer's on (:attr:`Imported.trainer_checkpointing`, given or by TRL's default), empty where it
    is off or the dialect checkpoints the model itself. Empty string: no clash."""
    if not trainer_key:
        return ""
    return (f"{fsdp_key} turns on FSDP's activation checkpointing while {trainer_key} (the Trainer's, given or by "
            "default) is true: transformers refuses both (trainer.py: 'can't both be set to True'); set "
            f"{trainer_key} to false (valid values: false)")


def launcher_gpus(r: KeyReader) -> None:
    """The GPU count is a launch option (torchrun/accelerate/deepspeed), never in the training config."""
    r.entries["num_gpus"] = Entry("default", "num_gpus", 1, "not in the file: the GPU count is set at launch; "
                                  "pass --num-gpus", ["num_gpus=1"])



#: transformers 5.24.0 training_args.py: ``eval_strategy`` defaults to "no" (l. 1106), ``per_device_eval_batch_size``
#: to 8 (l. 1128); trainer.py l. 682 refuses another strategy without an ``eval_dataset``, so a config that runs with
#: one has an eval set. ``evaluation_strategy`` is its name before transformers 4.46.
EVAL_SRC = f"{TRAINING_ARGS_SRC} l. 1106, 1128: eval_strategy 'no', per_device_eval_batch_size 8"


def trainer_eval(r: KeyReader, after: str | None = None) -> int:
    """``eval_batch_size`` of a Trainer config (returned, and set): ``per_device_eval_batch_size`` when
    ``eval_strategy`` is not "no" (evaluation between optimizer steps), or when the key ``after`` is true (a
    reader's ``trainer.evaluate()`` after ``train()``, the optimizer state still held); else 0."""
    key = "evaluation_strategy" if r.has("evaluation_strategy") and not r.has("eval_strategy") else "eval_strategy"
    strategy = str(r.get(key, "no", EVAL_SRC)).lower().removeprefix("intervalstrategy.")
    if strategy not in ("no", "steps", "epoch"):
        raise r.error(f"{key} '{strategy}' is unknown (valid values: no, steps, epoch)")
    by = key if strategy != "no" else after if after and r.flat.get(after) is True else None
    if by is None:
        r.set(key, "eval_batch_size", 0)
        return 0
    batch = r.get("per_device_eval_batch_size", 8, EVAL_SRC)
    if not isinstance(batch, int) or isinstance(batch, bool) or batch < 1:
        raise r.error(f"per_device_eval_batch_size must be a whole number ≥ 1, got {batch!r}")
    r.get(by)
    r.set(by, "eval_batch_size", batch)
    if by == key:
        r.entries[key].note = ("an eval set is assumed: the Trainer refuses this strategy without one "
                               f"({TRAINING_ARGS_SRC.replace('training_args.py', 'trainer.py')} l. 682)")
    r.set("per_device_eval_batch_size", "eval_batch_size", batch)
    return batch


def dora(r: KeyReader, key: str, source: str) -> bool:
    """A PEFT ``use_dora`` switch (``LoraConfig(use_dora=...)``): read whenever present, a null value as off; true
    sets the scenario's ``dora`` (estimate/dora.py)."""
    on = r.get(key) is not None and boolean(r, key, False, source)
    if on:
        r.set(key, "dora", True)
    return on


#: module names PEFT's ``modules_to_save`` entries take for the input embedding and the output layer across the
#: families (Llama embed_tokens / lm_head, GPT-2 wte, GPT-NeoX embed_in / embed_out, Bloom word_embeddings, Mistral's
#: own tok_embeddings / output): the scenario's two names (estimate/saved_modules.py)
_SAVED_NAMES = {"embed_tokens": "embed_tokens", "wte": "embed_tokens", "embed_in": "embed_tokens",
                "word_embeddings": "embed_tokens", "tok_embeddings": "embed_tokens",
                "lm_head": "lm_head", "embed_out": "lm_head", "output": "lm_head",
                # ms-swift's placeholder: get_modules_to_save (swift/llm/train/tuner.py, ms-swift 3.x) replaces it by
                # find_embedding(model), the model's nn.Embedding modules: the token embedding (an extra position
                # embedding some families have is not counted)
                "all-embedding": "embed_tokens"}


def saved_modules(r: KeyReader, key: str) -> None:
    """A PEFT ``modules_to_save`` list (or one comma-separated string) as the scenario's ``modules_to_save``: the input
    embedding and the output layer by any family's name; any other module (a classifier head, a norm) is reported as
    not counted."""
    value = r.get(key)
    if value in (None, "", []):
        return
    given = [n.strip() for n in value.split(",")] if isinstance(value, str) else names(
        r, key, value, "module names such as embed_tokens, lm_head")
    given = [n for n in given if n]
    mapped = [_SAVED_NAMES[n.rsplit(".", 1)[-1]] for n in given if n.rsplit(".", 1)[-1] in _SAVED_NAMES]
    if mapped:
        r.set(key, "modules_to_save", list(dict.fromkeys(mapped)))
    others = [n for n in given if n.rsplit(".", 1)[-1] not in _SAVED_NAMES]
    if others:
        r.mark(key, f"trained copies of {', '.join(others)}: not counted (embed_tokens and lm_head are)")


def checkpoint_quantization(r: KeyReader, key: str, method: str, framework: str) -> str | None:
    """The quantized base a pre-quantized checkpoint (named by ``key``) makes of a LoRA run: ``gptq-int4`` for a 4-bit
    GPTQ name (``method``/``quantize`` set, ``kbit_prepare: no``: ``framework`` never calls peft's
    prepare_model_for_kbit_training, which skips GPTQ models anyway), else None for a name with no such token. Refused
    in one line: full fine-tuning of quantized weights (LLaMA-Factory@ff6d4d1 model/adapter.py ``init_adapter``:
    "Quantized models can only be used for the LoRA or OFT tuning"), and an AWQ or 8-bit GPTQ checkpoint, whose training
    paths vramfit does not model (autoawq's ``WQLinearMMFunction`` saves the packed weight, not a 16-bit one)."""
    from vramfit.models.catalog import prequantized  # the name's tokens, as the estimate's note reads them

    name = str(r.out.get("model") or "")
    found = prequantized(name)
    if found is None:
        return None
    kind, eight = found
    label = f"{'an AWQ' if kind == 'awq' else 'an 8-bit GPTQ' if eight else 'a GPTQ'} checkpoint"
    if method == "full":
        raise r.error(f"{key}: {shown(name)} is {label} (its name): quantized weights cannot be fully fine-tuned "
                      "(valid: LoRA on it, or full fine-tuning of the 16-bit model)")
    if kind == "awq" or eight:
        raise r.error(f"{key}: {shown(name)} is {label} (its name), whose LoRA training path is not modelled yet "
                      "(valid: a 4-bit GPTQ or a 16-bit checkpoint, or on-the-fly bitsandbytes quantization)")
    r.set(key, "method", "qlora")
    r.set(key, "quantize", "gptq-int4")
    r.set(key, "kbit_prepare", "no")
    r.entries[key].note = (f"{label} by its name: {framework} loads the checkpoint's own quantization_config, so LoRA "
                           "trains on its 4-bit weights (quantize gptq-int4)")
    return "gptq-int4"


def freeze_tower(r: KeyReader, tower_key: str, projector_key: str, source: str, projector_source: str,
                 projector_unused: str = "") -> None:
    """A trainer's own switch for freezing a vision-language model's tower (``tower_key``, default True in ms-swift's
    freeze_vit and LLaMA-Factory's freeze_vision_tower) and projector -> ``freeze_vision``. Left at its default on a
    model the bundled catalog knows as text-only, nothing is set (the estimate would say the switch is ignored); a
    model outside the catalog gets the default, which a text-only model ignores."""
    tower = r.get(tower_key, True, source)
    projector = r.get(projector_key, True, projector_source)
    if tower_key not in r.flat and known_text_only(r):
        return
    r.set(tower_key, "freeze_vision", "yes" if tower else "no")
    if projector_unused and projector_key in r.flat:  # ``projector_unused``: why the key does nothing in this run
        r.entries[projector_key] = Entry("ignored", projector_key, r.flat[projector_key], projector_unused)
    elif bool(tower) != bool(projector):
        r.mark(projector_key, f"the projector frozen apart from the tower: counted with {tower_key}")


def known_text_only(r: KeyReader) -> bool:
    """Whether the bundled catalog knows the file's model (``r.out["model"]``) as a text-only one (no vision tower);
    a model outside the catalog is not known to be (never reads a file or the Hub)."""
    from vramfit.models.catalog import catalog_entry, catalog_spec

    entry = catalog_entry(str(r.out.get("model", "")))
    return entry is not None and catalog_spec(entry["id"]).vision is None
