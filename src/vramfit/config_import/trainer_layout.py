"""Where a Trainer-family config (TRL, Axolotl, LLaMA-Factory) says how the model is sharded: its ``deepspeed`` JSON
(a file, or the mapping written inline) or its ``fsdp`` words with ``fsdp_config`` (inline, or a JSON file)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vramfit.config_import import hf_common as hf
from vramfit.config_import.loader import load_mapping
from vramfit.config_import.report import Entry, KeyReader, flatten


def trainer_parallelism(r: KeyReader, config_alone: bool = False) -> tuple[dict[str, Any], list[Entry], tuple[Path, ...]]:
    """(layout keys, DeepSpeed entries, companion files) from a Trainer config's ``deepspeed`` JSON or
    ``fsdp`` words and ``fsdp_config``; ``config_alone``: an ``fsdp_config`` without ``fsdp`` turns FSDP
    on too (Axolotl). Nothing of either: ``({}, [], ())``."""
    inline = _inline_deepspeed(r)
    ds, fsdp = inline or r.get("deepspeed"), r.get("fsdp")
    fsdp_file = None if config_alone else _fsdp_config_file(r)
    fsdp_cfg = r.sub("fsdp_config")
    if ds and (fsdp or (config_alone and fsdp_cfg)):
        raise r.error("deepspeed and fsdp are both set; choose one")
    if inline:
        out, entries = hf.read_deepspeed(r, "deepspeed", r.path, data=inline)
        return out, entries, ()
    if ds:
        path = hf.resolve_path(r, "deepspeed", ds)
        out, entries = hf.read_deepspeed(r, "deepspeed", path)
        return out, entries, (path,)
    if fsdp or (config_alone and fsdp_cfg):
        layout = hf.fsdp_layout(r, "fsdp", fsdp, fsdp_cfg)
        hf.mark_fsdp(r, "fsdp_config", fsdp_cfg, layout)
        layout.update(hf.fsdp_checkpointing(r, "fsdp_config", fsdp_cfg, r.out.get("gradient_checkpointing")))
        if fsdp:
            r.set("fsdp", "parallelism", layout["parallelism"])
        return layout, [], (fsdp_file,) if fsdp_file else ()
    return {}, [], (fsdp_file,) if fsdp_file else ()


def _inline_deepspeed(r: KeyReader) -> dict[str, Any] | None:
    """A DeepSpeed config written as a mapping under ``deepspeed`` (transformers 5.24.0 training_args.py
    ``deepspeed``: "the path to deepspeed json config file ... or an already loaded json file as a dict"; Axolotl's
    ``deepspeed: str | dict``): read as that file's content, its keys reported as ``deepspeed → ...``."""
    value = r.data.get("deepspeed")
    if not isinstance(value, dict) or not value:
        return None
    for k in [k for k in r.flat if k.startswith("deepspeed.")]:
        del r.flat[k]
    return value


def _fsdp_config_file(r: KeyReader) -> Path | None:
    """``fsdp_config`` naming a JSON file (transformers 5.24.0 training_args.py ``fsdp_config``: "either a location of
    fsdp json config file (e.g., `fsdp_config.json`) or an already loaded json file as `dict`"): its keys read as if
    written inline (TRL and LLaMA-Factory pass it to TrainingArguments; Axolotl's fsdp_config is a mapping)."""
    value = r.flat.get("fsdp_config")
    if not isinstance(value, str) or not value.strip():
        return None
    path = hf.resolve_path(r, "fsdp_config", value)
    data = load_mapping(path)
    del r.flat["fsdp_config"]
    r.flat.update(flatten(data, "fsdp_config."))
    return path


#: accelerate upcasts what trains to fp32 once mixed precision is on, under FSDP1 (huggingface/accelerate@16cb6eb
#: accelerator.py l. 1991-2031, "we follow DeepSpeed's strategy to hold the parameters in full precision": every
#: trainable FlatParameter) and FSDP2 (utils/fsdp_utils.py l. 803-810: every trainable parameter, unless the model
#: holds bitsandbytes Params4bit)
FSDP_UPCAST = ("accelerate under FSDP with mixed precision on keeps the trained weights in fp32 (accelerator.py "
               "prepare_model, fsdp_utils.py fsdp2_prepare_model), so full fine-tuning reads as {mixed}")


def fsdp_upcast(keys: dict[str, Any], mixed_on: bool) -> str:
    """``keys`` (scenario keys) with a 16-bit ``-true`` full fine-tuning under FSDP turned ``-mixed`` where the
    Trainer runs accelerate with mixed precision (``mixed_on``); the note saying so, or "" where nothing changed.
    LoRA's trained adapters are fp32 already (PEFT's autocast_adapter_dtype), and a model loaded in fp32 is -mixed."""
    from vramfit.choices import FSDP_FAMILY

    precision = str(keys.get("precision", ""))
    if not mixed_on or keys.get("method") != "full" or precision not in ("bf16-true", "fp16-true") or \
            keys.get("parallelism") not in {p.value for p in FSDP_FAMILY}:
        return ""
    keys["precision"] = precision.replace("-true", "-mixed")
    return FSDP_UPCAST.format(mixed=keys["precision"])
